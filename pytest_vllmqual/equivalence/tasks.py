"""The comparison's task layer: does the candidate answer the scored items as well as the control, within a margin?

Each arm's sidecar may carry blocks of scored answers: ``items`` (the item bank, and an operator's
own items) and ``tool_replay`` (the typed tool cases replayed). Each block names its bank (name,
version, seed, SHA-256, chat template, ``max_tokens``, stop rules, judge version) and lists one
:class:`~pytest_vllmqual.equivalence.outcomes.ItemOutcome` per item. Two arms compare a block only
when both carry it with the same bank SHA-256; then the paired statistics of
:mod:`pytest_vllmqual.equivalence.paired` judge it per family and overall, at the recipe's margin
(:class:`TaskSettings`, re-exported here for the comparison).

A block's verdict is its overall non-inferiority; with ``compare.family_blocks`` every family's
too. The layer's verdict is over the blocks either arm carries: ``inferior`` when a block is,
``non-inferior`` when every one is, ``not measured`` when none could be compared, else
``inconclusive``. A block neither arm carries is reported as not measured and left out of the
verdict (a recipe whose model has no tool replay does not lose its verdict for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.words import TaskVerdict

from .outcomes import ItemOutcome
from .paired import PairedCheck, TaskSettings, judge_outcomes

__all__ = ["BLOCKS", "NO_CHANGE_NOTE", "Names", "TaskSettings", "block_section", "decide_tasks", "tasks_line",
           "tasks_markdown", "tasks_section"]

BLOCKS: tuple[tuple[str, str], ...] = (("items", "item bank"), ("tool_replay", "tool-call replay"))
"""The sidecar keys of the scored blocks, and how a sentence names each."""

NO_CHANGE_NOTE = ("no change detected is not no change: detectable_difference is the smallest difference in "
                  "accuracy this run would have detected (Connor's formula, alpha 0.05 two-sided, power 0.8, at "
                  "the discordant rate it saw); a smaller one may be there")
_COMPARED = ("name", "version", "seed", "chat_template_sha256", "max_tokens", "stop", "judge_version")


@dataclass(frozen=True)
class Names:
    """How the sentences name the two sides (a drift check names runs, not arms)."""

    control: str = "the control"
    candidate: str = "the candidate"
    both: str = "the arms"


@dataclass(frozen=True)
class _Side:
    """One arm's block: the bank and its outcomes, or why it has none."""

    bank: Mapping[str, Any] | None
    outcomes: list[ItemOutcome] | None
    why: str | None
    absent: bool = False


def _side(sidecar: Mapping[str, Any] | str | None, key: str, label: str, role: str) -> _Side:
    """``role`` is the side's name with its article (``the control``)."""
    if not isinstance(sidecar, Mapping):
        return _Side(None, None, str(sidecar or f"{role} has no sidecar"))
    block = sidecar.get(key)
    if not isinstance(block, Mapping):
        return _Side(None, None, f"{role}'s sidecar has no {label} answers", absent=True)
    bank = block.get("bank")
    try:
        outcomes = [ItemOutcome.from_dict(o) for o in block.get("outcomes") or []]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return _Side(None, None, f"{role}'s {label} answers are not readable ({type(exc).__name__}: {exc})")
    if not isinstance(bank, Mapping) or not bank.get("sha256"):
        return _Side(None, None, f"{role}'s {label} names no bank SHA-256")
    return _Side(bank, outcomes, None)


def _bank_difference(control: Mapping[str, Any], candidate: Mapping[str, Any], label: str, both: str) -> str | None:
    if control.get("sha256") == candidate.get("sha256"):
        return None
    keys = [k for k in _COMPARED if control.get(k) != candidate.get(k)]
    differ = f"; they differ in {', '.join(keys)}" if keys else ""
    return (f"{both} answered different {label}s (SHA-256 {str(control.get('sha256'))[:12]}… vs "
            f"{str(candidate.get('sha256'))[:12]}…{differ}): two arms compare only on the same bank")


def _sending_difference(control: Mapping[str, Any], candidate: Mapping[str, Any], label: str, both: str) -> str | None:
    """Why two arms' answers to the same bank do not pair when they were sent differently: one case at
    a time against several at once (``in_flight``; a bank without it was sent one at a time). On a GPU
    an answer can change with the batch it shares, so a flip could be the batch's, not the change's."""
    sent = [int(bank.get("in_flight") or 1) for bank in (control, candidate)]
    if sent[0] == sent[1]:
        return None
    return (f"{both} sent their {label} cases differently ({sent[0]} against {sent[1]} at once): a flip could "
            "be the batch's, not the change's; two arms compare only when sent the same way")


def _not_measured(key: str, label: str, reason: str, *, carried: bool) -> dict[str, Any]:
    return {"block": key, "label": label, "verdict": TaskVerdict.NOT_MEASURED.value, "reasons": [reason],
            "carried": carried, "families": [], "overall": None}


def _block_verdict(overall: PairedCheck, families: Sequence[PairedCheck],
                   settings: TaskSettings) -> tuple[TaskVerdict, list[str]]:
    """The overall decides; with ``family_blocks`` each measured family must agree (too few items and
    an undecided interval both read ``inconclusive`` at this level)."""
    deciding = [overall] + ([f for f in families if f.status is not TaskVerdict.NOT_MEASURED]
                            if settings.family_blocks else [])
    named = [f for f in families if f.status is not TaskVerdict.NON_INFERIOR]
    tail = "" if settings.family_blocks else " (reported; compare.family_blocks is false)"
    reasons = [f"overall: {overall.status}: {overall.reason}"]
    reasons += [f"family {f.name}: {f.status}: {f.reason}{tail}" for f in named]
    statuses = {c.status for c in deciding}
    if TaskVerdict.INFERIOR in statuses:
        return TaskVerdict.INFERIOR, reasons
    if statuses == {TaskVerdict.NON_INFERIOR}:
        return TaskVerdict.NON_INFERIOR, reasons
    if overall.status is TaskVerdict.NOT_MEASURED:
        return TaskVerdict.NOT_MEASURED, reasons
    return TaskVerdict.INCONCLUSIVE, reasons


def block_section(key: str, label: str, control: Mapping[str, Any] | str | None,
                  candidate: Mapping[str, Any] | str | None, settings: TaskSettings,
                  names: Names = Names()) -> dict[str, Any]:
    """One block compared: its verdict and reasons, the bank, every family's check and the overall's."""
    left, right = _side(control, key, label, names.control), _side(candidate, key, label, names.candidate)
    if left.absent and right.absent:
        return _not_measured(key, label, f"neither of {names.both} carries {label} answers", carried=False)
    for side in (left, right):
        if side.why is not None:
            return _not_measured(key, label, side.why, carried=True)
    assert left.bank is not None and right.bank is not None and left.outcomes is not None
    differ = (_bank_difference(left.bank, right.bank, label, names.both)
              or _sending_difference(left.bank, right.bank, label, names.both))
    if differ is not None:
        return _not_measured(key, label, differ, carried=True)
    try:
        families, overall = judge_outcomes(left.outcomes, right.outcomes or [], settings)
    except ValueError as exc:
        return _not_measured(key, label, f"the {label} answers cannot be paired: {exc}", carried=True)
    verdict, reasons = _block_verdict(overall, families, settings)
    return {"block": key, "label": label, "verdict": verdict.value, "reasons": reasons, "carried": True,
            "bank": dict(left.bank), "overall": overall.to_dict(), "families": [f.to_dict() for f in families]}


def decide_tasks(blocks: Sequence[Mapping[str, Any]]) -> tuple[TaskVerdict, list[str]]:
    """The layer's verdict over the blocks either arm carries, and a reason per block."""
    carried = [b for b in blocks if b.get("carried")]
    reasons = [f"{b['label']}: {b['verdict']}: {(b.get('reasons') or [''])[0]}" for b in blocks]
    verdicts = {TaskVerdict(b["verdict"]) for b in carried}
    if not carried or verdicts == {TaskVerdict.NOT_MEASURED}:
        return TaskVerdict.NOT_MEASURED, reasons
    if TaskVerdict.INFERIOR in verdicts:
        return TaskVerdict.INFERIOR, reasons
    if verdicts == {TaskVerdict.NON_INFERIOR}:
        return TaskVerdict.NON_INFERIOR, reasons
    return TaskVerdict.INCONCLUSIVE, reasons


def tasks_section(control: Mapping[str, Any] | str | None, candidate: Mapping[str, Any] | str | None,
                  settings: TaskSettings, names: Names = Names()) -> dict[str, Any]:
    """The ``tasks`` section from the two arms' sidecars (or why an arm has none)."""
    blocks = [block_section(key, label, control, candidate, settings, names) for key, label in BLOCKS]
    verdict, reasons = decide_tasks(blocks)
    return {"verdict": verdict.value, "reasons": reasons, "settings": settings.to_dict(), "blocks": blocks,
            "notes": [NO_CHANGE_NOTE]}


def _block_phrase(block: Mapping[str, Any]) -> str:
    """``item bank non-inferior: candidate − control -0.5 points [-2.6, +1.6] on 412 paired items (b 14,
    c 12, exact McNemar p 0.85; smallest detectable difference 4.1 points)``."""
    overall = block.get("overall") or {}
    gap = (overall.get("difference_points") or {}).get("candidate_minus_control")
    if not gap:
        return f"{block['label']} {block['verdict']}: {(block.get('reasons') or [''])[0]}"
    detectable = (overall.get("detectable_difference") or {}).get("points")
    seen = "n/a" if detectable is None else f"{detectable:.1f} points"
    return (f"{block['label']} {block['verdict']}: candidate − control {gap['point']:+.1f} points "
            f"[{gap['low']:+.1f}, {gap['high']:+.1f}] on {overall.get('paired')} paired items (b {overall.get('b')}, "
            f"c {overall.get('c')}, exact McNemar p {overall.get('mcnemar_p'):.3g}; smallest detectable difference "
            f"{seen})")


def tasks_line(section: Mapping[str, Any], *, label: str = "tasks") -> str:
    """One terminal line: the layer's verdict at its margin, then each block in a phrase."""
    margin = (section.get("settings") or {}).get("non_inferiority_margin_points")
    phrases = "; ".join(_block_phrase(b) for b in section.get("blocks") or [])
    return f"{label}: {section.get('verdict')} at a {margin:g}-point margin: {phrases}"


def _row(block: Mapping[str, Any], check: Mapping[str, Any]) -> str:
    accuracy = check.get("accuracy_pct") or {}
    gap = (check.get("difference_points") or {}).get("candidate_minus_control")
    detectable = (check.get("detectable_difference") or {}).get("points")

    def pct(role: str) -> str:
        shown = accuracy.get(role)
        return f"{shown['point']:.1f}% [{shown['low']:.1f}, {shown['high']:.1f}]" if shown else "n/a"
    diff = f"{gap['point']:+.1f} [{gap['low']:+.1f}, {gap['high']:+.1f}]" if gap else "n/a"
    p = check.get("mcnemar_p")
    cells = [block["label"], str(check.get("family")), str(check.get("paired")), pct("control"), pct("candidate"), diff,
             str(check.get("b", "n/a")), str(check.get("c", "n/a")), "n/a" if p is None else f"{p:.3g}",
             "n/a" if detectable is None else f"{detectable:.1f}", str(check.get("status"))]
    return "| " + " | ".join(cells) + " |"


def tasks_markdown(section: Mapping[str, Any]) -> list[str]:
    """The layer's line, then one row per family and overall of each compared block (points are
    accuracy points; the interval of candidate − control is Newcombe's, 95%)."""
    lines = [tasks_line(section)]
    compared = [b for b in section.get("blocks") or [] if b.get("overall")]
    if compared:
        lines += ["", "| block | family | paired items | control | candidate | candidate − control (points) | b | c "
                  "| McNemar p | detectable (points) | status |", "|---" * 11 + "|"]
        lines += [_row(b, check) for b in compared for check in [*b.get("families", []), b["overall"]]]
    return lines
