"""Benchmark: how long a fixed piece of client CPU work takes right after a request, against idle.

    python -m benchmarks.bench_spin [--recipe tiny-cpu] [--json PATH]
    python -m benchmarks.bench_spin --quick [--json PATH]   # against the fault server, seconds

After every engine step vLLM's TP workers busy-poll their shared-memory queue for a second
(``SpinCondition.busy_loop_s = 1`` in vllm/distributed/device_communicators/shm_broadcast.py).
With the tiny-cpu recipe each worker is pinned to one of the two cores
(``VLLM_CPU_OMP_THREADS_BIND: "0|1"``), so for that second any other process waits for a CPU.
This measures it: a pure-Python job (~12 ms of CPU) is timed idle and at set delays after a
1-token chat completion, with the run-queue wait the kernel reports for this process
(``/proc/self/schedstat``). Harness work between requests (checks, calibration, /metrics
parsing) pays exactly this; docs/PERFORMANCE.md uses it to explain the time-to-verdict figure.
``--engine-bind one-core`` runs the same model at TP=1 on core 0 (the fidelity section's server):
then no post-request wait is left (docs/PERFORMANCE.md, section 1, has both).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.fidelity_common import ENGINE_BINDS, bench_server_recipe
from benchmarks.quick_mode import add_quick_flag, quick_recipe
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.recipe.loader import resolve_recipe
from pytest_vllmqual.session.server import ServerManager

ROOT = Path(__file__).resolve().parent.parent

DELAYS_S = (0.0, 0.3, 0.6, 1.2, 2.0)
#: Quick mode (benchmarks/quick_mode.py): one request, no settling, the one delay the figures read.
QUICK_SPIN: dict[str, Any] = {"repeats": 1, "settle_s": 0.0, "delays_s": (0.0,)}


def cpu_job(iterations: int = 300_000) -> dict[str, float]:
    """A fixed amount of pure-Python work: its wall, CPU and run-queue wait, in ms."""
    before = _schedstat()
    wall, cpu = time.perf_counter(), time.process_time()
    total = 0
    for i in range(iterations):
        total += i * i
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    after = _schedstat()
    waited = (after[1] - before[1]) / 1e6 if before and after else None
    return {"wall_ms": wall * 1e3, "cpu_ms": cpu * 1e3, "runqueue_wait_ms": waited}  # type: ignore[dict-item]


def _schedstat() -> list[int] | None:
    try:
        return [int(x) for x in Path("/proc/self/schedstat").read_text().split()]
    except (OSError, ValueError):
        return None


def measure(handle: ServerHandle, *, repeats: int = 2, settle_s: float = 3.0,
            delays_s: Sequence[float] = DELAYS_S) -> dict[str, Any]:
    """The job idle (after ``settle_s`` of quiet) and at each delay after a 1-token completion."""
    client = QualClient(handle, timeout_s=60.0)
    try:
        time.sleep(settle_s)
        idle = [cpu_job() for _ in range(3)]
        after: dict[str, list[dict[str, float]]] = {}
        for _ in range(repeats):
            for delay in delays_s:
                client.chat({"messages": [{"role": "user", "content": "Say cloud."}], "max_tokens": 1},
                            label="spin-probe")
                time.sleep(delay)
                after.setdefault(f"{delay:g}", []).append(cpu_job())
                time.sleep(settle_s)
    finally:
        client.close()
    idle_wall = min(j["wall_ms"] for j in idle)
    worst = {delay: max(j["wall_ms"] for j in jobs) for delay, jobs in after.items()}
    return {"idle": idle, "after_request": after, "idle_wall_ms": idle_wall,
            "worst_wall_ms_by_delay_s": worst,
            "stretch_right_after_request": worst["0"] / idle_wall if idle_wall > 0 else None,
            "command": "python -m benchmarks.bench_spin"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="tiny-cpu")
    parser.add_argument("--recipes-dir", default=str(ROOT / "fixtures" / "recipes"))
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--engine-bind", choices=ENGINE_BINDS, default="recipe",
                        help="the server's engine as the recipe places it (default), at TP=1 on core 0 "
                             "(one-core), or every TP rank on core 0 (one-core-tp2)")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vllmqual-spin-") as tmp:
        if args.quick:
            recipe, _ = quick_recipe(Path(tmp) / "recipes")
        else:
            recipe = bench_server_recipe(resolve_recipe(args.recipe, Path(args.recipes_dir)), args.engine_bind)
        manager = ServerManager(recipe, run_id=f"bench-spin-{os.getpid()}", private_dir=Path(tmp) / "private",
                                progress=lambda line: print(f"[bench] {line}", flush=True))
        try:
            handle = manager.ensure_ready()
            result = measure(handle, **QUICK_SPIN) if args.quick else measure(handle)
        finally:
            manager.stop()
    result["engine_bind"] = args.engine_bind
    print(json.dumps({k: v for k, v in result.items() if k not in ("idle", "after_request")}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
