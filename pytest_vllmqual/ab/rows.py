"""The A/B comparison's rows: each arm's comparable metrics, and the rule that compares each one.

:func:`arm_metrics` reads every comparable value one report measured; :func:`compare_rows`
pairs two arms' metrics into the reference campaign's "Measurement | control | candidate | Change" rows
(only metrics both arms measured; the rest is listed apart). :class:`Tolerances` are the
control recipe's ``compare`` block.

Rows (only metrics both arms measured; the rest is listed under ``not_compared``)
---------------------------------------------------------------------------------

=================================  ==================  ========  ==========================================
Measurement                        Value format        Rule      Why this rule
=================================  ==================  ========  ==========================================
Minimum-rank KV allocation         ``15.27 GiB``       abs+pct   memory moved between pools: size and share
Engine-reported GPU KV tokens      ``283,917``         abs+pct   capacity in tokens: count and growth
Reported 131K concurrency          ``2.17x``           abs       derived from the KV tokens at the configured
                                                                 length; a percent would repeat that row
Peak activation per rank           ``1.73 GiB``        abs+pct   the profile's demand (largest rank)
Weight allocation per rank         ``75.64 GiB``       abs       fixed by checkpoint and quantization: a change
                                                                 is accounting drift, shown in GiB (a percent of
                                                                 ~75 GiB would make it look negligible)
Functional preflight               ``6/6``             status    pass/fail gates
Largest actual prompt              ``119,503``         status    a capacity gate; abs+pct when the sizes differ
Largest-request TTFT               ``17.445 s``        pct       one request per arm: only the relative change
Largest-request E2E                ``17.886 s``        pct       is comparable, and it is labelled against the
Largest-request effective prefill  ``7,537 tok/s``     pct       recipe's noise floor ("bounded observation,
Largest-request decode             ``73.86 tok/s``     pct       not a ranking" below it)
Cold managed start                 ``323.5 s``         pct       a single observation, like the timings
Load N: TTFT p95, TPOT p95,        ``36.1 ms``,        pct       per promoted level both arms measured: many
output tok/s                       ``3,921 tok/s``               requests per arm, still labelled against the
                                                                 noise floor (below it: a bounded observation)
Load N: goodput                    ``100.0%``          abs       the share of requests meeting every SLO
other gates (quality, reasoning,   ``3/3``,            status    "quality/tool summaries where both have them"
concurrency, load, ...)            ``2 checks × 3/3``
=================================  ==================  ========  ==========================================

Change cells: abs+pct ``+0.72 GiB / +4.715%`` (tokens have no unit: ``+269,326 / +94.861%``);
abs ``+2.05x``, ``-0.13 GiB``; pct ``-0.461%``; a zero change is ``unchanged``; status rows say
``unchanged pass`` / ``unchanged fail`` or what moved (``regressed: 6/6 → 5/6``). Absolute
changes use the value's precision; percents have three decimals, are relative to the control
and are computed from the values as the reports carry them (never from the rounded display),
half-up. Values are printed as carried: a report's effective prefill is never recomputed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from pytest_vllmqual.gates.registry import (
    COLD_START_GATE,
    ENGINE_RANKS_GATE,
    IDENTITY_GATE,
    KV_POOL_GATE,
    LADDER_GATE,
    PREFLIGHT_GATES,
    title_of,
)
from pytest_vllmqual.records import GateOutcome, worst_outcome
from pytest_vllmqual.report.number_format import (
    fixed,
    rounded,
    short_tokens,
    signed,
    signed_percent,
    to_decimal,
)
from pytest_vllmqual.report.query import (
    gate_outcome,
    gates_named,
    largest_rung,
    preflight_summary,
    recipe_value,
)

__all__ = ["ABOVE_FLOOR", "BOUNDED", "DEFAULT_TOLERANCES", "LOAD_ABOVE_FLOOR", "LOAD_RULES", "RULES", "Metric",
           "MetricRule", "Tolerances", "arm_metrics", "compare_rows", "load_metrics", "percent_change"]

BOUNDED = "bounded observation, not a ranking"
ABOVE_FLOOR = "above the noise floor, but one request per arm: re-measure before ranking"
LOAD_ABOVE_FLOOR = "above the noise floor, over one load level per arm: re-measure before ranking"
_LADDER_GATES = (LADDER_GATE,)
_KV_GATES = (KV_POOL_GATE,)
_COVERED_GATES = (*PREFLIGHT_GATES, *_LADDER_GATES, *_KV_GATES, ENGINE_RANKS_GATE, IDENTITY_GATE, COLD_START_GATE)
"""Gates whose evidence already has a row (or is identity); other gates get a status row."""
_OUTCOME_ORDER = ("error", "failed", "pending", "skipped", "absent", "passed")


@dataclass(frozen=True)
class Tolerances:
    """The recipe's ``compare`` block: noise floor, replay tolerance, tokens-per-GiB tolerance (percent)."""

    timing_noise_floor_pct: float = 5.0
    replay_tolerance_pct: float = 2.0
    kv_tokens_per_gib_tolerance_pct: float = 1.0
    source: str = "default"

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> Tolerances:
        """The control recipe's ``compare`` values; defaults fill the keys it does not set."""
        block = recipe_value(report, "compare")
        if not isinstance(block, Mapping):
            return cls()
        values = {k: float(block[k]) for k in ("timing_noise_floor_pct", "replay_tolerance_pct",
                                                "kv_tokens_per_gib_tolerance_pct")
                  if isinstance(block.get(k), int | float) and not isinstance(block.get(k), bool)}
        if not values:
            return cls()
        name = (report.get("recipe") or {}).get("name")
        return replace(cls(), **values, source=f"control recipe {name}" if name else "control recipe")


DEFAULT_TOLERANCES = Tolerances()
"""Used only for keys the control recipe's ``compare`` block does not set."""


def percent_change(control: Any, candidate: Any) -> Decimal | None:
    """(candidate - control) / control × 100, exact; None when the control is zero or missing."""
    a, b = to_decimal(control), to_decimal(candidate)
    if a is None or b is None or a == 0:
        return None
    return (b - a) / a * 100


@dataclass(frozen=True)
class MetricRule:
    """How one metric is read, shown and compared (see the module docstring's table)."""

    key: str
    rule: str  # "abs+pct" | "abs" | "pct" | "status"
    kind: str  # "memory" | "capacity" | "derived" | "fixed" | "gate" | "timing"
    places: int
    unit: str = ""
    suffix: str = ""

    def show(self, value: Any) -> str:
        number = to_decimal(value)
        if number is None:
            return str(value)
        text = fixed(number, self.places) + self.suffix
        return f"{text} {self.unit}" if self.unit else text

    def show_delta(self, delta: Decimal) -> str:
        text = signed(delta, self.places) + self.suffix
        return f"{text} {self.unit}" if self.unit else text


RULES: dict[str, MetricRule] = {r.key: r for r in (
    MetricRule("min_rank_kv_gib", "abs+pct", "memory", 2, "GiB"),
    MetricRule("kv_cache_tokens", "abs+pct", "capacity", 0),
    MetricRule("max_concurrency", "abs", "derived", 2, suffix="x"),
    MetricRule("peak_activation_gib", "abs+pct", "memory", 2, "GiB"),
    MetricRule("weights_gib", "abs", "fixed", 2, "GiB"),
    MetricRule("preflight", "status", "gate", 0),
    MetricRule("largest_prompt_tokens", "status", "gate", 0),
    MetricRule("largest_ttft_s", "pct", "timing", 3, "s"),
    MetricRule("largest_e2e_s", "pct", "timing", 3, "s"),
    MetricRule("largest_prefill_tok_s", "pct", "timing", 0, "tok/s"),
    MetricRule("largest_decode_tok_s", "pct", "timing", 2, "tok/s"),
    MetricRule("cold_start_s", "pct", "timing", 1, "s"),
)}
"""The per-metric rule table, in row order."""
_GATE_RULE = MetricRule("gate", "status", "gate", 0)
LOAD_RULES: dict[str, tuple[str, MetricRule, float]] = {
    "ttft_p95_s": ("TTFT p95", MetricRule("load_ttft", "pct", "load", 1, "ms"), 1000.0),
    "tpot_p95_s": ("TPOT p95", MetricRule("load_tpot", "pct", "load", 2, "ms"), 1000.0),
    "output_tok_s": ("output throughput", MetricRule("load_output", "pct", "load", 0, "tok/s"), 1.0),
    "goodput_pct": ("goodput (share of requests meeting every SLO)", MetricRule("load_goodput", "abs", "gate", 1,
                                                                                suffix="%"), 1.0),
}
"""Per promoted load level: the figure of the report's ``load`` section, its label, rule and scale."""


@dataclass(frozen=True)
class Metric:
    """One measured value of one arm: what the row shows and what it compares."""

    key: str
    measurement: str
    value: Any
    rule: MetricRule
    passed: bool | None = None
    outcome: str | None = None
    display: str | None = None

    def text(self) -> str:
        return self.display if self.display is not None else self.rule.show(self.value)


def _rank_max(ranks: Iterable[Mapping[str, Any]], key: str) -> float | None:
    values = [r[key] for r in ranks if isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool)]
    return max(values) if values else None


def _outcome(report: Mapping[str, Any], names: Iterable[str]) -> str:
    """The worst outcome over gates with any of ``names``; "absent" when none ran."""
    present = [o for o in (gate_outcome(report, n) for n in names) if o is not GateOutcome.ABSENT]
    return worst_outcome(present).value


def _gate_label(name: str) -> str:
    """The registry's title; a gate it does not know: its name, readable."""
    return title_of(name, name.replace("_", " ").capitalize())


def _gate_metric(report: Mapping[str, Any], name: str) -> Metric:
    records = gates_named(report, name)
    outcome = gate_outcome(report, name)
    summaries = [str(g.get("summary") or "").strip().splitlines()[0] if str(g.get("summary") or "").strip() else ""
                 for g in records]
    if len(records) > 1 and summaries[0] and all(s == summaries[0] for s in summaries):
        display = f"{len(records)} checks × {summaries[0]}"
    elif len(records) > 1:
        passed = sum(1 for g in records if g.get("outcome") == "passed")
        display = f"{passed}/{len(records)} checks passed"
    else:
        display = summaries[0] if summaries and summaries[0] else outcome
    return Metric(f"gate:{name}", _gate_label(name), display, _GATE_RULE,
                  passed=outcome == "passed", outcome=outcome, display=display)


def arm_metrics(report: Mapping[str, Any]) -> dict[str, Metric]:
    """Every comparable metric one report measured, keyed like :data:`RULES` (plus ``gate:NAME``)."""
    engine = report.get("engine") or {}
    ranks = [r for r in engine.get("ranks") or [] if isinstance(r, Mapping)]
    out: dict[str, Metric] = {}

    def add(key: str, measurement: str, value: Any, **extra: Any) -> None:
        if to_decimal(value) is not None:
            out[key] = Metric(key, measurement, value, RULES[key], **extra)

    pool = str(engine.get("kv_pool") or engine.get("device") or "GPU").upper()
    add("min_rank_kv_gib", "Minimum-rank KV allocation", engine.get("min_rank_kv_gib"))
    add("kv_cache_tokens", f"Engine-reported {pool} KV tokens", engine.get("kv_cache_tokens"))
    at = engine.get("concurrency_at_tokens")
    label = f"Reported {short_tokens(at)} concurrency" if isinstance(at, int) else "Reported concurrency"
    add("max_concurrency", label, engine.get("max_concurrency"))
    add("peak_activation_gib", "Peak activation per rank", _rank_max(ranks, "peak_activation_gib"))
    add("weights_gib", "Weight allocation per rank", _rank_max(ranks, "weights_gib"))
    preflight = report.get("preflight") or preflight_summary(report)
    if any(g.get("outcome") != "absent" for g in preflight.get("gates") or []):
        passed = preflight.get("passed") == preflight.get("total")
        out["preflight"] = Metric("preflight", "Functional preflight", int(preflight.get("passed") or 0),
                                  RULES["preflight"], passed=passed, outcome="passed" if passed else "failed",
                                  display=str(preflight.get("summary")))
    top = largest_rung(report)
    if top is not None:
        ladder = _outcome(report, _LADDER_GATES)
        add("largest_prompt_tokens", "Largest actual prompt", top.get("prompt_tokens"),
            passed=None if ladder == "absent" else ladder == "passed", outcome=ladder)
        add("largest_ttft_s", "Largest-request TTFT", top.get("ttft_s"))
        add("largest_e2e_s", "Largest-request E2E", top.get("e2e_s"))
        add("largest_prefill_tok_s", "Largest-request effective prefill", top.get("prefill_tok_s"))
        add("largest_decode_tok_s", "Largest-request decode", top.get("decode_tok_s"))
    add("cold_start_s", "Cold managed start", (report.get("lifecycle") or {}).get("cold_start_s"))
    out.update(load_metrics(report))
    for gate in report.get("gates") or []:
        name = str(gate.get("gate"))
        if name not in _COVERED_GATES and f"gate:{name}" not in out:
            out[f"gate:{name}"] = _gate_metric(report, name)
    return out


def load_metrics(report: Mapping[str, Any]) -> dict[str, Metric]:
    """The promoted levels of a report's ``load`` section, one metric per figure of ``LOAD_RULES``
    (keyed ``load:LEVEL:figure``, the level zero-padded so the rows sort by level)."""
    section = report.get("load")
    out: dict[str, Metric] = {}
    if not isinstance(section, Mapping):
        return out
    for row in section.get("levels") or []:
        level = row.get("level") if isinstance(row, Mapping) else None
        if not isinstance(level, int) or row.get("phase") != "promoted":
            continue
        for figure, (label, rule, scale) in LOAD_RULES.items():
            value = to_decimal(row.get(figure))
            if value is not None:
                key = f"load:{level:05d}:{figure}"
                out[key] = Metric(key, f"Load {level:,} in flight: {label}", float(value) * scale, rule)
    return out


def _status_change(a: Metric, b: Metric) -> str:
    if a.key == "preflight":
        if a.value == b.value and a.display == b.display:
            return "unchanged pass" if a.passed else "unchanged fail"
        word = "regressed" if int(b.value) < int(a.value) else "improved"
        return f"{word}: {a.text()} → {b.text()}"
    if a.key == "largest_prompt_tokens":
        if a.value == b.value:
            if a.passed is None or b.passed is None:
                return "unchanged"
            if a.passed == b.passed:
                return "unchanged pass" if a.passed else "unchanged fail"
            return f"unchanged size; gate {a.outcome} → {b.outcome}"
        return _numeric_change(replace(a, rule=replace(a.rule, rule="abs+pct")), b)[0]
    if a.outcome == b.outcome:
        word = {"passed": "pass", "failed": "fail", "error": "error", "skipped": "skip"}.get(str(a.outcome),
                                                                                          str(a.outcome))
        return f"unchanged {word}" if a.text() == b.text() else f"changed, both {word}"
    worse = _OUTCOME_ORDER.index(str(b.outcome)) < _OUTCOME_ORDER.index(str(a.outcome)) \
        if a.outcome in _OUTCOME_ORDER and b.outcome in _OUTCOME_ORDER else False
    return f"{'regressed' if worse else 'improved'}: {a.outcome} → {b.outcome}"


def _numeric_change(a: Metric, b: Metric) -> tuple[str, Decimal | None, Decimal | None]:
    """(change text, absolute delta, percent) for a numeric rule."""
    da, db = to_decimal(a.value), to_decimal(b.value)
    if da is None or db is None:
        return "n/a", None, None
    delta = db - da
    pct = percent_change(a.value, b.value)
    if delta == 0:
        return "unchanged", delta, pct
    rule = a.rule.rule
    if rule == "abs":
        return a.rule.show_delta(delta), delta, pct
    if rule == "pct":
        return (signed_percent(pct) if pct is not None else a.rule.show_delta(delta)), delta, pct
    if pct is None:
        return a.rule.show_delta(delta), delta, pct
    return f"{a.rule.show_delta(delta)} / {signed_percent(pct)}", delta, pct


def _row(a: Metric, b: Metric, noise_floor: float) -> dict[str, Any]:
    delta: Decimal | None = None
    pct: Decimal | None = None
    if a.rule.rule == "status":
        change = _status_change(a, b)
        if a.key == "largest_prompt_tokens":
            da, db = to_decimal(a.value), to_decimal(b.value)
            delta = None if da is None or db is None else db - da
            pct = percent_change(a.value, b.value)
    else:
        change, delta, pct = _numeric_change(a, b)
    label = None
    if a.rule.kind in ("timing", "load") and pct is not None:
        above = ABOVE_FLOOR if a.rule.kind == "timing" else LOAD_ABOVE_FLOOR
        label = BOUNDED if abs(pct) < Decimal(repr(noise_floor)) else above
    numeric = a.rule.rule != "status" or a.key == "largest_prompt_tokens"
    return {
        "key": a.key,
        "measurement": a.measurement,
        "rule": a.rule.rule,
        "kind": a.rule.kind,
        "unit": a.rule.unit or (a.rule.suffix or None),
        "values": [a.text(), b.text()],
        "control": a.value if numeric else a.text(),
        "candidate": b.value if numeric else b.text(),
        "delta": None if delta is None else float(delta),
        "delta_pct": rounded(pct, 3),
        "change": change,
        "label": label,
    }


def compare_rows(control: Mapping[str, Any], candidate: Mapping[str, Any], *,
                 noise_floor_pct: float = DEFAULT_TOLERANCES.timing_noise_floor_pct
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows for every metric both arms measured, metrics only one arm measured)."""
    a, b = arm_metrics(control), arm_metrics(candidate)
    order = [*RULES, *sorted(k for k in {*a, *b} if k not in RULES)]
    rows: list[dict[str, Any]] = []
    single: list[dict[str, Any]] = []
    for key in order:
        if key in a and key in b:
            measurement_a, measurement_b = a[key].measurement, b[key].measurement
            row = _row(a[key], b[key], noise_floor_pct)
            if measurement_a != measurement_b:
                row["measurement"] = f"{measurement_a} / {measurement_b}"
            rows.append(row)
        elif key in a or key in b:
            metric = a.get(key) or b[key]
            single.append({"key": key, "measurement": metric.measurement,
                           "control": a[key].text() if key in a else None,
                           "candidate": b[key].text() if key in b else None})
    return rows, single
