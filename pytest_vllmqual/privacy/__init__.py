"""privacy"""

__all__: list[str] = []
