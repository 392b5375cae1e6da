"""launch.docker"""

__all__: list[str] = []
