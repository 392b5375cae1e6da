"""Benchmark: time to verdict of a full ``pytest suites --recipe=tiny-cpu``, and where it goes.

    python -m benchmarks.bench_verdict [--recipe tiny-cpu] [--json PATH]
    python -m benchmarks.bench_verdict --quick [--json PATH]   # the same run against the fault server

Runs the whole qualification as a user does (a subprocess, its own server, its own report)
and splits its wall time, using the run's own report:

- server boot: ``lifecycle.cold_start_s`` (launcher start to ready, as the harness timed it);
- gate requests: every attempt's ``latency_s``; attempts that ran at the same time (the
  concurrency gate's ``concurrent-*``) count once, as that gate's measured ``wall_s``;
- teardown: ``lifecycle.teardown.seconds`` (server shutdown and the leftover checks);
- harness overhead: everything else (interpreter and plugin start-up, the recipe's prepare
  step, engine facts, prompt calibration, /metrics scrapes, report writing, waits).

A probe outside the run polls the server's ``/health`` every 100 ms and adds up the times the
API server did not answer within 0.2 s (``server_stalls``): such a stall lands in whatever
the harness was waiting for, a gate request or a calibration call alike.

Each stdout line is timestamped as it arrives (``-v`` and ``--durations=0`` add a line per
test and a table of setup/call/teardown seconds; neither changes what runs), so the
timeline shows where the overhead sits.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.fidelity_common import process_cpu_s
from benchmarks.quick_mode import add_quick_flag, quick_recipe

ROOT = Path(__file__).resolve().parent.parent
CONCURRENT_PREFIX = "concurrent-"
SERVER_ADDRESS = re.compile(r"\[vllmqual\] started .*? on (?P<address>[\w.-]+:\d+)")
READY_LINE = re.compile(r"\[vllmqual\] \S+ ready in ")
DURATION_LINE = re.compile(r"^(?P<s>\d+\.\d+)s (?P<phase>setup|call|teardown)\s+(?P<nodeid>\S+)")


def request_seconds(gate: dict[str, Any]) -> float:
    """Seconds the server spent answering this gate's attempts, concurrent ones counted once."""
    attempts = gate.get("attempts") or []
    sequential = sum(a.get("latency_s") or 0.0 for a in attempts
                     if not str(a.get("label", "")).startswith(CONCURRENT_PREFIX))
    concurrent = [a.get("latency_s") or 0.0 for a in attempts
                  if str(a.get("label", "")).startswith(CONCURRENT_PREFIX)]
    if concurrent:
        wall = (gate.get("measurements") or {}).get("wall_s")
        sequential += float(wall) if isinstance(wall, (int, float)) else max(concurrent)
    return sequential


def breakdown(report: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Split a run's wall time into server boot, gate requests, teardown and harness overhead."""
    lifecycle = report.get("lifecycle") or {}
    boot = float(lifecycle.get("cold_start_s") or 0.0)
    teardown = float(((lifecycle.get("teardown") or {}).get("seconds")) or 0.0)
    gates = report.get("gates") or []
    per_gate = []
    requests_total = 0.0
    for gate in gates:
        req = request_seconds(gate)
        requests_total += req
        duration = float(gate.get("duration_s") or 0.0)
        per_gate.append({"gate": gate.get("gate"), "outcome": gate.get("outcome"), "duration_s": duration,
                         "request_s": req, "attempts": len(gate.get("attempts") or []),
                         "in_gate_overhead_s": max(duration - req, 0.0)})
    in_gates = sum(g["duration_s"] for g in per_gate)
    overhead = wall_s - boot - requests_total
    return {
        "wall_s": wall_s,
        "server_boot_s": boot,
        "gate_requests_s": requests_total,
        "teardown_s": teardown,
        "harness_overhead_s": overhead,
        "harness_overhead_fraction": overhead / wall_s if wall_s > 0 else None,
        "harness_overhead_excluding_teardown_s": overhead - teardown,
        "harness_overhead_excluding_teardown_fraction": (overhead - teardown) / wall_s if wall_s > 0 else None,
        "in_gate_overhead_s": sum(g["in_gate_overhead_s"] for g in per_gate),
        "outside_gates_s": wall_s - boot - in_gates - teardown,
        "gates": per_gate,
        "gate_outcomes": {o: sum(1 for g in per_gate if g["outcome"] == o) for o in {g["outcome"] for g in per_gate}},
    }


def run_verdict(recipe: str, reports_dir: Path, *, recipes_dir: Path | None = None,
                extra_args: Sequence[str] = ()) -> dict[str, Any]:
    """Run the full qualification once as a subprocess; return its breakdown and timeline."""
    reports_dir.mkdir(parents=True, exist_ok=True)
    before = set(reports_dir.glob("*.json"))
    argv = [str(Path(sys.executable).with_name("pytest")), "suites", f"--recipe={recipe}",
            f"--vllmqual-reports-dir={reports_dir}", "-p", "no:cacheprovider", "-v", "--durations=0",
            "--durations-min=0", *extra_args]
    if recipes_dir is not None and recipes_dir.resolve() != (ROOT / "fixtures" / "recipes").resolve():
        argv.append(f"--vllmqual-recipes-dir={recipes_dir}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    timeline: list[tuple[float, str, float | None]] = []
    probe: StallProbe | None = None
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    own_cpu: float | None = None
    try:
        for line in proc.stdout:
            own_cpu = process_cpu_s(proc.pid) or own_cpu
            timeline.append((time.perf_counter() - started, line.rstrip()[:200], own_cpu))
            if probe is None and (match := SERVER_ADDRESS.search(line)):
                probe = StallProbe(f"http://{match['address']}")
                probe.start()
            elif probe is not None and "report written" in line:
                probe.stop()
        code = proc.wait()
    finally:
        if probe is not None:
            probe.stop()
    wall = time.perf_counter() - started
    written = sorted(set(reports_dir.glob("*.json")) - before, key=lambda p: p.stat().st_mtime)
    reports = [p for p in written if not p.name.startswith("comparison")]
    if not reports:
        tail = "\n".join(text for _, text, _ in timeline[-30:])
        raise RuntimeError(f"{' '.join(argv)} exited {code} and wrote no report:\n{tail}")
    report = json.loads(reports[-1].read_text())
    result = breakdown(report, wall)
    result.update({
        "command": " ".join(["pytest", *argv[1:]]),
        "exit_code": code,
        "report": str(reports[-1].relative_to(ROOT) if reports[-1].is_relative_to(ROOT) else reports[-1]),
        "phases": parse_durations(text for _, text, _ in timeline),
        "server_stalls": probe.summary() if probe is not None else None,
        # The pytest process's own CPU (user + system, its children excluded), read at its last line.
        "harness_cpu_s": own_cpu,
        "harness_cpu_fraction": own_cpu / wall if own_cpu is not None and wall > 0 else None,
        "harness_cpu_by_phase": cpu_by_phase(timeline),
        # cpu_s: the pytest process's CPU seconds when the line arrived (where it goes, line by line).
        "timeline": [{"t_s": round(t, 3), "line": text, "cpu_s": cpu} for t, text, cpu in timeline if text.strip()],
    })
    return result


def cpu_by_phase(timeline: Sequence[tuple[float, str, float | None]]) -> dict[str, Any]:
    """The pytest process's CPU seconds and wall seconds up to the line saying the server is ready,
    then to the report line, then to the end: what boot, the gates and the report each cost it."""
    marks: dict[str, int | None] = {"boot": None, "gates": None}
    for index, (_, text, _) in enumerate(timeline):
        if marks["boot"] is None and READY_LINE.search(text):
            marks["boot"] = index
        elif marks["boot"] is not None and "report written" in text:
            marks["gates"] = index
            break
    out: dict[str, Any] = {}
    start_t, start_cpu = 0.0, 0.0
    for phase, end in (("boot", marks["boot"]), ("gates", marks["gates"]), ("after", len(timeline) - 1)):
        if end is None or end < 0:
            break
        t, _, cpu = timeline[end]
        cpu = cpu if cpu is not None else start_cpu
        out[phase] = {"wall_s": t - start_t, "cpu_s": cpu - start_cpu}
        start_t, start_cpu = t, cpu
    return out


class StallProbe:
    """Polls the server's ``/health`` from outside the run: when its event loop is blocked, this sees it.

    ``/health`` takes about a millisecond; an answer that takes longer than ``STALL_S`` means
    the API server process could not serve anything during that time, whoever was asking.
    Such stalls land in whatever the harness was waiting for (often a ``/tokenize`` or
    ``/metrics`` call, which counts as harness overhead), so the total is reported beside it.
    """

    STALL_S = 0.2
    INTERVAL_S = 0.1

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.stalls: list[float] = []
        self.probes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-stall-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=30.0) as client:
            while not self._stop.wait(self.INTERVAL_S):
                begin = time.perf_counter()
                try:
                    response = client.get("/health")
                except httpx.HTTPError:
                    continue  # not listening yet, or gone
                if response.status_code != 200:
                    continue
                self.probes += 1
                spent = time.perf_counter() - begin
                if spent > self.STALL_S:
                    self.stalls.append(spent)

    def summary(self) -> dict[str, Any]:
        return {"probes": self.probes, "stalls": len(self.stalls), "stalled_s": sum(self.stalls),
                "longest_s": max(self.stalls, default=0.0), "threshold_s": self.STALL_S}


def parse_durations(lines: Iterable[str]) -> list[dict[str, Any]]:
    """pytest's ``--durations=0`` table: seconds per test phase (setup, call, teardown)."""
    rows = []
    for line in lines:
        match = DURATION_LINE.match(line)
        if match:
            rows.append({"seconds": float(match["s"]), "phase": match["phase"], "nodeid": match["nodeid"]})
    return rows


#: A server whose smoke fails, made from the real recipe: one output token cannot finish a sentence,
#: so the smoke gate sees finish_reason "length" and fails, as on a server whose template broke.
BROKEN_SMOKE = ("--vllmqual-set", "gates.smoke.max_tokens=1")


def run_broken_verdict(recipe: str, reports_dir: Path, *, recipes_dir: Path | None = None) -> dict[str, Any]:
    """Time to a verdict on a server whose smoke fails: fail fast (the default) against
    ``--vllmqual-no-fail-fast`` (every gate climbs on anyway), one real server each."""
    out: dict[str, Any] = {"broken_by": " ".join(BROKEN_SMOKE)}
    for mode, extra in (("fail_fast", ()), ("no_fail_fast", ("--vllmqual-no-fail-fast",))):
        result = run_verdict(recipe, reports_dir / mode, recipes_dir=recipes_dir, extra_args=(*BROKEN_SMOKE, *extra))
        report = json.loads((ROOT / result["report"]).read_text() if not Path(result["report"]).is_absolute()
                            else Path(result["report"]).read_text())
        gates = report.get("gates") or []
        out[mode] = {
            "wall_s": result["wall_s"],
            "server_boot_s": result["server_boot_s"],
            "after_ready_s": result["wall_s"] - result["server_boot_s"],
            "exit_code": result["exit_code"],
            "gates_run": sum(1 for g in gates if g.get("attempts")),
            "gates_not_run": sum(1 for g in gates if str(g.get("reason") or "").startswith("not run: smoke failed")),
            "command": result["command"],
        }
    out["after_ready_ratio"] = out["fail_fast"]["after_ready_s"] / out["no_fail_fast"]["after_ready_s"]
    return out

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="tiny-cpu")
    parser.add_argument("--recipes-dir", default=None, help="where --recipe is looked up (default fixtures/recipes)")
    parser.add_argument("--reports-dir", default=str(ROOT / "reports" / "bench" / "verdict"))
    parser.add_argument("--json", metavar="PATH")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        with tempfile.TemporaryDirectory(prefix="vllmqual-verdict-quick-") as tmp:
            recipe, recipes_dir = quick_recipe(Path(tmp) / "recipes")
            result = run_verdict(recipe.name, Path(tmp) / "reports", recipes_dir=recipes_dir)
    else:
        result = run_verdict(args.recipe, Path(args.reports_dir),
                             recipes_dir=Path(args.recipes_dir) if args.recipes_dir else None)
    print(json.dumps({k: v for k, v in result.items() if k not in ("timeline", "gates")}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
