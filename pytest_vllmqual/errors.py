"""The exception hierarchy, documented in one place (the httpx convention).

VllmQualError                 base of everything this package raises on purpose
├── RecipeError               a recipe file is missing, malformed or invalid (names file, key, fix)
├── LaunchError               the server could not be started or made ready (carries a status)
├── ServerGoneError           the server died or hung while gates were running
├── CalibrationError          an exact-length prompt cannot be built for the requested target
├── ReportError               the report could not be validated or written (names the path)
├── ArtifactError             an artifact name is unsafe or the artifact cannot be written
├── ComparisonError           two reports cannot be compared
├── CampaignError             a campaign spec is invalid, or reports do not fit the campaign
├── FleetError                a fleet file is invalid, or the fleet cannot run (names file, key, fix)
├── EngineEndpointError       /version or /v1/models did not answer as every vLLM server does
├── MetricsParseError         a /metrics body is not Prometheus text format
├── NvmlUnavailable           NVML cannot be used here (no module, library, driver or GPU)
└── NvmlQueryFailed           NVML started but a device query failed

Every message is meant to be shown to an operator as is: it says what broke, where, and
what to do about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_vllmqual.records import StartupStatus

__all__ = [
    "ArtifactError",
    "CalibrationError",
    "CampaignError",
    "ComparisonError",
    "EngineEndpointError",
    "FleetError",
    "LaunchError",
    "MetricsParseError",
    "NvmlQueryFailed",
    "NvmlUnavailable",
    "RecipeError",
    "ReportError",
    "ServerGoneError",
    "VllmQualError",
]


class VllmQualError(Exception):
    """Base class: an error the operator can act on, never a bug traceback."""


class FleetError(VllmQualError):
    """A fleet file is unusable, or Ray is missing or unreachable. Names the file, the key and the fix."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.key = key


class RecipeError(VllmQualError):
    """A recipe is unusable. The message names the file, the key path and the fix."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.key = key


class LaunchError(VllmQualError):
    """Startup failed. ``status`` says why: a ``records.StartupStatus`` (``port_in_use``,
    ``kv_insufficient``, ``startup_timeout``, ``docker_unavailable``, ...), each worded in
    ``privacy.public_text.STARTUP_CAUSES``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: StartupStatus,
        exit_code: int | None = None,
        log_tail: str = "",
        hint: str = "",
        details: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.exit_code = exit_code
        self.log_tail = log_tail
        self.hint = hint
        self.details = details or {}
        # log_tail is raw server text: kept for the private folder, never part of str(self).

    def to_dict(self) -> dict[str, Any]:
        """Everything the error carries, as plain JSON data: what an xdist worker receives and
        what the run record keeps (the log tail included: the public report drops it)."""
        return {"status": str(self.status), "message": str(self.args[0]) if self.args else "",
                "exit_code": self.exit_code, "log_tail": self.log_tail, "hint": self.hint,
                "details": dict(self.details)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaunchError:
        """The error again, from ``to_dict``'s output (a missing or unknown status reads as ``unknown``)."""
        try:
            status = StartupStatus(data.get("status"))
        except ValueError:
            status = StartupStatus.UNKNOWN
        return cls(data.get("message", "the server did not start"), status=status,
                   exit_code=data.get("exit_code"), log_tail=data.get("log_tail", ""),
                   hint=data.get("hint", ""), details=dict(data.get("details") or {}))

    def __str__(self) -> str:
        """The harness's own account: message, exit code, last startup phase, the private log by
        name and SHA-256, and the hint. The log tail is never part of it (it stays private)."""
        parts = [super().__str__()]
        if self.exit_code is not None:
            parts.append(f"exit code: {self.exit_code}")
        phase = self.details.get("last_phase")
        if phase:
            parts.append(f"last startup phase: {phase}")
        log = self.details.get("private_log")
        if isinstance(log, dict) and log.get("sha256"):
            parts.append(f"server log: {log.get('name')} in the run's private folder (sha256 {log['sha256']})")
        if self.hint:
            parts.append("Hint: " + self.hint)
        return "\n".join(parts)


class ServerGoneError(VllmQualError):
    """The server died (``server_dead``) or stopped answering (``hung``) during the run."""

    def __init__(self, message: str, *, status: str, log_tail: str = "", during: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.log_tail = log_tail
        """Raw server text: for the private folder and the local terminal, never a public output."""
        self.during = during
        """The gate during which the server went (None: not known, or between gates)."""


class CalibrationError(VllmQualError):
    """An exact-length prompt cannot be built (target below the chat overhead, no convergence)."""


class ReportError(VllmQualError):
    """The report failed schema validation or could not be written; names the path."""


class ArtifactError(VllmQualError):
    """An artifact name is unsafe (absolute, escaping the private folder) or cannot be written."""


class ComparisonError(VllmQualError):
    """Two reports cannot be compared (schema mismatch, missing sections)."""


class CampaignError(VllmQualError):
    """A campaign spec is invalid, or reports do not fit the campaign (names the arm and the fix)."""


class EngineEndpointError(VllmQualError):
    """``/version`` or ``/v1/models`` did not answer with what every vLLM server returns."""


class MetricsParseError(VllmQualError):
    """A ``/metrics`` body is not Prometheus text exposition format."""


class NvmlUnavailable(VllmQualError):
    """NVML cannot be used here (module missing, library missing, no driver, no GPU)."""


class NvmlQueryFailed(VllmQualError):
    """NVML started but a query about a device failed (GPU lost, driver error)."""
