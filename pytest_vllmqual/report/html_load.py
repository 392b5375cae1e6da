"""The HTML page's load section: latency percentiles against concurrency, with the SLO lines,
goodput per level, and the level table.

``svg#load-plot`` has three panels over the measured levels (evenly spaced, labelled by the
number of requests in flight): TTFT p50/p95/p99 with the TTFT SLO as a dashed line, TPOT
p50/p95/p99 with the TPOT SLO, and goodput % as bars with the goodput minimum. A level that
missed its SLOs is drawn in red; a level above ``max_num_seqs`` is marked "queued". Inline SVG,
no script, every value escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_vllmqual.recipe.load_gate_settings import SLOS, slo_caveat

from .html_kit import esc, table
from .html_svg import nice_ticks
from .load_section import load_of
from .number_format import fmt_num

__all__ = ["load_html", "load_svg"]

_SERIES = (("p50", "#1f77b4", "0"), ("p95", "#ff7f0e", "0"), ("p99", "#9467bd", "4 2"))
_LATENCY_PANELS = tuple(each for each in SLOS if each.unit == "ms")
"""The SLOs drawn as a latency panel, each in milliseconds (TTFT, TPOT); E2E is in the table only."""
_MISS = "#d62728"
_GOOD = "#59a14f"


def _ms(value: Any) -> float | None:
    return value * 1000.0 if isinstance(value, int | float) else None


def _axes(left: float, top: float, width: float, height: float, high: float, title: str,
          levels: Sequence[Mapping[str, Any]]) -> tuple[list[str], float]:
    ticks = nice_ticks(high)
    top_value = ticks[-1] or 1.0
    parts = [f'<text x="{left + width / 2:.1f}" y="{top - 8:.1f}" text-anchor="middle" class="ptitle">{esc(title)}</text>',
             f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#999"/>']
    for tick in ticks:
        y = top + height - height * tick / top_value
        parts.append(f'<line x1="{left - 3}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="#999"/>'
                     f'<text x="{left - 5}" y="{y + 3:.1f}" text-anchor="end" class="tick">{tick:g}</text>')
    for i, row in enumerate(levels):
        x = _x(i, len(levels), left, width)
        queued = " queued" if row.get("above_max_num_seqs") else ""
        parts.append(f'<text x="{x:.1f}" y="{top + height + 14:.1f}" text-anchor="middle" class="tick">'
                     f'{esc(row.get("level"))}{queued}</text>')
    return parts, top_value


def _x(i: int, n: int, left: float, width: float) -> float:
    return left + width * (i + 0.5) / max(n, 1)


def _latency_panel(name: str, key: str, slo: float | None, levels: Sequence[Mapping[str, Any]],
                   left: float, top: float, width: float, height: float) -> str:
    values = [_ms(row.get(f"{key}_{q}_s")) for row in levels for q, _, _ in _SERIES]
    high = max([v for v in values if v is not None] + ([slo] if slo else []) + [1e-3]) * 1.1
    parts, top_value = _axes(left, top, width, height, high, f"{name} ms (p50, p95, p99)", levels)

    def y_of(value: float) -> float:
        return top + height - height * min(value, top_value) / top_value

    for q, color, dash in _SERIES:
        points = []
        for i, row in enumerate(levels):
            value = _ms(row.get(f"{key}_{q}_s"))
            if value is None:
                continue
            x, y = _x(i, len(levels), left, width), y_of(value)
            points.append(f"{x:.1f},{y:.1f}")
            fill = color if row.get("met_slo") else _MISS
            parts.append(f'<circle class="load-pt" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{fill}"><title>'
                         f'{esc(name)} {q} at {esc(row.get("level"))} in flight: {value:.1f} ms</title></circle>')
        if len(points) > 1:
            parts.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{color}" '
                         f'stroke-dasharray="{dash}" stroke-width="1.5"/>')
    if slo:
        y = y_of(slo)
        parts.append(f'<line class="slo-line" x1="{left}" y1="{y:.1f}" x2="{left + width}" y2="{y:.1f}" '
                     f'stroke="{_MISS}" stroke-dasharray="6 3"/><text x="{left + width - 4}" y="{y - 4:.1f}" '
                     f'text-anchor="end" class="tick">SLO {slo:g} ms</text>')
    return "".join(parts)


def _goodput_panel(levels: Sequence[Mapping[str, Any]], minimum: float | None,
                   left: float, top: float, width: float, height: float) -> str:
    parts, top_value = _axes(left, top, width, height, 100.0, "goodput % (requests meeting every SLO)", levels)
    bar = width / max(len(levels), 1) * 0.5
    for i, row in enumerate(levels):
        value = row.get("goodput_pct")
        if not isinstance(value, int | float):
            continue
        x, h = _x(i, len(levels), left, width), height * value / top_value
        fill = _GOOD if row.get("met_slo") else _MISS
        rate = fmt_num(row.get("goodput_req_s"), 2)
        parts.append(f'<rect class="goodput-bar" x="{x - bar / 2:.1f}" y="{top + height - h:.1f}" width="{bar:.1f}" '
                     f'height="{h:.1f}" fill="{fill}"><title>{esc(row.get("level"))} in flight: {value:.1f}% '
                     f'({esc(rate)} req/s)</title></rect>')
    if isinstance(minimum, int | float):
        y = top + height - height * minimum / top_value
        parts.append(f'<line class="slo-line" x1="{left}" y1="{y:.1f}" x2="{left + width}" y2="{y:.1f}" '
                     f'stroke="#333" stroke-dasharray="6 3"/>')
    return "".join(parts)


def load_svg(report: Mapping[str, Any]) -> str:
    """The three panels for a report's load section ("" when it has no levels)."""
    section = load_of(report)
    levels = sorted((section or {}).get("levels") or [], key=lambda row: row.get("level") or 0)
    if not levels or section is None:
        return ""
    slo = section.get("slo") or {}
    width, height, panel_w, panel_h = 960, 260, 270, 180
    body = ("".join(_latency_panel(each.label, each.figure, slo.get(each.key), levels, 50 + 320 * n, 30, panel_w,
                                   panel_h) for n, each in enumerate(_LATENCY_PANELS))
            + _goodput_panel(levels, section.get("min_goodput_pct"), 680, 30, panel_w, panel_h))
    legend = "".join(f'<text x="{50 + 70 * n}" y="{height - 6}" class="tick" fill="{color}">● {q}</text>'
                     for n, (q, color, _) in enumerate(_SERIES))
    return (f'<svg id="load-plot" role="img" aria-label="latency percentiles and goodput against concurrency" '
            f'viewBox="0 0 {width} {height}" width="100%" xmlns="http://www.w3.org/2000/svg">'
            f'<style>.tick{{font:10px sans-serif}}.ptitle{{font:bold 11px sans-serif}}</style>{body}{legend}'
            f'<text x="{width / 2}" y="{height - 6}" class="tick" text-anchor="middle">requests in flight '
            "(x axis); red: the level missed its SLOs; dashed: the SLO</text></svg>")


def _outside(row: Mapping[str, Any], short: str) -> str:
    """The time outside the engine at p50/p95, each a range in ms ("n/a" where the server's view was not there)."""
    def one(q: int) -> str:
        low, high = row.get(f"{short}_outside_engine_p{q}_s_low"), row.get(f"{short}_outside_engine_p{q}_s_high")
        return f"{fmt_num(_ms(low), 0)}..{fmt_num(_ms(high), 0)}" if low is not None and high is not None else "n/a"
    return f"{one(50)} / {one(95)}"


def _lag(row: Mapping[str, Any]) -> str:
    share, late = row.get("client_cpu_share"), row.get("client_reader_oversleep_p99_s")
    text = (f"CPU {fmt_num(share * 100.0 if isinstance(share, int | float) else None, 0)}%, "
            f"reader late {fmt_num(_ms(late), 1)} ms p99")
    return text + (" (fell behind)" if row.get("client_fell_behind") else "")


def _row(row: Mapping[str, Any]) -> tuple[Any, ...]:
    def ms(key: str) -> str:
        return "/".join(fmt_num(_ms(row.get(f"{key}_{q}_s")), 1) for q in ("p50", "p95", "p99"))
    return (row.get("level"), row.get("phase"), row.get("requests"), row.get("errors"), ms("ttft"), ms("tpot"),
            ms("itl"), "/".join(fmt_num(row.get(f"e2e_{q}_s"), 3) for q in ("p50", "p95", "p99")),
            fmt_num(row.get("goodput_pct"), 1), fmt_num(row.get("goodput_req_s"), 2), fmt_num(row.get("output_tok_s"), 1),
            fmt_num(_ms(row.get("server_ttft_mean_s")), 1), _outside(row, "ttft"), _lag(row),
            ("met" if row.get("met_slo") else "not measured" if row.get("slo_judgement") == "not measured" else "missed") + (", queued in the server" if row.get("above_max_num_seqs")
                                                           else ""))


def load_html(report: Mapping[str, Any]) -> str:
    """The page's load section ("" when the report has none)."""
    section = load_of(report)
    if section is None:
        return ""
    slo = section.get("slo") or {}
    set_slos = ", ".join(f"{k} {v:g}" for k, v in slo.items() if isinstance(v, int | float)) or "none"
    search = section.get("search")
    found = ""
    if isinstance(search, Mapping):
        bound = "" if search.get("converged") else " (the search's steps ran out: a lower bound)"
        found = (f" Highest level at SLO found: <b>{esc(search.get('max_at_slo'))}</b>{esc(bound)}, "
                 f"first failing {esc(search.get('first_failing'))}, ceiling {esc(search.get('ceiling'))}, "
                 f"levels tried {esc(search.get('tried'))}.")
    caveat = slo_caveat(section.get("slos_set_by"))
    placeholder = f" Caveat: {caveat}." if caveat else ""
    rows = [_row(row) for row in section.get("levels") or []]
    classes = ["" if row.get("met_slo") else "fail" for row in section.get("levels") or []]
    headers = ["In flight", "Phase", "Requests", "Errors", "TTFT ms p50/p95/p99", "TPOT ms p50/p95/p99",
               "ITL ms p50/p95/p99", "E2E s p50/p95/p99", "Goodput %", "Goodput req/s", "Output tok/s",
               "Server TTFT mean ms", "TTFT outside the engine ms p50 / p95", "Client", "Result"]
    return ('<section id="load"><h2>Load at SLO</h2>'
            f"<p>Outcome <b>{esc(section.get('outcome'))}</b>. SLOs per request: {esc(set_slos)}; a level passes "
            f"when at least {esc(section.get('min_goodput_pct'))}% of its requests meet every SLO and none failed. "
            f"Each level kept exactly that many requests in flight after one uncounted warm-up; "
            f"max_num_seqs {esc(section.get('max_num_seqs'))}.{found}{esc(placeholder)}</p>"
            + load_svg(report) + table("load-table", headers, rows, classes) + "</section>")
