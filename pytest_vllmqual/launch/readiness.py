"""Readiness: wait until a started server can really serve, or say exactly why it cannot.

Ready means all of: the process is alive, ``/health`` answers 200, ``/v1/models`` lists the
served name, and one real 1-token completion succeeds within its own timeout (a server whose
``/health`` says 200 while generation hangs is never declared ready). Each condition is a
strategy object (the testcontainers shape), checked in order on every poll. The HTTP requests
go through a ``ReadinessProbe`` the caller passes in (``client.probes.ServerProbe``): the launch side
speaks no HTTP of its own. A startup that the log already shows as failed (KV does not fit,
port taken; ``vllm.startup_failure``) ends at once instead of waiting out the deadline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_vllmqual.errors import LaunchError
from pytest_vllmqual.privacy.public_text import STARTUP_PHASES
from pytest_vllmqual.recipe.model import StartupConfig
from pytest_vllmqual.records import StartupStatus
from pytest_vllmqual.vllm.server_log import log_tail
from pytest_vllmqual.vllm.server_messages import quote_server_message
from pytest_vllmqual.vllm.startup_failure import (
    StartupFailure,
    classify_startup_failure,
    exception_at_exit,
    exception_hint,
    last_startup_phase,
)

from .base import Launcher, ProgressFn, ServerHandle

__all__ = [
    "PROGRESS_EVERY_S",
    "CheckResult",
    "HealthOk",
    "ModelListed",
    "OneTokenCompletion",
    "ProbeAnswer",
    "ReadinessCheck",
    "ReadinessProbe",
    "default_checks",
    "wait_until_ready",
]

PROGRESS_EVERY_S = 5.0
_NO_PHASE = STARTUP_PHASES["none"]


@dataclass(frozen=True)
class ProbeAnswer:
    """What one probe request got: its status and body, or the httpx error it ended in."""

    status_code: int | None = None
    text: str = ""
    payload: Any = None
    """The JSON body of a 200 answer (None when it was not JSON)."""
    error: str | None = None
    """The type name of the httpx error when the request got no answer."""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.status_code == 200


class ReadinessProbe(Protocol):
    """The requests readiness makes, bound to one server; ``client.probes.ServerProbe`` implements it."""

    def health(self, timeout_s: float) -> ProbeAnswer: ...

    def models(self, timeout_s: float) -> ProbeAnswer: ...

    def one_token(self, timeout_s: float) -> ProbeAnswer: ...


@dataclass
class CheckResult:
    """The result of one readiness condition on one poll."""

    ready: bool
    detail: str = ""


class ReadinessCheck(Protocol):
    """One condition of readiness. ``name`` appears in progress and timeout messages."""

    name: str

    def check(self, probe: ReadinessProbe, handle: ServerHandle) -> CheckResult: ...


class HealthOk:
    """The API process answers ``/health`` with 200."""

    name = "/health 200"

    def check(self, probe: ReadinessProbe, handle: ServerHandle) -> CheckResult:
        answer = probe.health(2.0)
        if answer.error is not None:
            return CheckResult(False, f"{self.name}: {answer.error}")
        return CheckResult(answer.ok, f"/health {answer.status_code}")


class ModelListed:
    """``/v1/models`` lists the recipe's served name (the model is loaded under it)."""

    name = "/v1/models lists the served name"

    def check(self, probe: ReadinessProbe, handle: ServerHandle) -> CheckResult:
        answer = probe.models(5.0)
        if answer.error is not None:
            return CheckResult(False, f"{self.name}: {answer.error}")
        if not answer.ok:
            return CheckResult(False, f"/v1/models {answer.status_code}")
        data = answer.payload.get("data", []) if isinstance(answer.payload, dict) else []
        ids = [m.get("id") for m in data if isinstance(m, dict)]
        ok = handle.served_model_name in ids
        # The listed ids are server text: the detail counts them and names only the recipe's name.
        return CheckResult(ok, "" if ok else f"/v1/models lists {len(ids)} model(s), "
                                             f"none named {handle.served_model_name!r}")


class OneTokenCompletion:
    """One real completion of one token answers within its own timeout: the engine generates."""

    name = "one real 1-token completion"

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s

    def check(self, probe: ReadinessProbe, handle: ServerHandle) -> CheckResult:
        answer = probe.one_token(self.timeout_s)
        if answer.timed_out:
            return CheckResult(False, f"1-token completion did not answer within {self.timeout_s:g} s "
                                      "(generation hangs although /health may answer)")
        if answer.error is not None:
            return CheckResult(False, f"{self.name}: {answer.error}")
        if not answer.ok:
            quoted = quote_server_message(answer.text)
            return CheckResult(False, f"1-token completion returned HTTP {answer.status_code}"
                                      + (f": {quoted}" if quoted else " (its message is in the server log)"))
        usage = (answer.payload.get("usage") if isinstance(answer.payload, dict) else None) or {}
        return CheckResult(bool(usage.get("completion_tokens")), "1-token completion returned no tokens")


def default_checks(startup: StartupConfig) -> list[ReadinessCheck]:
    """Health, then the served name, then one real 1-token completion."""
    return [HealthOk(), ModelListed(), OneTokenCompletion(startup.ready_completion_timeout_s)]


def wait_until_ready(
    launcher: Launcher,
    handle: ServerHandle,
    startup: StartupConfig,
    progress: ProgressFn,
    probe: ReadinessProbe,
    *,
    recipe_name: str,
    checks: list[ReadinessCheck] | None = None,
) -> float:
    """Block until ready; return seconds from ``start`` to ready. Raises LaunchError.

    ``probe`` makes the HTTP requests of the checks (built above the launch layer and passed
    in). Engine facts are not read here: the run reads them once, after readiness.
    """
    checks = checks if checks is not None else default_checks(startup)
    started = time.monotonic()
    deadline = started + startup.deadline_s
    last_progress = started
    last_detail = "server not answering yet"
    while True:
        log = launcher.log_text()
        failure = classify_startup_failure(log)
        if failure is not None:
            raise _failure_error(failure, launcher, recipe_name, log)
        if launcher.alive() is False:
            raise _exited_error(launcher, recipe_name, log)
        now = time.monotonic()
        if now >= deadline:
            phase = last_startup_phase(log) or _NO_PHASE
            raise LaunchError(
                f"the server for recipe {recipe_name!r} was not ready within the "
                f"{startup.deadline_s:g} s startup deadline; last phase reached: {phase}; "
                f"last readiness check: {last_detail}",
                status=StartupStatus.STARTUP_TIMEOUT,
                log_tail=log_tail(log),
                hint="raise startup.deadline_s in the recipe if the model is just slow to load; "
                "otherwise the phase above is where it hangs.",
                details={"last_phase": phase},
            )
        ready = True
        for check in checks:
            result = check.check(probe, handle)
            if not result.ready:
                ready = False
                last_detail = result.detail or check.name
                break
        if ready:
            return time.monotonic() - started
        if now - last_progress >= PROGRESS_EVERY_S:
            last_progress = now
            phase = last_startup_phase(log) or "starting"
            progress(f"waiting for {recipe_name}: {now - started:5.1f} s elapsed, phase: {phase}")
        time.sleep(startup.poll_interval_s)


def _exited_error(launcher: Launcher, recipe_name: str, log: str) -> LaunchError:
    """The LaunchError of a server that exited before it was ready: named by the Python exception
    it died of when its log ends in a traceback (the type only), with that exception's hint."""
    code = launcher.exit_code()
    exception = exception_at_exit(log)
    details: dict[str, object] = {"last_phase": last_startup_phase(log) or _NO_PHASE}
    if exception is not None:
        details["exception"] = exception
    return LaunchError(
        f"the server for recipe {recipe_name!r} exited during startup"
        + (f" with a Python exception: {exception}" if exception else "")
        + (" with status 0, which is never success for a server" if code == 0 else ""),
        status=StartupStatus.EXITED,
        exit_code=code,
        log_tail=log_tail(log),
        hint=(exception_hint(exception) + "." if exception
              else "read the server log in the run's private folder (its path is printed above)."),
        details=details,
    )


def _failure_error(failure: StartupFailure, launcher: Launcher, recipe_name: str, log: str) -> LaunchError:
    """The LaunchError of a failure the log shows, in the recipe's terms (which key to change)."""
    kind = failure.kind
    details: dict[str, object] = failure.to_dict()
    if kind is StartupStatus.KV_INSUFFICIENT:
        message = (
            f"recipe {recipe_name!r} asks for more KV cache than fits: "
            f"{details.get('needed_gib')} GiB needed for max_model_len {details.get('max_seq_len')}, "
            f"{details.get('available_gib')} GiB available; the engine estimates the maximum "
            f"length at {details.get('estimated_max_len')} tokens"
        )
        hint = ("lower serve.max_model_len to at most the estimated length, raise the KV memory "
                "(gpu_memory_utilization, VLLM_CPU_KVCACHE_SPACE on CPU), or use a smaller KV dtype.")
    elif kind is StartupStatus.PORT_IN_USE:
        message = f"the server for recipe {recipe_name!r} could not bind its port: already in use"
        hint = "set launcher.port: 0 in the recipe, or stop whatever holds the port."
    else:
        message = f"the server for recipe {recipe_name!r} failed during startup ({kind}): {failure.message}"
        hint = failure.hint or "read the server log in the run's private folder (its path is printed above)."
    details["last_phase"] = last_startup_phase(log) or _NO_PHASE
    return LaunchError(message, status=kind, exit_code=launcher.exit_code(), log_tail=log_tail(log),
                       hint=hint, details=details)
