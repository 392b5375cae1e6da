"""The floor under load as a gate: one server's answers alone and while each load level is in flight.

Like the probe and the item bank, the gate does not judge the arm: it records the answers (the
sidecar's ``load_floor`` block) and the floor per level, and a comparison reads them. It is not
applicable to a recipe without load levels (``gates.load`` or ``gates.load_floor.levels``), passes
when every pass was answered, fails on an HTTP error of a measured request, and records a server
that dies under it with the request in flight. It asks the first ``items_per_family`` items of
each family of the recipe's own bank (the very questions the item bank asks; the needle family
only when named) and the probe's chunks and greedy prompts, and runs after the probe, before the
ladder, with the server to itself but for its own load. The answers alone are the ones the probe
and the item bank recorded earlier in the run when they asked exactly the same questions (the
probe's chunk tokens, ``top_k`` and greedy prompts; the bank's items and answer length), else
this gate asks them again first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.results import StreamResult
from pytest_vllmqual.equivalence import (
    BANK_VERSION,
    BLOCKS_DIR,
    PRIVATE_NAME,
    BankSettings,
    FloorQuestions,
    FloorSettings,
    Item,
    ProbeSettings,
    RecordedAnswers,
    build_bank,
    floor_levels,
    run_floor,
    write_block,
)
from pytest_vllmqual.equivalence import LOAD_FLOOR_KEY as BLOCK_KEY
from pytest_vllmqual.errors import ServerGoneError
from pytest_vllmqual.launch.base import ProgressFn
from pytest_vllmqual.recipe.load_gate_settings import LoadSettings, load_settings
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import FailureKind
from pytest_vllmqual.words import ItemFamily

from .equivalence import probe_prompts
from .items import SIDECAR_KEY as ITEMS_KEY
from .load import LevelRunner
from .recorder import GateRecorder
from .tool_fixtures import ToolCase
from .verdict import GateVerdict

__all__ = ["GATE_NAME", "floor_items", "level_row", "level_summary", "load_floor_gate", "recorded_answers"]

GATE_NAME = "load_floor"


def _floor_bank(recipe: Recipe, settings: FloorSettings) -> tuple[list[Item], BankSettings, str]:
    """The floor's items, the bank's settings and the bank's items hash (to match the bank's recorded block)."""
    bank_settings = BankSettings.from_recipe(recipe.gate("items"), recipe.serve.max_model_len, recipe.project_root)
    bank = build_bank(bank_settings)
    families = settings.families or tuple(str(f) for f in bank_settings.families if f is not ItemFamily.NEEDLE)
    items: list[Item] = []
    for family in families:
        items += [item for item in bank.items if item.family == family][:settings.items_per_family]
    return items, bank_settings, bank.items_sha256()


def floor_items(recipe: Recipe, settings: FloorSettings) -> tuple[list[Item], BankSettings]:
    """The first ``items_per_family`` items of each chosen family of the recipe's bank."""
    items, bank_settings, _hash = _floor_bank(recipe, settings)
    return items, bank_settings


def level_row(level: dict[str, Any]) -> dict[str, Any]:
    """One level as the report's flat row: the probe's figures (point and 95% bounds), the greedy
    answers, the item flips and what the background load did."""
    probe, items, load = level.get("probe") or {}, level["items"], level.get("load") or {}
    row: dict[str, Any] = {"in_flight": level["in_flight"], "answers_identical": level["answers_identical"],
                           "seconds": level.get("seconds"), "items": items["items"], "b": items["b"], "c": items["c"],
                           "changed_answers": items["changed_answers"]}
    for key in ("top1_agreement", "kl_lower_bound", "ln_ppl_ratio"):
        interval = probe.get(key) or {}
        row.update({key: interval.get("point"), f"{key}_low": interval.get("low"), f"{key}_high": interval.get("high")})
    row.update({key: probe.get(key) for key in ("chunks", "greedy_prompts", "greedy_identical", "greedy_hard")})
    row.update({key: load.get(key) for key in ("load_requests", "load_failed", "sends", "sends_at_full_level",
                                                "in_flight_at_sends_min")})
    return row


def level_summary(level: dict[str, Any]) -> str:
    """``4 in flight: top-1 99.80%, greedy 8/8 identical, items 1/32 changed (b 1, c 0)``."""
    probe, items = level.get("probe") or {}, level["items"]
    top1 = (probe.get("top1_agreement") or {}).get("point")
    head = (f"top-1 {100 * top1:.2f}%, greedy {probe['greedy_identical']}/{probe['greedy_prompts']} identical, "
            if top1 is not None else "")
    return (f"{level['in_flight']} in flight: {head}items {items['changed_answers']}/{items['items']} changed "
            f"(b {items['b']}, c {items['c']})")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def recorded_answers(private_dir: Path, items_sha256: str) -> RecordedAnswers:
    """What the probe and the item bank of this run left in its private folder (None where absent);
    ``items_sha256`` is the hash of the bank the floor's items come from."""
    return RecordedAnswers(_read_json(private_dir / PRIVATE_NAME), _read_json(private_dir / BLOCKS_DIR / f"{ITEMS_KEY}.json"),
                           items_sha256)


def _load_runner(client: QualClient, recipe: Recipe, settings: FloorSettings, progress: ProgressFn) -> LevelRunner:
    load = load_settings(recipe.gates) or LoadSettings(levels=settings.levels, prompt_tokens=settings.prompt_tokens,
                                                       output_tokens=settings.output_tokens)
    return LevelRunner(client, load, progress, max_num_seqs=recipe.serve.max_num_seqs)


def load_floor_gate(client: QualClient, recipe: Recipe, gate: GateRecorder, tool_fixtures: Sequence[ToolCase], *,
                    progress: ProgressFn) -> GateVerdict:
    """Answer the probe and the items alone and at each load level; keep the answers for the sidecar."""
    settings = FloorSettings.from_recipe(recipe.gates)
    if settings.off is not None:
        return GateVerdict(skip_reason=f"not applicable to recipe {recipe.name}: {settings.off}")
    try:
        items, bank_settings, items_sha256 = _floor_bank(recipe, settings)
    except (ValueError, OSError) as exc:
        return GateVerdict(failure=f"gates.items: {exc}", kind=FailureKind.CONFIG)
    probe_section = {**recipe.gate("equivalence"), **({"context_lengths": list(settings.context_lengths)}
                                                       if settings.context_lengths else {})}
    probe = ProbeSettings.from_recipe(probe_section, recipe.serve.max_model_len, recipe.project_root) \
        if settings.probe else None
    gate.threshold(**settings.to_dict())
    runner = _load_runner(client, recipe, settings, progress)
    pool = runner.prompts(max(settings.levels), runner.settings.requests_at(max(settings.levels)))
    questions = FloorQuestions(probe, probe_prompts(recipe, tool_fixtures) if probe else (), items,
                               bank_settings.max_tokens)
    try:
        block = run_floor(client, settings, questions,
                          lambda level, i: runner.send(pool[i % len(pool)], f"floor-load-{level}-{i}"),
                          load_ok=lambda r: isinstance(r, StreamResult) and r.ok, progress=progress,
                          on_pass=lambda partial: write_block(Path(gate.private_dir), BLOCK_KEY, partial),
                          recorded=recorded_answers(Path(gate.private_dir), items_sha256))
    except ServerGoneError:
        gate.server_gone(client.last_attempt, "died_under_load_floor")
        raise
    except ValueError as exc:
        return GateVerdict(failure=f"the floor under load failed: {exc}", kind=FailureKind.SERVER_ERROR)
    block["items"].update(bank_version=BANK_VERSION, seed=bank_settings.seed)
    block["load_prompts_distinct"] = len(pool)
    write_block(Path(gate.private_dir), BLOCK_KEY, block)
    levels = floor_levels(block)
    alone = block["passes"][0]
    gate.measure(alone_answers="recorded by the probe and the item bank of this run" if alone.get("recorded_by")
                 else "asked by this gate",
                 levels=[level_row(lv) for lv in levels], passes_seconds=[p["seconds"] for p in block["passes"]],
                 sidecar=f"{BLOCKS_DIR}/{BLOCK_KEY}.json",
                 answers_identical_at_every_level=all(lv["answers_identical"] for lv in levels))
    gate.summary("; ".join(level_summary(lv) for lv in levels))
    return GateVerdict()
