"""A campaign arm's requirements, evaluated on its public report dict.

``evaluate_requirement(report, name)`` says whether one required name is met and why, in the
words a campaign record quotes ("kv_pool: 283,917 < 393,216"; "gates: every gate that ran passed
or was excused by a declaration (18 passed, 3 skipped; measured failing under a declaration:
quality_intelligence, quality_session_recall)": a declared gate that measured failing is excused,
never counted as passed). Names with a built-in reading
(``BUILTIN_REQUIREMENTS``: startup, kv_pool, ladder, preflight, gates) are read from the
report's sections, the ladder through each rung's verdict; any other name is a gate name whose
outcome decides. ``campaign`` orders the arms and applies these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.gates.registry import COLD_START_GATE, KV_POOL_GATE, LADDER_GATE, PREFLIGHT_GATES
from pytest_vllmqual.privacy.failure_reason import first_line
from pytest_vllmqual.recipe.gate_settings import min_kv_tokens
from pytest_vllmqual.records import GateOutcome, RunMode, rung_verdict
from pytest_vllmqual.report.decision import declared_failing, public_record
from pytest_vllmqual.report.query import (
    gate_outcome,
    largest_rung,
    preflight_summary,
    recipe_value,
)

__all__ = ["BUILTIN_REQUIREMENTS", "Requirement", "evaluate_requirement"]

BUILTIN_REQUIREMENTS = ("gates", "startup", "kv_pool", "ladder", "preflight")

_LADDER_GATES = (LADDER_GATE,)
_FAILING = (GateOutcome.FAILED, GateOutcome.ERROR)


@dataclass(frozen=True)
class Requirement:
    """One required gate of one arm, evaluated on its report."""

    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _startup_failure(report: Mapping[str, Any]) -> str | None:
    life = report.get("lifecycle") or {}
    error = life.get("startup_error")
    if isinstance(error, Mapping) and error:
        return f"startup failed ({error.get('status') or 'error'}): {first_line(error.get('message'), 160)}"
    status = life.get("startup_status")
    if status not in (None, "ready"):
        return f"startup status {status}"
    return None


def _gate_reason(report: Mapping[str, Any], name: str) -> str:
    for gate in report.get("gates") or []:
        if gate.get("gate") == name and gate.get("outcome") != "passed":
            why = first_line(gate.get("reason"), 200)
            return f"gate {gate.get('outcome')}" + (f": {why}" if why else "")
    return "passed"


def _kv_pool(report: Mapping[str, Any]) -> Requirement:
    engine = report.get("engine") or {}
    tokens = _int(engine.get("kv_cache_tokens"))
    threshold: int | None = None
    for gate in report.get("gates") or []:
        if gate.get("gate") == KV_POOL_GATE:
            threshold = _int((gate.get("thresholds") or {}).get("min_kv_tokens")) or threshold
    threshold = threshold or min_kv_tokens(recipe_value(report))
    basis = "recipe minimum"
    if threshold is None:
        threshold = _int(recipe_value(report, "serve", "max_model_len"))
        basis = "max_model_len"
    outcome = gate_outcome(report, KV_POOL_GATE)
    if tokens is None:
        why = _startup_failure(report)
        return Requirement("kv_pool", False, "the engine reported no KV pool" + (f" ({why})" if why else ""))
    if threshold is None:
        ok = outcome == "passed"
        return Requirement("kv_pool", ok, f"{tokens:,} tokens" + ("" if ok else f"; {_gate_reason(report, KV_POOL_GATE)}"))
    met = tokens >= threshold
    detail = f"{tokens:,} {'≥' if met else '<'} {threshold:,}" + ("" if basis == "recipe minimum" else f" ({basis})")
    if outcome in _FAILING and met:
        return Requirement("kv_pool", False, f"{detail}; {_gate_reason(report, KV_POOL_GATE)}")
    return Requirement("kv_pool", met if outcome in ("passed", "absent", "skipped") else False, detail)


def _ladder(report: Mapping[str, Any]) -> Requirement:
    floor = _int(recipe_value(report, "gates", "capacity", "min_largest_prompt"))
    top = largest_rung(report)
    largest = _int(top.get("prompt_tokens")) if top is not None else None
    rungs = list(report.get("ladder") or [])
    verdicts = [rung_verdict(r) for r in rungs]
    probed = [v for v in verdicts if v.smoke is not None]
    smoke_failed = [v for v in probed if v.smoke is False]
    failed = [v for v in verdicts if v.failed]
    outcome, gate_name = "absent", LADDER_GATE
    for name in _LADDER_GATES:
        if gate_outcome(report, name) != "absent":
            outcome = gate_outcome(report, name)
            gate_name = name
            break
    problems: list[str] = []
    if largest is None:
        why = _startup_failure(report)
        problems.append("no capacity rung completed" + (f" ({why})" if why else ""))
    elif floor is not None and largest <= floor:
        problems.append(f"largest actual prompt {largest:,} ≤ {floor:,}")
    if smoke_failed:
        problems.append(f"post-probe smoke failed after {len(smoke_failed)} rung(s)")
    if outcome in _FAILING and not problems:
        problems.append(f"{_gate_reason(report, gate_name)}")
    if outcome == "absent" and not rungs:
        problems = problems or ["did not run"]
    if problems:
        return Requirement("ladder", False, "; ".join(problems))
    detail = f"largest actual prompt {largest:,}" + (f" > {floor:,}" if floor is not None else "")
    if probed:
        detail += f"; post-probe smoke passed after {len(probed)}/{len(probed)} probes"
    if failed:
        detail += f"; {len(failed)} retained failed rung(s)"
    return Requirement("ladder", True, detail)


def _startup(report: Mapping[str, Any]) -> Requirement:
    why = _startup_failure(report)
    if why:
        return Requirement("startup", False, why)
    cold = (report.get("lifecycle") or {}).get("cold_start_s")
    if RunMode.of((report.get("run") or {}).get("mode")) is RunMode.DIRECT_ONLY:
        return Requirement("startup", True, "direct-only: the endpoint was already serving")
    if isinstance(cold, int | float):
        return Requirement("startup", True, f"ready in {cold:.1f} s")
    if gate_outcome(report, COLD_START_GATE) == "passed" or report.get("gates"):
        return Requirement("startup", True, "ready")
    return Requirement("startup", False, "the server never became ready (no gate ran)")


def _preflight(report: Mapping[str, Any]) -> Requirement:
    summary = report.get("preflight") or preflight_summary(report)
    ok = summary.get("passed") == summary.get("total") and bool(summary.get("total"))
    missing = [str(g.get("gate")) for g in summary.get("gates") or [] if g.get("outcome") != "passed"]
    return Requirement("preflight", ok, str(summary.get("summary"))
                       + ("" if ok else f"; not passed: {', '.join(missing or list(PREFLIGHT_GATES))}"))


def _all_gates(report: Mapping[str, Any]) -> Requirement:
    run = report.get("run") or {}
    gates = report.get("gates") or []
    bad = [g for g in gates if g.get("outcome") in _FAILING]
    if bad:
        first = bad[0]
        why = first_line(first.get("reason"), 200)
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        return Requirement("gates", False, f"gate {first.get('gate')} {first.get('outcome')}"
                           + (f": {why}" if why else "") + more)
    if run.get("status") != "complete":
        reasons = "; ".join(run.get("status_reasons") or []) or _startup_failure(report) or "no reason recorded"
        return Requirement("gates", False, f"the run is incomplete: {reasons}")
    if not gates:
        return Requirement("gates", False, "no gate ran")
    excused = declared_failing(public_record(report))
    passed = sum(1 for g in gates if g.get("outcome") == GateOutcome.PASSED)
    counted = f"{passed} passed" + (f", {len(gates) - passed} skipped" if passed < len(gates) else "")
    if excused:
        return Requirement("gates", True, f"every gate that ran passed or was excused by a declaration ({counted}; "
                                          f"measured failing under a declaration: {', '.join(excused)})")
    return Requirement("gates", True, f"every gate that ran passed ({counted})")


def evaluate_requirement(report: Mapping[str, Any], name: str) -> Requirement:
    """Is requirement ``name`` met by this arm report? (see the module docstring)."""
    if name == "gates":
        return _all_gates(report)
    if name == "kv_pool":
        return _kv_pool(report)
    if name == "ladder":
        return _ladder(report)
    if name == "startup":
        return _startup(report)
    if name == "preflight":
        return _preflight(report)
    outcome = gate_outcome(report, name)
    if outcome == "passed":
        return Requirement(name, True, "passed")
    if outcome == "absent":
        why = _startup_failure(report)
        return Requirement(name, False, "did not run" + (f" ({why})" if why else ""))
    return Requirement(name, False, _gate_reason(report, name))
