"""The chunk rate the server sustains and the client CPU it costs (short prompts, long outputs),
with ``vllm bench serve``'s client CPU on the same workload as the reference; optionally the
client of another git revision beside this tree's (``client_at_revision``)."""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import io
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.fidelity_common import ROOT, Progress, build_prompts, harness_pass, vllm_bench_pass
from pytest_vllmqual.client.prompts import ExactPromptBuilder
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.launch.base import ServerHandle


def chunk_rate_sweep(handle: ServerHandle, builder: ExactPromptBuilder, *, private_dir: Path,
                     metrics_http: httpx.Client, concurrencies: Sequence[int], prompt_tokens: int,
                     max_tokens: int, progress: Progress, tokenizer: str | None = None,
                     workdir: Path | None = None, client_class: type[QualClient] = QualClient,
                     client_label: str = "harness", reference_at: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Short prompts, long outputs: the chunk rate the server sustains and the client CPU it costs.

    At the highest concurrency (or at each of ``reference_at``) the same workload also goes
    through ``vllm bench serve``, whose client CPU (its process's, its request phase only) is the
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


#: How many times each client streams the reference workload for the CPU-per-chunk comparison.
#: One pass each gave 0.80 and 1.74 in two idle runs of 2026-12-05 (a pass of about 4,000 chunks
#: costs either client 0.15-0.25 s of CPU, so one pass's start-up, a collection or a cache miss
#: moves it): the figure is the ratio of the medians over these rounds, in alternating order.
CPU_PER_CHUNK_ROUNDS = 3


def client_cpu_per_chunk_pairs(handle: ServerHandle, builder: ExactPromptBuilder, *, private_dir: Path,
                               metrics_http: httpx.Client, concurrency: int, prompt_tokens: int, max_tokens: int,
                               tokenizer: str, workdir: Path, rounds: int = CPU_PER_CHUNK_ROUNDS,
                               progress: Progress | None = None) -> dict[str, Any]:
    """The harness's and vLLM bench's client CPU per streamed chunk on the same workload, ``rounds``
    times each, taking turns (which goes first alternates), with fresh prompts every pass.

    The ratio is the harness's median over vLLM bench's median; the range is the lowest and the
    highest ratio of one round's two passes, so a reader sees how much one pass moves it."""
    per_round: list[dict[str, float]] = []
    for r in range(rounds):
        row: dict[str, float] = {}
        for client in (("harness", "vllm_bench") if r % 2 == 0 else ("vllm_bench", "harness")):
            prompts = build_prompts(builder, prompt_tokens, 2 * concurrency, f"cpu-{client}-c{concurrency}-r{r}")
            if client == "harness":
                result = harness_pass(handle, prompts, concurrency=concurrency, max_tokens=max_tokens,
                                      private_dir=private_dir, label=f"cpu-harness-r{r}", metrics_http=metrics_http)
                chunks = result.chunks or 0
            else:
                result = vllm_bench_pass(handle, prompts, concurrency=concurrency, max_tokens=max_tokens,
                                         tokenizer=tokenizer, workdir=workdir, label=f"cpu-vllm-r{r}",
                                         metrics_http=metrics_http)
                chunks = result.output_tokens
            if result.client_cpu_s is not None and chunks:
                row[client] = result.client_cpu_s / chunks * 1e6
        if len(row) == 2:
            per_round.append({**row, "ratio": row["harness"] / row["vllm_bench"]})
    out: dict[str, Any] = {"concurrency": concurrency, "rounds": per_round}
    if per_round:
        harness = statistics.median(r["harness"] for r in per_round)
        theirs = statistics.median(r["vllm_bench"] for r in per_round)
        out.update(harness_us_per_chunk=harness, vllm_bench_us_per_chunk=theirs, ratio=harness / theirs,
                   ratio_range=[min(r["ratio"] for r in per_round), max(r["ratio"] for r in per_round)])
        if progress is not None:
            progress(f"client CPU per chunk at c={concurrency}, median of {len(per_round)} rounds: harness "
                     f"{harness:.0f} µs, vllm bench {theirs:.0f} µs, ratio {harness / theirs:.3f} (one round's "
                     f"ratio {out['ratio_range'][0]:.2f}-{out['ratio_range'][1]:.2f})")
    return out


def client_at_revision(revision: str) -> type[QualClient]:
    """``QualClient`` as committed at ``revision``, imported beside this tree's (``--reference-client``).

    Why in this process: the two clients then take turns on one server start, with the same
    prompts, so the server's drift between two runs cannot fall on one of them. How: the
    revision's whole ``pytest_vllmqual/client`` folder (its transport and SSE parse spend most of
    the CPU per chunk) is written out with ``git archive`` and imported as a package of its own
    name, so its relative imports stay within that copy; what it imports from the rest of the
    package (errors, records, the server handle) is this tree's. A revision whose client does
    not import against this tree (or has no ``client`` folder) fails here, naming the revision.
    """
    name = "vllmqual_client_at_" + "".join(ch if ch.isalnum() else "_" for ch in revision)
    archive = subprocess.run(["git", "archive", "--format=tar", revision, "pytest_vllmqual/client"], cwd=ROOT,
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise RuntimeError(f"no client folder at revision {revision}: {archive.stderr.decode(errors='replace')}")
    folder = Path(tempfile.mkdtemp(prefix="vllmqual-client-at-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    package = folder / "pytest_vllmqual" / "client"
    spec = importlib.util.spec_from_file_location(name, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    assert spec is not None and spec.loader is not None, package
    sys.modules[name] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(sys.modules[name])
        module = importlib.import_module(f"{name}.qual_client")
    except ImportError as exc:
        del sys.modules[name]
        raise RuntimeError(f"the client of revision {revision} does not import beside this tree: {exc}") from exc
    client_class: type[QualClient] = module.QualClient
    return client_class
