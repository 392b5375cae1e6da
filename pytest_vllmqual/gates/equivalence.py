"""The equivalence probe as a gate: each arm answers the same probe, and keeps its answers.

The gate does not judge the arm: a comparison does, over two arms' answers. It passes when the
probe was answered, and is skipped as not measured (``not measured: ...``, the rule of
:mod:`pytest_vllmqual.not_measured`) when the server returns no log probabilities, which makes any
comparison of this arm "not measurable", or when no context length of the probe fits the model.
It runs with the server to itself (the plugin holds the traffic lock exclusively for it), because
log probabilities change with batch composition. It runs after every cheap gate (see
``session.gate_order``), and its chunks are sized to the memory the server has outside its KV
budget (``equivalence.memory``): vLLM computes a prompt's log probabilities over the whole
vocabulary outside that budget, so a chunk that does not fit is not sent, and a probe with no
chunk that fits is not measured. A server that dies under the probe is recorded with the chunk
in flight, and the run says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_vllmqual.atomic_io import write_text_atomic
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.equivalence import (
    OPEN_PROMPTS,
    PRIVATE_NAME,
    DepthSettings,
    ProbeMemory,
    ProbeSettings,
    model_vocab,
    run_probe,
    size_probe,
)
from pytest_vllmqual.errors import ServerGoneError
from pytest_vllmqual.hashing import canonical_json
from pytest_vllmqual.not_measured import not_measured
from pytest_vllmqual.recipe.model import Recipe

from .functional import JSON_PROMPT
from .ladder import DERIVED_RUNGS, rung_targets
from .recorder import GateRecorder
from .smoke import SMOKE_PROMPT
from .tool_fixtures import ToolCase
from .verdict import GateVerdict

__all__ = ["GATE_NAME", "depth_settings", "equivalence_gate", "probe_prompts"]

GATE_NAME = "equivalence"
_TOOL_PROMPTS = 3


def probe_prompts(recipe: Recipe, tool_fixtures: Sequence[ToolCase]) -> list[tuple[str, str]]:
    """The greedy prompts: the functional gates' own (smoke, JSON, the first typed tools, as plain
    chat without tools or a response format) and a few open ones."""
    smoke = str(recipe.gate("smoke").get("prompt") or SMOKE_PROMPT)
    prompts = [("smoke", smoke), ("json", JSON_PROMPT)]
    prompts += [(f"tool-{fixture.name}", fixture.prompt) for fixture in list(tool_fixtures)[:_TOOL_PROMPTS]]
    prompts += [(f"open-{number}", text) for number, text in enumerate(OPEN_PROMPTS, start=1)]
    return prompts


def depth_settings(recipe: Recipe) -> DepthSettings:
    """The depth buckets of this recipe: up to its largest ladder rung (the rungs a managed run would
    climb when it sets none), unless ``gates.equivalence`` sets them."""
    rungs = tuple(recipe.gate("capacity").get("rungs") or DERIVED_RUNGS)
    largest = max((target for target, _ in rung_targets(recipe, rungs)), default=None)
    return DepthSettings.from_recipe(recipe.gate(GATE_NAME), largest, recipe.serve.max_model_len)


def equivalence_gate(client: QualClient, recipe: Recipe, gate: GateRecorder,
                     tool_fixtures: Sequence[ToolCase], memory: ProbeMemory | None = None) -> GateVerdict:
    """Answer the probe and keep the answers in the private folder for the report's sidecar.

    ``memory``: what the server has outside its KV budget (``equivalence.memory.server_memory``);
    the probe keeps only the context lengths whose chunk fits it and records the limit and why."""
    asked = ProbeSettings.from_recipe(recipe.gate(GATE_NAME), recipe.serve.max_model_len, recipe.project_root)
    gate.threshold(context_lengths=list(asked.context_lengths), chunks_per_length=asked.chunks_per_length,
                   max_chunk_tokens=asked.max_chunk_tokens, greedy_max_tokens=asked.greedy_max_tokens)
    settings, sizing = size_probe(asked, memory or ProbeMemory(None, "no memory reading was given"),
                                  *model_vocab(recipe.identity.model_path))
    gate.measure(chunk_sizing=sizing)
    if settings.dropped_lengths:
        gate.measure(dropped_lengths=list(settings.dropped_lengths))
    if not settings.context_lengths:
        reason = (f"no context length of gates.equivalence fits this model (max_model_len "
                  f"{recipe.serve.max_model_len}, chunk cap {settings.max_chunk_tokens:,})")
        if asked.context_lengths:
            reason = (f"no probe chunk fits the memory the server has outside its KV budget: {sizing['why']}, "
                      f"and the shortest chunk asked is {min(asked.context_lengths):,} tokens")
        gate.summary(not_measured(reason))
        return GateVerdict(skip_reason=not_measured(reason))
    try:
        depth = depth_settings(recipe)
        gate.threshold(depth=depth.to_dict())
        result = run_probe(client, settings, probe_prompts(recipe, tool_fixtures), depth)
    except ServerGoneError:
        gate.server_gone(client.last_attempt, "died_under_probe",
                         "a prompt's log probabilities are computed over the whole vocabulary outside vLLM's "
                         "memory budget; lower gates.equivalence.max_chunk_tokens")
        raise
    except ValueError as exc:
        return GateVerdict(failure=f"the equivalence probe failed: {exc}")
    gate.measure(top_k=result.top_k, probe_seconds=result.seconds)
    if not result.measured:
        gate.summary(not_measured(str(result.reason)))
        return GateVerdict(skip_reason=not_measured(f"{result.reason}; no comparison with this arm can be made"))
    body = result.body
    text = canonical_json(body)
    write_text_atomic(text, Path(gate.private_dir) / PRIVATE_NAME, what="probe answers")
    positions = sum(len(chunk["positions"]) for chunk in body["chunks"])
    gate.measure(probe_sha256=body["probe_sha256"], chunks=len(body["chunks"]), scored_positions=positions,
                 greedy_prompts=len(body["greedy"]), sidecar=PRIVATE_NAME,
                 sidecar_bytes=len(text))
    lengths = ", ".join(f"{n:,}" for n in settings.context_lengths)
    deep = body.get("depth") or {}
    if deep:
        gate.measure(depth_windows=len(deep["windows"]), depth_buckets=deep["buckets"],
                     depth_seconds=deep["seconds"], depth_dropped=deep["dropped"])
    depth_text = (f", {len(deep['windows'])} depth windows in {len(deep['buckets'])} buckets to "
                  f"{deep['buckets'][-1][1]:,} tokens ({deep['seconds']:.1f} s)") if deep.get("buckets") else ""
    gate.summary(f"K = {result.top_k}; {len(body['chunks'])} chunks at {lengths} tokens ({positions:,} scored "
                 f"positions){depth_text}, {len(body['greedy'])} greedy prompts, in {result.seconds:.1f} s")
    return GateVerdict()
