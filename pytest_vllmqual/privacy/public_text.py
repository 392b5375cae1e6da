"""What public outputs may say about text that came from the server.

The public report, the HTML page and the junit XML carry no raw server text: a server log
line or an error body can hold anything an operator's environment put there (node names in
``VLLM_LOGGING_PREFIX``, paths, tokens), and no denylist keeps up with that. So the public
outputs say what happened in the harness's own words — a classified cause with the numbers
parsed out of the text — and the full text stays in the run's private folder, named by its
SHA-256.

Where a server message must be quoted (an HTTP 400 "maximum context length is N tokens"), it
passes through :data:`TEMPLATES`: known vLLM message templates whose numbers are parsed and
re-rendered into the template's fixed words, so nothing but those words and numbers survives.
A message no template knows is withheld.

A model's answer is the one kind of server text a gate's failure reason may quote, so that a
failed check says what the model said: :func:`quote_answer` keeps at most
:data:`ANSWER_QUOTE_CHARS` characters of it (a longer answer is cut and its length given), a
reason quotes at most :data:`ANSWER_QUOTES` answers, and the public outputs scrub every reason
like all free text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.records import ServerStatus, StartupStatus

__all__ = [
    "ANSWER_QUOTES",
    "ANSWER_QUOTE_CHARS",
    "HARNESS_ERROR_KINDS",
    "PUBLIC_DETAIL_KEYS",
    "STARTUP_CAUSES",
    "STARTUP_PHASES",
    "TEMPLATES",
    "WITHHELD",
    "Template",
    "public_attempt_error",
    "public_failure",
    "public_rung_error",
    "public_startup_details",
    "quote_answer",
    "quote_answers",
    "quote_server_message",
    "startup_cause",
]

WITHHELD = "the server's message is withheld from public outputs (kept in the private folder)"

ANSWER_QUOTE_CHARS = 40
"""The most characters of one model answer a failure reason quotes."""
ANSWER_QUOTES = 3
"""The most answers one failure reason quotes; the others are counted."""


def quote_answer(answer: object) -> str:
    """A model's answer (content, tool arguments, a value a schema rejected) as a failure reason may
    quote it: at most ``ANSWER_QUOTE_CHARS`` characters, in quotes; a longer one is cut and its length
    given. A value that is not text is quoted as its JSON."""
    text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False, default=str)
    if len(text) <= ANSWER_QUOTE_CHARS:
        return repr(text)
    return f"{text[:ANSWER_QUOTE_CHARS]!r}... ({len(text):,} characters)"


def quote_answers(answers: Sequence[object]) -> str:
    """Several answers, each quoted by :func:`quote_answer`, the first ``ANSWER_QUOTES`` of them."""
    shown = ", ".join(quote_answer(a) for a in answers[:ANSWER_QUOTES])
    more = len(answers) - ANSWER_QUOTES
    return f"[{shown}" + (f", and {more} more]" if more > 0 else "]")


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


# -- startup failures ------------------------------------------------------------------------

STARTUP_CAUSES: dict[StartupStatus, str] = {
    StartupStatus.KV_INSUFFICIENT: "the KV cache cannot hold one request of max_model_len",
    StartupStatus.GPU_BUSY: "the GPU did not have the free memory gpu_memory_utilization asks for",
    StartupStatus.CPU_MEMORY_BUSY: "the node did not have the free memory gpu_memory_utilization asks for on the CPU backend",
    StartupStatus.OUT_OF_MEMORY: "the GPU ran out of memory during startup",
    StartupStatus.PORT_IN_USE: "the server could not bind its port: address already in use",
    StartupStatus.ENGINE_CORE_FAILED: "the engine core failed to initialise",
    StartupStatus.EXITED: "the server process exited during startup",
    StartupStatus.STARTUP_TIMEOUT: "the server was not ready within the startup deadline",
    StartupStatus.COMMAND_NOT_FOUND: "the launch command was not found",
    StartupStatus.PREPARE_FAILED: "the recipe's prepare command failed",
    StartupStatus.IMAGE_NOT_PINNED: "the recipe's image is not pinned by digest",
    StartupStatus.GPU_REFUSED: "the GPU exclusivity preflight refused the start",
    StartupStatus.DOCKER_UNAVAILABLE: "no Docker engine answered, so no container was started",
    StartupStatus.IMAGE_UNAVAILABLE: "the recipe's image is not on the Docker engine and could not be pulled",
    StartupStatus.DOCKER_ERROR: "the Docker engine could not create or start the container",
    StartupStatus.NOT_RUN: "no server was handed to this worker for its arm",
    StartupStatus.STOPPED: "the arm's server had already been stopped when its tests ran",
}
"""Every failed start's status, in the harness's words."""

STARTUP_PHASES: dict[str, str] = {
    "ready": "ready (application startup complete)",
    "api_starting": "API server starting",
    "engine_failed": "engine core failed",
    "shutting_down": "shutting down",
    "engine_initialized": "engine initialized",
    "graphs_captured": "CUDA graphs captured",
    "capturing_graphs": "capturing CUDA graphs",
    "kv_allocated": "KV cache allocated",
    "kv_sizing": "profiling / KV cache sizing",
    "warming_up": "warming up",
    "compiling": "compiling (torch.compile)",
    "weights_loaded": "weights loaded",
    "loading_weights": "loading weights",
    "initializing": "initializing engine",
    "api_process_started": "API process started",
    "none": "no startup phase logged",
}
"""Every startup phase, in the harness's words: the one list of phases. ``vllm.startup_failure``
has one log pattern for each (but ``none``) and takes its words from here."""

PUBLIC_DETAIL_KEYS = ("max_seq_len", "needed_gib", "available_gib", "estimated_max_len", "free_gib", "total_gib",
                      "requested_gib", "gpu_memory_utilization", "last_phase", "kind", "exception")
"""Startup-failure details a public output may carry: numbers parsed from the log, labels, and
the class name of the Python exception a server died of (never its message)."""
_EXCEPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,79}")


def public_startup_details(details: Mapping[str, Any] | None) -> dict[str, Any]:
    """Only parsed numbers and the harness's own labels; the matched log line ("evidence") and
    the server's message stay private."""
    out: dict[str, Any] = {}
    for key in PUBLIC_DETAIL_KEYS:
        value = (details or {}).get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            continue
        if isinstance(value, str) and key == "last_phase":
            value = value if value in STARTUP_PHASES.values() else "unrecognised phase"
        elif isinstance(value, str) and key == "kind":
            value = value if value in STARTUP_CAUSES else "unclassified"
        elif isinstance(value, str) and key == "exception":
            value = value if _EXCEPTION_NAME.fullmatch(value) else "unrecognised exception"
        out[key] = value
    return out


def startup_cause(status: str | None, details: Mapping[str, Any] | None = None) -> str:
    """The classified cause in the harness's words, with the parsed numbers."""
    d = details or {}
    known = next((word for word in STARTUP_CAUSES if word == status), None)
    base = STARTUP_CAUSES[known] if known is not None else f"the server did not start ({status or 'unclassified'})"
    if status == StartupStatus.KV_INSUFFICIENT and d.get("needed_gib") is not None:
        text = f"{base}: {d.get('needed_gib')} GiB needed, {d.get('available_gib')} GiB available"
        if d.get("max_seq_len") is not None:
            text += f" for max_model_len {d['max_seq_len']}"
        if d.get("estimated_max_len") is not None:
            text += f"; the engine estimates the maximum length at {d['estimated_max_len']} tokens"
        return text
    if status == StartupStatus.EXITED and d.get("exception"):
        return f"{base} with a Python exception: {d['exception']}"
    if status in (StartupStatus.GPU_BUSY, StartupStatus.CPU_MEMORY_BUSY) and d.get("free_gib") is not None:
        return (f"{base}: {d.get('free_gib')} of {d.get('total_gib')} GiB free, {d.get('requested_gib')} GiB asked "
                f"for at gpu_memory_utilization {d.get('gpu_memory_utilization')}")
    return base


def public_failure(attempt: Any) -> str:
    """An attempt's failure for an assertion message (junit, terminal): "HTTP 400: <re-rendered
    template>", "HTTP 500: <withheld>", "timeout: ReadTimeout"; never the server's own text."""
    status = getattr(attempt, "status_code", None)
    said = public_attempt_error(getattr(attempt, "error", None), getattr(attempt, "error_kind", None), status)
    if said and status and not said.startswith(f"HTTP {status}"):
        said = f"HTTP {status}: {said}"
    return said or (f"HTTP {status}" if status else "no response")

