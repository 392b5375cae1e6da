"""gates"""

__all__: list[str] = []
