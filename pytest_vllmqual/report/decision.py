"""The decision block: a verdict, what the run proves, what it does not, and the caveats.

The decision is made on typed records (:func:`decide` reads a :class:`RunRecord`, its
``GateRecord`` and ``RungRecord`` lists and the :class:`Verdict` / :class:`GateOutcome`
words) and rendered into the public report once (:meth:`Decision.to_dict`). The record it
reads is the *public* one (:func:`public_record`): the sanitized report read back as a
``RunRecord``, so every sentence quotes only what the report itself may show, the figures the
report derives (rung rates, the minimum-rank KV, the identity status) are read as the report
carries them, and a report read back from disk is decided by the same rule. What the decision
asks of a run (its largest completed rung, a gate's runs, a recipe value) is the record's own;
the coverage table and the preflight are ``report.gate_coverage``'s (``CoverageRow``, ``coverage`` and
``preflight_of`` are re-exported here, where they were first defined, for a release), and
``report.query`` asks the preflight of a report dict for the pages and comparisons. Every sentence
is generated from what was measured: a list item exists because a section of the report
has, or lacks, the evidence. The verdicts (:class:`~pytest_vllmqual.records.Verdict`):

``no-promotion``
    The run cannot support promotion: a gate failed or errored, the run is incomplete
    (interrupted, server gone, startup failed), the served identity differs from the recipe
    (``provenance_mismatch``), teardown left something behind, or no gate ran.
``direct-only``
    No gate failed, but the endpoint was used as it was (external launcher): this run neither
    started nor stopped it, so cold start and teardown are not evidence.
``healthy``
    Managed, and no gate failed, but the qualification is incomplete: a row of the coverage
    (:func:`coverage`: every gate of the registry ``gates.registry.REGISTRY``, every other gate
    that ran, and every other gate pytest deselected, a user's own gates included; a gate only a
    comparison judges, such as the equivalence probe, is a row only when it ran) was not run,
    deselected or skipped; the identity is not verified; the run is not pinned (the model named
    neither by a hub revision nor by a content digest, a container image not by digest, or the
    recipe says ``pinned: false``); there is no completed capacity rung; no cold start was
    measured; or the engine's KV pool was not read. A gate the recipe declares not applicable
    that ran and failed is skipped: the declaration excuses it, so it neither fails the run nor
    counts as passed; the reason says "passed or was excused by a declaration" and names it as
    measured failing. One that passed counts as passed, with a caveat that the declaration no
    longer holds. Every gate that did not pass is named, with its reason, under
    ``does_not_prove``.
``promotable``
    Every row of the coverage ran and passed, on a managed cold start with a verified and pinned
    identity, a completed capacity rung, engine facts read and a clean teardown. This is the
    most a single run can earn. (Report schema 2 called it ``candidate``; that word now only
    names the B arm of an A/B.)
``priority-challenger``
    Only an A/B comparison (:mod:`pytest_vllmqual.ab.decision`) can award it: a promotable B arm
    that held up against the control arm under a bracketed replay. :func:`decide` never returns it.

Whatever the verdict, a qualification run changes no route and promotes nothing; the
decision says so in ``boundary``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.gates.registry import (
    PREFLIGHT_GATES,
    PREFLIGHT_LABELS,
    SECTION_GATES,
    title_of,
)
from pytest_vllmqual.gates.registry import proves as gate_proves
from pytest_vllmqual.privacy.failure_reason import first_line
from pytest_vllmqual.recipe.load_gate_settings import slo_caveat
from pytest_vllmqual.records import (
    GateOutcome,
    GateRecord,
    RunMode,
    RunRecord,
    Verdict,
)

from .gate_coverage import CoverageRow, coverage, preflight_of
from .number_format import fmt_decode, fmt_num, short_tokens
from .read_model import RunView, declared, declared_failing, max_model_len, public_record, unpinned

__all__ = ["BOUNDARY", "CoverageRow", "Decision", "coverage", "decide", "declared_failing", "max_model_len",
           "no_gate_failed", "preflight_of", "public_record", "unpinned", "verdict_summary", "with_decision"]

BOUNDARY = "No route or promotion changed: a qualification run never promotes."


def verdict_summary(verdict: Verdict) -> str:
    """The one-line summary: the verdict, and that nothing was promoted."""
    if verdict is Verdict.NO_PROMOTION:
        return "no-promotion"
    if verdict is Verdict.DIRECT_ONLY:
        return "healthy and direct-only; no-promotion"
    return f"{verdict}; no-promotion"


@dataclass(frozen=True)
class Decision:
    """The decision on one run, typed; :meth:`to_dict` is its one rendering into the report."""

    verdict: Verdict
    reasons: list[str]
    gates: list[CoverageRow] = field(default_factory=list)
    proves: list[str] = field(default_factory=list)
    does_not_prove: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    scope: str = "single run"

    @property
    def summary(self) -> str:
        return verdict_summary(self.verdict)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "summary": self.summary, "scope": self.scope,
                "reasons": list(self.reasons), "gates": [row.to_dict() for row in self.gates],
                "proves": list(self.proves), "does_not_prove": list(self.does_not_prove),
                "caveats": list(self.caveats), "boundary": BOUNDARY}


# -- readings ---------------------------------------------------------------------------------


def _label(gate: GateRecord) -> str:
    return title_of(gate.gate, gate.title or gate.gate or gate.nodeid or "?")


# -- the decision --------------------------------------------------------------------------


def _blocking_reasons(record: RunRecord) -> list[str]:
    reasons: list[str] = []
    if record.status == "incomplete":
        reasons.append(f"the run is incomplete: {'; '.join(record.status_reasons) or 'no reason recorded'}")
    if not record.gates:
        reasons.append("no gate ran")
    shared: dict[tuple[str, str, str], list[str]] = {}  # gates failed by one harness status: said once
    for gate in record.gates:
        if not gate.outcome.failing:
            continue
        why = first_line(gate.reason)
        if gate.status:
            shared.setdefault((str(gate.outcome), gate.status, why), []).append(gate.gate)
            continue
        reasons.append(f"gate {gate.gate} {gate.outcome}" + (f": {why}" if why else ""))
    for (outcome, status, why), names in shared.items():
        names = list(dict.fromkeys(names))
        label = f"gate {names[0]}" if len(names) == 1 else f"{len(names)} gates ({', '.join(names)})"
        reasons.append(f"{label} {outcome} [{status}]" + (f": {why}" if why else ""))
    identity = record.identity
    if identity.get("status") == "provenance_mismatch":
        fields = [str(c.get("field")) for c in identity.get("checks") or [] if c.get("ok") is False]
        reasons.append("provenance mismatch: the server that answered differs from the recipe in "
                       + (", ".join(fields) or "an identity field"))
    teardown = record.lifecycle.get("teardown") or {}
    if record.mode is not RunMode.DIRECT_ONLY and teardown and teardown.get("clean") is False:
        reasons.append(
            f"teardown was not clean: {teardown.get('surviving_processes', 0)} surviving processes, "
            f"{teardown.get('shm_leftover_files', 0)} /dev/shm files, "
            f"{teardown.get('containers_left') or 0} containers left")
    return reasons


def _missing_evidence(view: RunView, rows: Sequence[CoverageRow]) -> list[str]:
    record = view.record
    missing: list[str] = []
    preflight = preflight_of(record.gates)
    if preflight["passed"] != preflight["total"]:
        absent = [PREFLIGHT_LABELS.get(str(g["gate"]), str(g["gate"])) + f" ({g['outcome']})"
                  for g in preflight["gates"] if g["outcome"] != GateOutcome.PASSED]
        missing.append(f"the functional preflight is {preflight['summary']}; not passed: {', '.join(absent)}")
    others = [f"{row.gate} ({row.outcome})" for row in rows  # the preflight's six are named just above
              if row.outcome is not GateOutcome.PASSED and row.gate not in PREFLIGHT_GATES]
    if others:
        missing.append("not every gate passed: " + ", ".join(others))
    failing = view.excused
    if failing:
        missing.append("declared not applicable by the recipe and measured failing in this run (a claim, not a "
                       "pass): " + ", ".join(failing))
    identity = record.identity
    if identity.get("status") != "verified":
        unchecked = [str(f) for f in identity.get("not_checked") or []]
        missing.append(f"the identity is {identity.get('status') or 'unverified'}"
                       + (f" (not checked: {', '.join(unchecked)})" if unchecked else ""))
    not_pinned = view.unpinned
    if not_pinned:
        missing.append("the run is not pinned: " + "; ".join(not_pinned))
    if record.lifecycle.get("cold_start_s") is None:
        missing.append("no cold start was measured")
    if not record.completed_rungs:
        missing.append("no capacity rung completed")
    if view.kv_pool is None:
        missing.append("the engine's KV pool was not read")
    return missing


def _proves_identity_and_gates(view: RunView) -> list[str]:
    record = view.record
    proves: list[str] = []
    identity = record.identity
    matched = [c for c in identity.get("checks") or [] if c.get("ok") is True]
    if matched:
        parts = [f"{c.get('field')} {_shown(c.get('expected'))} (from {c.get('source') or 'the server'})"
                 for c in matched]
        not_pinned = view.unpinned
        if identity.get("status") != "verified":
            lead = "these pinned identity fields matched"
        elif not_pinned:
            lead = f"every identity field the recipe names was checked and matched ({'; '.join(not_pinned)})"
        else:
            lead = "the server that answered is the recipe's pinned identity, every pinned field checked"
        proves.append(f"{lead}: " + ", ".join(parts))
    cold = record.lifecycle.get("cold_start_s")
    if record.mode is RunMode.MANAGED and cold is not None:
        proves.append(f"a cold managed start passed health and a real completion in {cold:.1f} seconds")
    preflight = preflight_of(record.gates)
    if preflight["passed"]:
        proves.append(f"the functional preflight passed {preflight['text']}")
    for gate in record.gates:
        if gate.gate in (*PREFLIGHT_GATES, *SECTION_GATES, "identity") or gate.outcome is not GateOutcome.PASSED:
            continue
        summary = first_line(gate.summary, 300)
        said = gate_proves(gate.to_dict())
        if said and summary and summary.lower() not in ("pass", "passed") and summary not in said:
            said = f"{said} ({summary})"
        said = said or summary
        proves.append(f"{_label(gate)}: {said}" if said else f"{_label(gate)} passed")
    return proves


def _proves_capacity(record: RunRecord) -> list[str]:
    proves: list[str] = []
    top = record.largest_rung
    if top is not None:
        proves.append(
            f"a request of {fmt_num(top.prompt_tokens)} API-reported prompt tokens completed "
            f"({fmt_num(top.ttft_s, 3)} s TTFT, {fmt_num(top.e2e_s, 3)} s E2E, "
            f"{fmt_num(top.prefill_tok_s, 0)} effective prefill tok/s, "
            f"{fmt_decode(top.decode_tok_s, top.decode_source, top.decode_not_measured)}); "
            f"{len(record.completed_rungs)} ladder rung(s) completed")
        probed = [r.verdict.smoke for r in record.ladder if r.verdict.smoke is not None]
        if probed and all(probed):
            proves.append(f"a short functional smoke passed after every context probe ({len(probed)}/{len(probed)})")
    for rung in record.ladder:
        if rung.verdict.rejected_as_expected:
            size = rung.prompt_tokens or rung.target
            after = " and the server stayed healthy" if rung.verdict.healthy else ""
            proves.append(f"a {fmt_num(size)}-token prompt beyond max_model_len was rejected with HTTP "
                          f"{rung.status_code}{after}")
    engine = record.engine
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
    teardown = record.lifecycle.get("teardown") or {}
    if record.mode is RunMode.MANAGED and teardown.get("clean") is True:
        proves.append("teardown left no process, /dev/shm file or container of the run")
    return proves


def _capacity_gaps(view: RunView) -> list[str]:
    items: list[str] = []
    limit = view.max_model_len
    floor, largest = view.prompt_floor, view.largest_prompt
    if largest is None:
        items.append("any request near the configured context: no capacity rung completed"
                     + (f" (configured {fmt_num(limit)} tokens)" if limit else ""))
    else:
        if floor is not None and largest <= floor:
            items.append(f"a request above {short_tokens(floor)} prompt tokens "
                         f"(the largest measured was {fmt_num(largest)})")
        elif limit and largest < limit:
            items.append(f"a request between {fmt_num(largest)} prompt tokens (the largest measured) and "
                         f"the configured {fmt_num(limit)}")
        kv = view.kv_pool
        if kv is not None and kv > largest:
            items.append(f"that one request can use the whole reported KV pool of {fmt_num(kv)} tokens "
                         f"(the largest measured prompt was {fmt_num(largest)})")
    load_gaps = _load_gaps(view)
    if load_gaps:  # a passed load gate measured more than the concurrency burst; its bound supersedes
        return items + load_gaps
    if view.concurrency_passed:
        n = view.concurrency_proven
        items.append(f"concurrency beyond {n} active requests" if n is not None
                     else "concurrency beyond the measured request count")
    else:
        items.append("concurrency beyond one active request")
    return items


def _load_gaps(view: RunView) -> list[str]:
    """What a passed load gate leaves open: load above what it measured, and SLOs nobody chose."""
    if view.passed_load is None:
        return []
    top = view.sustained_load
    items = [f"sustained load above {top} requests in flight within the SLOs" if top is not None
             else "sustained load above the measured levels"]
    caveat = slo_caveat(view.passed_load.measurements.get("slos_set_by"))
    if caveat:
        items.append(f"load at an operator's target: {caveat}")
    return items


_NOT_RUN_WORDS = {GateOutcome.SKIPPED: "not applicable or skipped", GateOutcome.ABSENT: "not run",
                  GateOutcome.PENDING: "unfinished"}


def _does_not_prove(view: RunView, rows: Sequence[CoverageRow]) -> list[str]:
    record = view.record
    items = _capacity_gaps(view)
    items.append("broad task-quality equivalence: bounded checks are not a benchmark")
    for row in rows:
        if row.outcome in _NOT_RUN_WORDS:
            items.append(f"{row.title} (gate {row.gate}, {row.family}): {_NOT_RUN_WORDS[row.outcome]}: {row.reason}")
    if record.mode is RunMode.DIRECT_ONLY:
        items.append("a cold start or a clean teardown of this endpoint: it was used direct-only")
    identity = record.identity
    if identity.get("status") in ("unverified", "partially-verified"):
        unknown = [str(c.get("field")) + (f" ({c.get('note')})" if c.get("note") else "")
                   for c in identity.get("checks") or [] if c.get("ok") is None and c.get("pinned", True)]
        items.append("that the served model is the recipe's pinned identity in every pinned field"
                     + (f"; not checked: {'; '.join(unknown)}" if unknown else ""))
    device = str(record.engine.get("device") or "").lower()
    if device == "cpu" or (record.hardware.get("source") == "n/a" and not record.hardware.get("gpu_count")):
        items.append("anything about GPU memory or GPU throughput: the engine ran without a GPU"
                     if device == "cpu" else "anything about the GPUs: NVML was not available")
    return items


def _failure_caveats(record: RunRecord) -> list[str]:
    caveats: list[str] = []
    if record.status == "incomplete":
        caveats.append("the run is incomplete: " + ("; ".join(record.status_reasons) or "no reason recorded"))
    for gate in record.gates:
        failed = [a for a in gate.attempts if not a.ok and not a.expected_rejection]
        if not failed:
            continue
        first = failed[0]
        code = f"HTTP {first.status_code}" if first.status_code else (first.error_kind or "error")
        why = first_line(first.error, 160)
        caveats.append(
            f"gate {gate.gate} retains {len(failed)} failed attempt(s), not retried away; the first "
            f"({first.label}) was {code}" + (f": {why}" if why else ""))
    for rung in record.ladder:
        if rung.verdict.failed:
            code = f"HTTP {rung.status_code}" if rung.status_code else "no response"
            why = first_line(rung.error, 160)
            caveats.append(f"the {rung.target_label} context target returned {code}"
                           + (f" ({why})" if why else "") + "; it remains a real failed attempt")
    return caveats


def _ladder_caveats(record: RunRecord) -> list[str]:
    caveats: list[str] = []
    ladder = record.ladder
    for rung in ladder:
        err = rung.calibration_error
        if isinstance(err, int) and err != 0 and isinstance(rung.prompt_tokens, int):
            caveats.append(
                f"the {rung.target_label} target ({fmt_num(rung.target)}) produced "
                f"{fmt_num(rung.prompt_tokens)} API-reported prompt tokens (calibration error {err:+,}); "
                "claims use the reported count")
    measured = sorted((r for r in ladder if isinstance(r.prompt_tokens, int) and isinstance(r.target, int)),
                      key=lambda r: (r.target, r.index or 0))
    for earlier, later in itertools.pairwise(measured):
        if later.target > earlier.target and int(later.prompt_tokens or 0) < int(earlier.prompt_tokens or 0):
            caveats.append(
                f"requested targets were non-monotonic: {earlier.target_label} produced "
                f"{fmt_num(earlier.prompt_tokens)} actual tokens while {later.target_label} produced "
                f"{fmt_num(later.prompt_tokens)}; a target label is not a capacity measurement")
            break
    for rung in ladder:
        server = rung.server_prompt_tokens
        if isinstance(server, int) and isinstance(rung.prompt_tokens, int) and server != rung.prompt_tokens:
            caveats.append(f"the {rung.target_label} rung: the API reported {fmt_num(rung.prompt_tokens)} "
                           f"prompt tokens but the server's /metrics counted {fmt_num(server)}")
    if record.completed_rungs:
        caveats.append("one request per target supports a capacity comparison, not a performance ranking; "
                       "small timing deltas are bounded observations")
    return caveats


def no_gate_failed(excused: Sequence[str]) -> str:
    """What the gates that ran did, in words: passed, or passed or excused (naming the excused)."""
    if not excused:
        return "every gate that ran passed"
    return ("every gate that ran passed or was excused by a declaration (measured failing under a declaration: "
            + ", ".join(excused) + ")")


def _caveats(view: RunView) -> list[str]:
    record = view.record
    caveats = _failure_caveats(record) + _ladder_caveats(record)
    caveats += [f"gate {name} is declared not applicable in the recipe but passed in this run: the declaration "
                "no longer holds" for name in declared(record, GateOutcome.PASSED)]
    for check in record.identity.get("checks") or []:
        if check.get("ok") is False:
            caveats.append(f"provenance mismatch: {check.get('field')} expected {check.get('expected')!r}, "
                           f"observed {check.get('observed')!r}")
    limit, kv = view.max_model_len, view.kv_pool
    if kv is not None and limit and kv < limit:
        caveats.append(f"the engine-reported KV pool ({fmt_num(kv)} tokens) is below the configured "
                       f"{fmt_num(limit)}-token context")
    if record.mode is RunMode.DIRECT_ONLY:
        caveats.append("direct-only: this run did not start or stop the endpoint; its owner and operating "
                       "mode are outside the evidence")
    return caveats


def _verdict(view: RunView, rows: Sequence[CoverageRow]) -> tuple[Verdict, list[str]]:
    blocking = _blocking_reasons(view.record)
    if blocking:
        return Verdict.NO_PROMOTION, blocking
    ran = no_gate_failed(view.excused)
    if view.record.mode is RunMode.DIRECT_ONLY:
        return Verdict.DIRECT_ONLY, [f"{ran} on an endpoint this run did not start or stop"]
    missing = _missing_evidence(view, rows)
    if missing:
        return Verdict.HEALTHY, [f"{ran}, but the qualification is incomplete: " + "; ".join(missing)]
    return Verdict.PROMOTABLE, [f"every gate of the coverage ran and passed ({len(rows)}: every registered gate of "
                               "every family, and every other gate that ran) on a managed cold start, with a "
                               "verified and pinned identity, a completed capacity ladder, engine facts and a clean "
                               "teardown; a single run is at most promotable (priority-challenger needs an A/B "
                               "against the control arm)"]


def decide(record: RunRecord) -> Decision:
    """The decision on one run's public record (see the module docstring and :func:`public_record`)."""
    view = RunView(record)
    rows = coverage(record)
    verdict, reasons = _verdict(view, rows)
    return Decision(verdict=verdict, reasons=reasons, gates=rows,
                    proves=_proves_identity_and_gates(view) + _proves_capacity(record),
                    does_not_prove=_does_not_prove(view, rows), caveats=_caveats(view))


def with_decision(report: Mapping[str, Any], decision: Decision | None = None) -> dict[str, Any]:
    """The public report with its ``decision`` block: the one place a report and its verdict meet.

    The run's reports get it through ``report.writer.arm_report``; a report read back from disk
    or rebuilt by a script gets it here. ``decision`` defaults to :func:`decide` on the report
    read back as a typed record (:func:`public_record`), the same rule either way. An
    existing decision is replaced where it stands; a new one goes right after
    ``ladder_summary``, where the schema and the written reports have it.
    """
    block = (decision or decide(public_record(report))).to_dict()
    if "decision" in report:
        return {**report, "decision": block}
    out: dict[str, Any] = {}
    for key, value in report.items():
        out[key] = value
        if key == "ladder_summary":
            out["decision"] = block
    out.setdefault("decision", block)
    return out


def _shown(value: Any) -> str:
    return fmt_num(value) if isinstance(value, int) and not isinstance(value, bool) else str(value)
