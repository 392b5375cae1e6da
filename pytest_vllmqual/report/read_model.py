"""The read model every judge reads: a report read once into the typed record, with the facts derived from it.

A public report is read once (:func:`public_record`) into a
:class:`~pytest_vllmqual.records.RunRecord`, and :class:`RunView` carries the facts the judges
ask of it, each written once here: whether the server became ready (and why not), the largest
prompt a capacity rung completed and the floor the recipe sets for it, the concurrency a passed concurrency gate proved, the load a
passed load gate sustained within its SLOs, the KV pool against its minimum, the context the
claims measure against, why the run is not pinned, and which gates a declaration excused. The
single run's decision (``report.decision``), the A/B decision (``ab.decision``) and the
campaign's requirements and qualification (``campaign.requirements``, ``campaign.qualify``)
read these facts; none re-derives them from the report dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pytest_vllmqual.gates.identity import IdentityResult
from pytest_vllmqual.gates.registry import KV_POOL_GATE
from pytest_vllmqual.privacy.failure_reason import first_line
from pytest_vllmqual.recipe.gate_settings import min_kv_tokens
from pytest_vllmqual.records import (
    GateOutcome,
    GateRecord,
    RungRecord,
    RunMode,
    RunRecord,
    StartupStatus,
    Verdict,
    worst_outcome,
)

__all__ = ["KvMinimum", "RunView", "declared", "declared_failing", "max_model_len", "public_record", "unpinned",
           "verdict_of"]


_CONCURRENCY_GATE = "concurrency"
_LOAD_GATE = "load"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def public_record(report: Mapping[str, Any]) -> RunRecord:
    """A public report read back as the typed record the judges read (missing sections empty)."""
    run = report.get("run") or {}
    recipe = report.get("recipe") or {}
    return RunRecord(
        run_id=str(run.get("id") or ""), arm=str(run.get("arm") or ""), recipe_name=str(recipe.get("name") or ""),
        recipe_path="", recipe_sha256=str(recipe.get("sha256") or ""), recipe_content=dict(recipe.get("content") or {}),
        started_utc=str(run.get("started_utc") or ""), finished_utc=run.get("finished_utc"),
        mode=RunMode.of(run.get("mode")), status=str(run.get("status") or "complete"),
        status_reasons=[str(r) for r in run.get("status_reasons") or []],
        identity=dict(report.get("identity") or {}), hardware=dict(report.get("hardware") or {}),
        lifecycle=dict(report.get("lifecycle") or {}), engine=dict(report.get("engine") or {}),
        gates=[GateRecord.from_dict(g) for g in report.get("gates") or [] if isinstance(g, Mapping)],
        ladder=[RungRecord.from_dict(r) for r in report.get("ladder") or [] if isinstance(r, Mapping)],
        deselected_gates=[dict(d) for d in run.get("deselected_gates") or [] if isinstance(d, Mapping)],
    )


def max_model_len(identity: Mapping[str, Any], recipe_content: Mapping[str, Any]) -> int | None:
    """The context the claims measure against: what the server reported it served
    (``/v1/models``, the identity's observed value) when known, else what the recipe asked for.

    A server can serve another length than the recipe asked (vLLM derives one when none is
    given, a docker line can override it): a capacity claim is about the server that ran. When
    the two differ, the identity check already names the mismatch.
    """
    for value in ((identity.get("observed") or {}).get("max_model_len"),
                  (recipe_content.get("serve") or {}).get("max_model_len"),
                  (identity.get("expected") or {}).get("max_model_len")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def unpinned(record: RunRecord) -> list[str]:
    """Why the served model is not pinned by content: the recipe says so, or its identity checks
    pin neither the model nor a container's image (a pinned run names both). Empty when pinned;
    a campaign qualifies only a pinned arm (``campaign.qualify``)."""
    said = ["the recipe says pinned: false"] if record.recipe_value("pinned") is False else []
    return said + IdentityResult.from_dict(record.identity).unpinned


def declared(record: RunRecord, measured: GateOutcome) -> list[str]:
    """Gates the recipe declares not applicable whose run measured ``measured``, by name."""
    return sorted({g.gate for g in record.gates if g.measurements.get("declared_not_applicable")
                   and g.measurements.get("measured_outcome") == measured.value})


def declared_failing(record: RunRecord) -> list[str]:
    """Gates a declaration excused: declared not applicable by the recipe, measured failing in this
    run and so recorded skipped. They neither fail the run nor count as passed."""
    return declared(record, GateOutcome.FAILED)


def verdict_of(decision: Mapping[str, Any] | None) -> Verdict:
    """A stored decision's verdict (no-promotion when it has none, or one this version does not know)."""
    try:
        return Verdict(str((decision or {}).get("verdict") or Verdict.NO_PROMOTION))
    except ValueError:
        return Verdict.NO_PROMOTION


@dataclass(frozen=True)
class KvMinimum:
    """The KV pool a run must report: the kv-pool gate's threshold, else the recipe's minimum
    (``basis`` "recipe minimum"), else its configured ``max_model_len`` (``basis`` "max_model_len")."""

    tokens: int
    basis: str


@dataclass(frozen=True)
class RunView:
    """One report as the judges read it: the typed record, the stored decision, and the facts derived from them."""

    record: RunRecord
    #: The decision block the report carries (empty when it has none).
    decision: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> RunView:
        """Read a public report once."""
        return cls(public_record(report), dict(report.get("decision") or {}))

    @property
    def verdict(self) -> Verdict:
        """The report's own verdict (see :func:`verdict_of`)."""
        return verdict_of(self.decision)

    @property
    def first_reason(self) -> str | None:
        """The first reason of the stored decision (None when it gives none)."""
        reasons = self.decision.get("reasons") or []
        return str(reasons[0]) if reasons else None

    @cached_property
    def startup_failure(self) -> str | None:
        """Why the server did not become ready, in words (None when nothing says it failed)."""
        life = self.record.lifecycle
        error = life.get("startup_error")
        if isinstance(error, Mapping) and error:
            return f"startup failed ({error.get('status') or 'error'}): {first_line(error.get('message'), 160)}"
        status = life.get("startup_status")
        if status not in (None, StartupStatus.READY):
            return f"startup status {status}"
        return None

    @cached_property
    def ready(self) -> bool:
        """The server passed readiness (managed) or answered as found (direct-only): its startup
        status says ready, or, where the report records none, the run completed."""
        if self.record.lifecycle.get("startup_status") is not None:
            return self.startup_failure is None
        return self.record.status == "complete"

    @cached_property
    def largest_prompt(self) -> int | None:
        """The most API-reported prompt tokens a completed capacity rung carried (None when none completed)."""
        top = self.record.largest_rung
        return None if top is None else top.prompt_tokens

    @cached_property
    def prompt_floor(self) -> int | None:
        """The prompt the recipe's capacity gate must exceed (``gates.capacity.min_largest_prompt``; None when unset)."""
        return _int(self.record.recipe_value("gates", "capacity", "min_largest_prompt"))

    @cached_property
    def concurrency_passed(self) -> bool:
        """Every run of the concurrency gate passed."""
        return worst_outcome(g.outcome for g in self.record.gates_named(_CONCURRENCY_GATE)) is GateOutcome.PASSED

    @cached_property
    def concurrency_proven(self) -> int | None:
        """The most simultaneous requests the passed concurrency gate showed (None when it did not
        pass, or counted none)."""
        if not self.concurrency_passed:
            return None
        counts = [n for g in self.record.gates_named(_CONCURRENCY_GATE) if (n := _int(g.measurements.get("requests")))]
        return max(counts) if counts else None

    @cached_property
    def passed_load(self) -> GateRecord | None:
        """The first run of the load gate that passed (None when none did)."""
        return next((g for g in self.record.gates_named(_LOAD_GATE) if g.outcome is GateOutcome.PASSED), None)

    @cached_property
    def sustained_load(self) -> int | None:
        """The highest level a passed load gate held within its SLOs (its search's answer, else its
        top promoted level), or None when no passed load gate gives one."""
        for gate in self.record.gates_named(_LOAD_GATE):
            if gate.outcome is not GateOutcome.PASSED:
                continue
            best, levels = _int(gate.measurements.get("max_at_slo")), gate.measurements.get("promoted_levels")
            if best is not None:
                return best
            if isinstance(levels, list) and levels:
                return max(int(level) for level in levels)
        return None

    @cached_property
    def max_model_len(self) -> int | None:
        """The context the claims measure against (see :func:`max_model_len`)."""
        return max_model_len(self.record.identity, self.record.recipe_content)

    @property
    def kv_pool(self) -> int | None:
        """The KV pool the engine reported, in tokens (None when it was not read)."""
        return _int(self.record.engine.get("kv_cache_tokens"))

    @cached_property
    def recipe_kv_minimum(self) -> int | None:
        """The KV pool the recipe's gates ask for (None when they ask for none)."""
        return min_kv_tokens(self.record.recipe_content)

    @cached_property
    def kv_minimum(self) -> KvMinimum | None:
        """The KV pool this run must report (see :class:`KvMinimum`; None when nothing sets one)."""
        threshold: int | None = None
        for gate in self.record.gates_named(KV_POOL_GATE):
            threshold = _int(gate.thresholds.get("min_kv_tokens")) or threshold
        threshold = threshold or self.recipe_kv_minimum
        if threshold is not None:
            return KvMinimum(threshold, "recipe minimum")
        configured = _int(self.record.recipe_value("serve", "max_model_len"))
        return None if configured is None else KvMinimum(configured, "max_model_len")

    def started_at(self, context_tokens: int) -> bool:
        """The run proved a startup at ``context_tokens``: ready, configured with at least that
        context and a reported KV pool at least that large (a later death does not undo it)."""
        return ((self.max_model_len or 0) >= context_tokens and (self.kv_pool or 0) >= context_tokens
                and self.ready)

    @cached_property
    def unpinned(self) -> list[str]:
        """Why the run is not pinned, in words (empty when it is; see :func:`unpinned`)."""
        return unpinned(self.record)

    @property
    def pinned(self) -> bool:
        return not self.unpinned

    @cached_property
    def excused(self) -> list[str]:
        """The gates a declaration excused (see :func:`declared_failing`)."""
        return declared_failing(self.record)

    def gate_outcome(self, name: str) -> GateOutcome:
        """One outcome per gate name (the worst of its runs); absent when none ran."""
        return worst_outcome(g.outcome for g in self.record.gates_named(name))
