"""The short terminal summary printed at the end of a run: the report's key figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .decision import largest_rung

__all__ = ["summary_lines"]


def _fmt(value: Any, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    return f"{value}{unit}"


def summary_lines(report: dict[str, Any], path: Path | None) -> list[str]:
    """Lines in the seeds' vocabulary: verdict, preflight k/6, cold start, KV pool, largest prompt."""
    run = report.get("run", {})
    decision = report.get("decision", {})
    lifecycle = report.get("lifecycle", {})
    engine = report.get("engine", {})
    identity = report.get("identity", {})
    lines = [
        f"status: {run.get('status', '?')}"
        + (f" ({'; '.join(run.get('status_reasons', []))})" if run.get("status_reasons") else "")
        + f"  mode: {run.get('mode', '?')}  verdict: {decision.get('verdict', '?')}",
        f"identity: {identity.get('status', '?')}"
        + (f" (not checked: {', '.join(identity['not_checked'])})" if identity.get("not_checked") else ""),
        f"cold start to ready: {_fmt(lifecycle.get('cold_start_s'), ' s', 1)}",
    ]
    recipe = report.get("recipe") or {}
    if recipe.get("origin") == "discovered":
        lines.insert(1, "recipe: DISCOVERED from the endpoint, not pinned (thresholds only a pinned recipe knows "
                        "were not checked)")
    if recipe.get("overrides"):
        lines.insert(1, f"recipe overrides: {', '.join(recipe['overrides'])} (effective sha256 "
                        f"{str(recipe.get('sha256', ''))[:12]})")
    preflight = report.get("preflight") or {}
    if preflight.get("total"):
        lines.append(f"functional preflight: {preflight.get('summary')}")
    if engine.get("kv_cache_tokens") is not None:
        lines.append(
            f"engine KV pool: {_fmt(engine.get('kv_cache_tokens'))} tokens, max concurrency "
            f"{_fmt(engine.get('max_concurrency'), 'x', 2)} at {_fmt(engine.get('concurrency_at_tokens'))} tokens; "
            f"min-rank KV {_fmt(engine.get('min_rank_kv_gib'), ' GiB', 2)}"
            + (f" (KV pool from {engine['sources']['kv_cache_tokens']})"
               if (engine.get("sources") or {}).get("kv_cache_tokens") not in (None, "log") else ""))
    gates = report.get("gates", [])
    counts: dict[str, int] = {}
    for gate in gates:
        counts[gate.get("outcome", "?")] = counts.get(gate.get("outcome", "?"), 0) + 1
    if gates:
        lines.append("gates: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
        for gate in gates:
            if gate.get("outcome") in ("failed", "error", "skipped"):
                reason = (gate.get("reason") or "").splitlines()[0:1]
                lines.append(f"  {gate.get('outcome')}: {gate.get('gate')}"
                             + (f" [{gate['status']}]" if gate.get("status") else "")
                             + (f" — {reason[0]}" if reason else ""))
    absent = [str(row.get("gate")) for row in decision.get("gates") or [] if row.get("outcome") == "absent"]
    if absent:
        lines.append(f"  not run (not proven by this run): {', '.join(absent)}")
    top = largest_rung(report)
    if top is not None:
        lines.append(
            f"largest actual prompt: {_fmt(top['prompt_tokens'])}; TTFT {_fmt(top.get('ttft_s'), ' s')}; "
            f"{_fmt(top.get('prefill_tok_s'), ' effective prefill tok/s', 0)}; "
            f"{_fmt(top.get('decode_tok_s'), ' decode tok/s', 2)}")
    teardown = lifecycle.get("teardown") or {}
    if teardown:
        lines.append(f"teardown: {'clean' if teardown.get('clean') else 'NOT CLEAN'} "
                     f"({teardown.get('surviving_processes', 0)} surviving processes, "
                     f"{teardown.get('shm_leftover_files', 0)} /dev/shm files left)")
    if path is not None:
        lines.append(f"report: {path}")
        if path.with_suffix(".html").exists():
            lines.append(f"readable report: {path.with_suffix('.html')}")
    return lines
