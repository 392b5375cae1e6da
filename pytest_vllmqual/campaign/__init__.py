"""campaign"""

__all__: list[str] = []
