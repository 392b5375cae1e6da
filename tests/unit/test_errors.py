"""A LaunchError crosses process boundaries (to xdist workers) and lands in the run record as a
plain dict: ``to_dict`` and ``from_dict`` are the one way it is written and read back."""

from __future__ import annotations

import json

import pytest

from pytest_vllmqual.errors import LaunchError
from pytest_vllmqual.records import StartupStatus
from pytest_vllmqual.vllm.startup_failure import classify_startup_failure


def test_launch_error_round_trips_through_a_plain_dict() -> None:
    error = LaunchError("the KV cache does not fit", status="kv_insufficient", exit_code=1,
                        log_tail="ValueError: ... KV cache", hint="lower max_model_len",
                        details={"last_phase": "profiling", "private_log": {"name": "server.log", "sha256": "ab" * 32}})
    data = error.to_dict()
    assert json.loads(json.dumps(data)) == data, "the dict must survive JSON (workerinput, reports)"
    assert data == {"status": "kv_insufficient", "message": "the KV cache does not fit", "exit_code": 1,
                    "log_tail": "ValueError: ... KV cache", "hint": "lower max_model_len",
                    "details": {"last_phase": "profiling", "private_log": {"name": "server.log", "sha256": "ab" * 32}}}
    again = LaunchError.from_dict(data)
    assert isinstance(again, LaunchError)
    assert (again.status, again.exit_code, again.log_tail, again.hint, again.details) == (
        "kv_insufficient", 1, "ValueError: ... KV cache", "lower max_model_len", error.details)
    assert str(again) == str(error)
    assert again.to_dict() == data


def test_launch_error_from_an_empty_dict_says_the_server_did_not_start() -> None:
    error = LaunchError.from_dict({})
    assert (error.status, error.exit_code, error.log_tail, error.hint, error.details) == ("unknown", None, "", "", {})
    assert str(error) == "the server did not start"


def test_to_dict_does_not_share_the_details_of_the_error() -> None:
    error = LaunchError("boom", status="exited")
    error.to_dict()["details"]["x"] = 1
    assert error.details == {}


def test_a_typed_status_travels_as_its_plain_word_and_comes_back_typed() -> None:
    """xdist ships plain types only (an enum member is refused), so the worker's copy carries the
    word, and reads it back as the member; a word this version does not know reads as unknown."""
    failure = classify_startup_failure("ERROR [Errno 98] error while attempting to bind on address: address already in use")
    assert failure is not None and failure.kind is StartupStatus.PORT_IN_USE
    error = LaunchError("taken", status=failure.kind, details=failure.to_dict())
    data = error.to_dict()
    assert type(data["status"]) is str and type(data["details"]["kind"]) is str
    execnet = pytest.importorskip("execnet")
    assert execnet.loads(execnet.dumps(data)) == data, "what xdist ships to a worker"
    assert LaunchError.from_dict(data).status is StartupStatus.PORT_IN_USE
    assert LaunchError.from_dict({**data, "status": "a_word_from_elsewhere"}).status is StartupStatus.UNKNOWN
