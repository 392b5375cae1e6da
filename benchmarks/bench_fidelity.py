"""Benchmark: the harness against vLLM's own serving benchmark, on one server, in one run.

    python -m benchmarks.bench_fidelity [--recipe tiny-cpu] [--json PATH]
    python -m benchmarks.bench_fidelity --quick [--json PATH]   # harness leg only, fault server, seconds
    python -m benchmarks.bench_fidelity --only-chunk-rate [--rounds N] [--json PATH]

One server is started with the plugin's own launcher (``ServerManager``, the recipe's serve
command, the plugin's readiness), and everything that needs it runs on that one start:

- readiness detection (``fidelity_readiness``): when the log showed "Application startup
  complete." against when readiness returned;
- the harness against ``vllm bench serve`` (``fidelity_tools``): TTFT, decode rate and output
  throughput of the same workload through both tools, at each concurrency, rounds alternating
  which tool goes first;
- the clients' own share of TTFT (``fidelity_ttft_floor``), against a server that answers at once;
- the client's CPU at the highest chunk rate the server produces (``fidelity_chunk_rate``);
- the teardown profile (``fidelity_teardown``): where stopping the server spends its time.

A pass of requests through either tool, and the figures of each request (one formula for both
tools: the package's ``ttft_s``, and ``decode_tok_s`` = 1 / ``tpot_s`` as vLLM defines it, up to
the last output chunk), are ``fidelity_common``'s. ``run_all.py`` (``make bench``) also measures
prompt calibration against ``/tokenize`` on the same server (through ``run_fidelity``'s ``extra``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from benchmarks.fidelity_chunk_rate import chunk_rate_sweep, client_at_revision, client_cpu_per_chunk_pairs
from benchmarks.fidelity_common import (
    ENGINE_BINDS,
    FidelityConfig,
    Progress,
    bench_server_recipe,
    build_prompts,
    harness_pass,
    print_progress,
    vllm_bench_missing,
)
from benchmarks.fidelity_readiness import STARTUP_COMPLETE, start_server
from benchmarks.fidelity_teardown import TEARDOWN_CALLS, timed_calls
from benchmarks.fidelity_tools import compare_tools, summarize
from benchmarks.fidelity_ttft_floor import client_ttft_floor
from benchmarks.quick_mode import QUICK_SKIP_VLLM, add_quick_flag, quick_recipe
from pytest_vllmqual.client.prompts import ExactPromptBuilder, TokenCounter
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.token_counters import HFTokenCounter, ServerTokenCounter
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.recipe.loader import resolve_recipe
from pytest_vllmqual.recipe.model import Recipe

ROOT = Path(__file__).resolve().parent.parent


def run_fidelity(recipe: Recipe, *, config: FidelityConfig, workdir: Path, progress: Progress = print_progress,
                 extra: Callable[[ServerHandle], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Everything that needs the live server, on one server start (its engine placed as
    ``config.engine_bind`` says)."""
    recipe = bench_server_recipe(recipe, config.engine_bind)
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
        if config.vllm_bench:
            out["client_cpu_per_chunk"] = client_cpu_per_chunk_pairs(
                handle, builder, private_dir=private_dir, metrics_http=metrics_http,
                concurrency=max(config.rate_concurrencies), prompt_tokens=config.rate_prompt_tokens,
                max_tokens=config.rate_max_tokens, tokenizer=tokenizer, workdir=workdir, progress=progress)
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


def run_chunk_rate(recipe: Recipe, *, config: FidelityConfig, workdir: Path, rounds: int,
                   reference_revision: str | None, progress: Progress = print_progress) -> dict[str, Any]:
    """The chunk-rate sweep alone, on one server: this tree's client, optionally the client of
    ``reference_revision`` (alternating which goes first), and vLLM bench at every concurrency."""
    recipe = bench_server_recipe(recipe, config.engine_bind)
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
    add_engine_bind_flag(parser)
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
            rate = run_chunk_rate(recipe, config=FidelityConfig(engine_bind=args.engine_bind), workdir=Path(tmp), rounds=args.rounds,
                                  reference_revision=args.reference_client)
        if args.json:
            Path(args.json).write_text(json.dumps(rate, indent=2))
        return 0
    with tempfile.TemporaryDirectory(prefix="vllmqual-bench-") as tmp:
        results = run_fidelity(recipe, config=FidelityConfig(rounds=args.rounds, engine_bind=args.engine_bind),
                               workdir=Path(tmp))
    return _write_results(results, args.json)


def add_engine_bind_flag(parser: argparse.ArgumentParser) -> None:
    """``--engine-bind``: where the bench's own server places its engine (``fidelity_common.ENGINE_BINDS``)."""
    parser.add_argument("--engine-bind", choices=ENGINE_BINDS, default=FidelityConfig().engine_bind,
                        help="the bench server's engine: as the recipe says, or at TP=1 on core 0 (one-core, the "
                             "default: the other core is left to the API server and the client), or every TP "
                             "rank on core 0 (one-core-tp2)")


def _write_results(results: dict[str, Any], json_path: str | None) -> int:
    for row in results["summary"]:
        print(json.dumps({"concurrency": row["concurrency"], **row["ratios"]}))
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
