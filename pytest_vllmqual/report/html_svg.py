"""The inline SVG plots of the HTML report: the capacity ladder, the per-rank memory chart, histograms.

Generated here as text (no script, no external asset), so the page works offline; every
value from the report is escaped with the kit's :func:`~.html_kit.esc`. ``svg#ladder-plot`` draws TTFT and
effective prefill against API-reported prompt tokens, with failed and rejected rungs marked
distinctly; ``svg#memory-chart`` stacks weights / KV / peak activation / CUDA graph per rank;
:func:`histogram_svg` draws counts per bin (the equivalence section's per-position KL).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_vllmqual.records import rung_verdict
from pytest_vllmqual.report.number_format import short_tokens

from .html_kit import esc

__all__ = ["histogram_svg", "ladder_svg", "memory_svg", "nice_ticks", "rung_kind"]

_COLORS = {
    "ok": "#1f77b4",
    "failed": "#d62728",
    "rejected": "#ff7f0e",
    "weights": "#4c78a8",
    "kv": "#59a14f",
    "activation": "#f28e2b",
    "graph": "#b07aa1",
}


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``high``."""
    if high <= 0 or not math.isfinite(high):
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = magnitude
    for factor in (1, 2, 2.5, 5, 10):
        step = factor * magnitude
        if high / step <= count:
            break
    ticks = [0.0]
    while ticks[-1] < high - 1e-9:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _tick_label(value: float, kind: str) -> str:
    if kind == "tokens":
        return short_tokens(value) if value else "0"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}"


def _marker(kind: str, x: float, y: float, tip: str) -> str:
    title = f"<title>{esc(tip)}</title>"
    if kind == "ok":
        return (f'<circle class="pt pt-ok" cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="{_COLORS["ok"]}">'
                f"{title}</circle>")
    if kind == "failed":
        d = f"M{x - 5:.1f},{y - 5:.1f}L{x + 5:.1f},{y + 5:.1f}M{x - 5:.1f},{y + 5:.1f}L{x + 5:.1f},{y - 5:.1f}"
        return f'<path class="pt pt-failed" d="{d}" stroke="{_COLORS["failed"]}" stroke-width="2.5">{title}</path>'
    return (f'<rect class="pt pt-rejected" x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10" fill="none" '
            f'stroke="{_COLORS["rejected"]}" stroke-width="2">{title}</rect>')


def rung_kind(rung: Mapping[str, Any]) -> str:
    """"ok", "failed" (retained) or "rejected" (beyond max_model_len, as expected): how a rung is drawn."""
    return rung_verdict(rung).kind


def _panel(panel_id: str, title: str, y_key: str, y_unit: str, ladder: Sequence[Mapping[str, Any]],
           left: float, top: float, width: float, height: float) -> str:
    """One scatter panel: y_key against API-reported prompt tokens (target where none was reported)."""
    points = []
    for rung in ladder:
        x = rung.get("prompt_tokens") if isinstance(rung.get("prompt_tokens"), int) else rung.get("target")
        if not isinstance(x, int | float):
            continue
        y = rung.get(y_key)
        points.append((float(x), float(y) if isinstance(y, int | float) else None, rung_kind(rung), rung))
    x_ticks = nice_ticks(max([p[0] for p in points], default=1.0) * 1.03)
    y_ticks = nice_ticks(max([p[1] for p in points if p[1] is not None], default=1.0) * 1.1)
    x_max, y_max = x_ticks[-1], y_ticks[-1]

    def sx(value: float) -> float:
        return left + value / x_max * width

    def sy(value: float) -> float:
        return top + height - value / y_max * height

    out = [f'<g id="{esc(panel_id)}" class="panel">',
           f'<text class="title" x="{left:.1f}" y="{top - 12:.1f}">{esc(title)}</text>']
    for tick in y_ticks:
        y = sy(tick)
        out.append(f'<line class="grid" x1="{left:.1f}" y1="{y:.1f}" x2="{left + width:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text x="{left - 6:.1f}" y="{y + 4:.1f}" text-anchor="end">{esc(_tick_label(tick, y_unit))}</text>')
    for tick in x_ticks:
        x = sx(tick)
        out.append(f'<line class="axis" x1="{x:.1f}" y1="{top + height:.1f}" x2="{x:.1f}" y2="{top + height + 4:.1f}"/>')
        out.append(f'<text x="{x:.1f}" y="{top + height + 17:.1f}" text-anchor="middle">'
                   f"{esc(_tick_label(tick, 'tokens'))}</text>")
    out.append(f'<line class="axis" x1="{left:.1f}" y1="{top + height:.1f}" x2="{left + width:.1f}" y2="{top + height:.1f}"/>')
    out.append(f'<line class="axis" x1="{left:.1f}" y1="{top:.1f}" x2="{left:.1f}" y2="{top + height:.1f}"/>')
    out.append(f'<text x="{left + width / 2:.1f}" y="{top + height + 34:.1f}" text-anchor="middle">'
               "API-reported prompt tokens</text>")
    out.append(f'<text x="{left - 48:.1f}" y="{top + height / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 {left - 48:.1f} {top + height / 2:.1f})">{esc(y_unit)}</text>')
    line = sorted((p for p in points if p[2] == "ok" and p[1] is not None), key=lambda p: p[0])
    if len(line) > 1:
        coords = " ".join(f"{sx(p[0]):.1f},{sy(p[1] or 0):.1f}" for p in line)
        out.append(f'<polyline class="series" points="{coords}" fill="none" stroke="{_COLORS["ok"]}" '
                   'stroke-width="1.5" stroke-opacity="0.6"/>')
    for x, y, kind, rung in points:
        value = "no measurement" if y is None else f"{y:,.3f} {y_unit}"
        size = (f"{rung['prompt_tokens']:,} actual prompt tokens" if isinstance(rung.get("prompt_tokens"), int)
                else f"no API-reported size; placed at the target {rung.get('target'):,}")
        status = f"HTTP {rung.get('status_code')}" if rung.get("status_code") else ""
        tip = f"{rung.get('target_label')}: {size}; {value}; {kind} {status}".strip()
        out.append(_marker(kind, sx(x), sy(y if y is not None else 0.0), tip))
    out.append("</g>")
    return "".join(out)


def ladder_svg(report: Mapping[str, Any]) -> str:
    """Two panels (TTFT s and effective prefill tok/s against actual prompt tokens) with a legend."""
    ladder = list(report.get("ladder") or [])
    width, height = 1100, 380
    parts = [f'<svg id="ladder-plot" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="Capacity ladder: TTFT and effective prefill '
             'against API-reported prompt tokens">']
    parts.append(_panel("ladder-ttft", "TTFT (s)", "ttft_s", "s", ladder, 80, 50, 420, 250))
    parts.append(_panel("ladder-prefill", "Effective prefill (tok/s)", "prefill_tok_s", "tok/s", ladder,
                        640, 50, 420, 250))
    legend = [("ok", "completed rung"), ("failed", "failed rung (retained; at the bottom when nothing was measured)"),
              ("rejected", "rejected as expected (beyond max_model_len)")]
    parts.append('<g id="ladder-legend">')
    x = 80.0
    for kind, text in legend:
        parts.append(_marker(kind, x, height - 20, text))
        parts.append(f'<text x="{x + 10:.1f}" y="{height - 16:.1f}">{esc(text)}</text>')
        x += 30 + len(text) * 6.0
    parts.append("</g></svg>")
    return "".join(parts)


def memory_svg(report: Mapping[str, Any]) -> str:
    """Per-rank stacked bars: weights, KV, peak activation and (when logged) CUDA graph memory, in GiB."""
    ranks = [r for r in (report.get("engine") or {}).get("ranks") or [] if isinstance(r.get("rank"), int)]
    segments = [("weights_gib", "weights", "Weights"), ("kv_gib", "kv", "KV cache"),
                ("peak_activation_gib", "activation", "Peak activation")]
    if any(isinstance(r.get("cuda_graph_gib"), int | float) for r in ranks):
        segments.append(("cuda_graph_gib", "graph", "CUDA graph"))
    totals = [sum(float(r.get(k) or 0) for k, _, _ in segments) for r in ranks]
    ticks = nice_ticks(max(totals, default=1.0) * 1.05)
    top_value = ticks[-1]
    bar_w, gap, left, top, plot_h = 90, 60, 80, 40, 260
    width = max(560, left + len(ranks) * (bar_w + gap) + 220)
    height = top + plot_h + 60
    out = [f'<svg id="memory-chart" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="Per-rank memory in GiB">',
           f'<text class="title" x="{left}" y="22">Per-rank memory (GiB)</text>']

    def sy(value: float) -> float:
        return top + plot_h - value / top_value * plot_h

    for tick in ticks:
        out.append(f'<line class="grid" x1="{left}" y1="{sy(tick):.1f}" x2="{left + len(ranks) * (bar_w + gap)}" '
                   f'y2="{sy(tick):.1f}"/>')
        out.append(f'<text x="{left - 6}" y="{sy(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    out.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>')
    for i, rank in enumerate(ranks):
        x = left + gap / 2 + i * (bar_w + gap)
        base = 0.0
        out.append(f'<g id="memory-rank-{rank["rank"]}" class="bar">')
        for key, css, label in segments:
            value = rank.get(key)
            if not isinstance(value, int | float) or value <= 0:
                continue
            y_top, y_bottom = sy(base + value), sy(base)
            tip = f"rank {rank['rank']}: {label} {value:,.2f} GiB"
            out.append(f'<rect class="seg seg-{css}" x="{x:.1f}" y="{y_top:.1f}" width="{bar_w}" '
                       f'height="{max(y_bottom - y_top, 0.8):.1f}" fill="{_COLORS[css]}">'
                       f"<title>{esc(tip)}</title></rect>")
            base += value
        out.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h + 18}" text-anchor="middle">'
                   f"rank {esc(rank['rank'])}</text>")
        out.append(f'<text x="{x + bar_w / 2:.1f}" y="{sy(base) - 5:.1f}" text-anchor="middle">'
                   f"{base:,.2f}</text></g>")
    out.append(_memory_legend(segments, ranks, left + len(ranks) * (bar_w + gap) + 20, top))
    out.append("</svg>")
    return "".join(out)


def _memory_legend(segments: Sequence[tuple[str, str, str]], ranks: Sequence[Mapping[str, Any]], x: float,
                   top: float) -> str:
    """A swatch per series some rank measured; below them, in words, the series no rank measured."""
    measured = [s for s in segments if any(isinstance(r.get(s[0]), int | float) for r in ranks)]
    missing = [segment[2] for segment in segments if segment not in measured]
    out = ['<g id="memory-legend">']
    for j, (_, css, label) in enumerate(measured):
        y = top + 10 + j * 22
        out.append(f'<rect x="{x}" y="{y - 10}" width="14" height="14" fill="{_COLORS[css]}"/>'
                   f'<text x="{x + 20}" y="{y + 1}">{esc(label)}</text>')
    for j, label in enumerate(missing):
        y = top + 10 + (len(measured) + j) * 22
        out.append(f'<text class="not-measured" x="{x}" y="{y + 1}" style="fill:#57606a;font-style:italic">'
                   f"{esc(label)}: not measured</text>")
    return "".join(out) + "</g>"


def histogram_svg(svg_id: str, title: str, bins: Sequence[tuple[str, int]], *, x_label: str, y_label: str) -> str:
    """Vertical bars, one per (label, count), each with its count above it and its label below."""
    bar_w, gap, left, top, plot_h = 64, 18, 70, 40, 220
    width = max(480, left + len(bins) * (bar_w + gap) + 30)
    height = top + plot_h + 62
    ticks = nice_ticks(max([count for _, count in bins], default=1) * 1.1 or 1.0)
    top_value = ticks[-1] or 1.0

    def sy(value: float) -> float:
        return top + plot_h - value / top_value * plot_h

    out = [f'<svg id="{esc(svg_id)}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{esc(title)}">', f'<text class="title" x="{left}" y="22">{esc(title)}</text>']
    for tick in ticks:
        out.append(f'<line class="grid" x1="{left}" y1="{sy(tick):.1f}" x2="{width - 20}" y2="{sy(tick):.1f}"/>'
                   f'<text x="{left - 6}" y="{sy(tick) + 4:.1f}" text-anchor="end">{esc(_tick_label(tick, ""))}</text>')
    out.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>')
    for i, (label, count) in enumerate(bins):
        x = left + gap / 2 + i * (bar_w + gap)
        y = sy(count)
        out.append(f'<g class="bin"><rect x="{x:.1f}" y="{y:.1f}" width="{bar_w}" height="{max(top + plot_h - y, 0):.1f}" '
                   f'fill="{_COLORS["ok"]}"><title>{esc(label)}: {count:,}</title></rect>'
                   f'<text x="{x + bar_w / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle">{count:,}</text>'
                   f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{esc(label)}</text></g>')
    out.append(f'<text x="{left + (width - left) / 2:.1f}" y="{height - 12}" text-anchor="middle">{esc(x_label)}</text>'
               f'<text x="18" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 18 {top + plot_h / 2:.1f})">{esc(y_label)}</text></svg>')
    return "".join(out)
