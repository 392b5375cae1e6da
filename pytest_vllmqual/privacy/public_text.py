"""What public outputs may say about text that came from the server.

The public report, the HTML page and the junit XML carry no raw server text: a server log
line or an error body can hold anything an operator's environment put there (node names in
``VLLM_LOGGING_PREFIX``, paths, tokens), and no denylist keeps up with that. So the public
outputs say what happened in the harness's own words — a classified cause with the numbers
parsed out of the text — and the full text stays in the run's private folder, named by its
SHA-256.

A server message that must be quoted is re-rendered from a known vLLM template
(:mod:`pytest_vllmqual.vllm.server_messages`, with vLLM's other output patterns); the words here
are the harness's own: the classified causes and phases of a failed start.

A model's answer is the one kind of server text a gate's failure reason may quote, so that a
failed check says what the model said: :func:`quote_answer` keeps at most
:data:`ANSWER_QUOTE_CHARS` characters of it (a longer answer is cut and its length given), a
reason quotes at most :data:`ANSWER_QUOTES` answers, and the public outputs scrub every reason
like all free text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_vllmqual.records import StartupStatus

__all__ = [
    "ANSWER_QUOTES",
    "ANSWER_QUOTE_CHARS",
    "PUBLIC_DETAIL_KEYS",
    "STARTUP_CAUSES",
    "STARTUP_PHASES",
    "public_startup_details",
    "quote_answer",
    "quote_answers",
    "startup_cause",
]

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
