"""One decision an operator can act on: the comparison's three layers and the one rule that may block.

A comparison measures three layers: **tokens** (the probe's figures against their thresholds),
**tasks** (the paired statistics over the item bank and the tool-call replay) and **depth** (the
token figures per depth bucket). Each layer's status follows the one not-measured rule
(:mod:`pytest_vllmqual.not_measured`): passed, failed, or not measured (never a pass).

The recipe's ``compare.promotion`` names the rule that may block (:class:`PromotionSettings`):

- ``exact``: every exact token figure, and each depth bucket's, within the A/A floor (its
  interval overlaps the control-against-replay interval). Without a bracketed replay there is no
  floor, so the rule is not measured.
- ``tokens`` (the default): the probe's verdict, ``equivalent`` to pass, ``not equivalent`` to fail.
- ``tasks``: the item bank non-inferior at the margin; the tool-call replay too when either arm
  ran it; and no depth bucket worse than the shallowest (its top-1 agreement interval wholly below
  the shallowest bucket's): a change whose damage grows with depth fails here even when the items,
  which sit near the start of the context, pass. It needs two measured buckets.

Every rule is computed and written into the record; only the named one blocks. The record holds
each status, so the terminal, junit and the page only show it (:func:`layers_lines`, :func:`layer_cases`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.not_measured import Measured, of_equivalence
from pytest_vllmqual.words import PromotionRule, ResultLayer, TaskVerdict

__all__ = ["DEFAULT_SOURCE", "PromotionSettings", "layer_cases", "layers_lines", "of_task", "promotion_section"]

DEFAULT_SOURCE = "the default, today's rule"

_TASK = {TaskVerdict.NON_INFERIOR: Measured.PASSED, TaskVerdict.INFERIOR: Measured.FAILED}


@dataclass(frozen=True)
class PromotionSettings:
    """The rule that may block (``compare.promotion``) and where it came from."""

    rule: PromotionRule = PromotionRule.TOKENS
    source: str = DEFAULT_SOURCE

    @classmethod
    def from_recipe(cls, block: Mapping[str, Any] | None, *, recipe: str = "the control recipe") -> PromotionSettings:
        """The recipe's ``compare.promotion`` (a word the schema checked), else the default."""
        value = (block or {}).get("promotion")
        if value in {rule.value for rule in PromotionRule}:
            return cls(PromotionRule(value), f"{recipe}'s compare.promotion")
        return cls()


def of_task(verdict: object) -> Measured:
    """A task verdict under the one rule: only ``non-inferior`` passes and ``inferior`` fails."""
    known = {word.value for word in TaskVerdict}
    return _TASK.get(TaskVerdict(verdict), Measured.NOT_MEASURED) if verdict in known else Measured.NOT_MEASURED


def _first(section: Mapping[str, Any] | None, fallback: str) -> str:
    reasons = [str(r) for r in (section or {}).get("reasons") or []]
    return reasons[0] if reasons else fallback


def _layers(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each layer's own verdict word, its status under the rule, and its first reason."""
    tasks, depth = section.get("tasks"), section.get("depth")
    rows = [(ResultLayer.TOKENS, section.get("verdict"), of_equivalence(section.get("verdict")), _first(section, "")),
            (ResultLayer.TASKS, (tasks or {}).get("verdict", "not measured"),
             of_task((tasks or {}).get("verdict")), _first(tasks, "no scored items were compared")),
            (ResultLayer.DEPTH, (depth or {}).get("verdict", "not measurable"),
             of_equivalence((depth or {}).get("verdict")), _first(depth, "no depth window was compared"))]
    return [{"layer": layer.value, "verdict": str(verdict), "status": status.value, "reason": reason}
            for layer, verdict, status, reason in rows]


def _g(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else "n/a"


def _outside_floor(figures: Sequence[Mapping[str, Any]], where: str) -> tuple[list[str], list[str]]:
    """(figures outside the A/A floor, figures the floor could not be read for), as phrases."""
    outside, unread = [], []
    for figure in figures:
        if not figure.get("exact"):
            continue
        label = f"{where}{figure.get('label')}"
        if figure.get("within_floor") is False:
            floor = figure.get("floor") or {}
            outside.append(f"{label} [{_g(figure.get('low'))}, {_g(figure.get('high'))}] outside the A/A floor "
                           f"[{_g(floor.get('low'))}, {_g(floor.get('high'))}]")
        elif figure.get("within_floor") is None:
            unread.append(f"{label} has no A/A interval to hold it against")
    return outside, unread


def exact_rule(section: Mapping[str, Any]) -> tuple[Measured, list[str]]:
    """Every exact figure (the probe's, and each depth bucket's where its floor was measured)
    within the A/A floor."""
    if (section.get("floor") or {}).get("status") != "measured":
        why = (section.get("floor") or {}).get("reason") or "no bracketed replay of the control ran"
        return Measured.NOT_MEASURED, [f"the A/A floor was not measured ({why})"]
    outside, unread = _outside_floor(section.get("figures") or [], "")
    depth = section.get("depth") or {}
    if (depth.get("floor") or {}).get("status") == "measured":
        for bucket in depth.get("buckets") or []:
            more = _outside_floor(bucket.get("figures") or [], f"depth ({bucket.get('from')}, {bucket.get('to')}]: ")
            outside, unread = outside + more[0], unread + more[1]
    if outside:
        return Measured.FAILED, outside
    if unread:
        return Measured.NOT_MEASURED, unread
    return Measured.PASSED, ["every exact figure lies within the A/A floor"]


def _top1(bucket: Mapping[str, Any]) -> Mapping[str, Any] | None:
    figure = next((f for f in bucket.get("figures") or [] if f.get("figure") == "top1_agreement"), None)
    usable = figure is not None and figure.get("status") not in ("not measured", "too few units")
    return figure if usable and figure is not None and None not in (figure.get("low"), figure.get("high")) else None


def depth_trend(depth: Mapping[str, Any] | None) -> tuple[Measured, str]:
    """No depth bucket worse than the shallowest: a deeper bucket fails when its top-1 agreement's
    interval lies wholly below the shallowest bucket's; every bucket must be measured, and two at least."""
    buckets = list((depth or {}).get("buckets") or [])
    if len(buckets) < 2:
        return Measured.NOT_MEASURED, (f"{len(buckets)} depth bucket{'s' if len(buckets) != 1 else ''} compared: "
                                       "nothing deeper to hold against the shallowest")
    figures = [_top1(b) for b in buckets]
    missing = [f"({b.get('from')}, {b.get('to')}]" for b, f in zip(buckets, figures, strict=True) if f is None]
    shallow = figures[0]
    worse = [f"({b.get('from')}, {b.get('to')}] top-1 {f['point']:.1f}% [{f['low']:.1f}, {f['high']:.1f}] below the "
             f"shallowest bucket's [{shallow['low']:.1f}, {shallow['high']:.1f}]"
             for b, f in zip(buckets[1:], figures[1:], strict=True)
             if f is not None and shallow is not None and f["high"] < shallow["low"]]
    if worse:
        return Measured.FAILED, "; ".join(worse)
    if missing:
        return Measured.NOT_MEASURED, f"top-1 agreement not measured on enough windows in {', '.join(missing)}"
    return Measured.PASSED, f"no bucket of {len(buckets)} is worse than the shallowest"


def _block(tasks: Mapping[str, Any] | None, key: str) -> Mapping[str, Any] | None:
    return next((b for b in (tasks or {}).get("blocks") or [] if b.get("block") == key), None)


def tasks_rule(section: Mapping[str, Any]) -> tuple[Measured, list[str]]:
    """The item bank non-inferior, the tool-call replay too where either arm ran it, no bucket worse."""
    tasks = section.get("tasks")
    items, replay = _block(tasks, "items"), _block(tasks, "tool_replay")
    parts = [(of_task((items or {}).get("verdict")),
              f"item bank: {(items or {}).get('verdict', 'not measured')}: {_first(items, 'no item answers')}")]
    if replay is not None and replay.get("carried"):
        parts.append((of_task(replay.get("verdict")), f"tool-call replay: {replay.get('verdict')}: {_first(replay, '')}"))
    trend, why = depth_trend(section.get("depth"))
    parts.append((trend, f"depth: {why}"))
    statuses = {status for status, _ in parts}
    status = (Measured.FAILED if Measured.FAILED in statuses else
              Measured.PASSED if statuses == {Measured.PASSED} else Measured.NOT_MEASURED)
    first = [text for s, text in parts if s is status] + [text for s, text in parts if s is not status]
    return status, first


def promotion_section(section: Mapping[str, Any], settings: PromotionSettings) -> dict[str, Any]:
    """The section's ``promotion``: the rule that blocks with its status and reasons, every rule's
    status (the others reported, never blocking), and the three layers."""
    judged = {PromotionRule.EXACT: exact_rule(section),
              PromotionRule.TOKENS: (of_equivalence(section.get("verdict")),
                                     [str(r) for r in section.get("reasons") or []] or ["no token figure"]),
              PromotionRule.TASKS: tasks_rule(section)}
    status, reasons = judged[settings.rule]
    return {"rule": settings.rule.value, "source": settings.source, "status": status.value, "reasons": reasons,
            "rules": [{"rule": rule.value, "status": s.value, "blocks": rule is settings.rule, "reasons": r}
                      for rule, (s, r) in judged.items()],
            "layers": _layers(section)}


def layers_lines(section: Mapping[str, Any], *, label: str = "promotion") -> list[str]:
    """The terminal's last lines: the blocking rule's status, then each layer and each other rule."""
    promotion = section.get("promotion")
    if not isinstance(promotion, Mapping):
        return []
    reasons = [str(r) for r in promotion.get("reasons") or []]
    lines = [f"{label} (compare.promotion {promotion.get('rule')}; {promotion.get('source')}): "
             f"{promotion.get('status')}: {reasons[0] if reasons else 'no reason recorded'}"]
    lines += [f"  layer {layer['layer']}: {layer['verdict']} ({layer['status']}): {layer['reason']}"
              for layer in promotion.get("layers") or []]
    lines += [f"  rule {rule['rule']}: {rule['status']} (reported, not blocking)"
              for rule in promotion.get("rules") or [] if not rule.get("blocks")]
    return lines


def layer_cases(section: Mapping[str, Any]) -> list[tuple[str, str, Measured, str]]:
    """Every status the record holds, as (group, name, status, message) for junit: the blocking rule,
    each layer, each item family of each compared task block, each depth bucket."""
    promotion = section.get("promotion")
    if not isinstance(promotion, Mapping):
        return []
    cases = [("promotion", f"rule {promotion.get('rule')} (blocking)", Measured(promotion.get("status")),
              "; ".join(str(r) for r in promotion.get("reasons") or []))]
    cases += [("promotion", f"rule {r['rule']} (reported)", Measured(r["status"]), "; ".join(r.get("reasons") or []))
              for r in promotion.get("rules") or [] if not r.get("blocks")]
    cases += [("layer", str(layer["layer"]), Measured(layer["status"]), f"{layer['verdict']}: {layer['reason']}")
              for layer in promotion.get("layers") or []]
    for block in (section.get("tasks") or {}).get("blocks") or []:
        for check in [*(block.get("families") or []), *([block["overall"]] if block.get("overall") else [])]:
            cases.append((f"tasks {block.get('block')}", str(check.get("family")), of_task(check.get("status")),
                          f"{check.get('status')}: {check.get('reason')}"))
    for bucket in (section.get("depth") or {}).get("buckets") or []:
        reasons = "; ".join(bucket.get("reasons") or []) or "every figure within its threshold"
        cases.append(("depth", f"({bucket.get('from')}, {bucket.get('to')}]", of_equivalence(bucket.get("verdict")),
                      f"{bucket.get('verdict')}: {reasons}"))
    return cases
