"""A campaign arm's requirements, evaluated on its public report dict.

``evaluate_requirement(report, name)`` says whether one required name is met and why, reading the
report's facts from its read model (:class:`~pytest_vllmqual.report.read_model.RunView`), in the
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
from pytest_vllmqual.records import GateOutcome, RunMode
from pytest_vllmqual.report.gate_coverage import preflight_of
from pytest_vllmqual.report.read_model import RunView

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


def _gate_reason(view: RunView, name: str) -> str:
    for gate in view.record.gates_named(name):
        if gate.outcome is not GateOutcome.PASSED:
            why = first_line(gate.reason, 200)
            return f"gate {gate.outcome}" + (f": {why}" if why else "")
    return "passed"


def _kv_pool(view: RunView) -> Requirement:
    tokens, minimum = view.kv_pool, view.kv_minimum
    outcome = view.gate_outcome(KV_POOL_GATE)
    if tokens is None:
        why = view.startup_failure
        return Requirement("kv_pool", False, "the engine reported no KV pool" + (f" ({why})" if why else ""))
    if minimum is None:
        ok = outcome == "passed"
        return Requirement("kv_pool", ok, f"{tokens:,} tokens" + ("" if ok else f"; {_gate_reason(view, KV_POOL_GATE)}"))
    met = tokens >= minimum.tokens
    detail = (f"{tokens:,} {'≥' if met else '<'} {minimum.tokens:,}"
              + ("" if minimum.basis == "recipe minimum" else f" ({minimum.basis})"))
    if outcome in _FAILING and met:
        return Requirement("kv_pool", False, f"{detail}; {_gate_reason(view, KV_POOL_GATE)}")
    return Requirement("kv_pool", met if outcome in ("passed", "absent", "skipped") else False, detail)


def _ladder(view: RunView) -> Requirement:
    floor, largest = view.prompt_floor, view.largest_prompt
    rungs = view.record.ladder
    verdicts = [r.verdict for r in rungs]
    probed = [v for v in verdicts if v.smoke is not None]
    smoke_failed = [v for v in probed if v.smoke is False]
    failed = [v for v in verdicts if v.failed]
    outcome, gate_name = "absent", LADDER_GATE
    for name in _LADDER_GATES:
        if view.gate_outcome(name) != "absent":
            outcome = view.gate_outcome(name)
            gate_name = name
            break
    problems: list[str] = []
    if largest is None:
        why = view.startup_failure
        problems.append("no capacity rung completed" + (f" ({why})" if why else ""))
    elif floor is not None and largest <= floor:
        problems.append(f"largest actual prompt {largest:,} ≤ {floor:,}")
    if smoke_failed:
        problems.append(f"post-probe smoke failed after {len(smoke_failed)} rung(s)")
    if outcome in _FAILING and not problems:
        problems.append(f"{_gate_reason(view, gate_name)}")
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


def _startup(view: RunView) -> Requirement:
    why = view.startup_failure
    if why:
        return Requirement("startup", False, why)
    cold = view.record.lifecycle.get("cold_start_s")
    if view.record.mode is RunMode.DIRECT_ONLY:
        return Requirement("startup", True, "direct-only: the endpoint was already serving")
    if isinstance(cold, int | float):
        return Requirement("startup", True, f"ready in {cold:.1f} s")
    if view.gate_outcome(COLD_START_GATE) == "passed" or view.record.gates:
        return Requirement("startup", True, "ready")
    return Requirement("startup", False, "the server never became ready (no gate ran)")


def _preflight(report: Mapping[str, Any], view: RunView) -> Requirement:
    summary = report.get("preflight") or preflight_of(view.record.gates)
    ok = summary.get("passed") == summary.get("total") and bool(summary.get("total"))
    missing = [str(g.get("gate")) for g in summary.get("gates") or [] if g.get("outcome") != "passed"]
    return Requirement("preflight", ok, str(summary.get("summary"))
                       + ("" if ok else f"; not passed: {', '.join(missing or list(PREFLIGHT_GATES))}"))


def _all_gates(view: RunView) -> Requirement:
    record = view.record
    gates = record.gates
    bad = [g for g in gates if g.outcome in _FAILING]
    if bad:
        first = bad[0]
        why = first_line(first.reason, 200)
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        return Requirement("gates", False, f"gate {first.gate} {first.outcome}" + (f": {why}" if why else "") + more)
    if record.status != "complete":
        reasons = "; ".join(record.status_reasons) or view.startup_failure or "no reason recorded"
        return Requirement("gates", False, f"the run is incomplete: {reasons}")
    if not gates:
        return Requirement("gates", False, "no gate ran")
    excused = view.excused
    passed = sum(1 for g in gates if g.outcome is GateOutcome.PASSED)
    counted = f"{passed} passed" + (f", {len(gates) - passed} skipped" if passed < len(gates) else "")
    if excused:
        return Requirement("gates", True, f"every gate that ran passed or was excused by a declaration ({counted}; "
                                          f"measured failing under a declaration: {', '.join(excused)})")
    return Requirement("gates", True, f"every gate that ran passed ({counted})")


def evaluate_requirement(report: Mapping[str, Any], name: str, view: RunView | None = None) -> Requirement:
    """Is requirement ``name`` met by this arm report? (see the module docstring). ``view``: the
    report already read (:class:`RunView`), so a campaign reads each report once."""
    view = view or RunView.of(report)
    if name == "gates":
        return _all_gates(view)
    if name == "kv_pool":
        return _kv_pool(view)
    if name == "ladder":
        return _ladder(view)
    if name == "startup":
        return _startup(view)
    if name == "preflight":
        return _preflight(report, view)
    outcome = view.gate_outcome(name)
    if outcome == "passed":
        return Requirement(name, True, "passed")
    if outcome == "absent":
        why = view.startup_failure
        return Requirement(name, False, "did not run" + (f" ({why})" if why else ""))
    return Requirement(name, False, _gate_reason(view, name))
