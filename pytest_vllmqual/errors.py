"""The exception hierarchy, documented in one place (the httpx convention).

VllmQualError                 base of everything this package raises on purpose
├── RecipeError               a recipe file is missing, malformed or invalid (names file, key, fix)
├── LaunchError               the server could not be started or made ready (carries a status)
├── ServerGoneError           the server died or hung while gates were running
├── CalibrationError          an exact-length prompt cannot be built for the requested target
├── ReportError               the report could not be validated or written (names the path)
└── ComparisonError           two reports cannot be compared

Every message is meant to be shown to an operator as is: it says what broke, where, and
what to do about it.
"""

from __future__ import annotations


class VllmQualError(Exception):
    """Base class: an error the operator can act on, never a bug traceback."""


class RecipeError(VllmQualError):
    """A recipe is unusable. The message names the file, the key path and the fix."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.key = key


class LaunchError(VllmQualError):
    """Startup failed. ``status`` is one of the classified startup outcomes.

    Statuses: ``port_in_use``, ``kv_insufficient``, ``startup_timeout``, ``exited``,
    ``command_not_found``, ``not_ready``, ``gpu_busy``, ``image_not_pinned``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: str,
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

    def __str__(self) -> str:
        parts = [super().__str__()]
        if self.exit_code is not None:
            parts.append(f"exit code: {self.exit_code}")
        if self.log_tail:
            parts.append("last log lines:\n" + self.log_tail)
        if self.hint:
            parts.append("Hint: " + self.hint)
        return "\n".join(parts)


class ServerGoneError(VllmQualError):
    """The server died (``server_dead``) or stopped answering (``hung``) during the run."""

    def __init__(self, message: str, *, status: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.log_tail = log_tail


class CalibrationError(VllmQualError):
    """An exact-length prompt cannot be built (target below the chat overhead, no convergence)."""


class ReportError(VllmQualError):
    """The report failed schema validation or could not be written; names the path."""


class ComparisonError(VllmQualError):
    """Two reports cannot be compared (schema mismatch, missing sections)."""
