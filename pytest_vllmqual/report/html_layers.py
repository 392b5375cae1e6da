"""The HTML page's decision block: the rule that may block, the three layers, the task forest plot
and top-1 agreement by depth.

Drawn from an equivalence section's ``promotion``, ``tasks`` and ``depth`` parts as the comparison
wrote them: every status on the page is a word from the record (the page judges nothing). The
forest plot (``svg#<id>-forest``) draws, per item family of each compared block and overall, the
paired difference candidate − control in accuracy points with its 95% interval (Newcombe's), the
zero line and the non-inferiority margin (−margin: an interval wholly right of it is non-inferior).
The depth chart (``svg#<id>-depth-top1``) draws each bucket's top-1 agreement with its interval and
the threshold. Inline SVG, no script; every value is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .html_kit import bullets, esc, table
from .number_format import fmt_num

__all__ = ["accuracy_by_depth_svg", "depth_top1_svg", "forest_svg", "layers_html"]

_CLASS = {"failed": "fail", "not measured": "skip"}
_STATUS_COLOR = {"non-inferior": "#2ca02c", "inferior": "#d62728"}


def _rows(tasks: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(label, check) for each family and the overall of each compared block, with an interval."""
    out = []
    for block in tasks.get("blocks") or []:
        for check in [*(block.get("families") or []), *([block["overall"]] if block.get("overall") else [])]:
            gap = (check.get("difference_points") or {}).get("candidate_minus_control")
            if isinstance(gap, Mapping) and None not in (gap.get("point"), gap.get("low"), gap.get("high")):
                out.append((f"{block.get('label')}: {check.get('family')}", check))
    return out


def _whisker(start: tuple[float, float], end: tuple[float, float], dot: tuple[float, float], color: str,
             tip: str) -> str:
    """An interval as a line from ``start`` to ``end`` and its point as a dot with a tooltip."""
    return (f'<line x1="{start[0]:.1f}" y1="{start[1]:.1f}" x2="{end[0]:.1f}" y2="{end[1]:.1f}" stroke="{color}" '
            f'stroke-width="2"/><circle cx="{dot[0]:.1f}" cy="{dot[1]:.1f}" r="4" fill="{color}">'
            f'<title>{esc(tip)}</title></circle>')


def forest_svg(svg_id: str, tasks: Mapping[str, Any]) -> str:
    """One row per family: candidate − control (points) with its 95% interval, 0 and −margin drawn."""
    rows = _rows(tasks)
    if not rows:
        return ""
    margin = float((tasks.get("settings") or {}).get("non_inferiority_margin_points") or 3.0)
    gaps = [(check["difference_points"]["candidate_minus_control"]) for _, check in rows]
    reach = max([abs(float(g["low"])) for g in gaps] + [abs(float(g["high"])) for g in gaps] + [margin]) * 1.15
    left, top, row_h = 260, 44, 26
    width, plot_w = 760, 760 - 260 - 40
    height = top + row_h * len(rows) + 46

    def sx(value: float) -> float:
        return left + (value + reach) / (2 * reach) * plot_w

    out = [f'<svg id="{esc(svg_id)}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="paired difference per family">',
           f'<text class="title" x="{left}" y="20">Candidate − control, accuracy points [95%], margin −{margin:g}</text>']
    bottom = top + row_h * len(rows)
    for value, css, label in ((0.0, "axis", "0"), (-margin, "margin", f"−{margin:g} (margin)")):
        out.append(f'<line class="{css}" x1="{sx(value):.1f}" y1="{top - 6}" x2="{sx(value):.1f}" y2="{bottom}" '
                   f'stroke="{"#d62728" if css == "margin" else "#555"}" stroke-dasharray="{"4 3" if css == "margin" else ""}"/>'
                   f'<text x="{sx(value):.1f}" y="{bottom + 16}" text-anchor="middle">{esc(label)}</text>')
    for i, (label, check) in enumerate(rows):
        gap = check["difference_points"]["candidate_minus_control"]
        y = top + row_h * i + row_h / 2
        color = _STATUS_COLOR.get(str(check.get("status")), "#ff7f0e")
        tip = (f"{label}: {float(gap['point']):+.1f} [{float(gap['low']):+.1f}, {float(gap['high']):+.1f}] on "
               f"{check.get('paired')} paired items: {check.get('status')}")
        out.append(f'<g class="family"><text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{esc(label)}</text>'
                   + _whisker((sx(float(gap["low"])), y), (sx(float(gap["high"])), y), (sx(float(gap["point"])), y),
                              color, tip) + "</g>")
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle">candidate − control '
               f'(accuracy points; right of the margin line: no worse than the margin allows)</text></svg>')
    return "".join(out)


_Dot = tuple[str, str, float, float, float, str]
"""One point of a by-depth chart: its series' colour, its class, point, low, high, and its tooltip."""


def _by_depth_svg(svg_id: str, title: str, columns: Sequence[tuple[str, Sequence[_Dot]]],
                  threshold: float | None, x_label: str) -> str:
    """Percent figures per depth column, each a dot with its 95% interval (one per series, side by side)."""
    values = [v for _, dots in columns for dot in dots for v in dot[2:5]] + ([threshold] if threshold else [])
    low = max(0.0, min(values, default=0.0) - 2.0)
    left, top, plot_h, step = 70, 40, 200, 110
    width, height = left + step * len(columns) + 30, top + plot_h + 50

    def sy(value: float) -> float:
        return top + plot_h - (value - low) / ((100.0 - low) or 1.0) * plot_h

    out = [f'<svg id="{esc(svg_id)}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{esc(title)}">', f'<text class="title" x="{left}" y="22">{esc(title)}</text>',
           f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>'
           f'<text x="{left - 6}" y="{sy(100.0) + 4:.1f}" text-anchor="end">100</text>'
           f'<text x="{left - 6}" y="{sy(low) + 4:.1f}" text-anchor="end">{low:.0f}</text>']
    if threshold is not None:
        out.append(f'<line class="threshold" x1="{left}" y1="{sy(threshold):.1f}" x2="{width - 20}" '
                   f'y2="{sy(threshold):.1f}" stroke="#d62728" stroke-dasharray="4 3"/><text x="{width - 20}" '
                   f'y="{sy(threshold) - 4:.1f}" text-anchor="end">threshold {threshold:g}%</text>')
    for i, (label, dots) in enumerate(columns):
        x0 = left + step * i + step / 2
        for j, (color, css, point, lo, hi, tip) in enumerate(dots):
            x = x0 + (j - (len(dots) - 1) / 2) * 14
            out.append(f'<g class="{css}">' + _whisker((x, sy(lo)), (x, sy(hi)), (x, sy(point)), color, tip) + "</g>")
        out.append(f'<text x="{x0:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{esc(label)}</text>')
    out.append(f'<text x="{left + (width - left) / 2:.1f}" y="{height - 8}" text-anchor="middle">{esc(x_label)}'
               f'</text></svg>')
    return "".join(out)


def depth_top1_svg(svg_id: str, depth: Mapping[str, Any]) -> str:
    """Top-1 agreement per depth bucket with its 95% interval over windows, and its threshold."""
    columns: list[tuple[str, Sequence[_Dot]]] = []
    threshold = None
    for bucket in depth.get("buckets") or []:
        figure = next((f for f in bucket.get("figures") or [] if f.get("figure") == "top1_agreement"), None)
        if figure is None or figure.get("point") is None:
            continue
        label = f"({fmt_num(bucket.get('from'))}, {fmt_num(bucket.get('to'))}]"
        point = float(figure["point"])
        lo, hi = (float(figure[k]) if figure.get(k) is not None else point for k in ("low", "high"))
        threshold = float(figure.get("threshold") or 0.0)
        tip = f"{label}: {point:.1f}% [{lo:.1f}, {hi:.1f}], {bucket.get('windows')} windows: {bucket.get('verdict')}"
        columns.append((label, [("#1f77b4", "bucket", point, lo, hi, tip)]))
    return _by_depth_svg(svg_id, "Top-1 agreement by depth (%, 95% over windows)", columns, threshold,
                         "depth bucket (tokens)") if columns else ""


def accuracy_by_depth_svg(svg_id: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """The needle family's accuracy per prompt length, each arm with its exact 95% interval."""
    columns: list[tuple[str, Sequence[_Dot]]] = []
    for row in rows:
        dots: list[_Dot] = []
        for role, color in (("control", "#1f77b4"), ("candidate", "#ff7f0e")):
            shown = (row.get("accuracy_pct") or {}).get(role)
            if isinstance(shown, Mapping):
                tip = (f"{role}, {fmt_num(row.get('tokens'))} tokens: {shown['point']:.1f}% [{shown['low']:.1f}, "
                       f"{shown['high']:.1f}] on {row.get('items')} items")
                dots.append((color, f"needle {role}", float(shown["point"]), float(shown["low"]), float(shown["high"]),
                             tip))
        columns.append((f"{fmt_num(row.get('tokens'))}", dots))
    return _by_depth_svg(svg_id, "Needle accuracy by prompt length (%, exact 95%; control blue, candidate orange)",
                         columns, None, "needle prompt (tokens)") if columns else ""


def _task_table(prefix: str, tasks: Mapping[str, Any]) -> str:
    rows, classes = [], []
    for label, check in _rows(tasks):
        accuracy = check.get("accuracy_pct") or {}
        gap = check["difference_points"]["candidate_minus_control"]

        def pct(role: str, shown: Mapping[str, Any] = accuracy) -> str:
            one = shown.get(role)
            return f"{one['point']:.1f}% [{one['low']:.1f}, {one['high']:.1f}]" if isinstance(one, Mapping) else "n/a"
        rows.append((label, check.get("paired"), pct("control"), pct("candidate"),
                     f"{gap['point']:+.1f} [{gap['low']:+.1f}, {gap['high']:+.1f}]", check.get("b"), check.get("c"),
                     check.get("status")))
        classes.append({"inferior": "fail", "non-inferior": ""}.get(str(check.get("status")), "skip"))
    return table(f"{prefix}-tasks", ["Family", "Paired items", "Control accuracy [95%]", "Candidate accuracy [95%]",
                                     "Candidate − control (points) [95%]", "b", "c", "Status"], rows, classes,
                 numeric=(1, 5, 6)) if rows else ""


def _status_table(table_id: str, first: str, rows: Sequence[Mapping[str, Any]], key: str, extra: str) -> str:
    cells = [(row.get(key), row.get("verdict", "") if extra == "verdict" else
              ("blocks" if row.get("blocks") else "reported, not blocking"), row.get("status"),
              row.get("reason") or "; ".join(str(r) for r in row.get("reasons") or [])) for row in rows]
    return table(table_id, [first, "Verdict" if extra == "verdict" else "Role", "Status", "Why"], cells,
                 [_CLASS.get(str(row.get("status")), "") for row in rows])


def layers_html(section: Mapping[str, Any], *, prefix: str = "equivalence") -> str:
    """The decision block (without a heading): the blocking rule's status, the layers, the other
    rules, the forest plot and task table, and top-1 by depth."""
    promotion = section.get("promotion")
    if not isinstance(promotion, Mapping):
        return ""
    status = str(promotion.get("status"))
    css = {"passed": "verdict-promotable", "failed": "verdict-no-promotion"}.get(status, "")
    out = [f'<h4>Promotion: the rule that may block</h4><p class="{css}">compare.promotion '
           f'<b id="{esc(prefix)}-promotion-rule">{esc(promotion.get("rule"))}</b> ({esc(promotion.get("source"))}): '
           f'<span class="badge" id="{esc(prefix)}-promotion-status">{esc(status)}</span>.</p>',
           bullets(promotion.get("reasons") or [], f"{prefix}-promotion-reasons"),
           _status_table(f"{prefix}-layers", "Layer", promotion.get("layers") or [], "layer", "verdict"),
           _status_table(f"{prefix}-rules", "Rule", promotion.get("rules") or [], "rule", "role")]
    tasks = section.get("tasks")
    if isinstance(tasks, Mapping):
        out += ["<h4>Tasks: paired differences per family</h4>", forest_svg(f"{prefix}-forest", tasks),
                _task_table(prefix, tasks), accuracy_by_depth_svg(f"{prefix}-needle-depth", tasks.get("by_depth") or [])]
    depth = section.get("depth")
    if isinstance(depth, Mapping):
        out.append(depth_top1_svg(f"{prefix}-depth-top1", depth))
    return "".join(out)
