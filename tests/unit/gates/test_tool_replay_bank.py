"""The tool-call replay's cases: drawn from a seed (the same arguments give the same cases and hash),
inside what the fixture model was trained on (each prompt verbatim; every tool in file order, or the
tool with up to three others; a corpus system message or none; a corpus effort or none), and hashed
over every request, so any change to what is sent changes the bank's SHA-256."""

from __future__ import annotations

import dataclasses
import json

from pytest_vllmqual.gates.checks import shipped_tool_fixtures
from pytest_vllmqual.gates.tool_replay_bank import (
    BANK_NAME,
    DEFAULT_COUNT,
    EFFORTS,
    SYSTEM_PROMPTS,
    build_bank,
)

FIXTURES = shipped_tool_fixtures()


def test_the_same_seed_gives_the_same_cases_and_hash() -> None:
    first, second = build_bank(FIXTURES), build_bank(list(FIXTURES))
    assert first.cases == second.cases and first.sha256 == second.sha256
    assert len(first.sha256) == 64 and int(first.sha256, 16) >= 0


def test_another_seed_count_choice_or_limit_changes_the_hash() -> None:
    base = build_bank(FIXTURES).sha256
    others = [build_bank(FIXTURES, seed=44), build_bank(FIXTURES, count=DEFAULT_COUNT + 1),
              build_bank(FIXTURES, tool_choice="required"), build_bank(FIXTURES, max_tokens=64)]
    assert len({base, *(bank.sha256 for bank in others)}) == 5


def test_an_edited_expected_argument_changes_the_hash() -> None:
    edited = [dataclasses.replace(FIXTURES[0], expected={**FIXTURES[0].expected, "city": "Oslo"}), *FIXTURES[1:]]
    assert build_bank(edited).sha256 != build_bank(FIXTURES).sha256


def test_the_default_bank_has_a_hundred_cases_each_tool_five_times() -> None:
    bank = build_bank(FIXTURES)
    assert len(bank.cases) == DEFAULT_COUNT == 100
    counts = {fixture.name: sum(case.tool == fixture.name for case in bank.cases) for fixture in FIXTURES}
    assert set(counts.values()) == {5}, counts
    assert len({case.case_id for case in bank.cases}) == 100


def test_every_case_stays_inside_what_the_fixture_model_was_trained_on() -> None:
    names = [fixture.name for fixture in FIXTURES]
    bank = build_bank(FIXTURES, count=400)
    for case, body in zip(bank.cases, bank.requests(), strict=True):
        sent = [tool["function"]["name"] for tool in body["tools"]]
        assert case.tool in sent
        assert sent == names or (1 <= len(sent) <= 4 and len(set(sent)) == len(sent)), case
        assert body["messages"][-1] == {"role": "user", "content": bank.by_name[case.tool].prompt}
        system = [m["content"] for m in body["messages"] if m["role"] == "system"]
        assert system in ([], *([s] for s in SYSTEM_PROMPTS))
        effort = (body.get("chat_template_kwargs") or {}).get("reasoning_effort")
        assert effort is None or effort in EFFORTS
        assert body["temperature"] == 0 and body["tool_choice"] == "auto"


def test_every_fifth_round_sends_every_tool_and_the_rest_vary() -> None:
    bank = build_bank(FIXTURES)
    shapes = bank.describe()["shapes"]
    assert shapes["all"] == 20 and sum(shapes.values()) == 100
    assert {shape for shape in shapes if shape != "all"} <= {"subset-1", "subset-2", "subset-3", "subset-4"}
    assert len({case.system for case in bank.cases}) > 1 and len({case.effort for case in bank.cases}) > 2


def test_named_tool_choice_names_the_expected_tool() -> None:
    body = build_bank(FIXTURES, tool_choice="named").requests()[3]
    assert body["tool_choice"] == {"type": "function", "function": {"name": FIXTURES[3].name}}


def test_the_description_names_the_bank_for_the_sidecar() -> None:
    described = build_bank(FIXTURES, count=40, max_tokens=128).describe()
    assert described["name"] == BANK_NAME and described["count"] == 40 and described["max_tokens"] == 128
    assert described["sha256"] == build_bank(FIXTURES, count=40, max_tokens=128).sha256
    json.dumps(described)  # JSON as it is
