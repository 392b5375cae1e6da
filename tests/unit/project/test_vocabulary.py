"""The fixed words of a run are str enums: each member is its word, in JSON, f-strings and comparisons."""

from __future__ import annotations

import json

import pytest

from pytest_vllmqual.records import (
    GateOutcome,
    GateRecord,
    RunMode,
    RunRecord,
    ServerStatus,
    StartupStatus,
    Verdict,
    worst_outcome,
)


@pytest.mark.parametrize("word", [Verdict.PROMOTABLE, GateOutcome.PASSED, ServerStatus.SERVER_DEAD,
                                  StartupStatus.DOCKER_UNAVAILABLE, RunMode.DIRECT_ONLY])
def test_a_word_is_its_string_everywhere(word: Verdict | GateOutcome | ServerStatus | StartupStatus | RunMode) -> None:
    assert word == word.value
    assert str(word) == f"{word}" == word.value
    assert json.dumps({"w": word}) == json.dumps({"w": word.value})


def test_the_top_single_run_verdict_is_promotable_and_candidate_is_no_verdict() -> None:
    assert Verdict("promotable") is Verdict.PROMOTABLE
    with pytest.raises(ValueError):
        Verdict("candidate")


def test_a_gate_record_ships_its_outcome_as_a_plain_string_and_reads_it_back_typed() -> None:
    record = GateRecord(nodeid="t::x", gate="x", outcome=GateOutcome.FAILED, status=ServerStatus.HUNG.value)
    data = record.to_dict()
    assert type(data["outcome"]) is str and data["outcome"] == "failed"
    again = GateRecord.from_dict(data)
    assert again.outcome is GateOutcome.FAILED and again.outcome.failing
    assert GateRecord.from_dict({"nodeid": "t::y", "gate": "y", "outcome": "passed"}).outcome is GateOutcome.PASSED


def test_worst_outcome_of_a_gate_that_ran_more_than_once() -> None:
    assert worst_outcome([]) is GateOutcome.ABSENT
    assert worst_outcome(["passed", "skipped"]) is GateOutcome.SKIPPED
    assert worst_outcome(["failed", "error", "passed"]) is GateOutcome.ERROR
    assert worst_outcome(["passed", "passed"]) is GateOutcome.PASSED


def test_only_ok_is_a_usable_server() -> None:
    assert [s.gone for s in ServerStatus] == [False, True, True]


def test_a_gate_record_ships_a_typed_status_as_a_plain_string() -> None:
    record = GateRecord(nodeid="t::x", gate="x", outcome=GateOutcome.SKIPPED, status=StartupStatus.NOT_RUN)
    data = record.to_dict()
    assert type(data["status"]) is str and data["status"] == "not_run"
    execnet = pytest.importorskip("execnet")
    assert execnet.loads(execnet.dumps(data)) == data, "what xdist ships from a worker"


def test_a_run_mode_read_back_is_typed_and_anything_but_direct_only_was_managed() -> None:
    assert RunMode.of("direct-only") is RunMode.DIRECT_ONLY
    assert RunMode.of("managed") is RunMode.MANAGED and RunMode.of(None) is RunMode.MANAGED
    record = RunRecord(run_id="r", arm="a", recipe_name="a", recipe_path="", recipe_sha256="0" * 64, recipe_content={},
                       started_utc="2026-12-04T00:00:00Z", mode="direct-only")  # type: ignore[arg-type]
    assert record.mode is RunMode.DIRECT_ONLY


def test_only_the_three_progress_words_are_not_a_failed_start() -> None:
    assert {s for s in StartupStatus if not s.failed} == {StartupStatus.NOT_STARTED, StartupStatus.STARTING,
                                                          StartupStatus.READY}


def test_every_fixed_word_in_the_package_is_on_the_one_word_base() -> None:
    """A plain ``(str, Enum)`` prints ``Class.MEMBER`` in an f-string on Python 3.11; every enum of
    the package derives from ``records.Word`` instead (the base itself is the one exception)."""
    import ast

    from support import ROOT

    stray = []
    for path in sorted((ROOT / "pytest_vllmqual").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name != "Word":
                bases = {ast.unparse(base) for base in node.bases}
                if bases & {"Enum", "enum.Enum", "StrEnum", "enum.StrEnum", "IntEnum"}:
                    stray.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert stray == []
