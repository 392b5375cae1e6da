"""The harness against ``vllm bench serve``: TTFT, decode rate and output throughput of the same
workload through both tools, passes alternating which tool goes first (harness first in even
rounds), so that drift of the shared machine falls on both; ratios with bootstrap intervals.
Each pass gets its own nonces, so no pass is served from the prefix cache of another; the
lengths are identical and checked (``usage.prompt_tokens``).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.fidelity_common import (
    RATE_MIN_REQUESTS,
    FidelityConfig,
    PassResult,
    Progress,
    RequestFigures,
    build_prompts,
    harness_pass,
    median_known,
    ratio,
    vllm_bench_command,
    vllm_bench_pass,
)
from pytest_vllmqual.client.prompts import ExactPromptBuilder
from pytest_vllmqual.launch.base import ServerHandle

#: Two workloads per concurrency and round. On the 2-core tiny-cpu server the two TP workers
#: keep both cores busy while they decode, so the API server process that writes the stream
#: often gets the CPU only when decoding ends, and the chunks of a request then arrive in one
#: burst (any client sees it, vLLM bench too; hence the engine on one core by default,
#: ``fidelity_common.ENGINE_BINDS``, and the burst rule of every rate,
#: ``fidelity_common.rate_not_measurable``). "ttft" asks for one token, so the first chunk
#: leaves as soon as prefill ends and TTFT is measured, not the scheduler; "decode" asks for
#: ``max_tokens`` and gives decode tok/s and output throughput.
WORKLOADS = ("ttft", "decode")


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
        # Over the requests whose tokens did not arrive in a burst (fidelity_common.rate_not_measurable).
        "median_decode_tok_s": median_of_measurable([r.decode_tok_s for r in reqs]),
        "median_output_tok_s_per_request": median_of_measurable([r.output_tok_s for r in reqs]),
        **rate_counts(reqs),
        # The same rates as shares of the server's own pace in each request's pass (server_pace_tok_s).
        "paced_median_decode": median_of_measurable(paced_decode(mine)),
        "paced_median_output_per_request": median_of_measurable(paced_output(mine)),
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
    }
    if chunks:
        figures["client_cpu_us_per_chunk"] = (figures["client_cpu_s"] or 0.0) / chunks * 1e6
    if mine and mine[0].tool == "vllm_bench":
        figures["own_summary_per_pass"] = {
            key: [p.tool_reported.get(key) for p in mine]
            for key in ("median_ttft_ms", "median_tpot_ms", "output_throughput")
        }
    return figures


def server_pace_tok_s(p: PassResult, completion_tokens: int) -> float | None:
    """The server's own per-request output rate in pass ``p`` for a request of ``completion_tokens``:
    completion_tokens / (mean TTFT + (completion_tokens - 1) x mean TPOT), from its histograms read
    around the pass. None without both means.

    The two tools' passes of a round run one after the other, and on 2 cores the server's own pace
    moved by up to 2x from one pass to the next (2026-12-06: 1 / mean TPOT 149 tok/s in one tool's
    pass, 215 in the other's, each tool within 5 % of the server in its own pass). A tool's rate over
    the server's pace in the same pass takes that drift out; the harness / vLLM bench ratio of those
    shares is then the difference between the two clients."""
    ttft, tpot = p.server_ttft_mean_s, p.server_tpot_mean_s
    if not ttft or not tpot or completion_tokens < 1:
        return None
    return completion_tokens / (ttft + (completion_tokens - 1) * tpot)


def paced_decode(mine: Sequence[PassResult]) -> list[float | None]:
    """Each request's decode tok/s as a share of its pass's server decode rate (1 / mean TPOT)."""
    return [r.decode_tok_s * p.server_tpot_mean_s if r.decode_tok_s is not None and p.server_tpot_mean_s else None
            for p in mine for r in p.requests]


def paced_output(mine: Sequence[PassResult]) -> list[float | None]:
    """Each request's output tok/s (tokens / e2e) as a share of its pass's ``server_pace_tok_s``."""
    shares: list[float | None] = []
    for p in mine:
        for r in p.requests:
            pace = server_pace_tok_s(p, r.completion_tokens or 0)
            shares.append(r.output_tok_s / pace if r.output_tok_s is not None and pace else None)
    return shares


def paced_throughput(p: PassResult) -> float | None:
    """The pass-wall output throughput as a share of the server's pace for the pass's longest answer."""
    pace = server_pace_tok_s(p, max((r.completion_tokens or 0 for r in p.requests), default=0))
    return p.output_throughput / pace if pace else None


def median_of_measurable(values: Sequence[float | None]) -> float | None:
    """The median of the known rates, None (not measurable) where fewer than ``RATE_MIN_REQUESTS`` are known."""
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if len(kept) >= RATE_MIN_REQUESTS else None


def rate_counts(reqs: Sequence[RequestFigures]) -> dict[str, Any]:
    """How many completed requests gave a rate and how many did not (burst delivery), with the reasons."""
    completed = [r for r in reqs if r.ok and (r.completion_tokens or 0) > 1]
    reasons = [why for r in completed if (why := r.rate_not_measurable) is not None]
    return {"rate_requests": len(completed), "rate_not_measurable": len(reasons),
            "rate_not_measurable_examples": reasons[:3]}


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
        "median_ttft": ratio(h_t["median_ttft_s"], v_t["median_ttft_s"]),
        "median_decode_tok_s": ratio(h_d["median_decode_tok_s"], v_d["median_decode_tok_s"]),
        "output_throughput": paired_median_ratio(select("harness", "decode"), select("vllm_bench", "decode")),
        "pooled_output_throughput": ratio(h_d["output_throughput_tok_s"], v_d["output_throughput_tok_s"]),
        "median_output_tok_s_per_request": ratio(h_d["median_output_tok_s_per_request"],
                                                 v_d["median_output_tok_s_per_request"]),
        # The guarded fidelity ratios: each tool's figures at the server's pace of its own passes.
        "paced_median_decode_tok_s": ratio(h_d["paced_median_decode"], v_d["paced_median_decode"]),
        "paced_median_output_tok_s_per_request": ratio(h_d["paced_median_output_per_request"],
                                                       v_d["paced_median_output_per_request"]),
        "paced_output_throughput": paired_median_ratio(select("harness", "decode"), select("vllm_bench", "decode"),
                                                       value=paced_throughput),
        "harness_ttft_vs_server_histogram": ratio(h_t["mean_ttft_s"], h_t["server_ttft_mean_s"]),
        "vllm_bench_ttft_vs_server_histogram": ratio(v_t["mean_ttft_s"], v_t["server_ttft_mean_s"]),
        "decode_workload_median_ttft": ratio(h_d["median_ttft_s"], v_d["median_ttft_s"]),
        # Each tool's decode rate against the server's own for the same passes: ~1 for both means each
        # measures the server as it measures itself, and a harness/vLLM-bench gap is the server's.
        "harness_decode_vs_server": ratio(h_d["median_decode_tok_s"], h_d["server_decode_tok_s"]),
        "vllm_bench_decode_vs_server": ratio(v_d["median_decode_tok_s"], v_d["server_decode_tok_s"]),
        "server_decode_harness_passes_vs_vllm_bench_passes": ratio(h_d["server_decode_tok_s"],
                                                                    v_d["server_decode_tok_s"]),
        "decode_workload_harness_ttft_vs_server_histogram": ratio(h_d["mean_ttft_s"], h_d["server_ttft_mean_s"]),
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
        "paced_median_decode_tok_s": bootstrap_ratio_ci(paced_decode(select("harness", "decode")),
                                                        paced_decode(select("vllm_bench", "decode")), statistics.median),
        "paced_median_output_tok_s_per_request": bootstrap_ratio_ci(paced_output(select("harness", "decode")),
                                                                    paced_output(select("vllm_bench", "decode")),
                                                                    statistics.median),
        "paced_output_throughput": bootstrap_ratio_ci([paced_throughput(p) for p in select("harness", "decode")],
                                                      [paced_throughput(p) for p in select("vllm_bench", "decode")],
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


def _throughput(p: PassResult) -> float | None:
    return p.output_throughput


def paired_round_ratios(harness: Sequence[PassResult], vllm_bench: Sequence[PassResult],
                        value: Callable[[PassResult], float | None] = _throughput) -> list[dict[str, Any]]:
    """Each round's pass-wall output throughput (or another ``value`` of a pass), harness over vLLM
    bench, the two passes of one round run back to back: how far one round's pair moves, beside the
    pooled figure."""
    theirs = {p.round: p for p in vllm_bench}
    return [{"round": p.round, "harness_tok_s": value(p), "vllm_bench_tok_s": value(theirs[p.round]),
             "ratio": ratio(value(p), value(theirs[p.round]))}
            for p in harness if p.round in theirs]


def paired_median_ratio(harness: Sequence[PassResult], vllm_bench: Sequence[PassResult],
                        value: Callable[[PassResult], float | None] = _throughput) -> float | None:
    """The median over rounds of each round's harness / vLLM bench pass-wall output throughput.

    The two passes of a round run back to back, in alternating order, so they share the machine's
    state of the moment; the ratio of each tool's median over all rounds can instead compare one
    tool's slow round with the other's fast one (2026-12-05: rounds at 0.922, 0.883 and 0.984 gave
    0.892 that way). None when no round has both passes."""
    ratios = [r for pair in paired_round_ratios(harness, vllm_bench, value) if (r := pair["ratio"]) is not None]
    return statistics.median(ratios) if ratios else None


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
                    ttft = median_known([q.ttft_s for q in result.requests])
                    decode = median_known([q.decode_tok_s for q in result.requests])
                    counts = rate_counts(result.requests)
                    rates = (f", rates not measurable for {counts['rate_not_measurable']} of "
                             f"{counts['rate_requests']}" if workload == "decode" else "")
                    progress(f"{label}: median TTFT {(ttft or 0) * 1e3:.1f} ms, median decode "
                             + (f"{decode:.1f} tok/s" if decode is not None else "not measurable")
                             + f", output {result.output_throughput:.1f} tok/s{rates}, "
                             f"{sum(1 for q in result.requests if not q.ok)} failed")
    return passes, commands
