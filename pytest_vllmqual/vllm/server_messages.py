"""vLLM's error messages as a public output may say them: known templates re-rendered, the rest withheld.

The public report, the HTML page and the junit XML carry no raw server text (see
:mod:`pytest_vllmqual.privacy.public_text`). Where a server message must be quoted (an HTTP 400
"maximum context length is N tokens"), it passes through :data:`TEMPLATES`: known vLLM message
templates whose numbers are parsed and re-rendered into the template's fixed words, so nothing
but those words and numbers survives. A message no template knows is withheld. The templates
follow vLLM's wording, so they live with the other patterns over vLLM's output; an attempt's
or a ladder rung's error is said through them here (:func:`public_attempt_error`,
:func:`public_rung_error`, :func:`public_failure`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.records import ServerStatus

__all__ = [
    "HARNESS_ERROR_KINDS",
    "TEMPLATES",
    "WITHHELD",
    "Template",
    "public_attempt_error",
    "public_failure",
    "public_rung_error",
    "quote_server_message",
]

WITHHELD = "the server's message is withheld from public outputs (kept in the private folder)"


@dataclass(frozen=True)
class Template:
    """One known vLLM message: a pattern with numeric groups, and its re-rendering."""

    name: str
    pattern: re.Pattern[str]
    render: Callable[[Mapping[str, str]], str]


def _n(groups: Mapping[str, str], key: str) -> str:
    """A parsed number, re-rendered (never the matched text itself)."""
    return str(int(groups[key]))


TEMPLATES: tuple[Template, ...] = (
    # vLLM ≥0.2x (renderers/params.py): the prompt alone is over the limit.
    Template("max_context_prompt_tokens", re.compile(
        r"This model's maximum context length is (?P<max>\d+) tokens\. However, your prompt contains "
        r"(?P<atleast>at least )?(?P<n>\d+) input tokens"),
        lambda g: (f"This model's maximum context length is {_n(g, 'max')} tokens. However, your prompt "
                   f"contains {'at least ' if g.get('atleast') else ''}{_n(g, 'n')} input tokens, which exceeds "
                   "this limit even without any output tokens.")),
    Template("max_context_prompt_chars", re.compile(
        r"This model's maximum context length is (?P<max>\d+) tokens\. However, your prompt contains "
        r"(?P<chars>\d+) characters \(more than (?P<maxchars>\d+) characters, which is the upper bound for "
        r"(?P<maxin>\d+) input tokens\)"),
        lambda g: (f"This model's maximum context length is {_n(g, 'max')} tokens. However, your prompt "
                   f"contains {_n(g, 'chars')} characters (more than {_n(g, 'maxchars')} characters, which is "
                   f"the upper bound for {_n(g, 'maxin')} input tokens).")),
    # vLLM 0.10–0.1x (serving_engine.py): prompt plus completion over the limit.
    Template("max_context_requested", re.compile(
        r"This model's maximum context length is (?P<max>\d+) tokens\. However, you requested (?P<n>\d+) tokens"
        r"(?: \((?P<p>\d+) in the messages, (?P<c>\d+) in the completion\))?"),
        lambda g: (f"This model's maximum context length is {_n(g, 'max')} tokens. However, you requested "
                   f"{_n(g, 'n')} tokens"
                   + (f" ({_n(g, 'p')} in the messages, {_n(g, 'c')} in the completion)." if g.get("p") else "."))),
    Template("max_tokens_too_large", re.compile(
        r"'max_tokens' or 'max_completion_tokens' is too large: (?P<x>\d+)\. This model's maximum context "
        r"length is (?P<max>\d+) tokens and your request has (?P<k>\d+) input tokens"),
        lambda g: (f"'max_tokens' or 'max_completion_tokens' is too large: {_n(g, 'x')}. This model's maximum "
                   f"context length is {_n(g, 'max')} tokens and your request has {_n(g, 'k')} input tokens.")),
    Template("input_exceeds_context", re.compile(
        r"Input length \((?P<n>\d+)\) exceeds model's maximum context length \((?P<max>\d+)\)"),
        lambda g: f"Input length ({_n(g, 'n')}) exceeds model's maximum context length ({_n(g, 'max')})."),
    Template("max_tokens_at_least_one", re.compile(r"max_tokens must be at least 1, got (?P<x>-?\d+)"),
             lambda g: f"max_tokens must be at least 1, got {int(g['x'])}."),
    Template("model_not_found", re.compile(r"The model `[^`]*` does not exist"),
             lambda g: "The model named in the request does not exist."),
    Template("engine_dead", re.compile(r"EngineDeadError|EngineCore encountered an issue"),
             lambda g: "The engine core died (EngineDeadError)."),
)
"""Known vLLM messages, most specific first."""


def quote_server_message(text: str | None) -> str | None:
    """A known vLLM message re-rendered from its parsed numbers, or None when no template knows it."""
    if not text:
        return None
    for template in TEMPLATES:
        m = template.pattern.search(text)
        if m:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            return template.render(groups)
    return None


HARNESS_ERROR_KINDS = ("stream_contract",)
"""Attempt error kinds whose text the harness wrote itself (a list of stream contract violations)."""


def public_attempt_error(error: str | None, error_kind: str | None, status_code: int | None) -> str | None:
    """An attempt's error as a public output may state it.

    HTTP errors: a known template re-rendered (the status code is the attempt's own field),
    else the status and that the message is withheld.
    Transport failures: the kind and the exception class (the harness's words), and the
    liveness verdict if the server was found gone. Stream contract violations are the
    harness's own words and pass as they are.
    """
    if error is None:
        return None
    if error_kind in HARNESS_ERROR_KINDS:
        return error
    quoted = quote_server_message(error)
    if quoted is not None:
        return quoted
    if error_kind in ("timeout", "connection", ServerStatus.SERVER_DEAD, ServerStatus.HUNG):
        exception = error.split(":", 1)[0].strip()
        exception = exception if re.fullmatch(r"[A-Za-z_][\w.]*", exception) else "transport error"
        found: dict[str, str] = {ServerStatus.SERVER_DEAD: "; the server was found dead",
                                 ServerStatus.HUNG: "; the server was found hung"}
        verdict = found.get(
            error_kind or "", "")
        return f"{error_kind}: {exception}{verdict}"
    if status_code:
        return f"HTTP {status_code}: {WITHHELD}"
    return f"{error_kind or 'error'}: {WITHHELD}"


def public_rung_error(error: str | None, status_code: int | None) -> str | None:
    """A ladder rung's error: harness words ("calibration error N tokens", "server_dead: …")
    pass through the same rules as an attempt's error."""
    if error is None:
        return None
    if re.fullmatch(r"calibration error -?\d+ tokens", error):
        return error
    if re.fullmatch(r"(?:server_dead|hung): the server did not survive this rung"
                    r"(?: \(its stream carried the engine's error event\))?", error):
        return error  # the ladder's own words
    m = re.match(r"(server_dead|hung): ", error)
    if m:
        return f"{m.group(1)}: the server was found {'dead' if m.group(1) == 'server_dead' else 'hung'}"
    return public_attempt_error(error, f"http_{status_code}" if status_code else None, status_code)


def public_failure(attempt: Any) -> str:
    """An attempt's failure for an assertion message (junit, terminal): "HTTP 400: <re-rendered
    template>", "HTTP 500: <withheld>", "timeout: ReadTimeout"; never the server's own text."""
    status = getattr(attempt, "status_code", None)
    said = public_attempt_error(getattr(attempt, "error", None), getattr(attempt, "error_kind", None), status)
    if said and status and not said.startswith(f"HTTP {status}"):
        said = f"HTTP {status}: {said}"
    return said or (f"HTTP {status}" if status else "no response")

