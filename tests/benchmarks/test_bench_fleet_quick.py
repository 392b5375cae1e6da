"""`python -m benchmarks.bench_fleet --quick` in CI: four wait-only jobs on two logical Ray nodes finish
within 1.15x of the ideal makespan, and the runner's per-job figures are there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.fleet_jobs import ROOT


def test_quick_fleet_benchmark_is_within_its_makespan_limit(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_fleet", "--quick", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = json.loads(out.read_text())["results"]
    assert result["kind"] == "wait-only jobs" and (result["nodes"], result["jobs"]) == (2, 4)
    assert result["efficiency"] <= 1.15 and result["within_limit"] is True  # --quick exits 0 either way
    assert result["submit_to_start_median_s"] is not None
    assert result["record_assembly_per_job_ms"] > 0
