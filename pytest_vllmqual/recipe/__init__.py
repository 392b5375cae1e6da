"""recipe"""

__all__: list[str] = []
