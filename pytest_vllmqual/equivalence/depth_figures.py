"""Per depth bucket: top-1 agreement, ln PPL ratio and the KL lower bound of two arms' depth windows.

The windows of both arms are matched by depth and by the SHA-256 of the token IDs their requests
read; each bucket pools its matched windows (the unit of the bootstrap) into the figures of
:mod:`.figures`, and holds them against the token thresholds of :mod:`.verdict`. A bucket needs at
least ``min_scored_chunks`` windows (8 by default; fewer: *too few units*). With a bracketed
replay, the control against its replay gives each bucket its A/A floor. A bucket's word follows
the verdict's rule on its three figures: one beyond is ``not equivalent``; the exact two within,
``equivalent``; otherwise ``inconclusive`` (or ``not measurable`` with no matched window).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_vllmqual.records import EquivalenceVerdict, FigureStatus

from .figures import ChunkSums, chunk_sums, pooled
from .verdict import FIGURES, FigureCheck, FigureSpec, Thresholds, check_figure, describe, fmt_interval

__all__ = ["DEPTH_FIGURES", "depth_comparison", "depth_lines", "depth_sums"]

_KEYS = ("top1_agreement", "ln_ppl_ratio", "kl_lower_bound")
DEPTH_FIGURES: tuple[FigureSpec, ...] = tuple(
    replace(spec, unit=("scored window", "scored windows"),
            more="more windows: gates.equivalence depth_windows (at least 8 per bucket)")
    for spec in FIGURES if spec.key in _KEYS)
"""The figures judged per bucket, counted in windows."""


def depth_sums(control: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[int, list[ChunkSums]]:
    """Per bucket of the control's plan: the pooled sums of every window both arms scored alike."""
    theirs = {(w["depth"], w["context_sha256"]): w for w in candidate.get("windows") or []}
    out: dict[int, list[ChunkSums]] = {i: [] for i in range(len(control.get("buckets") or []))}
    for window in control.get("windows") or []:
        other = theirs.get((window["depth"], window["context_sha256"]))
        if other is not None and len(other["positions"]) == len(window["positions"]):
            out.setdefault(int(window["bucket"]), []).append(chunk_sums(
                {"length": window["depth"], "positions": window["positions"]},
                {"length": window["depth"], "positions": other["positions"]}))
    return out


def _word(checks: Sequence[FigureCheck]) -> EquivalenceVerdict:
    statuses = {c.status for c in checks}
    if FigureStatus.BEYOND in statuses:
        return EquivalenceVerdict.NOT_EQUIVALENT
    if all(c.status is FigureStatus.NOT_MEASURED for c in checks):
        return EquivalenceVerdict.NOT_MEASURABLE
    if all(c.status is FigureStatus.WITHIN for c in checks if c.spec.exact):
        return EquivalenceVerdict.EQUIVALENT
    return EquivalenceVerdict.INCONCLUSIVE


def _bucket(lo: int, hi: int, sums: Sequence[ChunkSums], floor: Sequence[ChunkSums] | None,
            thresholds: Thresholds) -> dict[str, Any]:
    pooled_: dict[str, Any] = pooled(sums) if sums else {"chunks": 0, "positions": 0, "intervals": {}}
    floor_intervals: dict[str, Any] = pooled(floor)["intervals"] if floor else {}
    checks = [check_figure(spec, pooled_["intervals"].get(spec.key), thresholds, floor_intervals.get(spec.key))
              for spec in DEPTH_FIGURES]
    word = _word(checks)
    return {"from": lo, "to": hi, "windows": pooled_["chunks"], "positions": pooled_["positions"],
            "verdict": word.value, "reasons": [describe(c) for c in checks if c.status is not FigureStatus.WITHIN],
            "figures": [c.to_dict() for c in checks],
            "floor": "measured" if floor else "not measured",
            **({"kl_p99": pooled_["kl_p99"], "kl_max": pooled_["kl_max"]} if sums else {})}


def depth_comparison(control: Mapping[str, Any], candidate: Mapping[str, Any],
                     replay: Mapping[str, Any] | None, thresholds: Thresholds) -> dict[str, Any]:
    """The comparison's ``depth`` part from the arms' sidecar bodies (``replay``: the bracketed
    control's, for the A/A floor): per bucket the figures, their intervals over windows, the floor
    and a word; the depth verdict is the worst bucket's."""
    ctrl, cand = control.get("depth"), candidate.get("depth")
    for role, body in (("control", ctrl), ("candidate", cand)):
        if not isinstance(body, Mapping) or not body.get("windows"):
            why = "; ".join((body or {}).get("dropped") or []) if isinstance(body, Mapping) else ""
            return {"verdict": EquivalenceVerdict.NOT_MEASURABLE.value,
                    "reasons": [f"the {role} scored no depth window" + (f" ({why})" if why else "")], "buckets": []}
    assert isinstance(ctrl, Mapping) and isinstance(cand, Mapping)
    rep = replay.get("depth") if replay is not None else None
    sums = depth_sums(ctrl, cand)
    floors = depth_sums(ctrl, rep) if isinstance(rep, Mapping) and rep.get("windows") else None
    buckets = [_bucket(lo, hi, sums.get(i, []), floors.get(i) if floors else None, thresholds)
               for i, (lo, hi) in enumerate(ctrl.get("buckets") or [])]
    order = [EquivalenceVerdict.NOT_EQUIVALENT, EquivalenceVerdict.INCONCLUSIVE, EquivalenceVerdict.NOT_MEASURABLE,
             EquivalenceVerdict.EQUIVALENT]
    worst = min((EquivalenceVerdict(b["verdict"]) for b in buckets), key=order.index,
                default=EquivalenceVerdict.NOT_MEASURABLE)
    reasons = [f"({b['from']:,}, {b['to']:,}]: {b['verdict']}" + (f": {b['reasons'][0]}" if b["reasons"] else "")
               for b in buckets]
    return {"verdict": worst.value, "reasons": reasons, "buckets": buckets,
            "method": ctrl.get("method"), "window_tokens": (ctrl.get("settings") or {}).get("window_tokens"),
            "dropped": list(ctrl.get("dropped") or []),
            "floor": {"status": "measured" if floors else "not measured"}}


def depth_lines(section: Mapping[str, Any]) -> list[str]:
    """The terminal's depth lines from an equivalence section: the depth verdict, then one line per
    bucket with its figures and intervals (``(4,096, 8,110]: not equivalent, 8 windows: top-1 …``)."""
    depth = section.get("depth")
    if not isinstance(depth, Mapping):
        return []
    floor = "" if (depth.get("floor") or {}).get("status") == "measured" else "; A/A floor not measured"
    lines = [f"depth: {depth.get('verdict')}{floor}" + ("" if depth.get("buckets") else
                                                          f": {'; '.join(depth.get('reasons') or [])}")]
    specs = {spec.key: spec for spec in DEPTH_FIGURES}
    for bucket in depth.get("buckets") or []:
        shown = [f"{specs[f['figure']].label} {fmt_interval(specs[f['figure']], f['point'], f['low'], f['high'])}"
                 for f in bucket["figures"] if f["figure"] in specs]
        lines.append(f"  ({bucket['from']:,}, {bucket['to']:,}]: {bucket['verdict']}, {bucket['windows']} windows: "
                     + "; ".join(shown))
    return lines
