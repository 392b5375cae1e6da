"""Campaign runs for real on CPU: one pytest session runs the arms in order with one server at a
time, writes a report per arm and the campaign record (the bracketed A/B is
tests/integration/test_smollm2_ab.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.fault_harness import NO_WORKER_ARGS

from pytest_vllmqual.launch.cleanup.procs import processes_of_run

ROOT = Path(__file__).resolve().parents[2]
GATES = ["suites/test_smoke.py", "suites/test_engine.py"]
pytestmark = [pytest.mark.real_vllm]


def run_session(reports: Path, *args: str) -> tuple[int, str]:
    """Every arm at TP=1 with the engine core running the model itself (``NO_WORKER_ARGS``, the same on each
    arm): what these tests prove (arms in order, one server at a time, the comparison, fallbacks)
    depends neither on TP nor on the server's process tree."""
    proc = subprocess.run([sys.executable, "-m", "pytest", *GATES, f"--vllmqual-reports-dir={reports}",
                           "-p", "no:cacheprovider", "-q", *NO_WORKER_ARGS, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)
    return proc.returncode, proc.stdout + proc.stderr


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture(scope="module")
def fallback_campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, Path]:
    """`pytest --campaign=tiny-fallback`, run once: tiny-cpu-kvfail fails kv_pool on purpose, so
    tiny-cpu runs as its fallback and qualifies, so tiny-cpu-4096 (the fallback for tiny-cpu) is not
    needed. Both tests below read this one run: two real servers, not three.
    Owns its servers: which servers the campaign starts (and does not) is what is tested."""
    reports = tmp_path_factory.mktemp("campaign")
    code, output = run_session(reports, "--campaign=tiny-fallback")
    return code, output, reports


def test_campaign_runs_the_fallback_when_the_first_arm_fails_kv_pool(
        fallback_campaign: tuple[int, str, Path]) -> None:
    code, output, reports = fallback_campaign
    first = load(next(reports.glob("tiny-cpu-kvfail-*.json")))
    second = load(next(reports.glob("tiny-cpu-2*.json")))
    kv_gate = next(g for g in first["gates"] if g["gate"] == "kv_pool")
    assert kv_gate["outcome"] == "failed" and "1,000,000,000" in kv_gate["reason"]
    assert all(g["outcome"] in ("passed", "skipped") for g in second["gates"])
    record = load(next(reports.glob("campaign-*.json")))
    assert record["ran"] == ["tiny-cpu-kvfail", "tiny-cpu"] and record["qualified"] == "tiny-cpu"
    # The fallback stands in for the first arm's kv_pool, which fails on purpose, and for nothing else:
    # the exit is 0 only when that is the first arm's only failure. Record, last line and exit agree.
    others = [g["gate"] for g in first["gates"] if g["outcome"] in ("failed", "error") and g["gate"] != "kv_pool"]
    expected = 1 if others else 0
    assert code == expected == record["exit"]["code"], (others, output[-6000:])
    last = [line for line in output.splitlines() if "] campaign: " in line][-1]
    assert last.endswith(f"campaign: {record['exit']['reason']}; exit {expected}")
    if not others:
        assert last.endswith("campaign: tiny-cpu qualified (fallback for tiny-cpu-kvfail, which failed kv_pool); exit 0")
    assert any("tiny-cpu ran because tiny-cpu-kvfail failed kv_pool" in r for r in record["reasons"]), record
    for report in (first, second):
        assert processes_of_run(report["run"]["id"]) == []


def test_campaign_skips_every_gate_of_a_fallback_that_is_not_needed(
        fallback_campaign: tuple[int, str, Path]) -> None:
    """Found on GPU (tiny-gpu-393k): the first arm passed, the fallback's first gate was skipped,
    and its later gates then started the fallback's server anyway. A skip is decided once per arm:
    here tiny-cpu passed, so its fallback tiny-cpu-4096 writes no report and starts no server."""
    code, output, reports = fallback_campaign
    assert code == load(next(reports.glob("campaign-*.json")))["exit"]["code"], output[-6000:]
    assert list(reports.glob("tiny-cpu-4096-*.json")) == [], "the unneeded fallback must not write a report"
    assert "REPORT NOT WRITTEN" not in output
    passed = load(next(reports.glob("tiny-cpu-2*.json")))
    assert all(g["outcome"] in ("passed", "skipped") for g in passed["gates"]), passed["gates"]
    record = load(next(reports.glob("campaign-*.json")))
    assert "tiny-cpu-4096" not in record["ran"] and record["qualified"] == "tiny-cpu", record
    assert "waiting for tiny-cpu-4096" not in output  # its server never started
