"""One recipe on several nodes: do the nodes agree?

Engine facts (KV pool, concurrency, per-rank KV, tokens per GiB, TP seen, vLLM version, the
effective recipe's SHA-256) must agree within the recipe's own tolerance
(``compare.kv_tokens_per_gib_tolerance_pct``, default 1 %); timings (cold start, the largest
prompt's TTFT) beyond its noise floor (``compare.timing_noise_floor_pct``, default 5 %) are
flagged as observations, never as failures. A gate that passed on some nodes and not on others
is a finding. With three or more nodes the one that differs from the others is named; with
two, the difference is reported without blame.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ENGINE_FACTS", "TIMINGS", "compare_nodes"]

ENGINE_FACTS = ("kv_cache_tokens", "max_concurrency", "min_rank_kv_gib", "kv_tokens_per_gib", "tp_size_seen",
                "vllm_version", "recipe_sha256")
TIMINGS = ("cold_start_s", "largest_ttft_s")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _deviates(value: Any, reference: Any, tolerance_pct: float) -> bool:
    if isinstance(value, (int, float)) and isinstance(reference, (int, float)) and not isinstance(value, bool):
        if reference == 0:
            return value != 0
        return abs(float(value) - float(reference)) / abs(float(reference)) * 100 > tolerance_pct
    return bool(value != reference)


def _reference(values: list[Any]) -> Any:
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) == len(values):
        return statistics.median(numbers)
    return max(set(map(str, values)), key=lambda v: sum(1 for x in values if str(x) == v))


def _differ(key: str, rows: Sequence[Mapping[str, Any]], tolerance_pct: float, kind: str) -> dict[str, Any] | None:
    present = [r for r in rows if r.get(key) is not None]
    if len(present) < 2:
        return None
    values = [r[key] for r in present]
    reference = _reference(values)
    if len(present) == 2:
        a, b = present
        if not _deviates(a[key], b[key], tolerance_pct) and not _deviates(b[key], a[key], tolerance_pct):
            return None
        return {"kind": kind, "key": key, "odd_one_out": None, "tolerance_pct": tolerance_pct,
                "values": {r["node"]: r[key] for r in present},
                "text": f"{key} differs between {a['node']} ({_fmt(a[key])}) and {b['node']} ({_fmt(b[key])}); "
                        "with two nodes neither is taken as the reference"}
    odd = [r for r in present if _deviates(r[key] if not isinstance(reference, str) else str(r[key]),
                                           reference, tolerance_pct)]
    if not odd:
        return None
    agree = [r for r in present if r not in odd]
    values_map = {r["node"]: r[key] for r in present}
    if len(odd) == 1 and len(agree) >= 2:
        name = odd[0]["node"]
        within = f" (tolerance {tolerance_pct:g} %)" if not isinstance(reference, str) else ""
        return {"kind": kind, "key": key, "odd_one_out": name, "tolerance_pct": tolerance_pct, "values": values_map,
                "text": f"{name} is the odd one out on {key}: {_fmt(odd[0][key])} against {_fmt(agree[0][key])} on "
                        f"{', '.join(r['node'] for r in agree)}{within}"}
    listing = ", ".join(f"{r['node']} {_fmt(r[key])}" for r in present)
    return {"kind": kind, "key": key, "odd_one_out": None, "tolerance_pct": tolerance_pct, "values": values_map,
            "text": f"{key} disagrees across nodes with no single odd one out: {listing}"}


def _gate_findings(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    findings: list[dict[str, Any]] = []
    gates = sorted({g for r in rows for g in (r.get("gate_outcomes") or {})})
    for gate in gates:
        outcomes = {r["node"]: (r.get("gate_outcomes") or {}).get(gate, "absent") for r in rows}
        if len(set(outcomes.values())) <= 1:
            continue
        counts: dict[str, list[str]] = {}
        for node, outcome in outcomes.items():
            counts.setdefault(outcome, []).append(node)
        odd = [nodes for nodes in counts.values() if len(nodes) == 1]
        name = odd[0][0] if len(rows) >= 3 and len(odd) == 1 and len(counts) == 2 else None
        text = ", ".join(f"{outcome} on {', '.join(nodes)}" for outcome, nodes in sorted(counts.items()))
        findings.append({"kind": "gate", "key": gate, "odd_one_out": name, "tolerance_pct": None,
                         "values": outcomes,
                         "text": (f"{name} is the odd one out on gate {gate}: " if name else f"gate {gate}: ") + text})
    return findings


def compare_nodes(rows: Sequence[Mapping[str, Any]], compare: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The cross-node comparison of one job's rows (one row per node, each with a report)."""
    settings = dict(compare or {})
    fact_tol = float(settings.get("kv_tokens_per_gib_tolerance_pct", 1.0))
    timing_tol = float(settings.get("timing_noise_floor_pct", 5.0))
    facts = [f for f in (_differ(k, rows, fact_tol, "engine_fact") for k in ENGINE_FACTS) if f]
    timings = [f for f in (_differ(k, rows, timing_tol, "timing") for k in TIMINGS) if f]
    gates = _gate_findings(rows)
    odd = sorted({f["odd_one_out"] for f in [*facts, *gates] if f["odd_one_out"]})
    agree = not facts and not gates
    nodes = [str(r["node"]) for r in rows]
    if agree:
        summary = (f"{len(nodes)} nodes agree on every engine fact within {fact_tol:g} % and on every gate outcome"
                   + (f"; {len(timings)} timing(s) differ beyond the {timing_tol:g} % noise floor (observations)"
                      if timings else ""))
    elif odd:
        causes = [f"{r['node']} ran with the node overrides {', '.join(r['node_overrides'])}" for r in rows
                  if r["node"] in odd and r.get("node_overrides")]
        summary = (f"{', '.join(odd)} differs from the other nodes: " + "; ".join(f["text"] for f in [*facts, *gates])
                   + "".join(f"; {cause}" for cause in causes))
    else:
        summary = "the nodes differ: " + "; ".join(f["text"] for f in [*facts, *gates])
    return {"nodes": nodes, "agree": agree, "odd_one_out": odd, "fact_tolerance_pct": fact_tol,
            "timing_noise_floor_pct": timing_tol, "findings": [*facts, *gates], "timing_observations": timings,
            "summary": summary}
