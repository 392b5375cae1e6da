"""The load fidelity benchmark's quick mode: the gate's closed loop against the fault server,
exactly the levels asked for, every request completed, the CPU row filled (seconds, no vLLM)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_mode_measures_the_gate_client_at_each_level(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_load_fidelity", "--quick",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())
    assert results["vllm_bench"] is False and results["ratios"] == []
    passes = results["passes"]
    assert [(p["tool"], p["level"], p["requests"], p["completed"]) for p in passes] == [("gate", 1, 4, 4),
                                                                                        ("gate", 2, 8, 8)]
    assert all(p["ttft_p50_s"] > 0 and p["tpot_p50_s"] is not None for p in passes)
    assert results["client_cpu_at_highest_level"]["gate_cpu_ms_per_request"] > 0
    # The fault server keeps no vLLM histograms: the server view is there, and says "not measured".
    assert [(row["level"], row["tool"]) for row in results["against_the_server"]] == [
        (1, "gate"), (1, "vllm_bench"), (2, "gate"), (2, "vllm_bench")]
    assert all(row["tpot_mean_over_server"] is None for row in results["against_the_server"])
    assert all(p["ttft_mean_over_server"] is None for p in passes)
