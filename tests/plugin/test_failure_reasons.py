"""A gate's failure reason is said once, in the failure's own words: an exception that wraps
another whose words it already quotes is not printed again after "During handling of the above
exception" / "The above exception was the direct cause", neither in the report nor on the
terminal; an assertion's reason is its message, not pytest's ``assert False`` explanation; a
public documentation link in it stays as written. The gates need no server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = "https://errors.pydantic.dev/2.14/v/missing"

GATES = f'''
import pytest


class ParseError(Exception):
    pass


def parse():
    try:
        raise ValueError("1 validation error for ChatCompletion\\nchoices.0.message\\n  Field required "
                         "[type=missing]\\n    For further information visit {LINK}")
    except ValueError as exc:
        raise ParseError(f"chat: the openai SDK could not parse the response: {{exc}}") from exc


def test_wrapped(gate):
    parse()


def test_during_handling(gate):
    try:
        {{}}["max_model_len"]
    except KeyError:
        raise RuntimeError("/v1/models gave no 'max_model_len' for tiny-chat")


def test_new_words_in_the_cause(gate):
    try:
        raise OSError("connection refused")
    except OSError:
        raise RuntimeError("the smoke request did not complete")


def test_asserted(gate):
    failure = "kv_pool: engine-reported KV pool 1,024 tokens is below the recipe minimum 32,768"
    assert failure is None, failure


def test_needs_the_value(gate):
    kv_tokens = 1024
    assert kv_tokens >= 32768
'''


@pytest.fixture
def session(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[str, dict[str, object]]]:
    pytester.makepyfile(test_gates=GATES)
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess(f"--vllmqual-recipes-dir={ROOT / 'fixtures' / 'recipes'}",
                                           "--recipe=tiny-cpu", f"--vllmqual-reports-dir={reports}",
                                           "--vllmqual-no-fail-fast", "-p", "no:cacheprovider")
    (path,) = reports.glob("tiny-cpu-*.json")
    gates = {str(g["gate"]): g for g in json.loads(path.read_text())["gates"]}
    return result, gates


def test_a_wrapped_error_is_said_once_with_its_link_intact(session: tuple[pytest.RunResult, dict[str, dict[str, object]]]
                                                           ) -> None:
    result, gates = session
    reason = str(gates["wrapped"]["reason"])
    assert reason.startswith("ParseError: chat: the openai SDK could not parse the response: 1 validation error")
    assert reason.count("1 validation error for ChatCompletion") == 1, reason
    assert LINK in reason and "host-A" not in reason, reason
    out = result.stdout.str()
    said = [line for line in out.splitlines() if line.startswith("E ") and LINK in line]
    assert len(said) == 1, out  # the error's lines once (the test's own source, quoted above, also holds it)
    assert "direct cause of the following exception" not in out


def test_an_error_raised_while_handling_one_it_quotes_is_said_once(
        session: tuple[pytest.RunResult, dict[str, dict[str, object]]]) -> None:
    result, gates = session
    assert gates["during_handling"]["reason"] == "RuntimeError: /v1/models gave no 'max_model_len' for tiny-chat"
    out = result.stdout.str()
    own = out[out.index(" test_during_handling "):out.index(" test_new_words_in_the_cause ")]
    assert "RuntimeError: /v1/models gave no" in own and "During handling of the above exception" not in own, own
    # A cause with words of its own is still shown with its chain: that is no repetition.
    assert "During handling of the above exception" in out[out.index(" test_new_words_in_the_cause "):]


def test_a_cause_with_words_of_its_own_is_named_once(
        session: tuple[pytest.RunResult, dict[str, dict[str, object]]]) -> None:
    _, gates = session
    assert gates["new_words_in_the_cause"]["reason"] == (
        "RuntimeError: the smoke request did not complete (caused by OSError: connection refused)")


def test_an_assertion_s_reason_is_its_message_or_the_values_that_failed(
        session: tuple[pytest.RunResult, dict[str, dict[str, object]]]) -> None:
    _, gates = session
    assert gates["asserted"]["reason"] == ("kv_pool: engine-reported KV pool 1,024 tokens is below the recipe "
                                           "minimum 32,768")
    assert gates["needs_the_value"]["reason"] == "assert 1024 >= 32768"


def test_a_fixture_failure_worded_by_the_harness_is_said_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_marked='''
import pytest

@pytest.mark.recipe("no-such-recipe")
def test_marked(vllm_server):
    pass
''')
    result = pytester.runpytest_subprocess(f"--vllmqual-recipes-dir={ROOT / 'fixtures' / 'recipes'}",
                                           "--recipe=tiny-cpu", f"--vllmqual-reports-dir={pytester.path / 'r'}",
                                           "-p", "no:cacheprovider")
    out = result.stdout.str()
    said = [line for line in out.splitlines() if "unknown recipe 'no-such-recipe'" in line
            and not line.startswith("ERROR ")]  # the short summary line may quote it again, cut short
    assert len(said) == 1, out
    assert "During handling of the above exception" not in out
