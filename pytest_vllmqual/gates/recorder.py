"""What a gate writes into: its attempts (the raw request and response bytes kept in the
run's private folder, named by SHA-256 in public outputs), measurements, thresholds and a
summary. The ``gate`` fixture hands one ``GateRecorder`` to each gate; the plugin turns the
filled ``GateRecord`` into the report's gate entry and the junit properties.

How a gate ended is decided here too, from plain values the plugin reads off pytest's report
(``end_phase``): the outcome, the harness's status (a server found gone, a failed start) and
the reason, and whether the gate failed on its own evidence (``failed_on_its_own``), which is
what stops the arm's remaining gates.

The recorder is the one writer of gate artifacts, and names them: ``gates/<gate>/<n>-<label>``
with every character outside ``A-Za-z0-9_.-`` (and a leading dot) folded to ``_``, so any gate
name or label gives a relative name inside the gate's folder. ``report.artifacts`` lists and verifies them.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_vllmqual.errors import ArtifactError, RecipeError, ServerGoneError
from pytest_vllmqual.records import Attempt, FailureKind, GateOutcome, GateRecord, StartupStatus

if TYPE_CHECKING:
    from .verdict import GateVerdict

__all__ = ["GateRecorder", "artifact_part", "end_phase", "failed_on_its_own", "failure_kind"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def artifact_part(text: str, limit: int | None = None) -> str:
    """One safe path part of an artifact name: never empty, never ``..``, never hidden (a
    leading dot would hide it from the artifact list)."""
    part = _UNSAFE.sub("_", text)[:limit]
    visible = part.lstrip(".")
    return "_" * (len(part) - len(visible)) + visible or "_"


class GateRecorder:
    """What a gate writes into: attempts (raw bytes kept privately), measurements, a summary."""

    def __init__(self, record: GateRecord, private_dir: Path, *, prefix: str = "") -> None:
        self.record = record
        self.private_dir = private_dir
        self.prefix = prefix
        self._lock = threading.Lock()

    def record_attempt(self, attempt: Attempt, request: bytes, response: bytes) -> None:
        with self._lock:
            number = len(self.record.attempts) + 1
            self.record.attempts.append(attempt)
        folder = f"gates/{artifact_part(self.prefix + self.record.gate)}"
        base = f"{folder}/{number:03d}-{artifact_part(attempt.label, 60)}"
        try:
            (self.private_dir / folder).mkdir(parents=True, exist_ok=True)
            (self.private_dir / f"{base}.request.json").write_bytes(request)
            (self.private_dir / f"{base}.response.txt").write_bytes(response)
        except OSError as exc:
            raise ArtifactError(f"cannot write the artifacts {self.private_dir / base}.*: "
                                f"{exc.strerror or exc}") from None
        attempt.request_artifact = f"{base}.request.json"
        attempt.response_artifact = f"{base}.response.txt"

    def measure(self, **values: Any) -> None:
        self.record.measurements.update(values)

    def threshold(self, **values: Any) -> None:
        self.record.thresholds.update(values)

    def summary(self, text: str) -> None:
        self.record.summary = text

    def server_gone(self, last_attempt: Attempt | None, flag: str, hint: str = "") -> None:
        """Record that the server died under this gate, and which request was in flight: ``flag``
        (e.g. ``died_under_items``) is set true; ``hint`` says what the user can change."""
        in_flight = last_attempt.label if last_attempt is not None else "the first request"
        self.measure(**{flag: True, "request_in_flight": in_flight})
        self.summary(f"the server was gone during {in_flight}{': ' + hint if hint else ''}")

    def ended(self, verdict: GateVerdict) -> GateVerdict:
        """Keep whose failure the gate's verdict is (``failure_kind``), and hand the verdict on."""
        self.record.failure_kind = None if verdict.failure is None or verdict.kind is None else str(verdict.kind)
        return verdict


def end_phase(record: GateRecord, *, when: str, outcome: str, duration_s: float, error: BaseException | None = None,
              error_status: str | None = None, reason: str | None = None) -> bool:
    """Write what one phase of the gate's test (``setup``, ``call``, ``teardown``) says about the
    gate into its record; True when this phase settled the gate's outcome.

    ``outcome`` is pytest's (``passed``, ``failed``, ``skipped``); ``error`` the exception the
    phase raised and ``error_status`` the harness's status it carries (``server_dead``, a failed
    start's ``kv_insufficient``, ...); ``reason`` the failure or skip in words. The call phase
    settles a gate, and so does a setup that did not pass (a failed setup is an ``error``). A
    server found gone is the gate's status whatever the phase, and its reason is the harness's
    one line, not the log tail's last lines. A failed setup carries the status of the error
    that failed it (a failed start), unless a server found gone already set one.
    """
    gone = error if isinstance(error, ServerGoneError) else None
    if gone is not None:
        record.status = gone.status
    if not (when == "call" or (when == "setup" and outcome != "passed")):
        return False
    record.outcome = GateOutcome("error" if when == "setup" and outcome == "failed" else outcome)
    record.duration_s = round(duration_s, 4)
    if outcome != "passed":
        record.reason = f"{gone.status}: {gone}" if gone is not None else reason
    if when == "setup" and record.status is None and error is not None:
        record.status = error_status
    if record.outcome.failing:
        kind = failure_kind(record, error)
        record.failure_kind = None if kind is None else str(kind)
    return True


def failure_kind(record: GateRecord, error: BaseException | None) -> FailureKind | str | None:
    """Whose failure a failed gate is: a server found gone or never started, else what the gate's
    own verdict said, else the recipe (a recipe error), else its first failed request's kind;
    None when nothing tells (an exception in a user's own gate code)."""
    if isinstance(error, ServerGoneError) or _server_gone(record.status):
        return FailureKind.SERVER_GONE
    if record.failure_kind is not None:
        return record.failure_kind
    if isinstance(error, RecipeError):
        return FailureKind.CONFIG
    failed = next((a for a in record.attempts if not a.ok and not a.expected_rejection), None)
    return failed.failure_kind if failed is not None else None


def _server_gone(status: str | None) -> bool:
    """A harness status that says the gate had no usable server (gone, or a start that failed)."""
    if status is None:
        return False
    if status in ("server_dead", "hung"):
        return True
    try:
        return StartupStatus(status).failed
    except ValueError:
        return False


def failed_on_its_own(record: GateRecord) -> bool:
    """A gate that failed or errored with no harness status (its own evidence, not a server
    that was gone or never started): what stops the arm's remaining fail-fast gates."""
    return record.outcome.failing and record.status is None
