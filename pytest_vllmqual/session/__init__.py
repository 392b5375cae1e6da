"""session"""

__all__: list[str] = []
