"""Output equivalence: the probe each arm answers, its sidecar file, and the figures over two arms."""

__all__: list[str] = []
