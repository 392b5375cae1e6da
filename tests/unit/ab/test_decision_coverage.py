"""An A/B's candidate arm earns priority-challenger only when its own report is promotable: a
candidate run with ``--vllmqual-arm-marks 'candidate=not openai_sdk'`` left a gate out, so it is
not promotable and the comparison says why."""

from __future__ import annotations

from pathlib import Path

from support.campaign_samples import pin_revision
from support.equivalence_samples import attach_probe, probe_body
from support.report_samples import blank_sanitizer

from pytest_vllmqual.ab.compare import compare_reports
from unit.ab.test_compare import redecide, reference_report, with_every_gate


def test_a_candidate_arm_that_deselected_openai_sdk_is_no_priority_challenger(tmp_path: Path) -> None:
    control, replay = reference_report("control-8192.json"), reference_report("replay-8192.json")
    candidate = with_every_gate(reference_report("candidate-4096.json"))
    candidate["lifecycle"]["cold_start_s"] = 318.0
    pin_revision(candidate)
    assert redecide(candidate)["decision"]["verdict"] == "promotable", candidate["decision"]["reasons"]
    candidate["gates"] = [g for g in candidate["gates"] if g["gate"] != "openai_sdk"]
    candidate["run"]["deselected_gates"] = [
        {"gate": "openai_sdk", "reason": "deselected by --vllmqual-arm-marks candidate='not openai_sdk'"}]
    redecide(candidate)
    for role, report in (("control", control), ("candidate", candidate), ("replay", replay)):
        attach_probe(report, tmp_path, role, probe_body())
    result = compare_reports(control, candidate, replay=replay, sanitizer=blank_sanitizer(),
                             folders=dict.fromkeys(("control", "candidate", "replay"), tmp_path))
    assert result["verdict"] not in ("priority-challenger", "promotable"), result["decision"]["reasons"]
    assert any("the candidate arm's own evidence is healthy" in r and "openai_sdk" in r
               for r in result["decision"]["reasons"]), result["decision"]["reasons"]
    assert candidate["decision"]["verdict"] == "healthy"
