"""How any gate's failure reason is worded: once, from the exception itself.

pytest's rendering of a failure repeats itself: an assertion message comes back with its
``assert False`` explanation, and an exception raised while handling another prints both,
joined by "During handling of the above exception, another exception occurred" (or "The above
exception was the direct cause"), when the second already quotes the first. The report's
``reason`` and the terminal's one-line summaries take this text instead: the message that
names what failed, each cause said once (only when it adds words the message does not hold),
each line once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_CAUSES", "REASON_LIMIT", "failure_reason", "first_line", "repeats_its_causes", "report_reason",
           "said_once"]

REASON_LIMIT = 2000
"""Characters of a reason; the public report cuts free text shorter still."""
MAX_CAUSES = 3
_MESSAGE_ONLY = ("AssertionError", "Failed", "Skipped", "XFailed", "Exit")
"""Exceptions whose message is the whole reason (an assertion's message, ``pytest.fail``'s)."""


def _message(exc: BaseException) -> str:
    """An exception in words: its message, with its type unless the message is the reason."""
    name = type(exc).__name__
    text = str(exc).strip()
    if name == "AssertionError" and not text.startswith("assert ") and "\nassert " in text:
        text = text.split("\nassert ", 1)[0].strip()  # the message, not pytest's explanation after it
    if name in _MESSAGE_ONLY:
        return text or "assertion failed"
    return f"{name}: {text}" if text else name


def _causes(exc: BaseException) -> list[BaseException]:
    """The exceptions behind ``exc``: its explicit cause, else the one it was raised while handling."""
    chain: list[BaseException] = []
    seen = {id(exc)}
    current: BaseException | None = exc
    while current is not None and len(chain) < MAX_CAUSES:
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
        if current is None or id(current) in seen:
            break
        seen.add(id(current))
        chain.append(current)
    return chain


def first_line(text: Any, limit: int = 200) -> str:
    """The first line of a reason (or any message), cut to ``limit`` characters with "…": what a
    list item, a table cell or a summary line shows of it. Empty for no text."""
    if not text:
        return ""
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def said_once(text: str) -> str:
    """``text`` with every repeated non-empty line left out (the first one stays)."""
    seen: set[str] = set()
    kept: list[str] = []
    for line in text.splitlines():
        key = line.strip()
        if key and key in seen:
            continue
        seen.add(key)
        kept.append(line)
    return "\n".join(kept).strip()


def failure_reason(exc: BaseException) -> str:
    """The reason a gate failed: the message of ``exc``, then each cause whose words it does not
    already hold, as "(caused by Type: message)"."""
    reason = _message(exc)
    for cause in _causes(exc):
        cause_text = str(cause).strip()
        if not cause_text or cause_text in reason or _message(cause) in reason:
            continue
        reason += f" (caused by {_message(cause)})"
    return said_once(reason)[:REASON_LIMIT]


def repeats_its_causes(exc: BaseException) -> bool:
    """Whether every exception behind ``exc`` says nothing its message does not already say:
    printing the chain would then say the failure twice."""
    causes = _causes(exc)
    message = _message(exc)
    return bool(causes) and all(str(c).strip() in message for c in causes)


def report_reason(report: Any, error: BaseException | None) -> str:
    """A pytest test report's reason, said once: a skip's reason, else the failure's own words
    (``failure_reason`` of ``error``), else the last lines pytest printed."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if error is not None and not report.skipped:
        return failure_reason(error)
    text = getattr(report, "longreprtext", "") or str(report.longrepr or "")
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    chosen = errors or lines[-3:]
    return "\n".join(line.removeprefix("E ").strip() for line in chosen)[:REASON_LIMIT]
