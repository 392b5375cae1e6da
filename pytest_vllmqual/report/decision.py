"""The decision block: a verdict, what the run proves, what it does not, and the caveats.

Everything here is derived from the public report dict (so it works the same on a report
read back from disk), and every sentence is generated from what was measured. Nothing is a
fixed claim: a list item exists because a section of the report has, or lacks, the
evidence. The vocabulary is the seeds':

``no-promotion``
    The run cannot support promotion: a gate failed or errored, the run is incomplete
    (interrupted, server gone, startup failed), the served identity differs from the recipe
    (``provenance_mismatch``), teardown left something behind, or no gate ran.
``direct-only``
    Every gate that ran passed, but the endpoint was used as it was (external launcher): this
    run neither started nor stopped it, so cold start and teardown are not evidence.
``healthy``
    Managed, and every gate that ran passed, but the qualification is incomplete: a gate of
    the registry (``gates.REGISTRY``) was not applicable, skipped or deselected, the identity
    is not verified, there is no completed capacity rung, no cold start was measured, or the
    engine's KV pool was not read. Every gate that did not pass is named, with its reason,
    under ``does_not_prove``.
``candidate``
    Every registered gate of every family passed, on a managed cold start with a verified
    identity, a completed capacity rung, engine facts read and a clean teardown. This is the
    most a single run can earn.
``priority-challenger``
    Only an A/B comparison (:mod:`.decision_ab`) can award it: a candidate that held up
    against the control arm under a bracketed replay. :func:`decide_run` never returns it.

Whatever the verdict, a qualification run changes no route and promotes nothing; the
decision says so in ``boundary``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from pytest_vllmqual.gates.registry import (
    PREFLIGHT_GATES,
    PREFLIGHT_LABELS,
    REGISTRY,
    SECTION_GATES,
    family_of,
    title_of,
)
from pytest_vllmqual.gates.registry import proves as gate_proves
from pytest_vllmqual.records import rung_verdict

from .number_format import fmt_num, short_tokens
from .query import (
    first_line,
    gate_outcome,
    gates_named,
    largest_rung,
    ok_rungs,
    preflight_summary,
    recipe_value,
)

__all__ = ["BOUNDARY", "SINGLE_RUN_VERDICTS", "VERDICTS", "decide_run", "gate_coverage", "with_decision"]

VERDICTS: dict[str, str] = {
    "no-promotion": "a gate failed, the run is incomplete, the identity differs, or teardown was not clean",
    "direct-only": "gates passed on an endpoint this run did not start or stop",
    "healthy": "managed and every gate that ran passed, but the qualification evidence is incomplete",
    "candidate": "every gate of every family passed, managed and verified; the most one run earns",
    "priority-challenger": "awarded only by an A/B comparison against the control arm",
}
SINGLE_RUN_VERDICTS = ("no-promotion", "direct-only", "healthy", "candidate")

BOUNDARY = "No route or promotion changed: a qualification run never promotes."
_FAILING_OUTCOMES = ("failed", "error")


# -- rung and coverage readings --------------------------------------------------------------


def _max_model_len(report: Mapping[str, Any]) -> int | None:
    expected = (report.get("identity") or {}).get("expected") or {}
    value = expected.get("max_model_len") or recipe_value(report, "serve", "max_model_len")
    return value if isinstance(value, int) else None


def _label(gate: Mapping[str, Any]) -> str:
    name = str(gate.get("gate") or "")
    return title_of(name, str(gate.get("title") or name or gate.get("nodeid") or "?"))


def gate_coverage(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every registered gate (and every other gate that ran), one row each: name, family,
    title, outcome (passed/failed/error/skipped/absent) and, when it did not pass, why."""
    deselected = {str(d.get("gate")): str(d.get("reason") or "") for d in
                  (report.get("run") or {}).get("deselected_gates") or [] if isinstance(d, Mapping)}
    names = [spec.name for spec in REGISTRY]
    for gate in report.get("gates") or []:
        name = str(gate.get("gate"))
        if name not in names:
            names.append(name)
    rows: list[dict[str, Any]] = []
    for name in names:
        records = gates_named(report, name)
        outcome = gate_outcome(report, name)
        markers = [str(m) for r in records for m in r.get("markers") or []]
        row: dict[str, Any] = {"gate": name, "family": family_of(name, markers) or "other",
                               "title": title_of(name, str(records[0].get("title") or "") if records else ""),
                               "outcome": outcome}
        if outcome == "absent":
            row["reason"] = (f"deselected ({deselected[name]})" if deselected.get(name)
                             else "did not run in this session (deselected with -m/-k, or not collected)")
        elif outcome != "passed":
            worst = next((r for r in records if r.get("outcome") == outcome), records[0])
            row["reason"] = first_line(worst.get("reason")) or "no reason given"
        rows.append(row)
    return rows


# -- the decision --------------------------------------------------------------------------


def _blocking_reasons(report: Mapping[str, Any]) -> list[str]:
    run = report.get("run") or {}
    reasons: list[str] = []
    if run.get("status") == "incomplete":
        why = "; ".join(run.get("status_reasons") or []) or "no reason recorded"
        reasons.append(f"the run is incomplete: {why}")
    gates = report.get("gates") or []
    if not gates:
        reasons.append("no gate ran")
    for gate in gates:
        if gate.get("outcome") in _FAILING_OUTCOMES:
            status = f" [{gate['status']}]" if gate.get("status") else ""
            why = first_line(gate.get("reason"))
            reasons.append(f"gate {gate.get('gate')} {gate.get('outcome')}{status}" + (f": {why}" if why else ""))
    identity = report.get("identity") or {}
    if identity.get("status") == "provenance_mismatch":
        fields = [str(c.get("field")) for c in identity.get("checks") or [] if c.get("ok") is False]
        reasons.append("provenance mismatch: the server that answered differs from the recipe in "
                       + (", ".join(fields) or "an identity field"))
    teardown = (report.get("lifecycle") or {}).get("teardown") or {}
    if run.get("mode") != "direct-only" and teardown and teardown.get("clean") is False:
        reasons.append(
            f"teardown was not clean: {teardown.get('surviving_processes', 0)} surviving processes, "
            f"{teardown.get('shm_leftover_files', 0)} /dev/shm files, "
            f"{teardown.get('containers_left') or 0} containers left")
    return reasons


def _missing_evidence(report: Mapping[str, Any]) -> list[str]:
    missing: list[str] = []
    preflight = report.get("preflight") or preflight_summary(report)
    if preflight.get("passed") != preflight.get("total"):
        absent = [PREFLIGHT_LABELS.get(str(g["gate"]), str(g["gate"])) + f" ({g['outcome']})"
                  for g in preflight.get("gates") or [] if g.get("outcome") != "passed"]
        missing.append(f"the functional preflight is {preflight.get('summary')}; not passed: {', '.join(absent)}")
    others = [f"{row['gate']} ({row['outcome']})" for row in gate_coverage(report)
              if row["outcome"] != "passed" and row["family"] != "functional"]
    if others:
        missing.append("not every gate passed: " + ", ".join(others))
    identity = report.get("identity") or {}
    if identity.get("status") != "verified":
        unchecked = [str(f) for f in identity.get("not_checked") or []]
        missing.append(f"the identity is {identity.get('status') or 'unverified'}"
                       + (f" (not checked: {', '.join(unchecked)})" if unchecked else ""))
    if (report.get("lifecycle") or {}).get("cold_start_s") is None:
        missing.append("no cold start was measured")
    if not ok_rungs(report):
        missing.append("no capacity rung completed")
    if (report.get("engine") or {}).get("kv_cache_tokens") is None:
        missing.append("the engine's KV pool was not read")
    return missing


def _proves(report: Mapping[str, Any]) -> list[str]:
    proves: list[str] = []
    run = report.get("run") or {}
    identity = report.get("identity") or {}
    checks = identity.get("checks") or []
    matched = [c for c in checks if c.get("ok") is True]
    if matched:
        parts = [f"{c.get('field')} {_shown(c.get('expected'))} (from {c.get('source') or 'the server'})"
                 for c in matched]
        lead = ("the server that answered is the recipe's pinned identity, every pinned field checked"
                if identity.get("status") == "verified" else "these pinned identity fields matched")
        proves.append(f"{lead}: " + ", ".join(parts))
    lifecycle = report.get("lifecycle") or {}
    if run.get("mode") == "managed" and lifecycle.get("cold_start_s") is not None:
        proves.append(f"a cold managed start passed health and a real completion in "
                      f"{lifecycle['cold_start_s']:.1f} seconds")
    preflight = report.get("preflight") or preflight_summary(report)
    if preflight.get("passed"):
        proves.append(f"the functional preflight passed {preflight.get('text')}")
    for gate in report.get("gates") or []:
        if gate.get("gate") in (*PREFLIGHT_GATES, *SECTION_GATES, "identity") or gate.get("outcome") != "passed":
            continue
        summary = first_line(gate.get("summary"), 300)
        said = gate_proves(gate) or gate.get("proves")
        if said and summary and summary.lower() not in ("pass", "passed") and summary not in said:
            said = f"{said} ({summary})"
        said = said or summary
        proves.append(f"{_label(gate)}: {said}" if said else f"{_label(gate)} passed")
    top = largest_rung(report)
    if top is not None:
        done = len(ok_rungs(report))
        proves.append(
            f"a request of {fmt_num(top.get('prompt_tokens'))} API-reported prompt tokens completed "
            f"({fmt_num(top.get('ttft_s'), 3)} s TTFT, {fmt_num(top.get('e2e_s'), 3)} s E2E, "
            f"{fmt_num(top.get('prefill_tok_s'), 0)} effective prefill tok/s, "
            f"{fmt_num(top.get('decode_tok_s'), 2)} decode tok/s); {done} ladder rung(s) completed")
        smokes = [rung_verdict(r).smoke for r in report.get("ladder") or []]
        probed = [smoke for smoke in smokes if smoke is not None]
        if probed and all(probed):
            proves.append(f"a short functional smoke passed after every context probe ({len(probed)}/{len(probed)})")
    for rung in report.get("ladder") or []:
        verdict = rung_verdict(rung)
        if verdict.rejected_as_expected:
            size = rung.get("prompt_tokens") or rung.get("target")
            after = " and the server stayed healthy" if verdict.healthy else ""
            proves.append(f"a {fmt_num(size)}-token prompt beyond max_model_len was rejected with HTTP "
                          f"{rung.get('status_code')}{after}")
    engine = report.get("engine") or {}
    if engine.get("kv_cache_tokens") is not None:
        text = f"the engine reported a KV pool of {fmt_num(engine['kv_cache_tokens'])} tokens"
        if engine.get("max_concurrency") is not None:
            text += (f" ({fmt_num(engine['max_concurrency'], 2)}x concurrency at "
                     f"{fmt_num(engine.get('concurrency_at_tokens'))} tokens per request)")
        if engine.get("min_rank_kv_gib") is not None:
            text += f" and {fmt_num(engine['min_rank_kv_gib'], 2)} GiB minimum-rank KV allocation"
        if engine.get("ranks"):
            text += f" over {len(engine['ranks'])} rank(s)"
        proves.append(text)
    teardown = lifecycle.get("teardown") or {}
    if run.get("mode") == "managed" and teardown.get("clean") is True:
        proves.append("teardown left no process, /dev/shm file or container of the run")
    return proves


def _does_not_prove(report: Mapping[str, Any]) -> list[str]:
    items: list[str] = []
    run = report.get("run") or {}
    limit = _max_model_len(report)
    floor = recipe_value(report, "gates", "capacity", "min_largest_prompt")
    top = largest_rung(report)
    if top is None:
        items.append("any request near the configured context: no capacity rung completed"
                     + (f" (configured {fmt_num(limit)} tokens)" if limit else ""))
    else:
        largest = int(top["prompt_tokens"])
        if isinstance(floor, int) and largest <= floor:
            items.append(f"a request above {short_tokens(floor)} prompt tokens "
                         f"(the largest measured was {fmt_num(largest)})")
        elif limit and largest < limit:
            items.append(f"a request between {fmt_num(largest)} prompt tokens (the largest measured) and "
                         f"the configured {fmt_num(limit)}")
        kv = (report.get("engine") or {}).get("kv_cache_tokens")
        if isinstance(kv, int) and kv > largest:
            items.append(f"that one request can use the whole reported KV pool of {fmt_num(kv)} tokens "
                         f"(the largest measured prompt was {fmt_num(largest)})")
    concurrency = gates_named(report, "concurrency")
    if gate_outcome(report, "concurrency") == "passed":
        n = (concurrency[0].get("measurements") or {}).get("requests")
        items.append(f"concurrency beyond {n} active requests" if isinstance(n, int)
                     else "concurrency beyond the measured request count")
    else:
        items.append("concurrency beyond one active request")
    items.append("broad task-quality equivalence: bounded checks are not a benchmark")
    for row in gate_coverage(report):
        if row["outcome"] in ("skipped", "absent", "pending"):
            word = {"skipped": "not applicable or skipped", "absent": "not run", "pending": "unfinished"}[row["outcome"]]
            items.append(f"{row['title']} (gate {row['gate']}, {row['family']}): {word}: {row['reason']}")
    if run.get("mode") == "direct-only":
        items.append("a cold start or a clean teardown of this endpoint: it was used direct-only")
    identity = report.get("identity") or {}
    if identity.get("status") in ("unverified", "partially-verified"):
        unknown = [str(c.get("field")) + (f" ({c.get('note')})" if c.get("note") else "")
                   for c in identity.get("checks") or [] if c.get("ok") is None and c.get("pinned", True)]
        items.append("that the served model is the recipe's pinned identity in every pinned field"
                     + (f"; not checked: {'; '.join(unknown)}" if unknown else ""))
    device = str((report.get("engine") or {}).get("device") or "").lower()
    hardware = report.get("hardware") or {}
    if device == "cpu" or (hardware.get("source") == "n/a" and not hardware.get("gpu_count")):
        items.append("anything about GPU memory or GPU throughput: the engine ran without a GPU"
                     if device == "cpu" else "anything about the GPUs: NVML was not available")
    return items


def _caveats(report: Mapping[str, Any]) -> list[str]:
    caveats: list[str] = []
    run = report.get("run") or {}
    if run.get("status") == "incomplete":
        caveats.append("the run is incomplete: " + ("; ".join(run.get("status_reasons") or []) or "no reason recorded"))
    for gate in report.get("gates") or []:
        failed = [a for a in gate.get("attempts") or [] if not a.get("ok") and not a.get("expected_rejection")]
        if not failed:
            continue
        first = failed[0]
        code = f"HTTP {first['status_code']}" if first.get("status_code") else (first.get("error_kind") or "error")
        why = first_line(first.get("error"), 160)
        caveats.append(
            f"gate {gate.get('gate')} retains {len(failed)} failed attempt(s), not retried away; the first "
            f"({first.get('label')}) was {code}" + (f": {why}" if why else ""))
    ladder = list(report.get("ladder") or [])
    for rung in ladder:
        if rung_verdict(rung).failed:
            code = f"HTTP {rung['status_code']}" if rung.get("status_code") else "no response"
            why = first_line(rung.get("error"), 160)
            caveats.append(f"the {rung.get('target_label')} context target returned {code}"
                           + (f" ({why})" if why else "") + "; it remains a real failed attempt")
    for rung in ladder:
        err = rung.get("calibration_error")
        if isinstance(err, int) and err != 0 and isinstance(rung.get("prompt_tokens"), int):
            caveats.append(
                f"the {rung.get('target_label')} target ({fmt_num(rung.get('target'))}) produced "
                f"{fmt_num(rung['prompt_tokens'])} API-reported prompt tokens (calibration error {err:+,}); "
                "claims use the reported count")
    measured = sorted((r for r in ladder if isinstance(r.get("prompt_tokens"), int) and isinstance(r.get("target"), int)),
                      key=lambda r: (int(r["target"]), int(r.get("index") or 0)))
    for earlier, later in itertools.pairwise(measured):
        if int(later["target"]) > int(earlier["target"]) and int(later["prompt_tokens"]) < int(earlier["prompt_tokens"]):
            caveats.append(
                f"requested targets were non-monotonic: {earlier.get('target_label')} produced "
                f"{fmt_num(earlier['prompt_tokens'])} actual tokens while {later.get('target_label')} produced "
                f"{fmt_num(later['prompt_tokens'])}; a target label is not a capacity measurement")
            break
    for rung in ladder:
        server = rung.get("server_prompt_tokens")
        if isinstance(server, int) and isinstance(rung.get("prompt_tokens"), int) and server != rung["prompt_tokens"]:
            caveats.append(f"the {rung.get('target_label')} rung: the API reported {fmt_num(rung['prompt_tokens'])} "
                           f"prompt tokens but the server's /metrics counted {fmt_num(server)}")
    if len(ok_rungs(report)) > 0:
        caveats.append("one request per target supports a capacity comparison, not a performance ranking; "
                       "small timing deltas are bounded observations")
    identity = report.get("identity") or {}
    for check in identity.get("checks") or []:
        if check.get("ok") is False:
            caveats.append(f"provenance mismatch: {check.get('field')} expected {check.get('expected')!r}, "
                           f"observed {check.get('observed')!r}")
    engine = report.get("engine") or {}
    limit = _max_model_len(report)
    kv = engine.get("kv_cache_tokens")
    if isinstance(kv, int) and limit and kv < limit:
        caveats.append(f"the engine-reported KV pool ({fmt_num(kv)} tokens) is below the configured "
                       f"{fmt_num(limit)}-token context")
    if run.get("mode") == "direct-only":
        caveats.append("direct-only: this run did not start or stop the endpoint; its owner and operating "
                       "mode are outside the evidence")
    return caveats


def decide_run(report: Mapping[str, Any]) -> dict[str, Any]:
    """The decision block for one run's public report (see the module docstring)."""
    run = report.get("run") or {}
    blocking = _blocking_reasons(report)
    if blocking:
        verdict, reasons = "no-promotion", blocking
    elif run.get("mode") == "direct-only":
        verdict = "direct-only"
        reasons = ["every gate that ran passed on an endpoint this run did not start or stop"]
    else:
        missing = _missing_evidence(report)
        if missing:
            verdict = "healthy"
            reasons = ["every gate that ran passed, but the qualification is incomplete: " + "; ".join(missing)]
        else:
            verdict = "candidate"
            reasons = ["every registered gate of every family passed on a managed cold start, with a verified "
                       "identity, a completed capacity ladder, engine facts and a clean teardown; a single run "
                       "is at most a candidate (priority-challenger needs an A/B against the control arm)"]
    if verdict == "no-promotion":
        summary = "no-promotion"
    elif verdict == "direct-only":
        summary = "healthy and direct-only; no-promotion"
    else:
        summary = f"{verdict}; no-promotion"
    return {
        "verdict": verdict,
        "summary": summary,
        "scope": "single run",
        "reasons": reasons,
        "gates": gate_coverage(report),
        "proves": _proves(report),
        "does_not_prove": _does_not_prove(report),
        "caveats": _caveats(report),
        "boundary": BOUNDARY,
    }


def with_decision(report: Mapping[str, Any]) -> dict[str, Any]:
    """The public report with its ``decision`` block: the one place a report and its verdict meet.

    The evidence layer builds the report without a verdict; the run (and any script that
    rebuilds a report) calls this. An existing decision is replaced where it stands; a new one
    goes right after ``ladder_summary``, where the schema and the written reports have it.
    """
    decision = decide_run(report)
    if "decision" in report:
        return {**report, "decision": decision}
    out: dict[str, Any] = {}
    for key, value in report.items():
        out[key] = value
        if key == "ladder_summary":
            out["decision"] = decision
    out.setdefault("decision", decision)
    return out


def _shown(value: Any) -> str:
    return fmt_num(value) if isinstance(value, int) and not isinstance(value, bool) else str(value)
