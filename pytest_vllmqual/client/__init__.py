"""client"""

__all__: list[str] = []
