"""The reference campaign's tables as rows of text: "Gate | Result" and "Measurement | Value",
the teardown line and a figure across ranks, read from a public report.

The HTML page (``report.html_page``) lays these rows out; what each cell says is decided here
once, from the report's own sections, so a sentence on the page is what the report shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_vllmqual.gates.registry import (
    COLD_START_GATE,
    IDENTITY_GATE,
    KV_POOL_GATE,
    LADDER_GATE,
    PREFLIGHT_GATES,
)
from pytest_vllmqual.privacy.failure_reason import first_line
from pytest_vllmqual.records import GateOutcome, RunMode
from pytest_vllmqual.report.number_format import fmt_decode, fmt_num, fmt_places, readable, short_tokens
from pytest_vllmqual.report.query import (
    gate_outcome,
    gates_named,
    largest_rung,
    preflight_summary,
)

__all__ = ["measurement_rows", "outcome_class", "per_rank", "result_rows", "teardown_text"]


def outcome_class(outcome: Any) -> str:
    """The CSS class of an outcome's cell: failed and error red, skipped and not run grey."""
    return {"failed": "fail", "error": "fail", "skipped": "skip", "pending": "skip", "absent": "skip"}.get(
        str(outcome), "")


# -- numbers across ranks -----------------------------------------------------------------------


def per_rank(ranks: Sequence[Mapping[str, Any]], key: str, digits: int = 2, unit: str = " GiB") -> str:
    """"75.64 GiB" when every rank agrees, else "75.64 / 75.60 GiB (rank 0 / rank 1)"."""
    values = [(r.get("rank"), r.get(key)) for r in ranks if isinstance(r.get(key), int | float)]
    if not values:
        return "n/a"
    shown = {fmt_places(v, digits) for _, v in values}
    if len(shown) == 1:
        return f"{fmt_places(values[0][1], digits)}{unit}"
    joined = " / ".join(fmt_places(v, digits) for _, v in values)
    names = " / ".join(f"rank {r}" for r, _ in values)
    return f"{joined}{unit} ({names})"


# -- the reference campaign's tables ---------------------------------------------------------


def _identity_text(report: Mapping[str, Any]) -> str:
    identity = report.get("identity") or {}
    status = identity.get("status") or "unverified"
    checks = identity.get("checks") or []
    if status == "provenance_mismatch":
        bad = [f"{c.get('field')} expected {c.get('expected')}, observed {c.get('observed')}"
               for c in checks if c.get("ok") is False]
        return "Provenance mismatch: " + "; ".join(bad)
    good = [str(c.get("field")) + (f" ({c['source']})" if c.get("source") else "") for c in checks if c.get("ok") is True]
    unknown = [str(c.get("field")) for c in checks if c.get("ok") is None and c.get("pinned", True)]
    unpinned = [str(c.get("field")) for c in checks if c.get("pinned") is False]
    expected = identity.get("expected") or {}
    text = f"{status.capitalize()}: runtime {expected.get('runtime_version')}, served model " \
           f"{expected.get('served_model_name')}, max_model_len {fmt_num(expected.get('max_model_len'))}, " \
           f"TP={expected.get('tensor_parallel_size')}"
    text += f" (checked: {', '.join(good) or 'none'}"
    text += f"; not checked: {', '.join(unknown)}" if unknown else ""
    text += f"; not pinned or not applicable: {', '.join(unpinned)})" if unpinned else ")"
    return text


def _gate_result(gate: Mapping[str, Any]) -> str:
    outcome = str(gate.get("outcome"))
    detail = first_line(gate.get("summary"), 400) if outcome == "passed" else first_line(gate.get("reason"), 400)
    word = {"passed": "Passed", "failed": "Failed", "error": "Error", "skipped": "Skipped"}.get(outcome, outcome)
    status = f" [{gate.get('status')}]" if gate.get("status") else ""
    return f"{word}{status}" + (f": {detail}" if detail else "")


def result_rows(report: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(gate, result, css class) rows of the reference campaign's "Gate | Result" table."""
    rows: list[tuple[str, str, str]] = []
    run = report.get("run") or {}
    life = report.get("lifecycle") or {}
    error = life.get("startup_error") or {}
    if run.get("mode") == RunMode.DIRECT_ONLY:
        rows.append(("Cold managed start", "Not measured: the endpoint was used direct-only", "skip"))
    elif error:
        rows.append(("Cold managed start", f"Failed ({error.get('status')}): "
                     f"{first_line(error.get('cause') or error.get('message'))}", "fail"))
    elif (cold := gate_outcome(report, COLD_START_GATE)) not in (GateOutcome.PASSED, GateOutcome.ABSENT):
        # the gate judged the start against the recipe's ceiling: its words, not "passed health"
        gate = next(g for g in gates_named(report, COLD_START_GATE) if g.get("outcome") == cold)
        rows.append(("Cold managed start", _gate_result(gate), outcome_class(cold)))
    elif life.get("cold_start_s") is not None:
        rows.append(("Cold managed start", f"Passed health in {life['cold_start_s']:.1f} seconds", ""))
    else:
        rows.append(("Cold managed start", "Not measured", "skip"))
    identity_status = (report.get("identity") or {}).get("status")
    rows.append(("Identity", _identity_text(report),
                 "fail" if identity_status == "provenance_mismatch" else ("" if identity_status == "verified" else "skip")))
    for gate in [g for g in report.get("gates") or [] if g.get("family") == "reasoning"]:
        rows.append((str(gate.get("title") or "Reasoning prompt contract"), _gate_result(gate),
                     outcome_class(gate.get("outcome"))))
    preflight = report.get("preflight") or preflight_summary(report)
    not_passed = [f"{g['gate']} {g['outcome']}" for g in preflight.get("gates") or [] if g.get("outcome") != "passed"]
    rows.append(("Functional preflight", str(preflight.get("text")) + (f"; {', '.join(not_passed)}" if not_passed else ""),
                 "" if not not_passed else "fail"))
    handled = {*PREFLIGHT_GATES, LADDER_GATE, KV_POOL_GATE, IDENTITY_GATE, COLD_START_GATE}
    for gate in report.get("gates") or []:
        if gate.get("gate") in handled or gate.get("family") == "reasoning":
            continue
        rows.append((str(gate.get("title") or gate.get("gate")), _gate_result(gate), outcome_class(gate.get("outcome"))))
    top = largest_rung(report)
    capacity = gate_outcome(report, LADDER_GATE)
    if top is not None:
        text = (f"{fmt_num(top.get('prompt_tokens'))} actual prompt tokens; {fmt_num(top.get('ttft_s'), 3)} s TTFT; "
                f"{fmt_num(top.get('e2e_s'), 3)} s E2E; {fmt_num(top.get('prefill_tok_s'), 0)} effective prefill tok/s; "
                + fmt_decode(top.get("decode_tok_s"), top.get("decode_source"), top.get("decode_not_measured")))
        if capacity in ("failed", "error"):
            text = f"Capacity gate {capacity}; largest completed: " + text
        rows.append(("Near-limit capacity", text, outcome_class(capacity)))
    elif capacity != "absent":
        gate = gates_named(report, LADDER_GATE)[0]
        rows.append(("Near-limit capacity", _gate_result(gate) or "no rung completed", "fail"))
    engine = report.get("engine") or {}
    if engine.get("kv_cache_tokens") is not None:
        device = str(engine.get("device") or "GPU").upper()
        text = (f"{fmt_num(engine.get('min_rank_kv_gib'), 2)} GiB, {fmt_num(engine.get('kv_cache_tokens'))} tokens, "
                f"reported {fmt_num(engine.get('max_concurrency'), 2)}× capacity at the configured "
                f"{fmt_num(engine.get('concurrency_at_tokens'))}-token envelope")
        engine_gate = gate_outcome(report, KV_POOL_GATE)
        if engine_gate in ("failed", "error"):
            text = f"Engine gate {engine_gate}: " + text
        rows.append((f"{device} KV allocation", text, outcome_class(engine_gate)))
    teardown = life.get("teardown") or {}
    if teardown:
        rows.append(("Teardown", teardown_text(teardown), "" if teardown.get("clean") else "fail"))
    elif run.get("mode") == RunMode.DIRECT_ONLY:
        rows.append(("Teardown", "Not run: the endpoint was used direct-only", "skip"))
    rows.append(("Route and promotion", "No route or promotion changed", ""))
    return rows


def teardown_text(teardown: Mapping[str, Any]) -> str:
    """The "Teardown" result in words: what was left behind, and what the /dev/shm reclaim did."""
    if teardown.get("clean"):
        text = (f"Clean: no surviving process, {teardown.get('shm_leftover_files', 0)} /dev/shm files, "
                f"{teardown.get('containers_left') or 0} containers left ({fmt_num(teardown.get('seconds'), 1)} s)")
    else:
        survivors, names = teardown.get("surviving_processes"), teardown.get("surviving_process_names") or []
        shm = teardown.get("shm_leftover_files")
        text = ("Not clean: " + ("surviving processes not counted" if survivors is None else
                                 f"{survivors} surviving processes" + (f" ({readable(names)})" if names else ""))
                + ", " + ("/dev/shm not checked" if shm is None else f"{shm} /dev/shm files")
                + f", {teardown.get('containers_left') or 0} containers")
    reclaim = teardown.get("shm_reclaim")
    if isinstance(reclaim, Mapping) and reclaim.get("summary"):
        files = reclaim.get("reclaimed") or []
        text += f"; shm reclaim: {reclaim['summary']}" + (f"; files reclaimed: {readable(files)}" if files else "")
    elif reclaim:
        text += f"; shm reclaim: {readable(reclaim)}"
    return text


def measurement_rows(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(measurement, value) rows: the reference campaign's engine facts and the largest request."""
    engine = report.get("engine") or {}
    ranks = engine.get("ranks") or []
    device = str(engine.get("device") or "GPU").upper()
    rows: list[tuple[str, str]] = []
    if engine.get("min_rank_kv_gib") is not None:
        rows.append(("Minimum-rank KV allocation", f"{fmt_num(engine['min_rank_kv_gib'], 2)} GiB"))
    if engine.get("kv_cache_tokens") is not None:
        rows.append((f"Engine-reported {device} KV tokens", fmt_num(engine["kv_cache_tokens"])))
    if engine.get("max_concurrency") is not None:
        at = engine.get("concurrency_at_tokens")
        label = f"Reported {short_tokens(at)} concurrency" if isinstance(at, int) else "Reported concurrency"
        rows.append((label, f"{fmt_num(engine['max_concurrency'], 2)}x"))
    if any(r.get("peak_activation_gib") is not None for r in ranks):
        rows.append(("Peak activation per rank", per_rank(ranks, "peak_activation_gib")))
    if any(r.get("weights_gib") is not None for r in ranks):
        rows.append(("Weight allocation per rank", per_rank(ranks, "weights_gib")))
    if any(r.get("kv_gib") is not None for r in ranks):
        rows.append(("KV allocation per rank", per_rank(ranks, "kv_gib")))
    if any(r.get("cuda_graph_gib") is not None for r in ranks):
        rows.append(("CUDA graph memory per rank", per_rank(ranks, "cuda_graph_gib")))
    if engine.get("kv_tokens_per_gib") is not None:
        rows.append(("KV tokens per GiB (minimum rank)", fmt_num(engine["kv_tokens_per_gib"], 1)))
    if engine.get("init_engine_seconds") is not None:
        rows.append(("Engine init (profile, KV cache, warmup)", f"{fmt_num(engine['init_engine_seconds'], 2)} s"))
    if engine.get("tp_size_seen") is not None:
        rows.append(("Ranks seen in the log", fmt_num(engine["tp_size_seen"])))
    cache = engine.get("cache_config") or {}
    if cache:
        rows.append(("KV cache config (/metrics)", ", ".join(f"{k} {v}" for k, v in cache.items())))
    preflight = report.get("preflight") or preflight_summary(report)
    rows.append(("Functional preflight", str(preflight.get("summary"))))
    top = largest_rung(report)
    if top is not None:
        rows += [
            ("Largest actual prompt", fmt_num(top.get("prompt_tokens"))),
            ("Largest-request TTFT", f"{fmt_num(top.get('ttft_s'), 3)} s"),
            ("Largest-request E2E", f"{fmt_num(top.get('e2e_s'), 3)} s"),
            ("Largest-request effective prefill", f"{fmt_num(top.get('prefill_tok_s'), 0)} tok/s"),
            ("Largest-request decode", fmt_decode(top.get("decode_tok_s"), top.get("decode_source"),
                                                  top.get("decode_not_measured"), unit=" tok/s")),
        ]
    cold = (report.get("lifecycle") or {}).get("cold_start_s")
    if cold is not None:
        rows.append(("Cold managed start", f"{cold:.1f} s"))
    hardware = report.get("hardware") or {}
    if hardware.get("source") == "nvml":
        rows.append(("Hardware", f"{hardware.get('gpu_count')}× {hardware.get('gpu_model')}, "
                                 f"{fmt_num(hardware.get('gpu_memory_gib'), 1)} GiB each, {hardware.get('interconnect')}"))
    else:
        rows.append(("Hardware", "n/a (no GPU read through NVML)"))
    return rows
