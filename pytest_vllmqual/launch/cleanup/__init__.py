"""launch.cleanup"""

__all__: list[str] = []
