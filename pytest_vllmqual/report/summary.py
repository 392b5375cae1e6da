"""The short terminal summary printed at the end of a run: the report's key figures.

Read from the public report only (so it says what the report says), in the reference campaign's
vocabulary, with every number written by :func:`~pytest_vllmqual.report.number_format.fmt_num`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .load_section import load_summary_line
from .number_format import fmt_decode, fmt_num
from .query import decision_shown, largest_rung

__all__ = ["summary_lines"]


def summary_lines(report: dict[str, Any], path: Path | None) -> list[str]:
    """Lines in the reference campaign's vocabulary: verdict, preflight k/6, cold start, KV pool, largest prompt.

    A carried-forward record that today's rules decide differently leads with that verdict, and the
    next two lines give both decisions' reasons, the stored one labelled as the run wrote it."""
    run = report.get("run", {})
    shown = decision_shown(report)
    decision = shown.first
    lifecycle = report.get("lifecycle", {})
    engine = report.get("engine", {})
    identity = report.get("identity", {})
    lines = [
        f"status: {run.get('status', '?')}"
        + (f" ({'; '.join(run.get('status_reasons', []))})" if run.get("status_reasons") else "")
        + f"  mode: {run.get('mode', '?')}  verdict: {decision.get('verdict', '?')}",
        f"identity: {identity.get('status', '?')}"
        + (f" (not checked: {', '.join(identity['not_checked'])})" if identity.get("not_checked") else ""),
        f"cold start to ready: {fmt_num(lifecycle.get('cold_start_s'), 1, ' s')}",
    ]
    recipe = report.get("recipe") or {}
    if recipe.get("origin") == "discovered":
        lines.insert(1, "recipe: DISCOVERED from the endpoint, not pinned (thresholds only a pinned recipe knows "
                        "were not checked)")
    if recipe.get("overrides"):
        lines.insert(1, f"recipe overrides: {', '.join(recipe['overrides'])} (effective sha256 "
                        f"{str(recipe.get('sha256', ''))[:12]})")
    if shown.stored is not None:
        lines[1:1] = [f"  decided again by the rules of {shown.rules}: {_said(shown.first)}",
                      f"  the decision the run wrote (stored): {_said(shown.stored)}"]
    preflight = report.get("preflight") or {}
    if preflight.get("total"):
        lines.append(f"functional preflight: {preflight.get('summary')}")
    if engine.get("kv_cache_tokens") is not None:
        lines.append(
            f"engine KV pool: {fmt_num(engine.get('kv_cache_tokens'), 3)} tokens, max concurrency "
            f"{fmt_num(engine.get('max_concurrency'), 2, 'x')} at {fmt_num(engine.get('concurrency_at_tokens'), 3)} tokens; "
            f"min-rank KV {fmt_num(engine.get('min_rank_kv_gib'), 2, ' GiB')}"
            + (f" (KV pool from {engine['sources']['kv_cache_tokens']})"
               if (engine.get("sources") or {}).get("kv_cache_tokens") not in (None, "log") else ""))
    gates = report.get("gates", [])
    counts: dict[str, int] = {}
    for gate in gates:
        counts[gate.get("outcome", "?")] = counts.get(gate.get("outcome", "?"), 0) + 1
    if gates:
        lines.append("gates: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
        lines.extend(_unfinished_gate_lines(gates))
    absent = [str(row.get("gate")) for row in decision.get("gates") or [] if row.get("outcome") == "absent"]
    if absent:
        lines.append(f"  not run (not proven by this run): {', '.join(absent)}")
    top = largest_rung(report)
    if top is not None:
        lines.append(
            f"largest actual prompt: {fmt_num(top['prompt_tokens'], 3)}; TTFT {fmt_num(top.get('ttft_s'), 3, ' s')}; "
            f"{fmt_num(top.get('prefill_tok_s'), 0, ' effective prefill tok/s')}; "
            + fmt_decode(top.get("decode_tok_s"), top.get("decode_source"), top.get("decode_not_measured")))
    load_line = load_summary_line(report)
    if load_line is not None:
        lines.append(load_line)
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


def _said(decision: Any) -> str:
    reasons = "; ".join(str(r) for r in decision.get("reasons") or [])
    return f"{decision.get('verdict', '?')}" + (f" — {reasons}" if reasons else "")


def _unfinished_gate_lines(gates: list[dict[str, Any]]) -> list[str]:
    """One line per failed, errored or skipped gate and reason: the cases of one parametrized gate
    that share a reason (both arithmetic checks not applicable) are named on one line, not repeated,
    and so are the gates that share one harness status and reason (every gate of a server that
    did not start: the cause is said once)."""
    cases: dict[tuple[str, str, str, str], list[str]] = {}
    for gate in gates:
        if gate.get("outcome") in ("failed", "error", "skipped"):
            reason = ((gate.get("reason") or "").splitlines() or [""])[0]
            status = str(gate.get("status") or "")
            name = "" if status else str(gate.get("gate"))
            nodeid = str(gate.get("nodeid") or "")
            case = nodeid[nodeid.index("[") + 1:-1] if nodeid.endswith("]") and "[" in nodeid else ""
            cases.setdefault((str(gate.get("outcome")), name, status, reason), []).append(
                str(gate.get("gate")) if status else case)
    lines = []
    for (outcome, name, status, reason), names in cases.items():
        shown = list(dict.fromkeys(case for case in names if case))
        if not name:  # gates grouped by their shared status
            label = shown[0] if len(shown) == 1 else f"{len(shown)} gates ({', '.join(shown)})"
        else:
            label = name + (f" ({', '.join(shown)})" if len(names) > 1 and shown else "")
        lines.append(f"  {outcome}: {label}" + (f" [{status}]" if status else "")
                     + (f" — {reason}" if reason else ""))
    return lines
