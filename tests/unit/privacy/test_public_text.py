"""Server text in public outputs: known vLLM templates re-rendered from their numbers, the rest withheld."""

from __future__ import annotations

import pytest
from support import ROOT

from pytest_vllmqual.privacy.public_text import public_startup_details, startup_cause
from pytest_vllmqual.records import Attempt
from pytest_vllmqual.vllm.server_messages import (
    WITHHELD,
    public_attempt_error,
    public_failure,
    public_rung_error,
    quote_server_message,
)

PLANTED = "node-17.corp.internal"


@pytest.mark.parametrize(("raw", "quoted"), [
    # vLLM 0.32 (renderers/params.py), with text an operator's proxy might append
    (f"This model's maximum context length is 32768 tokens. However, your prompt contains 32769 input tokens, "
     f"which exceeds this limit even without any output tokens. Please reduce the length. [via {PLANTED}]",
     "This model's maximum context length is 32768 tokens. However, your prompt contains 32769 input tokens, "
     "which exceeds this limit even without any output tokens."),
    ("This model's maximum context length is 32768 tokens. However, your prompt contains at least 32769 input "
     "tokens, which exceeds",
     "This model's maximum context length is 32768 tokens. However, your prompt contains at least 32769 input "
     "tokens, which exceeds this limit even without any output tokens."),
    # vLLM 0.10-0.1x
    ("This model's maximum context length is 131072 tokens. However, you requested 131089 tokens (131073 in the "
     "messages, 16 in the completion). Please reduce the length of the messages or completion.",
     "This model's maximum context length is 131072 tokens. However, you requested 131089 tokens (131073 in the "
     "messages, 16 in the completion)."),
    ("'max_tokens' or 'max_completion_tokens' is too large: 64. This model's maximum context length is 32768 "
     "tokens and your request has 32760 input tokens (64 > 32768 - 32760).",
     "'max_tokens' or 'max_completion_tokens' is too large: 64. This model's maximum context length is 32768 "
     "tokens and your request has 32760 input tokens."),
    (f"The model `{PLANTED}` does not exist.", "The model named in the request does not exist."),
    # vLLM 0.32 (entrypoints/serve/utils/api_utils.py)
    ("Input length (40012) exceeds model's maximum context length (32768).",
     "Input length (40012) exceeds model's maximum context length (32768)."),
])
def test_known_templates_are_re_rendered_from_their_numbers(raw: str, quoted: str) -> None:
    assert quote_server_message(raw) == quoted
    assert PLANTED not in (quote_server_message(raw) or "")


def test_an_unknown_message_is_withheld_and_only_the_status_remains() -> None:
    raw = f"Internal error on {PLANTED}: /data/users/jdoe/ckpt missing"
    assert quote_server_message(raw) is None
    assert public_attempt_error(raw, "http_500", 500) == f"HTTP 500: {WITHHELD}"
    assert public_attempt_error(f"ConnectError: [Errno 111] {PLANTED}", "connection", None) == "connection: ConnectError"
    assert public_attempt_error("no [DONE]; no usage chunk", "stream_contract", 200) == "no [DONE]; no usage chunk"
    attempt = Attempt(kind="chat", label="smoke", ok=False, status_code=503, error=raw, error_kind="http_503")
    assert public_failure(attempt) == f"HTTP 503: {WITHHELD}"


def test_rung_errors_keep_the_harness_words_only() -> None:
    assert public_rung_error("calibration error -3 tokens", 200) == "calibration error -3 tokens"
    assert public_rung_error(f"server_dead: the server is dead ({PLANTED})", None) == \
        "server_dead: the server was found dead"
    assert public_rung_error(f"boom at {PLANTED}", 500) == f"HTTP 500: {WITHHELD}"


def test_startup_details_keep_parsed_numbers_never_the_log_line() -> None:
    details = {"kind": "kv_insufficient", "message": f"{PLANTED} said no", "evidence": f"[{PLANTED}] ValueError",
               "needed_gib": 4.5, "available_gib": 1.0, "max_seq_len": 32768, "estimated_max_len": 7264,
               "last_phase": f"{PLANTED} phase", "private_log": {"name": "server.log", "sha256": "0" * 64}}
    public = public_startup_details(details)
    assert public == {"max_seq_len": 32768, "needed_gib": 4.5, "available_gib": 1.0, "estimated_max_len": 7264,
                      "last_phase": "unrecognised phase", "kind": "kv_insufficient"}
    assert startup_cause("kv_insufficient", public) == (
        "the KV cache cannot hold one request of max_model_len: 4.5 GiB needed, 1.0 GiB available for "
        "max_model_len 32768; the engine estimates the maximum length at 7264 tokens")
    assert startup_cause("exited") == "the server process exited during startup"
    assert startup_cause("something_new") == "the server did not start (something_new)"


def test_a_quoted_template_keeps_its_own_words_and_the_failure_line_adds_the_status() -> None:
    raw = "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens. Please reduce."
    assert public_attempt_error(raw, "http_400", 400) == ("This model's maximum context length is 32768 tokens. "
                                                          "However, you requested 40000 tokens.")
    attempt = Attempt(kind="chat", label="over", ok=False, status_code=400, error=raw, error_kind="http_400")
    assert public_failure(attempt).startswith("HTTP 400: This model's maximum context length is 32768 tokens.")
    assert "Please reduce" not in public_failure(attempt)
    assert "Please reduce" not in repr(attempt) and "32768" not in repr(attempt)


def test_every_failed_start_has_its_words() -> None:
    """A start that fails with a status no entry words would fall through to a generic line."""
    from pytest_vllmqual.privacy.public_text import STARTUP_CAUSES
    from pytest_vllmqual.records import StartupStatus

    failed = {status for status in StartupStatus if status.failed}
    assert {StartupStatus.DOCKER_UNAVAILABLE, StartupStatus.IMAGE_UNAVAILABLE, StartupStatus.DOCKER_ERROR,
            StartupStatus.PORT_IN_USE} <= failed
    assert failed - set(STARTUP_CAUSES) == {StartupStatus.UNKNOWN}, "statuses without words"
    assert set(STARTUP_CAUSES) <= failed
    assert startup_cause("docker_unavailable") == "no Docker engine answered, so no container was started"
    assert startup_cause(StartupStatus.DOCKER_UNAVAILABLE) == startup_cause("docker_unavailable")
    assert startup_cause("unknown") == "the server did not start (unknown)"


def test_the_package_raises_no_startup_status_as_a_bare_string() -> None:
    """Every failed start names its status as a ``StartupStatus`` member, so a typo cannot
    produce a status the report has no words for."""
    import re

    package = ROOT / "pytest_vllmqual"
    bare = [f"{path.relative_to(package)}: {m.group(0)}" for path in package.rglob("*.py")
            for m in re.finditer(r'status="[a-z_]+"', path.read_text())]
    assert bare == []


def test_startup_phases_and_causes_cannot_drift_from_their_words() -> None:
    """The phase and cause words are the public text's; the log patterns cover exactly those
    phases (``none`` aside: no line names it), and every failure kind has its words."""

    from pytest_vllmqual.privacy.public_text import STARTUP_CAUSES, STARTUP_PHASES
    from pytest_vllmqual.vllm.startup_failure import FAILURE_KINDS, PHASE_KEYS, last_startup_phase

    assert len(PHASE_KEYS) == len(set(PHASE_KEYS))
    assert set(PHASE_KEYS) == set(STARTUP_PHASES) - {"none"}
    assert FAILURE_KINDS <= set(STARTUP_CAUSES)
    assert last_startup_phase("INFO Application startup complete.\n") == STARTUP_PHASES["ready"]
