"""The project's benchmarks: what the harness costs beside the server it measures (docs/PERFORMANCE.md).

A package of the checkout, not of the wheel: each benchmark runs from the checkout's root as a
module (``python -m benchmarks.run_all``, ``python -m benchmarks.bench_fidelity --quick``), so the
benchmarks import each other and the package by their names, with no path of their own added.
"""

__all__: list[str] = []
