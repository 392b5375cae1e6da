"""Benchmark: the load gate's closed loop against ``vllm bench serve --max-concurrency N``.

    python -m benchmarks.bench_load_fidelity [--recipe tiny-cpu] [--levels 1,2,4] [--rounds 2] [--json PATH]
    python -m benchmarks.bench_load_fidelity --quick [--json PATH]

One server (the plugin's launcher, the recipe's serve command). At each level the same prompts
(exact length, one nonce each, so neither tool is served from the other's prefix cache) go
through both tools, alternating which goes first each round:

- the gate's client: ``client.load_loop.run_closed_loop`` over ``QualClient.stream_chat_once``,
  the request body the load gate sends (``ignore_eos``, fixed ``max_tokens``), one uncounted
  warm-up request first, exactly N in flight;
- ``vllm bench serve`` (through ``benchmarks/vllm_serve_bench.py``) with ``--max-concurrency N``,
  ``--request-rate inf``, the very same user texts and output length.

Per level: the p50 TTFT and p50 TPOT of the gate's client over vLLM bench's, each with a 95%
bootstrap interval (an interval holding 1.0 means the tools agree within this run's noise), and
at the highest level each client's own CPU seconds per completed request. Each pass also reads the
server's own histograms (``/metrics``) before and after it: each tool's mean TTFT and TPOT over the
server's mean for the same requests says which client is nearer the server where the two differ.
Both tools' figures are computed with one formula (``gates.load_stats``) from their per-request data.

``--quick`` runs against the fault server (tests/faults/fault_server.py), which serves no real
tokens for vLLM bench to count: only the gate's client runs, at levels 1 and 2, so the loop, the
figures and the JSON shape are checked in seconds without vLLM (``tests/load`` runs it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.fidelity_common import (
    EXTRA_BODY,
    build_prompts,
    print_progress,
    vllm_bench_missing,
    vllm_bench_pass,
)
from benchmarks.fidelity_readiness import start_server
from benchmarks.fidelity_tools import bootstrap_ratio_ci
from pytest_vllmqual.client.load_loop import run_closed_loop
from pytest_vllmqual.client.prompts import ExactPrompt, ExactPromptBuilder
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.token_counters import ServerTokenCounter
from pytest_vllmqual.gates.ladder import fetch_metrics_text, parse_metrics_text
from pytest_vllmqual.gates.load_stats import RequestFigures, percentile, server_cross_check
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.recipe.loader import resolve_recipe

ROOT = Path(__file__).resolve().parent.parent

FAULT_SERVER = ROOT / "tests" / "faults" / "fault_server.py"


@dataclass
class LoadPass:
    """One tool at one level in one round: its per-request figures and its own CPU."""

    tool: str
    level: int
    round: int
    requests: list[RequestFigures]
    wall_s: float
    client_cpu_s: float | None
    server: dict[str, Any] | None = None

    def values(self, figure: str) -> list[float]:
        return [v for r in self.requests if r.ok and (v := getattr(r, figure)) is not None]

    def p50(self, figure: str) -> float | None:
        return percentile(self.values(figure), 50)

    def mean(self, figure: str) -> float | None:
        values = self.values(figure)
        return sum(values) / len(values) if values else None

    def server_view(self) -> dict[str, Any]:
        """This client's mean TTFT and TPOT over the server's own mean for the same requests (its
        /metrics histograms before and after the pass; the warm-up request is in both)."""
        server = self.server or {}
        out: dict[str, Any] = {}
        for figure in ("ttft", "tpot"):
            mine, theirs = self.mean(f"{figure}_s"), server.get(f"server_{figure}_mean_s")
            out[f"{figure}_mean_s"] = mine
            out[f"server_{figure}_mean_s"] = theirs
            out[f"{figure}_mean_over_server"] = mine / theirs if mine and theirs else None
        return out

    def to_dict(self) -> dict[str, Any]:
        done = [r for r in self.requests if r.ok]
        return {"tool": self.tool, "level": self.level, "round": self.round, "requests": len(self.requests),
                "completed": len(done), "wall_s": self.wall_s, "client_cpu_s": self.client_cpu_s,
                "ttft_p50_s": self.p50("ttft_s"), "tpot_p50_s": self.p50("tpot_s"),
                "cpu_per_request_ms": (1000 * self.client_cpu_s / len(done)) if done and self.client_cpu_s else None,
                **self.server_view()}


def gate_pass(handle: ServerHandle, prompts: Sequence[ExactPrompt], warmup: ExactPrompt, *, level: int,
              max_tokens: int, round_index: int) -> LoadPass:
    """The load gate's way: one warm-up, then exactly ``level`` in flight over ``prompts``."""
    client = QualClient(handle, timeout_s=600.0)

    def send(prompt: ExactPrompt) -> Any:
        body = {**prompt.request_fields(), "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                **EXTRA_BODY}
        return client.stream_chat_once(body, label=f"load-{level}", output_times=True)

    send(warmup)
    cpu = time.process_time()
    loop = run_closed_loop(level, len(prompts), lambda i: send(prompts[i]))
    cpu = time.process_time() - cpu
    client.close()
    requests = [RequestFigures.from_times(ok=r.result.ok, ttft_s=r.result.ttft_s, e2e_s=r.result.e2e_s,
                                          completion_tokens=(r.result.usage or {}).get("completion_tokens"),
                                          output_times=r.result.output_times) for r in loop.requests]
    return LoadPass("gate", level, round_index, requests, loop.wall_s, cpu)


def bench_pass(handle: ServerHandle, prompts: Sequence[ExactPrompt], *, level: int, max_tokens: int,
               tokenizer: str, workdir: Path, metrics_http: httpx.Client, round_index: int) -> LoadPass:
    result = vllm_bench_pass(handle, prompts, concurrency=level, max_tokens=max_tokens, tokenizer=tokenizer,
                             workdir=workdir, label=f"vllm-{level}-{round_index}", metrics_http=metrics_http,
                             round_index=round_index)
    requests = [RequestFigures(ok=r.ok, ttft_s=r.ttft_s, e2e_s=r.e2e_s, completion_tokens=r.completion_tokens,
                                last_output_s=r.e2e_s)  # vLLM bench ends a request at its last token chunk
                for r in result.requests]
    return LoadPass("vllm_bench", level, round_index, requests, result.duration_s, result.client_cpu_s)


def _ratio_row(passes: Sequence[LoadPass], level: int) -> dict[str, Any]:
    mine = [r for p in passes if p.tool == "gate" and p.level == level for r in p.requests if r.ok]
    theirs = [r for p in passes if p.tool == "vllm_bench" and p.level == level for r in p.requests if r.ok]

    def median(values: list[float]) -> float:
        return percentile(values, 50) or 0.0

    row: dict[str, Any] = {"level": level}
    for figure in ("ttft_s", "tpot_s"):
        a = [getattr(r, figure) for r in mine]
        b = [getattr(r, figure) for r in theirs]
        pa, pb = percentile([v for v in a if v is not None], 50), percentile([v for v in b if v is not None], 50)
        row[f"{figure[:-2]}_p50_ratio"] = pa / pb if pa and pb else None
        row[f"{figure[:-2]}_p50_ratio_ci95"] = bootstrap_ratio_ci(a, b, median)
    return row


def _cpu_row(passes: Sequence[LoadPass], level: int) -> dict[str, Any]:
    out: dict[str, Any] = {"level": level}
    for tool in ("gate", "vllm_bench"):
        chosen = [p for p in passes if p.tool == tool and p.level == level and p.client_cpu_s is not None]
        done = sum(1 for p in chosen for r in p.requests if r.ok)
        cpu = sum(p.client_cpu_s or 0.0 for p in chosen)
        out[f"{tool}_cpu_ms_per_request"] = 1000 * cpu / done if done else None
    return out


def _server_rows(passes: Sequence[LoadPass], level: int) -> list[dict[str, Any]]:
    """Per tool at this level: its mean TTFT and TPOT over the server's own, averaged over rounds,
    so a difference between the two tools can be placed: the one nearer 1.0 agrees with the server."""
    rows = []
    for tool in ("gate", "vllm_bench"):
        views = [p.server_view() for p in passes if p.tool == tool and p.level == level]
        row: dict[str, Any] = {"level": level, "tool": tool}
        for key in ("ttft_mean_over_server", "tpot_mean_over_server"):
            values = [v[key] for v in views if v[key] is not None]
            row[key] = sum(values) / len(values) if values else None
        rows.append(row)
    return rows


def run(handle: ServerHandle, *, levels: Sequence[int], rounds: int, prompt_tokens: int, max_tokens: int,
        tokenizer: str | None, workdir: Path) -> dict[str, Any]:
    """Every level, every round, the tools alternating first; then the ratios and the CPU row."""
    metrics_http = httpx.Client(base_url=handle.base_url, headers=handle.auth_headers())
    builder = ExactPromptBuilder(ServerTokenCounter(metrics_http, handle.served_model_name))
    passes: list[LoadPass] = []
    for level in levels:
        count = max(32, 4 * level) if tokenizer is not None else 4 * level
        for round_index in range(rounds):
            order = ("gate", "vllm_bench") if round_index % 2 == 0 else ("vllm_bench", "gate")
            for tool in order:
                if tool == "vllm_bench" and tokenizer is None:
                    continue
                prompts = build_prompts(builder, prompt_tokens, count + 1, f"{tool}-{level}-{round_index}")
                before = parse_metrics_text(fetch_metrics_text(metrics_http))
                if tool == "gate":
                    passes.append(gate_pass(handle, prompts[1:], prompts[0], level=level, max_tokens=max_tokens,
                                            round_index=round_index))
                elif tokenizer is not None:
                    passes.append(bench_pass(handle, prompts[1:], level=level, max_tokens=max_tokens,
                                             tokenizer=tokenizer, workdir=workdir, metrics_http=metrics_http,
                                             round_index=round_index))
                after = parse_metrics_text(fetch_metrics_text(metrics_http))
                passes[-1].server = server_cross_check(after.delta(before) if before and after else None)
                print_progress(f"level {level} round {round_index} {tool}: {json.dumps(passes[-1].to_dict())}")
    metrics_http.close()
    return {"levels": list(levels), "rounds": rounds, "prompt_tokens": prompt_tokens, "max_tokens": max_tokens,
            "vllm_bench": tokenizer is not None, "passes": [p.to_dict() for p in passes],
            "ratios": [_ratio_row(passes, level) for level in levels] if tokenizer is not None else [],
            "client_cpu_at_highest_level": _cpu_row(passes, max(levels)),
            "against_the_server": [row for level in levels for row in _server_rows(passes, level)]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def fault_server() -> Iterator[ServerHandle]:
    """The fault server on a free loopback port, until the block ends."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(FAULT_SERVER), "--port", str(port), "--served-model-name", "m"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield ServerHandle(base_url=f"http://127.0.0.1:{port}", served_model_name="m", launcher_kind="external")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="tiny-cpu")
    parser.add_argument("--recipes-dir", default=str(ROOT / "fixtures" / "recipes"))
    parser.add_argument("--levels", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="the gate's client only, against the fault server")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    levels = [int(v) for v in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="vllmqual-load-bench-") as tmp:
        if args.quick:
            with fault_server() as handle:
                results = run(handle, levels=[1, 2], rounds=1, prompt_tokens=64, max_tokens=2, tokenizer=None,
                              workdir=Path(tmp))
        else:
            missing = vllm_bench_missing()
            if missing is not None:
                print(f"bench_load_fidelity: {missing}", file=sys.stderr)
                return 2
            recipe = resolve_recipe(args.recipe, Path(args.recipes_dir))
            manager, _ = start_server(recipe, Path(tmp) / "private", print_progress)
            try:
                assert manager.handle is not None
                results = run(manager.handle, levels=levels, rounds=args.rounds, prompt_tokens=args.prompt_tokens,
                              max_tokens=args.max_tokens, tokenizer=recipe.model_location(), workdir=Path(tmp))
            finally:
                manager.stop()
    for row in results["ratios"]:
        print(json.dumps(row))
    print(json.dumps(results["client_cpu_at_highest_level"]))
    for row in results["against_the_server"]:
        print(json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
