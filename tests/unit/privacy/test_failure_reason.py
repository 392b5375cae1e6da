"""A gate's reason in the failure's own words, said once: the message, each cause only when it
adds words, each line once; an assertion's message without pytest's explanation after it."""

from __future__ import annotations

from collections.abc import Callable

from pytest_vllmqual.privacy.failure_reason import failure_reason, first_line, repeats_its_causes, said_once


def raised(make: Callable[[], None]) -> BaseException:
    try:
        make()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def wrapped_quoting_its_cause() -> None:
    try:
        raise ValueError("Field required [type=missing]")
    except ValueError as exc:
        raise RuntimeError(f"could not parse: {exc}") from exc


def raised_while_handling_new_words() -> None:
    try:
        raise OSError("connection refused")
    except OSError:
        raise RuntimeError("the request did not complete")  # noqa: B904 - an implicit chain on purpose


def raised_from_none() -> None:
    try:
        raise OSError("connection refused")
    except OSError:
        raise RuntimeError("the request did not complete") from None


def test_a_cause_the_message_already_quotes_is_not_said_again() -> None:
    exc = raised(wrapped_quoting_its_cause)
    assert failure_reason(exc) == "RuntimeError: could not parse: Field required [type=missing]"
    assert repeats_its_causes(exc) is True


def test_a_cause_with_words_of_its_own_is_named_once() -> None:
    exc = raised(raised_while_handling_new_words)
    assert failure_reason(exc) == "RuntimeError: the request did not complete (caused by OSError: connection refused)"
    assert repeats_its_causes(exc) is False


def test_a_suppressed_context_is_not_a_cause() -> None:
    exc = raised(raised_from_none)
    assert failure_reason(exc) == "RuntimeError: the request did not complete"
    assert repeats_its_causes(exc) is False


def test_an_assertion_message_loses_pytest_s_explanation_a_bare_assert_keeps_it() -> None:
    with_message = AssertionError("kv_pool: 1,024 tokens is below the recipe minimum 32,768\nassert False\n"
                                  " +  where False = GateVerdict(failed).passed")
    assert failure_reason(with_message) == "kv_pool: 1,024 tokens is below the recipe minimum 32,768"
    assert failure_reason(AssertionError("assert 1024 >= 32768")) == "assert 1024 >= 32768"
    assert failure_reason(AssertionError()) == "assertion failed"


def test_repeated_lines_are_said_once_and_order_is_kept() -> None:
    assert said_once("a\nb\n\na\nc\nb") == "a\nb\n\nc"
    assert failure_reason(RuntimeError("first\nrepeated\nrepeated")) == "RuntimeError: first\nrepeated"


def test_an_exception_without_words_is_named_by_its_type() -> None:
    assert failure_reason(TimeoutError()) == "TimeoutError"


def test_first_line_shows_one_line_of_a_reason_cut_with_an_ellipsis() -> None:
    assert first_line("  gate failed: 3/5 answers\nassert False\n") == "gate failed: 3/5 answers"
    assert first_line("x" * 250) == "x" * 199 + "…"
    assert first_line("x" * 160, 160) == "x" * 160
    assert first_line(ValueError("not YAML\n  line 3")) == "not YAML"
    for nothing in (None, "", "  \n "):
        assert first_line(nothing) == ""
