"""Fleets on Ray: one recipe qualified on every serving node, several jobs at once (``vllmqual fleet``).

Ray is an optional extra (``pytest-vllmqual[fleet]``): only ``fleet.cluster`` imports it, and
only when a fleet runs. Each job is a Ray task that runs the same pytest command a person runs,
on its node; the driver reads the sanitized reports back and compares the nodes.
"""

__all__: list[str] = []
