"""The A/B comparison's retained findings: KV bytes against tokens, the replay, the timing noise.

Retained findings (never normalized away)
-----------------------------------------
``kv_bytes_vs_tokens``: with kv_cache_dtype, TP/DCP and (when reported) the block size
unchanged, tokens per GiB should not move; beyond ``compare.kv_tokens_per_gib_tolerance_pct``
it is flagged with both figures. ``replay``: the replay must reproduce the control's engine
facts within ``compare.replay_tolerance_pct`` and its gate outcomes exactly, else the baseline
is "not reproducible" (timings are reported, not judged). ``timing_noise``: single-request
timing deltas below ``compare.timing_noise_floor_pct`` are "bounded observation, not a ranking".
Tolerances come from the control recipe's ``compare`` block (:data:`.rows.DEFAULT_TOLERANCES`
fill what it lacks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from pytest_vllmqual.clock import parse_utc
from pytest_vllmqual.report.number_format import fixed, rounded, signed_percent, to_decimal
from pytest_vllmqual.report.query import recipe_value

from .rows import BOUNDED, Tolerances, compare_rows, percent_change
from .variables import controlled_variables, fmt_setting, public_value

__all__ = ["KV_GEOMETRY_PATHS", "STALE_LOG_CLEARED", "kv_consistency", "replay_check", "retained_finding",
           "timing_noise"]

STALE_LOG_CLEARED = "a fresh bracketed replay reproduced the baseline, so this is not a stale-log comparison"
KV_GEOMETRY_PATHS = ("serve.kv_cache_dtype", "serve.tensor_parallel_size", "serve.decode_context_parallel_size")
"""Recipe keys that change how many tokens one GiB of KV holds (with the engine's block size)."""


def retained_finding(finding_id: str, status: str, summary: str,
                     figures: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One finding of the record: kept whatever its status, its figures as public scalars."""
    return {"id": finding_id, "status": status, "retained": True, "summary": summary,
            "figures": {k: public_value(v) for k, v in (figures or {}).items()}}


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
    ga, gb, ta, tb = (to_decimal(v) for v in (gib_a, gib_b, tok_a, tok_b))
    if ga is None or gb is None or ta is None or tb is None or not ga or not gb:
        return retained_finding("kv_bytes_vs_tokens", "not_measured",
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
    headline = f"{signed_percent(gib_pct)} KV bytes vs {signed_percent(tok_pct)} reported tokens"
    dtype = recipe_value(control, "serve", "kv_cache_dtype") or dtype_a or "auto"
    figures = {
        "control_kv_gib": gib_a, "candidate_kv_gib": gib_b, "kv_gib_change_pct": rounded(gib_pct, 3),
        "control_kv_tokens": tok_a, "candidate_kv_tokens": tok_b, "kv_tokens_change_pct": rounded(tok_pct, 3),
        "control_tokens_per_gib": rounded(per_a, 1), "candidate_tokens_per_gib": rounded(per_b, 1),
        "tokens_per_gib_change_pct": rounded(per_pct, 3), "tolerance_pct": tolerance_pct,
        "kv_cache_dtype": str(dtype), "block_size": block_a if block_a == block_b else None,
        "headline": headline, "kv_gib_change": signed_percent(gib_pct), "kv_tokens_change": signed_percent(tok_pct),
    }
    if geometry:
        moved = ", ".join(f"{g['path']} {fmt_setting(g['control'], g['path'])} → "
                          f"{fmt_setting(g['candidate'], g['path'])}"
                          for g in geometry)
        return retained_finding("kv_bytes_vs_tokens", "not_applicable",
                        f"KV bytes vs KV tokens: {headline}; the cache geometry changed ({moved}), so tokens per "
                        "GiB is expected to move and is not judged.", figures)
    per_text = (f"tokens per GiB of the minimum rank moved {signed_percent(per_pct)} "
                f"({fixed(per_a, 1)} → {fixed(per_b, 1)})")
    block = (f"block size {block_a} unchanged" if block_a is not None and block_a == block_b
             else "block size not reported")
    if abs(per_pct) <= Decimal(repr(tolerance_pct)):
        return retained_finding("kv_bytes_vs_tokens", "consistent",
                        f"KV bytes vs KV tokens: consistent; {per_text}, within the {tolerance_pct:g}% tolerance "
                        f"(kv_cache_dtype {dtype} unchanged, {block}).", figures)
    only = " only" if abs(gib_pct) < abs(tok_pct) else ""
    summary = (
        f"KV bytes vs KV tokens: {headline}. The minimum-rank KV allocation {_change_word(gib_pct)}{only} "
        f"{signed_percent(abs(gib_pct)).lstrip('+')} ({fixed(ga, 2)} → {fixed(gb, 2)} GiB) while the "
        f"engine-reported KV tokens {_change_word(tok_pct)} {signed_percent(abs(tok_pct)).lstrip('+')} "
        f"({fixed(ta, 0)} → {fixed(tb, 0)}); {per_text}, beyond the {tolerance_pct:g}% tolerance, "
        f"with kv_cache_dtype {dtype} unchanged ({block}). Cache geometry or engine accounting remains "
        "unresolved; the mismatch is retained explicitly rather than normalized away.")
    return retained_finding("kv_bytes_vs_tokens", "flagged", summary, figures)


_REPORTED_ONLY = frozenset({"timing", "load"})
"""Row kinds a replay reports but does not judge."""


def replay_check(control: Mapping[str, Any], replay: Mapping[str, Any], candidate: Mapping[str, Any],
                 tolerances: Tolerances) -> tuple[dict[str, Any], dict[str, Any]]:
    """(replay section, replay finding): does the replay reproduce the control?

    Engine facts must agree within the replay tolerance, gate outcomes and the largest actual
    prompt exactly (within the tolerance for the prompt size); timings, the load levels' latency
    and throughput among them, are reported only: they move with machine noise (the load gate's
    pass or fail and each level's goodput are still compared).
    """
    rows, _single = compare_rows(control, replay, noise_floor_pct=tolerances.timing_noise_floor_pct)
    tolerance = Decimal(repr(tolerances.replay_tolerance_pct))
    checks = []
    for row in rows:
        if row["kind"] in _REPORTED_ONLY:
            continue
        if row["rule"] == "status" and row["key"] != "largest_prompt_tokens":
            within = row["change"].startswith("unchanged") or row["change"].startswith("changed, both pass")
        elif row["key"] == "largest_prompt_tokens":
            pct = to_decimal(row["delta_pct"])
            within = row["change"].startswith("unchanged pass") or row["change"] == "unchanged" or (
                pct is not None and abs(pct) <= tolerance and "fail" not in row["change"])
        else:
            pct = to_decimal(row["delta_pct"])
            within = row["change"] == "unchanged" or (pct is not None and abs(pct) <= tolerance)
        checks.append({"key": row["key"], "measurement": row["measurement"], "control": row["values"][0],
                       "replay": row["values"][1], "change": row["change"], "within": within})
    recipe = controlled_variables(control, replay)
    timing = [f"{r['measurement']} {r['change']}" for r in rows if r["kind"] in _REPORTED_ONLY]
    problems = [f"{c['measurement']} {c['control']} → {c['replay']} ({c['change']})" for c in checks if not c["within"]]
    if recipe["functional"]:
        problems.insert(0, "the replay's recipe differs functionally from the control's ("
                        + ", ".join(recipe["functional"]) + ")")
    if not checks:
        problems.append("the replay shares no engine fact or gate with the control")
    start_c = parse_utc((control.get("run") or {}).get("started_utc"))
    start_b = parse_utc((candidate.get("run") or {}).get("started_utc"))
    start_r = parse_utc((replay.get("run") or {}).get("started_utc"))
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
    deviations = [abs(to_decimal(r["delta_pct"]) or Decimal(0)) for r in rows
                  if r["kind"] != "timing" and r["rule"] != "status" and r["delta_pct"] is not None]
    if deviations:
        figures["largest_engine_deviation_pct"] = rounded(max(deviations), 3)
    if reproduced:
        prefix = STALE_LOG_CLEARED if bracketed else (
            "a replay reproduced the baseline (not bracketed: it did not run after the candidate), so this is "
            "not a stale-log comparison")
        detail = f"{len(checks)} engine facts and gates within {tolerances.replay_tolerance_pct:g}%"
        if timing:
            detail += f"; replay timings (reported, not judged): {', '.join(timing)}"
        return section, retained_finding("replay", "reproduced", f"{prefix}: {detail}.", figures)
    return section, retained_finding(
        "replay", "not_reproducible",
        f"the baseline is not reproducible: the replay of the control differs beyond the "
        f"{tolerances.replay_tolerance_pct:g}% replay tolerance: {'; '.join(problems)}.", figures)


def timing_noise(rows: Iterable[Mapping[str, Any]], noise_floor_pct: float) -> dict[str, Any]:
    """Single-request timing deltas against the noise floor."""
    timing = [r for r in rows if r["kind"] == "timing" and r["delta_pct"] is not None]
    if not timing:
        return retained_finding("timing_noise", "not_measured", "no timing was measured in both arms.")
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
    return retained_finding("timing_noise", "above_noise_floor" if above else "bounded", summary, figures)
