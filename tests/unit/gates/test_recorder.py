"""How a gate ended, decided without pytest (``gates.recorder.end_phase``): the plugin reads
plain values off pytest's report and the recorder writes the outcome, status and reason."""

from __future__ import annotations

from pytest_vllmqual.errors import LaunchError, ServerGoneError
from pytest_vllmqual.gates.recorder import end_phase, failed_on_its_own
from pytest_vllmqual.records import Attempt, FailureKind, GateOutcome, GateRecord, ServerStatus, StartupStatus


def _record() -> GateRecord:
    return GateRecord(nodeid="suites/test_smoke.py::test_smoke", gate="smoke")


def test_a_passed_call_settles_the_gate() -> None:
    record = _record()
    assert end_phase(record, when="setup", outcome="passed", duration_s=0.5) is False
    assert record.outcome is GateOutcome.PENDING
    assert end_phase(record, when="call", outcome="passed", duration_s=1.234567, reason="ignored") is True
    assert (record.outcome, record.duration_s, record.reason, record.status) == (GateOutcome.PASSED, 1.2346, None, None)
    assert not failed_on_its_own(record)


def test_a_failed_call_on_its_own_evidence_stops_the_arm() -> None:
    record = _record()
    assert end_phase(record, when="call", outcome="failed", duration_s=2.0, error=AssertionError("no hello"),
                     reason="no hello") is True
    assert (record.outcome, record.reason, record.status) == (GateOutcome.FAILED, "no hello", None)
    assert failed_on_its_own(record)


def test_a_failed_setup_is_an_error_with_the_start_s_status() -> None:
    record = _record()
    error = LaunchError("the KV cache is too small", status=StartupStatus.KV_INSUFFICIENT)
    assert end_phase(record, when="setup", outcome="failed", duration_s=30.0, error=error,
                     error_status=error.status, reason="the KV cache is too small") is True
    assert (record.outcome, record.status, record.reason) == (GateOutcome.ERROR, "kv_insufficient",
                                                              "the KV cache is too small")
    assert not failed_on_its_own(record), "a server that never started is not the gate's own failure"


def test_a_skipped_setup_settles_the_gate_with_its_reason() -> None:
    record = _record()
    assert end_phase(record, when="setup", outcome="skipped", duration_s=0.0, reason="not applicable") is True
    assert (record.outcome, record.reason) == (GateOutcome.SKIPPED, "not applicable")


def test_a_server_found_gone_is_the_status_and_the_one_line_reason() -> None:
    record = _record()
    gone = ServerGoneError("the server process exited", status=ServerStatus.SERVER_DEAD, log_tail="Traceback ...")
    assert end_phase(record, when="call", outcome="failed", duration_s=3.0, error=gone, error_status=gone.status,
                     reason="the log tail's last lines") is True
    assert record.status == "server_dead"
    assert record.reason == "server_dead: the server process exited"
    assert not failed_on_its_own(record)


def test_a_teardown_leaves_the_outcome_but_records_a_server_gone() -> None:
    record = _record()
    end_phase(record, when="call", outcome="passed", duration_s=1.0)
    gone = ServerGoneError("no answer", status=ServerStatus.HUNG)
    assert end_phase(record, when="teardown", outcome="failed", duration_s=0.1, error=gone) is False
    assert (record.outcome, record.status, record.duration_s) == (GateOutcome.PASSED, "hung", 1.0)


def test_a_failed_gate_keeps_whose_failure_its_verdict_said() -> None:
    record = _record()
    record.failure_kind = "model_behaviour"  # the gate's verdict (GateRecorder.ended)
    end_phase(record, when="call", outcome="failed", duration_s=1.0, error=AssertionError("no cloud"), reason="x")
    assert record.failure_kind == FailureKind.MODEL_BEHAVIOUR
    assert record.to_dict()["failure_kind"] == "model_behaviour"
    assert GateRecord.from_dict(record.to_dict()).failure_kind == "model_behaviour"


def test_a_gate_without_a_kind_of_its_own_is_classified_by_what_the_harness_saw() -> None:
    gone = ServerGoneError("the server is gone", status=ServerStatus.SERVER_DEAD)
    record = _record()
    record.failure_kind = "model_behaviour"
    end_phase(record, when="call", outcome="failed", duration_s=1.0, error=gone, error_status=gone.status)
    assert record.failure_kind == "server_gone", "a server found gone wins over what the gate had said"
    never = _record()
    error = LaunchError("the KV cache is too small", status=StartupStatus.KV_INSUFFICIENT)
    end_phase(never, when="setup", outcome="failed", duration_s=1.0, error=error, error_status=error.status)
    assert never.failure_kind == "server_gone"
    timed_out = _record()
    timed_out.attempts = [Attempt(kind="chat", label="a", ok=True, status_code=200),
                          Attempt(kind="chat", label="b", ok=False, error_kind="timeout")]
    end_phase(timed_out, when="call", outcome="failed", duration_s=1.0, error=AssertionError("late"))
    assert timed_out.failure_kind == "transport"
    unknown = _record()
    end_phase(unknown, when="call", outcome="failed", duration_s=1.0, error=KeyError("x"))
    assert unknown.failure_kind is None, "nothing tells whose failure an exception in the gate's own code is"
    passed = _record()
    end_phase(passed, when="call", outcome="passed", duration_s=1.0)
    assert passed.failure_kind is None
