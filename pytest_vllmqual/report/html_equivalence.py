"""The HTML page's equivalence block: does one arm answer as another does, figure by figure.

Drawn from a comparison's ``equivalence`` section (the control against the candidate) or a
report's ``drift`` section (an earlier run against this one): the verdict and its reasons; each
figure with its 95% interval against its threshold and the A/A floor; each arm's K, prefix
caching and logprobs mode; the per-position KL lower bound as a histogram (``svg#<id>-kl-histogram``);
top-1 agreement and the other figures by context length; and, prompt by prompt, whether the
greedy answers were identical or where they first diverged (a near tie or a hard divergence).
Every value is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_vllmqual.equivalence import FIGURES, FigureSpec, fmt_interval
from pytest_vllmqual.records import Divergence, FigureStatus

from .html_kit import bullets, esc, table
from .html_layers import layers_html
from .html_svg import histogram_svg
from .number_format import fmt_num

__all__ = ["equivalence_html"]

_SPECS = {spec.key: spec for spec in FIGURES}
_ROW_CLASS = {FigureStatus.BEYOND.value: "fail", FigureStatus.UNDECIDED.value: "skip",
              FigureStatus.NOT_MEASURED.value: "skip"}
_BY_LENGTH = ("top1_agreement", "kl_lower_bound", "ln_ppl_ratio", "rms_delta_p")


def _interval(spec: FigureSpec, interval: Any) -> str:
    """A stored (unscaled) interval as the page shows it: ``84.4% [83.1, 85.6]``."""
    if not isinstance(interval, Mapping):
        return "n/a"
    values = [interval.get(k) for k in ("point", "low", "high")]
    point, low, high = (None if v is None else float(v) * spec.scale for v in values)
    return fmt_interval(spec, point, low, high)


def _figure_rows(section: Mapping[str, Any]) -> tuple[list[tuple[Any, ...]], list[str]]:
    rows, classes = [], []
    for figure in section.get("figures") or []:
        spec = _SPECS.get(str(figure.get("figure")))
        if spec is None:
            continue
        floor = figure.get("floor")
        floor_text = fmt_interval(spec, floor.get("point"), floor.get("low"), floor.get("high")) \
            if isinstance(floor, Mapping) else "not measured"
        within = {True: "yes", False: "no", None: "n/a"}.get(figure.get("within_floor"), "n/a")
        rows.append((figure.get("label"), fmt_interval(spec, figure.get("point"), figure.get("low"), figure.get("high")),
                     f"{'at most' if spec.upper else 'at least'} {fmt_interval(spec, figure.get('threshold'), None, None)}"
                     + ("" if spec.exact else " (a lower bound: can show a difference, never equivalence)"),
                     figure.get("status"), floor_text, within))
        classes.append(_ROW_CLASS.get(str(figure.get("status")), ""))
    return rows, classes


def _short(digest: Any) -> str:
    """A hash's first 16 characters (the record keeps it whole)."""
    return "n/a" if digest is None else f"{str(digest)[:16]}…" if len(str(digest)) > 16 else str(digest)


def _arms_table(prefix: str, section: Mapping[str, Any], names: Mapping[str, str]) -> str:
    arms = section.get("arms")
    if not isinstance(arms, Mapping) or not arms:
        return ""
    rows = []
    for role, arm in arms.items():
        if not isinstance(arm, Mapping):
            continue
        pin = arm.get("checkpoint_pin") if isinstance(arm.get("checkpoint_pin"), Mapping) else {}
        caching = arm.get("prefix_caching")
        rows.append((names.get(str(role), role), arm.get("top_k"),
                     "on" if caching is True else "off" if caching is False else "not reported",
                     arm.get("logprobs_mode"), arm.get("runtime_version"),
                     f"{pin.get('kind')} {_short(pin.get('value'))}" if pin else "not pinned",
                     _short(arm.get("probe_sha256"))))
    return table(f"{prefix}-arms", ["Arm", "K (top log probabilities)", "Prefix caching", "Logprobs mode", "Runtime",
                                    "Checkpoint pin", "Probe SHA-256"], rows)


def _teacher_forced(prefix: str, section: Mapping[str, Any]) -> str:
    tf = section.get("teacher_forced")
    if not isinstance(tf, Mapping):
        return ""
    overall = tf.get("overall") or {}
    bins = [(str(b.get("bin")), int(b.get("positions") or 0)) for b in tf.get("kl_histogram") or []]
    kl = _SPECS["kl_lower_bound"]
    out = ["<h4>Teacher-forced: the same tokens scored by both arms</h4>",
           f'<p>{esc(fmt_num(overall.get("positions")))} scored positions in {esc(overall.get("chunks"))} chunks; '
           f'per position, the KL lower bound has p99 {esc(fmt_interval(kl, overall.get("kl_p99"), None, None))} and '
           f'max {esc(fmt_interval(kl, overall.get("kl_max"), None, None))} (mean '
           f'{esc(_interval(kl, (overall.get("intervals") or {}).get("kl_lower_bound")))}).</p>']
    if bins:
        out.append(histogram_svg(f"{prefix}-kl-histogram", "Per-position KL lower bound (nats)", bins,
                                 x_label="KL lower bound per scored position (bin upper edge)", y_label="positions"))
    rows, classes = [], []
    for row in tf.get("by_length") or []:  # the comparison judged each length (``top1_status``); shown as written
        intervals = row.get("intervals") or {}
        status = str(row.get("top1_status") or "not recorded (a record older than the judged lengths)")
        rows.append((fmt_num(row.get("length")), row.get("chunks"), fmt_num(row.get("positions")),
                     *(_interval(_SPECS[key], intervals.get(key)) for key in _BY_LENGTH), status))
        classes.append(_ROW_CLASS.get(status, ""))
    if rows:
        out.append(table(f"{prefix}-by-length", ["Context length (tokens)", "Chunks", "Scored positions",
                                                 "Top-1 agreement [95%]", "KL lower bound [95%]", "ln PPL ratio [95%]",
                                                 "RMS Δp [95%]", "Top-1 against its threshold"],
                         rows, classes, numeric=(0, 1, 2)))
    return "".join(out)


def _depth(prefix: str, section: Mapping[str, Any]) -> str:
    """The depth buckets as the comparison judged them (the page re-judges nothing)."""
    depth = section.get("depth")
    if not isinstance(depth, Mapping):
        return ""
    head = (f'<h4>By context depth: windows deep in one cached prefix</h4><p>Depth verdict: '
            f'<b id="{esc(prefix)}-depth-verdict">{esc(depth.get("verdict"))}</b>; A/A floor '
            f'{esc((depth.get("floor") or {}).get("status", "not measured"))}.</p>')
    rows, classes = [], []
    for bucket in depth.get("buckets") or []:
        figures = {f.get("figure"): f for f in bucket.get("figures") or []}
        shown = [fmt_interval(_SPECS[key], f.get("point"), f.get("low"), f.get("high")) + f" ({f.get('status')})"
                 for key in ("top1_agreement", "ln_ppl_ratio", "kl_lower_bound") if (f := figures.get(key))]
        rows.append((f"({fmt_num(bucket.get('from'))}, {fmt_num(bucket.get('to'))}]", bucket.get("windows"),
                     fmt_num(bucket.get("positions")), *shown, bucket.get("verdict")))
        classes.append({"not equivalent": "fail", "inconclusive": "skip"}.get(str(bucket.get("verdict")), ""))
    if not rows:
        return head + bullets(depth.get("reasons") or [], f"{prefix}-depth-reasons")
    return head + table(f"{prefix}-by-depth", ["Depth (tokens)", "Windows", "Scored positions", "Top-1 agreement [95%]",
                                               "ln PPL ratio [95%]", "KL lower bound [95%]", "Bucket verdict"],
                        rows, classes, numeric=(1, 2)) + (bullets(depth["dropped"], f"{prefix}-depth-dropped")
                                                          if depth.get("dropped") else "")


def _answer(row: Mapping[str, Any]) -> str:
    kind = str(row.get("kind"))
    if kind == Divergence.IDENTICAL:
        return f"identical for {fmt_num(row.get('length'))} tokens (any difference lies beyond)"
    where = f"at token {fmt_num(row.get('position'))} of {fmt_num(row.get('length'))}"
    if kind == Divergence.NEAR_TIE:
        return f"near tie {where}: the control's own top-K held the other token within 0.5 nats"
    return f"hard divergence {where}"


def _greedy(prefix: str, section: Mapping[str, Any]) -> str:
    greedy = section.get("greedy")
    if not isinstance(greedy, Mapping):
        return ""
    answers = [a for a in greedy.get("answers") or [] if isinstance(a, Mapping)]
    classes = [{Divergence.HARD.value: "fail", Divergence.NEAR_TIE.value: "skip"}.get(str(a.get("kind")), "")
               for a in answers]
    return ("<h4>Greedy answers: where they diverged</h4>"
            f'<p>{esc(greedy.get("identical"))} of {esc(greedy.get("prompts"))} answers identical, '
            f'{esc(greedy.get("near_ties"))} near ties, {esc(greedy.get("hard"))} hard divergences.</p>'
            + table(f"{prefix}-greedy", ["Prompt", "Answer", "First divergence (token)", "Tokens compared"],
                    [(a.get("id"), _answer(a), fmt_num(a.get("position")), fmt_num(a.get("length"))) for a in answers],
                    classes, numeric=(2, 3)))


def _flips(section: Mapping[str, Any]) -> str:
    flips = section.get("flips")
    if not isinstance(flips, Mapping):
        return ""
    flipped = ", ".join(str(k) for k in flips.get("flipped") or []) or "none"
    if not flips.get("items"):
        return "<p>Flips: no item was scored in both arms.</p>"
    return (f'<p>Scored items in both arms: {esc(flips.get("items"))}; correct → incorrect {esc(flips.get("b"))}, '
            f'incorrect → correct {esc(flips.get("c"))}; exact McNemar p = {esc(flips.get("mcnemar_p"))}. '
            f"Flipped: {esc(flipped)}.</p>")


def equivalence_html(section: Mapping[str, Any], *, prefix: str = "equivalence",
                     names: Mapping[str, str] | None = None) -> str:
    """The block's HTML (without a heading); element ids start with ``prefix``; ``names`` relabels
    the arms' roles (a drift section's control is the reference run)."""
    names = dict(names or {})
    verdict = str(section.get("verdict"))
    floor = section.get("floor") or {}
    rows, classes = _figure_rows(section)
    figures = table(f"{prefix}-figures", ["Figure", "Value [95%]", "Threshold", "Status", "A/A floor [95%]",
                                          "Within the floor"], rows, classes) if rows else ""
    css = {"equivalent": "verdict-promotable", "not equivalent": "verdict-no-promotion"}.get(verdict, "")
    return (f'<p class="{css}">Verdict: <span class="badge" id="{esc(prefix)}-verdict">{esc(verdict)}</span>; A/A floor '
            f'<b>{esc(floor.get("status"))}</b>: {esc(floor.get("reason"))}. Thresholds: '
            f'{esc((section.get("thresholds") or {}).get("source"))}; K = {esc(section.get("top_k"))}; probe '
            f'<code>{esc(section.get("probe_sha256"))}</code>.</p>'
            + bullets(section.get("reasons") or [], f"{prefix}-reasons") + layers_html(section, prefix=prefix) + figures
            + _arms_table(prefix, section, names) + _teacher_forced(prefix, section) + _depth(prefix, section)
            + _greedy(prefix, section)
            + _flips(section) + bullets(section.get("notes") or [], f"{prefix}-notes"))
