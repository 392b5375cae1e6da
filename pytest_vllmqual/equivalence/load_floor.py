"""The floor under load: how far one server's own answers move when other requests share its batch.

The bracketed A/A floor compares the control with a fresh replay of itself, every request sent
alone. A server under load batches each request with others, and vLLM's answers can change with
batch composition. So the ``load_floor`` gate asks one server the same questions (the probe's
teacher-forced chunks and greedy prompts, and the first items of each family of the bank) first
alone, then while the load gate's exact prompts keep each of the recipe's load levels in flight,
and keeps every answer in the arm's sidecar (block ``load_floor``). This module turns that block
into the floor per level: top-1 agreement, the KL lower bound and the ln PPL ratio of the chunks
(alone against loaded, with 95% intervals over chunks), greedy answers identical or not, and item
flips (b: right alone, wrong under load; c: the reverse) with the answers whose text changed.

A comparison judges with the floor that matches how its items were sent: the item bank and the
probe send every request alone, so their A/A floor is the bracketed replay's; the levels' floors
are reported beside it (what an operator who serves under load should expect anyway). Batch
invariance, the answers identical alone and at every level, is a check a recipe asks for
(``compare.batch_invariance: true``), not a gate every run must pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.recipe.load_gate_settings import load_settings
from pytest_vllmqual.records import EquivalenceVerdict

from .answers import count_flips
from .figures import greedy_figures, teacher_forced

__all__ = ["BLOCK_KEY", "FLOOR_VERSION", "FloorSettings", "arm_floor", "batch_invariance", "floor_levels", "floor_lines",
           "level_floor", "load_floor_section", "sent_in_flight", "with_load_floor"]

BLOCK_KEY = "load_floor"
"""The block of the arm's sidecar that holds the answers alone and under load."""
FLOOR_VERSION = "1"
_FIGURES = ("top1_agreement", "kl_lower_bound", "ln_ppl_ratio")
DEFAULT_ITEMS_PER_FAMILY = 8
"""Items of each family asked at every level: the first ones of the bank, so they are the very
questions the item bank asks (8 of each of 4 families is 32 answers per level)."""


@dataclass(frozen=True)
class FloorSettings:
    """The recipe's ``gates.load_floor``, with the levels and load prompts of its ``gates.load``."""

    levels: tuple[int, ...]
    prompt_tokens: int
    output_tokens: int
    items_per_family: int = DEFAULT_ITEMS_PER_FAMILY
    #: The bank's families asked (None: every family of the recipe's bank but the needle, whose
    #: passages of thousands of tokens cost most under load).
    families: tuple[str, ...] | None = None
    probe: bool = True
    #: The probe's chunk lengths asked at every level (None: the probe's own, ``gates.equivalence``).
    context_lengths: tuple[int, ...] | None = None
    #: Why the floor is not measured (no load levels); None when it is.
    off: str | None = None

    @classmethod
    def from_recipe(cls, gates: Mapping[str, Any]) -> FloorSettings:
        """The levels are ``gates.load_floor.levels``, else ``gates.load.levels``; the load prompts are
        the load gate's (``prompt_tokens``, ``output_tokens``)."""
        section = gates.get(BLOCK_KEY) or {}
        load = load_settings(gates)
        levels = tuple(int(n) for n in section.get("levels") or (load.levels if load else ()))
        families = section.get("families")
        per_family = int(section.get("items_per_family", DEFAULT_ITEMS_PER_FAMILY))
        chosen = tuple(str(f) for f in families) if families else None
        probe = bool(section.get("probe", True))
        lengths = tuple(int(n) for n in section["context_lengths"]) if section.get("context_lengths") else None
        if not levels:
            return cls((), 0, 0, per_family, chosen, probe, lengths,
                       off="the recipe sets no gates.load levels (nor gates.load_floor.levels)")
        return cls(levels, load.prompt_tokens if load else 256, load.output_tokens if load else 32, per_family, chosen,
                   probe, lengths)

    def to_dict(self) -> dict[str, Any]:
        return {"levels": list(self.levels), "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "items_per_family": self.items_per_family,
                "families": list(self.families) if self.families is not None else None, "probe": self.probe,
                "context_lengths": list(self.context_lengths) if self.context_lengths is not None else None}


def _probe_body(one_pass: Mapping[str, Any]) -> dict[str, Any]:
    return {"chunks": one_pass.get("chunks") or [], "greedy": one_pass.get("greedy") or []}


def _probe_floor(alone: Mapping[str, Any], loaded: Mapping[str, Any], greedy_max_tokens: int) -> dict[str, Any] | None:
    """Top-1, KL lower bound and ln PPL ratio of the chunks, and the greedy answers, loaded against alone."""
    a, b = _probe_body(alone), _probe_body(loaded)
    if not a["chunks"] or len(a["chunks"]) != len(b["chunks"]):
        return None
    tf = teacher_forced(a, b)["overall"]
    greedy = greedy_figures(a, b, max_tokens=greedy_max_tokens) if a["greedy"] and len(a["greedy"]) == len(b["greedy"]) \
        else {"prompts": 0, "identical": 0, "hard": 0, "near_ties": 0}
    return {"chunks": tf["chunks"], "positions": tf["positions"],
            **{key: tf["intervals"][key] for key in _FIGURES}, "kl_max": tf["kl_max"],
            "greedy_prompts": greedy["prompts"], "greedy_identical": greedy["identical"],
            "greedy_near_ties": greedy["near_ties"], "greedy_hard": greedy["hard"]}


def _items_floor(alone: Mapping[str, Any], loaded: Mapping[str, Any]) -> dict[str, Any]:
    """Item flips between the answers alone and under load, and the answers whose text changed."""
    right = {o["item_id"]: bool(o["correct"]) for o in loaded.get("outcomes") or []}
    pairs = [(bool(o["correct"]), right[o["item_id"]]) for o in alone.get("outcomes") or [] if o["item_id"] in right]
    texts = {a["item_id"]: a.get("text") for a in loaded.get("answers") or []}
    changed = sorted(a["item_id"] for a in alone.get("answers") or []
                     if a["item_id"] in texts and texts[a["item_id"]] != a.get("text"))
    count = count_flips(pairs)
    return {"items": count.n, "b": count.b, "c": count.c, "changed_answers": len(changed), "changed": changed}


def level_floor(alone: Mapping[str, Any], loaded: Mapping[str, Any], *, greedy_max_tokens: int) -> dict[str, Any]:
    """One level's floor: the probe's figures and the items' flips, and whether every answer was identical."""
    probe = _probe_floor(alone, loaded, greedy_max_tokens)
    items = _items_floor(alone, loaded)
    identical = items["changed_answers"] == 0 and (probe is None or probe["greedy_identical"] == probe["greedy_prompts"])
    return {"in_flight": int(loaded["in_flight"]), "probe": probe, "items": items, "answers_identical": identical,
            "load": loaded.get("load"), "seconds": loaded.get("seconds")}


def floor_levels(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The floor at every measured level of one arm's ``load_floor`` block (the pass alone is the reference)."""
    passes = list(block.get("passes") or [])
    alone = next((p for p in passes if int(p.get("in_flight", -1)) == 0), None)
    if alone is None:
        return []
    max_tokens = int((block.get("probe") or {}).get("greedy_max_tokens") or 0)
    return [level_floor(alone, p, greedy_max_tokens=max_tokens) for p in passes if int(p.get("in_flight", 0)) > 0]


def sent_in_flight(sidecar: Mapping[str, Any] | None) -> int:
    """How many other requests shared the batch when this arm's items were sent: 0 (alone) unless the
    items block says otherwise."""
    items = (sidecar or {}).get("items") or {}
    return int(items.get("sent_in_flight") or 0)


def arm_floor(sidecar: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """One arm's floor per level from its sidecar, or why it has none."""
    if not isinstance(sidecar, Mapping):
        return {"status": "not measured", "reason": str(sidecar or "no sidecar"), "levels": []}
    block = sidecar.get(BLOCK_KEY)
    if not isinstance(block, Mapping):
        return {"status": "not measured", "reason": "its sidecar holds no load_floor block (the load_floor gate did "
                                                    "not run: it needs gates.load levels)", "levels": []}
    levels = floor_levels(block)
    if not levels:
        return {"status": "not measured", "reason": "its load_floor block holds no pass alone and under load",
                "levels": []}
    return {"status": "measured", "reason": "one server's answers alone against the same answers under load",
            "levels": levels, "settings": block.get("settings")}


def batch_invariance(floors: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Whether every measured arm answered identically alone and at every level (``passed``), which
    level of which arm changed an answer (``failed``), or why it is ``not measured``."""
    reasons, missing = [], []
    for role, floor in floors.items():
        if floor["status"] != "measured":
            missing.append(f"{role}: {floor['reason']}")
            continue
        for level in floor["levels"]:
            if not level["answers_identical"]:
                probe = level["probe"] or {}
                reasons.append(f"{role} at {level['in_flight']} in flight: {level['items']['changed_answers']} of "
                               f"{level['items']['items']} item answers and "
                               f"{probe.get('greedy_prompts', 0) - probe.get('greedy_identical', 0)} of "
                               f"{probe.get('greedy_prompts', 0)} greedy answers changed")
    if reasons:
        return {"status": "failed", "reasons": reasons + missing}
    if missing or not floors:
        return {"status": "not measured", "reasons": missing or ["no arm measured the floor under load"]}
    return {"status": "passed", "reasons": ["every answer identical alone and at every level, in every arm"]}


def _matched(sent: int, floors: Mapping[str, Mapping[str, Any]], bracket: Mapping[str, Any]) -> dict[str, Any]:
    """The floor the comparison judges with: the bracketed A/A floor for items sent alone, else the
    control's floor at the level the items were sent at."""
    if sent == 0:
        return {"sent_in_flight": 0, "floor": "bracketed A/A", "status": str(bracket.get("status") or "not measured"),
                "reason": "the items and the probe were sent alone, so the floor is the control against its replay, "
                          "every request alone; the levels' floors are reported beside it"}
    control = floors.get("control") or {}
    level = next((lv for lv in control.get("levels") or [] if lv["in_flight"] == sent), None)
    if level is None:
        return {"sent_in_flight": sent, "floor": f"under load at {sent}", "status": "not measured",
                "reason": f"the items were sent at {sent} in flight and the control measured no floor at that level"}
    return {"sent_in_flight": sent, "floor": f"under load at {sent}", "status": "measured", "level": level,
            "reason": f"the items were sent at {sent} in flight: the control's own answers alone against that level"}


def load_floor_section(found: Mapping[str, Any], bracket: Mapping[str, Any], *,
                       asks_batch_invariance: bool) -> dict[str, Any]:
    """The comparison's ``load_floor``: each arm's floor per level, the floor matched to how the items
    were sent, and (when the recipe asks) batch invariance."""
    floors = {role: arm_floor(found.get(role)) for role in ("control", "candidate", "replay") if role in found}
    sent = sent_in_flight(found.get("control") if isinstance(found.get("control"), Mapping) else None)
    section: dict[str, Any] = {"version": FLOOR_VERSION, "arms": floors, "matched": _matched(sent, floors, bracket)}
    section["batch_invariance"] = batch_invariance({r: f for r, f in floors.items() if r != "replay"}) \
        if asks_batch_invariance else {"status": "not asked", "reasons": ["compare.batch_invariance is not set"]}
    return section


def floor_lines(section: Mapping[str, Any]) -> list[str]:
    """One line per arm and level: ``control at 4 in flight: top-1 99.8% [...]; items 0/32 changed (b 0, c 0)``."""
    lines = []
    for role, floor in (section.get("arms") or {}).items():
        if floor.get("status") != "measured":
            lines.append(f"floor under load, {role}: not measured ({floor.get('reason')})")
            continue
        for level in floor["levels"]:
            probe, items = level.get("probe") or {}, level["items"]
            top1 = probe.get("top1_agreement") or {}
            figures = (f"top-1 {100 * top1['point']:.2f}%, KL lower bound {probe['kl_lower_bound']['point']:.6f}, "
                       f"ln PPL ratio {probe['ln_ppl_ratio']['point']:+.6f}, greedy {probe['greedy_identical']}/"
                       f"{probe['greedy_prompts']} identical; ") if top1 else ""
            lines.append(f"floor under load, {role} at {level['in_flight']} in flight: {figures}items "
                         f"{items['changed_answers']}/{items['items']} answers changed (b {items['b']}, c {items['c']})")
    invariance = section.get("batch_invariance") or {}
    if invariance.get("status") != "not asked":
        lines.append(f"batch invariance: {invariance.get('status')}: {'; '.join(invariance.get('reasons') or [])}")
    return lines


def with_load_floor(section: dict[str, Any], found: Mapping[str, Any], compare: Mapping[str, Any] | None) -> None:
    """Add the comparison's ``load_floor`` to the equivalence ``section`` when an arm measured it or the
    recipe asks for batch invariance; when asked, a failed check makes the verdict ``not equivalent``
    and one not measured caps ``equivalent`` at ``inconclusive``, each with its reason."""
    asked = bool((compare or {}).get("batch_invariance"))
    measured = any(isinstance(body, Mapping) and isinstance(body.get(BLOCK_KEY), Mapping) for body in found.values())
    if not (asked or measured):
        return
    floor = load_floor_section(found, section.get("floor") or {}, asks_batch_invariance=asked)
    section[BLOCK_KEY] = floor
    invariance = floor["batch_invariance"]
    if invariance["status"] == "failed":
        section["verdict"] = EquivalenceVerdict.NOT_EQUIVALENT.value
        section["reasons"] = [f"batch invariance (compare.batch_invariance): answers changed under load: "
                              f"{'; '.join(invariance['reasons'])}", *section.get("reasons", [])]
    elif invariance["status"] == "not measured" and section.get("verdict") == EquivalenceVerdict.EQUIVALENT.value:
        section["verdict"] = EquivalenceVerdict.INCONCLUSIVE.value
        section["reasons"] = [f"batch invariance (compare.batch_invariance) not measured: "
                              f"{'; '.join(invariance['reasons'])}", *section.get("reasons", [])]
