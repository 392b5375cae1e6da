"""A/B comparison of two arm reports: the seeds' "Measurement | control | candidate | Change" table.

:func:`compare_reports` reads two public reports (control, candidate) and an optional replay
of the control, and returns the comparison record (``schemas/comparison.schema.json``,
``$id`` …/comparison/2). :func:`render_markdown` prints it the way the seeds do. Everything
is built from an allowlist of report fields; an arm report is referenced by its SHA-256.

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
other gates (quality, reasoning,   ``3/3``,            status    "quality/tool summaries where both have them"
concurrency, ...)                  ``2 checks × 3/3``
=================================  ==================  ========  ==========================================

Change cells: abs+pct ``+0.72 GiB / +4.715%`` (tokens have no unit: ``+269,326 / +94.861%``);
abs ``+2.05x``, ``-0.13 GiB``; pct ``-0.461%``; a zero change is ``unchanged``; status rows say
``unchanged pass`` / ``unchanged fail`` or what moved (``regressed: 6/6 → 5/6``). Absolute
changes use the value's precision; percents have three decimals, are relative to the control
and are computed from the values as the reports carry them (never from the rounded display),
half-up. Values are printed as carried: a report's effective prefill is never recomputed.

Controlled variables
--------------------
The two recipes' contents are flattened to dotted paths and diffed. ``name``, ``description``,
``launcher.port``, ``identity.served_model_name`` and ``launcher.docker.container_name`` are
*identity-only* (they keep the evidence of two arms apart); ``pinned``, ``startup.*``,
``requests.*``, ``gates.*`` and ``compare.*`` are *harness* settings (they change how the
arm is measured, not what is served: listed, and a caveat, but not confounding); everything
else is *functional*. More than one functional variable → ``confounded: true``.

Retained findings (never normalized away)
-----------------------------------------
``kv_bytes_vs_tokens``: with kv_cache_dtype, TP/DCP and (when reported) the block size
unchanged, tokens per GiB should not move; beyond ``compare.kv_tokens_per_gib_tolerance_pct``
it is flagged with both figures. ``replay``: the replay must reproduce the control's engine
facts within ``compare.replay_tolerance_pct`` and its gate outcomes exactly, else the baseline
is "not reproducible" (timings are reported, not judged). ``timing_noise``: single-request
timing deltas below ``compare.timing_noise_floor_pct`` are "bounded observation, not a ranking".
Tolerances come from the control recipe's ``compare`` block (:data:`DEFAULT_TOLERANCES` fill
what it lacks).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from . import __version__
from .decision import (
    BOUNDARY,
    gate_outcome,
    gates_named,
    largest_rung,
    ok_rungs,
    preflight_summary,
    recipe_value,
    short_tokens,
)
from .errors import ComparisonError, ReportError
from .evidence import SCHEMA_ID as REPORT_SCHEMA_ID
from .evidence import TOOL_NAME, load_report, sha256_file, validate_report
from .gates import (
    COLD_START_GATE,
    ENGINE_RANKS_GATE,
    IDENTITY_GATE,
    KV_POOL_GATE,
    LADDER_GATE,
    PREFLIGHT_GATES,
    title_of,
)
from .sanitize import Sanitizer

SCHEMA_ID = "https://pytest-vllmqual/schemas/comparison/2"
SCHEMA_VERSION = 2

BOUNDED = "bounded observation, not a ranking"
ABOVE_FLOOR = "above the noise floor, but one request per arm: re-measure before ranking"
STALE_LOG_CLEARED = "a fresh bracketed replay reproduced the baseline, so this is not a stale-log comparison"

IDENTITY_ONLY_PATHS = ("name", "description", "launcher.port", "identity.served_model_name",
                       "launcher.docker.container_name")
"""Recipe keys that only keep two arms' evidence apart; changing them is not an experimental variable."""
HARNESS_SECTIONS = ("pinned", "startup", "requests", "gates", "compare")
"""Top-level recipe sections that change how an arm is measured, not what is served."""
GROUPED_VARIABLES = ("serve.speculative_config",)
"""Recipe objects whose sub-keys together are one variable."""
KV_GEOMETRY_PATHS = ("serve.kv_cache_dtype", "serve.tensor_parallel_size", "serve.decode_context_parallel_size")
"""Recipe keys that change how many tokens one GiB of KV holds (with the engine's block size)."""

ROLES = ("control", "candidate", "replay")
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


@dataclass(frozen=True)
class Targets:
    """The capacity the next qualification must show: an actual prompt above ``prompt_tokens`` and
    a serve that starts with ``max_model_len`` and a reported KV pool of ``context_tokens``.

    Defaults are the seeds' next GPU-only arm (393,216 configured tokens, a prompt above 300,000);
    :meth:`from_reports` takes the arms' recipe thresholds when they set them.
    """

    prompt_tokens: int = 300_000
    context_tokens: int = 393_216
    source: str = "default: the seeds' next qualification arm"

    @classmethod
    def from_reports(cls, reports: Iterable[Mapping[str, Any]]) -> Targets:
        prompts: list[int] = []
        contexts: list[int] = []
        for report in reports:
            value = recipe_value(report, "gates", "capacity", "min_largest_prompt")
            if isinstance(value, int) and not isinstance(value, bool):
                prompts.append(value)
            for path in (("gates", "engine", "min_kv_tokens"), ("gates", "capacity", "min_kv_tokens")):
                value = recipe_value(report, *path)
                if isinstance(value, int) and not isinstance(value, bool):
                    contexts.append(value)
        if not prompts and not contexts:
            return cls()
        default = cls()
        return cls(prompt_tokens=max(prompts) if prompts else default.prompt_tokens,
                   context_tokens=max(contexts) if contexts else default.context_tokens,
                   source="the arms' recipe thresholds" + ("" if prompts and contexts else " and the default"))


# -- numbers ---------------------------------------------------------------------------------------


def _dec(value: Any) -> Decimal | None:
    """A number exactly as the report carries it (floats via their shortest repr)."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        return None


def _fixed(value: Decimal, places: int) -> str:
    """Half-up rounding to ``places`` decimals, with thousands separators."""
    quantum = Decimal(1).scaleb(-places)
    return f"{value.quantize(quantum, rounding=ROUND_HALF_UP):,.{places}f}"


def _signed(value: Decimal, places: int) -> str:
    rounded = value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    sign = "+" if value > 0 else ("-" if value < 0 else "")
    return sign + f"{abs(rounded):,.{places}f}"


def percent_change(control: Any, candidate: Any) -> Decimal | None:
    """(candidate - control) / control × 100, exact; None when the control is zero or missing."""
    a, b = _dec(control), _dec(candidate)
    if a is None or b is None or a == 0:
        return None
    return (b - a) / a * 100


def _pct_text(pct: Decimal) -> str:
    return _signed(pct, 3) + "%"


def _float(value: Decimal | None, places: int) -> float | None:
    return None if value is None else float(value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


# -- metrics ---------------------------------------------------------------------------------------


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
        number = _dec(value)
        if number is None:
            return str(value)
        text = _fixed(number, self.places) + self.suffix
        return f"{text} {self.unit}" if self.unit else text

    def show_delta(self, delta: Decimal) -> str:
        text = _signed(delta, self.places) + self.suffix
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

GATE_RULE = MetricRule("gate", "status", "gate", 0)


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
    outcomes = [gate_outcome(report, n) for n in names]
    present = [o for o in outcomes if o != "absent"]
    if not present:
        return "absent"
    return min(present, key=lambda o: _OUTCOME_ORDER.index(o) if o in _OUTCOME_ORDER else 0)


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
    return Metric(f"gate:{name}", _gate_label(name), display, GATE_RULE,
                  passed=outcome == "passed", outcome=outcome, display=display)


def arm_metrics(report: Mapping[str, Any]) -> dict[str, Metric]:
    """Every comparable metric one report measured, keyed like :data:`RULES` (plus ``gate:NAME``)."""
    engine = report.get("engine") or {}
    ranks = [r for r in engine.get("ranks") or [] if isinstance(r, Mapping)]
    out: dict[str, Metric] = {}

    def add(key: str, measurement: str, value: Any, **extra: Any) -> None:
        if _dec(value) is not None:
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
    for gate in report.get("gates") or []:
        name = str(gate.get("gate"))
        if name not in _COVERED_GATES and f"gate:{name}" not in out:
            out[f"gate:{name}"] = _gate_metric(report, name)
    return out


# -- rows ------------------------------------------------------------------------------------------


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
    da, db = _dec(a.value), _dec(b.value)
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
        return (_pct_text(pct) if pct is not None else a.rule.show_delta(delta)), delta, pct
    if pct is None:
        return a.rule.show_delta(delta), delta, pct
    return f"{a.rule.show_delta(delta)} / {_pct_text(pct)}", delta, pct


def _row(a: Metric, b: Metric, noise_floor: float) -> dict[str, Any]:
    delta: Decimal | None = None
    pct: Decimal | None = None
    if a.rule.rule == "status":
        change = _status_change(a, b)
        if a.key == "largest_prompt_tokens":
            da, db = _dec(a.value), _dec(b.value)
            delta = None if da is None or db is None else db - da
            pct = percent_change(a.value, b.value)
    else:
        change, delta, pct = _numeric_change(a, b)
    label = None
    if a.rule.kind == "timing" and pct is not None:
        label = BOUNDED if abs(pct) < Decimal(repr(noise_floor)) else ABOVE_FLOOR
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
        "delta_pct": _float(pct, 3),
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


# -- controlled variables --------------------------------------------------------------------------


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping):
        if not node and prefix:
            return {prefix: None}
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: node}


def _public_value(value: Any) -> Any:
    """A scalar as is; anything deeper as compact JSON text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def classify_change(path: str) -> str:
    """"identity-only", "harness" or "functional" for a dotted recipe path."""
    if path in IDENTITY_ONLY_PATHS:
        return "identity-only"
    if path.split(".", 1)[0] in HARNESS_SECTIONS:
        return "harness"
    return "functional"


def _variable(path: str) -> str:
    for group in GROUPED_VARIABLES:
        if path == group or path.startswith(group + "."):
            return group
    return path


def _fmt_setting(value: Any, path: str = "") -> str:
    """Recipe values as the seeds write them: 8192 → "8,192" (ports stay "18081")."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if path.endswith("port") else f"{value:,}"
    if value is None:
        return "unset"
    return str(_public_value(value))


def controlled_variables(control: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, Any]:
    """Diff the two recipes' contents: what changed, classified; confounded when >1 functional variable."""
    a = _flatten((control.get("recipe") or {}).get("content") or {})
    b = _flatten((candidate.get("recipe") or {}).get("content") or {})
    changed = []
    for path in sorted({*a, *b}):
        if a.get(path) != b.get(path):
            changed.append({"path": path, "control": _public_value(a.get(path)),
                            "candidate": _public_value(b.get(path)), "kind": classify_change(path)})
    functional = sorted({_variable(c["path"]) for c in changed if c["kind"] == "functional"})
    identity_only = [c["path"] for c in changed if c["kind"] == "identity-only"]
    harness = [c["path"] for c in changed if c["kind"] == "harness"]
    confounded = len(functional) > 1
    if not functional:
        summary = "No functional variable changed: the arms are functionally identical (a repeat, not an A/B)."
    elif not confounded:
        only = next(c for c in changed if _variable(c["path"]) == functional[0])
        detail = (f" ({_fmt_setting(only['control'], only['path'])} → {_fmt_setting(only['candidate'], only['path'])})"
                  if only["path"] == functional[0] else "")
        summary = f"Only {functional[0]} changed functionally{detail}."
    else:
        summary = (f"{len(functional)} functional variables changed ({', '.join(functional)}): the comparison is "
                   "confounded and no change is attributed to a single variable.")
    if identity_only:
        summary += f" {', '.join(identity_only)} changed solely to preserve evidence identity."
    if harness:
        summary += f" Harness settings changed: {', '.join(harness)}."
    return {"changed": changed, "functional": functional, "identity_only": identity_only, "harness": harness,
            "confounded": confounded, "summary": summary}


# -- consistency findings --------------------------------------------------------------------------


def _finding(finding_id: str, status: str, summary: str, figures: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"id": finding_id, "status": status, "retained": True, "summary": summary,
            "figures": {k: _public_value(v) for k, v in (figures or {}).items()}}


def _cache_value(report: Mapping[str, Any], key: str) -> Any:
    cache = (report.get("engine") or {}).get("cache_config") or {}
    return cache.get(key) if isinstance(cache, Mapping) else None


def _change_word(pct: Decimal) -> str:
    return "rose" if pct > 0 else ("fell" if pct < 0 else "did not move")


def kv_consistency(control: Mapping[str, Any], candidate: Mapping[str, Any], tolerance_pct: float,
                   changes: Mapping[str, Any]) -> dict[str, Any]:
    """KV bytes against KV tokens: with the cache geometry unchanged, tokens per GiB must hold still."""
    ea, eb = control.get("engine") or {}, candidate.get("engine") or {}
    gib_a, gib_b = ea.get("min_rank_kv_gib"), eb.get("min_rank_kv_gib")
    tok_a, tok_b = ea.get("kv_cache_tokens"), eb.get("kv_cache_tokens")
    ga, gb, ta, tb = (_dec(v) for v in (gib_a, gib_b, tok_a, tok_b))
    if ga is None or gb is None or ta is None or tb is None or not ga or not gb:
        return _finding("kv_bytes_vs_tokens", "not_measured",
                        "KV bytes vs KV tokens: not checked; an arm lacks the minimum-rank KV GiB or the "
                        "engine-reported KV tokens.")
    geometry = [c for c in changes.get("changed") or [] if c["path"] in KV_GEOMETRY_PATHS]
    block_a, block_b = _cache_value(control, "block_size"), _cache_value(candidate, "block_size")
    dtype_a, dtype_b = _cache_value(control, "cache_dtype"), _cache_value(candidate, "cache_dtype")
    if block_a is not None and block_b is not None and block_a != block_b:
        geometry.append({"path": "engine.cache_config.block_size", "control": block_a, "candidate": block_b})
    if dtype_a is not None and dtype_b is not None and dtype_a != dtype_b:
        geometry.append({"path": "engine.cache_config.cache_dtype", "control": dtype_a, "candidate": dtype_b})
    gib_pct = percent_change(gib_a, gib_b)
    tok_pct = percent_change(tok_a, tok_b)
    per_a, per_b = ta / ga, tb / gb
    per_pct = (per_b - per_a) / per_a * 100
    assert gib_pct is not None and tok_pct is not None
    headline = f"{_pct_text(gib_pct)} KV bytes vs {_pct_text(tok_pct)} reported tokens"
    dtype = recipe_value(control, "serve", "kv_cache_dtype") or dtype_a or "auto"
    figures = {
        "control_kv_gib": gib_a, "candidate_kv_gib": gib_b, "kv_gib_change_pct": _float(gib_pct, 3),
        "control_kv_tokens": tok_a, "candidate_kv_tokens": tok_b, "kv_tokens_change_pct": _float(tok_pct, 3),
        "control_tokens_per_gib": _float(per_a, 1), "candidate_tokens_per_gib": _float(per_b, 1),
        "tokens_per_gib_change_pct": _float(per_pct, 3), "tolerance_pct": tolerance_pct,
        "kv_cache_dtype": str(dtype), "block_size": block_a if block_a == block_b else None,
        "headline": headline, "kv_gib_change": _pct_text(gib_pct), "kv_tokens_change": _pct_text(tok_pct),
    }
    if geometry:
        moved = ", ".join(f"{g['path']} {_fmt_setting(g['control'], g['path'])} → "
                          f"{_fmt_setting(g['candidate'], g['path'])}"
                          for g in geometry)
        return _finding("kv_bytes_vs_tokens", "not_applicable",
                        f"KV bytes vs KV tokens: {headline}; the cache geometry changed ({moved}), so tokens per "
                        "GiB is expected to move and is not judged.", figures)
    per_text = (f"tokens per GiB of the minimum rank moved {_pct_text(per_pct)} "
                f"({_fixed(per_a, 1)} → {_fixed(per_b, 1)})")
    block = (f"block size {block_a} unchanged" if block_a is not None and block_a == block_b
             else "block size not reported")
    if abs(per_pct) <= Decimal(repr(tolerance_pct)):
        return _finding("kv_bytes_vs_tokens", "consistent",
                        f"KV bytes vs KV tokens: consistent; {per_text}, within the {tolerance_pct:g}% tolerance "
                        f"(kv_cache_dtype {dtype} unchanged, {block}).", figures)
    only = " only" if abs(gib_pct) < abs(tok_pct) else ""
    summary = (
        f"KV bytes vs KV tokens: {headline}. The minimum-rank KV allocation {_change_word(gib_pct)}{only} "
        f"{_pct_text(abs(gib_pct)).lstrip('+')} ({_fixed(ga, 2)} → {_fixed(gb, 2)} GiB) while the "
        f"engine-reported KV tokens {_change_word(tok_pct)} {_pct_text(abs(tok_pct)).lstrip('+')} "
        f"({_fixed(ta, 0)} → {_fixed(tb, 0)}); {per_text}, beyond the {tolerance_pct:g}% tolerance, "
        f"with kv_cache_dtype {dtype} unchanged ({block}). Cache geometry or engine accounting remains "
        "unresolved; the mismatch is retained explicitly rather than normalized away.")
    return _finding("kv_bytes_vs_tokens", "flagged", summary, figures)


def _parse_utc(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def replay_check(control: Mapping[str, Any], replay: Mapping[str, Any], candidate: Mapping[str, Any],
                 tolerances: Tolerances) -> tuple[dict[str, Any], dict[str, Any]]:
    """(replay section, replay finding): does the replay reproduce the control?

    Engine facts must agree within the replay tolerance, gate outcomes and the largest actual
    prompt exactly (within the tolerance for the prompt size); timings are reported only.
    """
    rows, _single = compare_rows(control, replay, noise_floor_pct=tolerances.timing_noise_floor_pct)
    tolerance = Decimal(repr(tolerances.replay_tolerance_pct))
    checks = []
    for row in rows:
        if row["kind"] == "timing":
            continue
        if row["rule"] == "status" and row["key"] != "largest_prompt_tokens":
            within = row["change"].startswith("unchanged") or row["change"].startswith("changed, both pass")
        elif row["key"] == "largest_prompt_tokens":
            pct = _dec(row["delta_pct"])
            within = row["change"].startswith("unchanged pass") or row["change"] == "unchanged" or (
                pct is not None and abs(pct) <= tolerance and "fail" not in row["change"])
        else:
            pct = _dec(row["delta_pct"])
            within = row["change"] == "unchanged" or (pct is not None and abs(pct) <= tolerance)
        checks.append({"key": row["key"], "measurement": row["measurement"], "control": row["values"][0],
                       "replay": row["values"][1], "change": row["change"], "within": within})
    recipe = controlled_variables(control, replay)
    timing = [f"{r['measurement']} {r['change']}" for r in rows if r["kind"] == "timing"]
    problems = [f"{c['measurement']} {c['control']} → {c['replay']} ({c['change']})" for c in checks if not c["within"]]
    if recipe["functional"]:
        problems.insert(0, "the replay's recipe differs functionally from the control's ("
                        + ", ".join(recipe["functional"]) + ")")
    if not checks:
        problems.append("the replay shares no engine fact or gate with the control")
    start_c = _parse_utc((control.get("run") or {}).get("started_utc"))
    start_b = _parse_utc((candidate.get("run") or {}).get("started_utc"))
    start_r = _parse_utc((replay.get("run") or {}).get("started_utc"))
    bracketed = bool(start_c and start_b and start_r and start_c <= start_b <= start_r)
    reproduced = not problems
    section = {
        "reproduced": reproduced,
        "bracketed": bracketed,
        "tolerance_pct": tolerances.replay_tolerance_pct,
        "checks": checks,
        "timings": timing,
        "problems": problems,
    }
    figures: dict[str, Any] = {"tolerance_pct": tolerances.replay_tolerance_pct, "checked": len(checks),
                               "bracketed": bracketed}
    deviations = [abs(_dec(r["delta_pct"]) or Decimal(0)) for r in rows
                  if r["kind"] != "timing" and r["rule"] != "status" and r["delta_pct"] is not None]
    if deviations:
        figures["largest_engine_deviation_pct"] = _float(max(deviations), 3)
    if reproduced:
        prefix = STALE_LOG_CLEARED if bracketed else (
            "a replay reproduced the baseline (not bracketed: it did not run after the candidate), so this is "
            "not a stale-log comparison")
        detail = f"{len(checks)} engine facts and gates within {tolerances.replay_tolerance_pct:g}%"
        if timing:
            detail += f"; replay timings (reported, not judged): {', '.join(timing)}"
        return section, _finding("replay", "reproduced", f"{prefix}: {detail}.", figures)
    return section, _finding(
        "replay", "not_reproducible",
        f"the baseline is not reproducible: the replay of the control differs beyond the "
        f"{tolerances.replay_tolerance_pct:g}% replay tolerance: {'; '.join(problems)}.", figures)


def timing_noise(rows: Iterable[Mapping[str, Any]], noise_floor_pct: float) -> dict[str, Any]:
    """Single-request timing deltas against the noise floor."""
    timing = [r for r in rows if r["kind"] == "timing" and r["delta_pct"] is not None]
    if not timing:
        return _finding("timing_noise", "not_measured", "no timing was measured in both arms.")
    below = [r for r in timing if r["label"] == BOUNDED]
    above = [r for r in timing if r["label"] != BOUNDED]
    figures = {"noise_floor_pct": noise_floor_pct, "below_floor": len(below), "above_floor": len(above)}
    parts = []
    if below:
        parts.append(f"single-request timing deltas below the {noise_floor_pct:g}% noise floor are bounded "
                     "observations, not a ranking: "
                     + ", ".join(f"{r['measurement']} {r['change']}" for r in below))
    if above:
        parts.append(f"above the {noise_floor_pct:g}% noise floor from one request per arm (re-measure before "
                     "ranking): " + ", ".join(f"{r['measurement']} {r['change']}" for r in above))
    summary = "; ".join(parts) + "; one request per target supports a capacity comparison, not a performance ranking."
    return _finding("timing_noise", "above_noise_floor" if above else "bounded", summary, figures)


# -- the decision ----------------------------------------------------------------------------------


def _verdict_of(report: Mapping[str, Any]) -> str:
    return str((report.get("decision") or {}).get("verdict") or "no-promotion")


def _became_ready(report: Mapping[str, Any]) -> bool:
    """The arm's server passed readiness (managed) or answered as found (direct-only)."""
    lifecycle = report.get("lifecycle") or {}
    if lifecycle.get("startup_status") is not None:
        return lifecycle.get("startup_status") == "ready"
    return (report.get("run") or {}).get("status") == "complete"


def _largest_prompt(reports: Iterable[Mapping[str, Any]]) -> int | None:
    sizes = [int(r["prompt_tokens"]) for report in reports for r in ok_rungs(report)]
    return max(sizes) if sizes else None


def _max_model_len(report: Mapping[str, Any]) -> int | None:
    value = recipe_value(report, "serve", "max_model_len")
    if not isinstance(value, int):
        value = ((report.get("identity") or {}).get("expected") or {}).get("max_model_len")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _concurrency_proven(reports: Iterable[Mapping[str, Any]]) -> int:
    """The most simultaneous requests a passed concurrency gate showed (1 when none did)."""
    best = 1
    for report in reports:
        for gate in gates_named(report, "concurrency"):
            n = (gate.get("measurements") or {}).get("requests")
            if gate.get("outcome") == "passed" and isinstance(n, int) and n > best:
                best = n
    return best


def _regressions(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    out = []
    for row in rows:
        change = str(row["change"])
        if row["rule"] == "status" and (change.startswith("regressed") or "→ failed" in change
                                        or "→ error" in change):
            out.append(f"{row['measurement']}: {change}")
        elif row["key"] == "largest_prompt_tokens" and (row["delta"] or 0) < 0:
            out.append(f"{row['measurement']}: {row['values'][0]} → {row['values'][1]}")
    return out


def _size_word(pct: float | None) -> str:
    if pct is None:
        return "change"
    if 90 <= pct < 100:
        return "near-doubling"
    if 100 <= pct < 101:
        return "doubling"
    return f"{pct:+.3f}% change"


def decide_comparison(control: Mapping[str, Any], candidate: Mapping[str, Any], replay: Mapping[str, Any] | None,
                      rows: list[dict[str, Any]], variables: Mapping[str, Any], findings: list[dict[str, Any]],
                      replay_section: Mapping[str, Any] | None, targets: Targets) -> dict[str, Any]:
    """The comparison's decision block: verdict, proves / does not prove, caveats (all generated)."""
    by_id = {f["id"]: f for f in findings}
    by_key = {r["key"]: r for r in rows}
    cand_verdict, ctrl_verdict = _verdict_of(candidate), _verdict_of(control)
    regressions = _regressions(rows)
    reasons: list[str] = []
    if cand_verdict == "no-promotion":
        own = (candidate.get("decision") or {}).get("reasons") or []
        verdict = "no-promotion"
        reasons.append("the candidate arm's own decision is no-promotion" + (f": {own[0]}" if own else ""))
    else:
        blockers = []
        if cand_verdict != "candidate":
            own = (candidate.get("decision") or {}).get("reasons") or []
            blockers.append(f"the candidate arm's own evidence is {cand_verdict}" + (f" ({own[0]})" if own else ""))
        if ctrl_verdict == "no-promotion":
            blockers.append("the control arm itself is no-promotion")
        if variables["confounded"]:
            blockers.append("the comparison is confounded: " + ", ".join(variables["functional"]))
        if not variables["functional"]:
            blockers.append("no functional variable changed: a repeat, not an A/B")
        if replay is None:
            blockers.append("no bracketed replay of the control ran")
        elif replay_section is not None and not replay_section["reproduced"]:
            blockers.append("the baseline is not reproducible")
        if regressions:
            blockers.append("the candidate regressed against the control: " + "; ".join(regressions))
        if blockers:
            verdict = "healthy" if cand_verdict == "candidate" and regressions else cand_verdict
            reasons.append("not a priority-challenger: " + "; ".join(blockers))
        else:
            verdict = "priority-challenger"
            reasons.append("a managed, verified candidate changed one functional variable, kept every gate of "
                           "the control, and a bracketed replay reproduced the baseline")
    summary = ("no-promotion" if verdict == "no-promotion" else
               "healthy and direct-only; no-promotion" if verdict == "direct-only" else f"{verdict}; no-promotion")

    proves: list[str] = []
    functional = variables["functional"]
    kv = by_id.get("kv_bytes_vs_tokens")
    kv_flagged = bool(kv and kv["status"] == "flagged")
    # A flagged KV mismatch keeps the token count (and the concurrency derived from it) out of
    # what the comparison proves: the engine reported it, but its cause is unresolved.
    kinds = ("memory", "fixed") if kv_flagged else ("memory", "fixed", "derived", "capacity")
    memory_rows = [r for r in rows if r["kind"] in kinds and r["change"] not in ("unchanged", "n/a")]
    moved = "; ".join(f"{r['measurement']} {r['values'][0]} → {r['values'][1]} ({r['change']})" for r in memory_rows)
    if len(functional) == 1 and memory_rows:
        proves.append(f"with only {functional[0]} changed functionally, the engine's own facts moved: {moved}")
    elif memory_rows:
        proves.append(f"the engine's own facts differ between the arms (not attributed to one variable): {moved}")
    kept = [r for r in rows if r["rule"] == "status" and str(r["change"]).startswith("unchanged pass")]
    if kept and not regressions:
        proves.append("the candidate kept the control's bounded gates: "
                      + ", ".join(f"{r['measurement']} {r['values'][1]}" for r in kept))
    replay_finding = by_id.get("replay")
    if replay_finding and replay_finding["status"] == "reproduced":
        proves.append("the control is reproducible under the current runtime: "
                      + str(replay_finding["summary"]).split(":", 1)[0])

    does_not: list[str] = []
    arms = [control, candidate, *([replay] if replay is not None else [])]
    largest = _largest_prompt(arms)
    if largest is None or largest <= targets.prompt_tokens:
        does_not.append(f"a request above {short_tokens(targets.prompt_tokens)} prompt tokens"
                        + (f" (the largest measured in any arm was {largest:,})" if largest is not None
                           else " (no arm completed a capacity rung)"))
    # A startup is proven by the arm having become ready with the configured context and a large
    # enough reported pool; a death later in the run (a ladder rung) does not undo it.
    started = [r for r in arms if (_max_model_len(r) or 0) >= targets.context_tokens
               and ((r.get("engine") or {}).get("kv_cache_tokens") or 0) >= targets.context_tokens
               and _became_ready(r)]
    if not started:
        does_not.append(f"{short_tokens(targets.context_tokens)} startup (no arm was configured with "
                        f"max_model_len ≥ {targets.context_tokens:,} and a reported KV pool ≥ "
                        f"{targets.context_tokens:,} tokens)")
    concurrency = _concurrency_proven([candidate])
    does_not.append("concurrency beyond one active request" if concurrency <= 1
                    else f"concurrency beyond {concurrency} active requests")
    quality_both = [r for r in rows if r["key"].startswith("gate:quality")]
    does_not.append("broad task-quality equivalence" + (
        ": bounded repeated checks are not a benchmark" if quality_both else
        ": the arms did not both run the repeated quality checks"))
    if kv_flagged and kv:
        does_not.append(f"a causal explanation for the {_size_word(kv['figures'].get('kv_tokens_change_pct'))} "
                        "of reported KV tokens")
    if replay is None:
        does_not.append("that the control is reproducible: no bracketed replay ran")
    elif replay_finding and replay_finding["status"] == "not_reproducible":
        does_not.append("a reproducible baseline: the replay did not reproduce the control")
    if (candidate.get("run") or {}).get("mode") == "direct-only":
        does_not.append("a cold start or a clean teardown of the candidate: it was used direct-only")

    caveats: list[str] = []
    kv_row = by_key.get("kv_cache_tokens")
    ctx_lens = [v for v in (_max_model_len(control), _max_model_len(candidate)) if v is not None]
    if kv_row and not started and isinstance(kv_row["candidate"], int) and kv_row["candidate"] >= targets.context_tokens:
        text = (f"the reported KV pool of {kv_row['candidate']:,} tokens is not yet a "
                f"{short_tokens(targets.context_tokens)} capacity result")
        clauses = []
        if kv_flagged and kv:
            pct = kv["figures"].get("kv_gib_change_pct")
            clauses.append(f"the KV byte allocation {'rose only' if (pct or 0) > 0 else 'moved'} "
                           f"{abs(pct or 0):.3f}%")
        if ctx_lens and max(ctx_lens) < targets.context_tokens:
            clauses.append(f"this A/B retained a {max(ctx_lens):,}-token configured context")
        caveats.append(text + (": " + ", and ".join(clauses) if clauses else ""))
    if kv_flagged and kv:
        caveats.append(f"the mismatch between {kv['figures'].get('kv_gib_change')} KV bytes and "
                       f"{kv['figures'].get('kv_tokens_change')} reported tokens is retained explicitly rather than "
                       "normalized away")
    timing = by_id.get("timing_noise")
    if timing and timing["status"] in ("bounded", "above_noise_floor"):
        caveats.append("one request per target supports a capacity comparison, not a performance ranking; "
                       "small timing deltas are bounded observations")
    if variables["confounded"]:
        caveats.append(f"confounded: {len(functional)} functional variables changed ({', '.join(functional)})")
    if variables["harness"]:
        caveats.append("the arms were measured with different harness settings: " + ", ".join(variables["harness"]))
    prompt_row = by_key.get("largest_prompt_tokens")
    if prompt_row and prompt_row["delta"]:
        caveats.append(f"the largest requests differ in size ({prompt_row['values'][0]} vs "
                       f"{prompt_row['values'][1]} tokens): the timing rows compare different prompts")
    if replay_finding and replay_finding["status"] == "not_reproducible":
        caveats.append(str(replay_finding["summary"]))
    elif replay_section is not None and not replay_section.get("bracketed"):
        caveats.append("the replay did not run after the candidate (not bracketed A, B, A)")
    return {"verdict": verdict, "summary": summary, "scope": "A/B comparison", "reasons": reasons,
            "proves": proves, "does_not_prove": does_not, "caveats": caveats, "boundary": BOUNDARY}


# -- the record ------------------------------------------------------------------------------------


def report_digest(report: Mapping[str, Any]) -> str:
    """SHA-256 of a report's canonical JSON (sorted keys, compact), for reports held in memory."""
    text = json.dumps(report, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _arm_ref(report: Mapping[str, Any], role: str, digest: str | None) -> dict[str, Any]:
    run = report.get("run") or {}
    recipe = report.get("recipe") or {}
    return {
        "role": role,
        "arm": str(run.get("arm") or ""),
        "run_id": str(run.get("id") or ""),
        "recipe": str(recipe.get("name") or ""),
        "recipe_sha256": str(recipe.get("sha256") or ""),
        "report_sha256": digest or report_digest(report),
        "hashed": "file" if digest else "canonical-json",
        "started_utc": run.get("started_utc"),
        "mode": run.get("mode"),
        "status": run.get("status"),
        "verdict": _verdict_of(report),
    }


def _arm_labels(control: Mapping[str, Any], candidate: Mapping[str, Any],
                variables: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """Column headers ("8,192 control", "4,096 candidate") and, for the title, the changed variable.

    With exactly one functional scalar change the headers name its two values (the seeds'
    style); otherwise they name the arms.
    """
    functional = variables["functional"]
    if len(functional) == 1:
        change = next((c for c in variables["changed"] if c["path"] == functional[0]), None)
        if change is not None and all(isinstance(change[k], int | float | str) and not isinstance(change[k], bool)
                                      for k in ("control", "candidate")):
            a, b = _fmt_setting(change["control"], change["path"]), _fmt_setting(change["candidate"], change["path"])
            return [f"{a} control", f"{b} candidate"], f"{functional[0].rsplit('.', 1)[-1]} {a} → {b}"
    names = [str((r.get("run") or {}).get("arm") or (r.get("recipe") or {}).get("name")) for r in (control, candidate)]
    if names[0] == names[1]:
        names = [str((r.get("run") or {}).get("id")) for r in (control, candidate)]
    return [f"{names[0]} control", f"{names[1]} candidate"], None


def _check_report(report: Any, role: str) -> None:
    if not isinstance(report, Mapping):
        raise ComparisonError(f"the {role} is not a report object (got {type(report).__name__})")
    if report.get("schema") == SCHEMA_ID:
        raise ComparisonError(f"the {role} is a comparison record, not an arm report")
    if report.get("schema") != REPORT_SCHEMA_ID:
        raise ComparisonError(f"the {role} is not a vllmqual arm report: schema {report.get('schema')!r}, expected "
                              f"{REPORT_SCHEMA_ID}")


def compare_reports(control: Mapping[str, Any], candidate: Mapping[str, Any], *,
                    replay: Mapping[str, Any] | None = None, targets: Targets | None = None,
                    report_hashes: Mapping[str, str] | None = None,
                    sanitizer: Sanitizer | None = None) -> dict[str, Any]:
    """The comparison record of two arm reports (and a replay of the control), schema-valid.

    ``targets`` defaults to :meth:`Targets.from_reports`; ``report_hashes`` maps ``control`` /
    ``candidate`` / ``replay`` to the SHA-256 of each report file (the CLI passes them; without
    them each report is hashed as canonical JSON). ``sanitizer`` scrubs every string once more.
    """
    for role, report in (("control", control), ("candidate", candidate), ("replay", replay)):
        if report is not None:
            _check_report(report, role)
    hashes = dict(report_hashes or {})
    if replay is not None and (hashes.get("replay") or report_digest(replay)) == (
            hashes.get("control") or report_digest(control)):
        raise ComparisonError("the replay is the control's own report; a replay must be a fresh run of the control")
    tolerances = Tolerances.from_report(control)
    arms = [control, candidate, *([replay] if replay is not None else [])]
    targets = targets or Targets.from_reports(arms)
    rows, single = compare_rows(control, candidate, noise_floor_pct=tolerances.timing_noise_floor_pct)
    variables = controlled_variables(control, candidate)
    findings = [kv_consistency(control, candidate, tolerances.kv_tokens_per_gib_tolerance_pct, variables)]
    replay_section: dict[str, Any] | None = None
    if replay is not None:
        replay_section, replay_finding = replay_check(control, replay, candidate, tolerances)
        findings.append(replay_finding)
    else:
        findings.append(_finding("replay", "absent", "no replay of the control ran: the baseline may be a stale log."))
    findings.append(timing_noise(rows, tolerances.timing_noise_floor_pct))
    decision = decide_comparison(control, candidate, replay, rows, variables, findings, replay_section, targets)
    labels, changed_text = _arm_labels(control, candidate, variables)
    notes = [f"{r['measurement']}: {r['label']} ({r['change']} against the "
             f"{tolerances.timing_noise_floor_pct:g}% noise floor)" for r in rows if r["label"]]
    notes += [f"measured in one arm only: {s['measurement']} (control {s['control'] or 'not measured'}, "
              f"candidate {s['candidate'] or 'not measured'})" for s in single]
    names = [(r.get("recipe") or {}).get("name") for r in (control, candidate)]
    title = f"A/B: {names[0]} vs {names[1]}" + (f" ({changed_text})" if changed_text else "")
    sanitizer = sanitizer or Sanitizer()
    body = sanitizer.scrub_obj({
        "title": title,
        "arms": labels,
        "control": _arm_ref(control, "control", hashes.get("control")),
        "candidate": _arm_ref(candidate, "candidate", hashes.get("candidate")),
        "replay": _arm_ref(replay, "replay", hashes.get("replay")) if replay is not None else None,
        "tolerances": {"timing_noise_floor_pct": tolerances.timing_noise_floor_pct,
                       "replay_tolerance_pct": tolerances.replay_tolerance_pct,
                       "kv_tokens_per_gib_tolerance_pct": tolerances.kv_tokens_per_gib_tolerance_pct,
                       "source": tolerances.source},
        "targets": {"prompt_tokens": targets.prompt_tokens, "context_tokens": targets.context_tokens,
                    "source": targets.source},
        "rows": rows,
        "not_compared": single,
        "controlled_variables": variables,
        "findings": findings,
        "replay_check": replay_section,
        "decision": decision,
        "notes": notes,
    })
    comparison: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": TOOL_NAME, "version": __version__},
        **body,
        "verdict": body["decision"]["verdict"],
        "redactions": sanitizer.redaction_summary(),
    }
    validate_comparison(comparison)
    return comparison


# -- markdown --------------------------------------------------------------------------------------


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(comparison: Mapping[str, Any]) -> str:
    """The comparison as markdown: the seeds' table, then variables, findings and the decision."""
    arms = [str(a) for a in comparison.get("arms") or ["control", "candidate"]]
    lines = [f"## {_md(comparison.get('title') or 'A/B comparison')}", "",
             f"| Measurement | {' | '.join(_md(a) for a in arms)} | Change |",
             "|---|" + "---|" * len(arms) + "---|"]
    for row in comparison.get("rows") or []:
        lines.append(f"| {_md(row['measurement'])} | {' | '.join(_md(v) for v in row['values'])} | "
                     f"{_md(row['change'])} |")
    lines.append("")
    for note in comparison.get("notes") or []:
        lines.append(f"- {note}")
    variables = comparison.get("controlled_variables") or {}
    lines += ["", "### Controlled variables", "", str(variables.get("summary") or "")]
    for change in variables.get("changed") or []:
        lines.append(f"- {change['kind']}: `{change['path']}` {_fmt_setting(change['control'], change['path'])} → "
                     f"{_fmt_setting(change['candidate'], change['path'])}")
    lines.append(f"- confounded: {'yes' if variables.get('confounded') else 'no'}")
    lines += ["", "### Retained findings", ""]
    for finding in comparison.get("findings") or []:
        lines.append(f"- **{finding['id']}** ({finding['status']}): {finding['summary']}")
    decision = comparison.get("decision") or {}
    lines += ["", f"### Decision: {decision.get('verdict')} ({decision.get('summary')})", ""]
    lines += [f"- {r}" for r in decision.get("reasons") or []]
    for title, key in (("What this proves", "proves"), ("What it does not prove", "does_not_prove"),
                       ("Caveats", "caveats")):
        items = decision.get(key) or []
        lines += ["", f"**{title}**", ""] + ([f"- {i}" for i in items] or ["- nothing"])
    lines += ["", f"_{decision.get('boundary') or BOUNDARY}_"]
    refs = [comparison.get(r) for r in ROLES if comparison.get(r)]
    lines += ["", "Reports: " + "; ".join(f"{ref['role']} {ref['recipe']} sha256 {ref['report_sha256']}"
                                          for ref in refs if isinstance(ref, Mapping))]
    return "\n".join(lines) + "\n"


# -- schema, loading, writing ----------------------------------------------------------------------


@lru_cache(maxsize=1)
def comparison_schema() -> dict[str, Any]:
    """The comparison JSON Schema shipped in the package (draft 2020-12, ``$id`` …/comparison/2)."""
    text = resources.files("pytest_vllmqual").joinpath("schemas/comparison.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def comparison_errors(comparison: Any) -> list[str]:
    """Every schema violation as "key.path: message"; empty when valid."""
    validator = jsonschema.Draft202012Validator(comparison_schema())
    errors = sorted(validator.iter_errors(comparison), key=lambda e: (len(list(e.absolute_path)), e.message))
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}" for e in errors]


def validate_comparison(comparison: Any, *, where: str = "comparison") -> None:
    """Raise ComparisonError naming the first violation when the record does not match its schema."""
    problems = comparison_errors(comparison)
    if problems:
        more = f" ({len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ComparisonError(f"{where} does not match the comparison schema {SCHEMA_ID}: {problems[0]}{more}")


def load_arm_report(path: Path, role: str = "report") -> dict[str, Any]:
    """Read one arm report for comparison; one-line errors for missing, not a report, or schema mismatch."""
    path = Path(path)
    if not path.is_file():
        raise ComparisonError(f"the {role} {path} does not exist. Fix: pass the report.json an arm run wrote.")
    report = load_report(path, validate=False)
    schema = report.get("schema")
    if schema == SCHEMA_ID:
        raise ComparisonError(f"the {role} {path} is a comparison record, not an arm report")
    if schema != REPORT_SCHEMA_ID:
        found = f"schema {schema!r}" if schema is not None else "no 'schema' key"
        raise ComparisonError(f"the {role} {path} is not a vllmqual arm report ({found}; expected {REPORT_SCHEMA_ID})")
    try:
        validate_report(report, where=f"the {role} {path}")
    except ReportError as exc:
        raise ComparisonError(str(exc)) from None
    return report


def compare_files(control: Path, candidate: Path, *, replay: Path | None = None,
                  targets: Targets | None = None) -> dict[str, Any]:
    """:func:`compare_reports` on report files; each report is referenced by its file's SHA-256."""
    paths = {"control": Path(control), "candidate": Path(candidate), **({"replay": Path(replay)} if replay else {})}
    reports = {role: load_arm_report(path, role) for role, path in paths.items()}
    hashes = {role: sha256_file(path) for role, path in paths.items()}
    if hashes["control"] == hashes["candidate"]:
        raise ComparisonError(f"the control and the candidate are the same report ({paths['control']}, "
                              f"{paths['candidate']}). Fix: pass two different arms.")
    return compare_reports(reports["control"], reports["candidate"], replay=reports.get("replay"),
                           targets=targets, report_hashes=hashes)


def write_comparison_atomic(comparison: Mapping[str, Any], path: Path) -> Path:
    """Validate, then write atomically (temp file, fsync, rename)."""
    from .evidence import write_text_atomic

    validate_comparison(comparison, where=f"comparison {path}")
    return write_text_atomic(json.dumps(comparison, indent=2, ensure_ascii=False) + "\n", Path(path),
                             what="comparison")

