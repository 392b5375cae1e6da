"""ab"""

__all__: list[str] = []
