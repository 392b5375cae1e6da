"""Typed records of one qualification run.

These are the in-memory evidence: gates record attempts and measurements into them, the
plugin ships them between xdist workers as plain dicts, and ``report.public`` turns a RunRecord
into the sanitized public report. Records grow by adding optional fields; ``from_dict``
ignores keys it does not know so old and new workers interoperate. A rung's verdict
(``rung_verdict``) is derived here, once, for the ladder gate, the report builder, the
decision, the campaign and the HTML page alike, from a ``RungRecord`` or a report's rung dict.

The fixed words a record holds (:class:`Verdict`, :class:`GateOutcome`, :class:`FailureKind`, ...)
live in ``words``; every one is re-exported here, where they were first defined.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pytest_vllmqual.words import (
    AnswerCause,
    ArmStatus,
    Divergence,
    EquivalenceVerdict,
    FailureKind,
    FigureSource,
    FigureStatus,
    FloorNodes,
    GateOutcome,
    ItemFamily,
    ItemJudge,
    LauncherKind,
    LevelJudgement,
    RungSource,
    RunMode,
    ServerStatus,
    StartupStatus,
    TaskVerdict,
    Verdict,
    Word,
    worst_failure,
    worst_outcome,
)

__all__ = [
    "HEALTH_OK",
    "AnswerCause",
    "ArmStatus",
    "Attempt",
    "Divergence",
    "EquivalenceVerdict",
    "FailureKind",
    "FigureSource",
    "FigureStatus",
    "FloorNodes",
    "GateOutcome",
    "GateRecord",
    "ItemFamily",
    "ItemJudge",
    "LauncherKind",
    "LevelJudgement",
    "RunMode",
    "RunRecord",
    "RungRecord",
    "RungSource",
    "RungVerdict",
    "ServerStatus",
    "StartupStatus",
    "TaskVerdict",
    "Verdict",
    "Word",
    "rung_verdict",
    "value_at",
    "worst_failure",
    "worst_outcome",
]

_T = TypeVar("_T")

HEALTH_OK = ("healthy", "ok")
"""The exact values a rung's ``health_after`` takes when /health answered 200."""


def value_at(node: Any, *path: str) -> Any:
    """The value at a key path of nested mappings (a recipe's content), None where the path ends early."""
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _from_dict(cls: type[_T], data: Mapping[str, Any]) -> _T:
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class Attempt:
    """One request of a gate: what was sent (by hash), what came back, how long it took."""

    kind: str
    label: str
    ok: bool
    status_code: int | None = None
    latency_s: float | None = None
    usage: dict[str, Any] | None = None
    request_sha256: str | None = None
    response_sha256: str | None = None
    request_artifact: str | None = None
    response_artifact: str | None = None
    error: str | None = None
    error_kind: str | None = None
    expected_rejection: bool = False
    timing: dict[str, Any] | None = None

    @property
    def failure_kind(self) -> FailureKind:
        """Whose failure this request is, when it did not come back as asked (an error status, no
        answer, a broken stream): the model's never, since no answer of the model's came back whole."""
        if self.error_kind in (ServerStatus.SERVER_DEAD, ServerStatus.HUNG):
            return FailureKind.SERVER_GONE
        if self.error_kind in ("timeout", "connection"):
            return FailureKind.TRANSPORT
        return FailureKind.SERVER_ERROR

    def __repr__(self) -> str:
        """No server text (``error`` may hold it): a failed assertion prints this repr publicly."""
        return f"Attempt(kind={self.kind!r}, label={self.label!r}, ok={self.ok}, status_code={self.status_code})"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attempt:
        return _from_dict(cls, data)


@dataclass
class GateRecord:
    """One gate (one test): outcome, measurements, and every attempt, failures retained.

    ``outcome`` is pytest's result of the test (:class:`GateOutcome`). ``status`` is the harness's
    word for why the gate could not run against a usable server, and is None when it could: a
    :class:`ServerStatus` (``server_dead``, ``hung``) or a :class:`StartupStatus` (a failed start's
    ``kv_insufficient``, ``not_run`` when stopped by fail-fast, ``stopped``). A gate that failed on
    its own evidence has an outcome of ``failed`` and no status. ``failure_kind`` says whose
    failure it was (a :class:`FailureKind`): set on a failed or errored gate, and on a declared gate
    that ended skipped because the model's answers failed; None otherwise, and where nothing the
    gate or the harness saw tells (an exception in a user's own gate code).
    """

    nodeid: str
    gate: str
    title: str = ""
    markers: list[str] = field(default_factory=list)
    arm: str | None = None
    outcome: GateOutcome = GateOutcome.PENDING
    reason: str | None = None
    status: str | None = None
    duration_s: float | None = None
    summary: str | None = None
    failure_kind: str | None = None
    measurements: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def retained_failures(self) -> list[Attempt]:
        return [a for a in self.attempts if not a.ok]

    def __post_init__(self) -> None:
        self.outcome = _outcome(self.outcome)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["outcome"] = _outcome(self.outcome).value  # a plain string: xdist ships plain types only
        data["status"] = None if self.status is None else str(self.status)
        data["failure_kind"] = None if self.failure_kind is None else str(self.failure_kind)
        data["attempts"] = [a.to_dict() for a in self.attempts]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateRecord:
        record = _from_dict(cls, {k: v for k, v in data.items() if k != "attempts"})
        record.attempts = [Attempt.from_dict(a) for a in data.get("attempts") or []]
        return record


def _outcome(value: str) -> GateOutcome:
    """An outcome word as the enum; a word this version does not know reads as ``error``."""
    try:
        return GateOutcome(value)
    except ValueError:
        return GateOutcome.ERROR


@dataclass
class RungRecord:
    """One ladder rung: one real streamed request at an exact prompt length."""

    index: int
    target: int
    target_label: str
    prompt_tokens: int | None = None
    calibration_error: int | None = None
    status_code: int | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    ttft_content_s: float | None = None
    e2e_s: float | None = None
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    ok: bool = False
    expected_rejection: bool = False
    error: str | None = None
    post_probe_smoke: str | None = None
    health_after: str | None = None
    server_ttft_s: float | None = None
    #: Why ``decode_tok_s`` is not given although the request completed (the client read late).
    decode_not_measured: str | None = None
    #: Whose view ``decode_tok_s`` is (a ``FigureSource`` word): the client's clock, or the
    #: server's ``vllm:request_decode_time_seconds`` where the client read the answer late.
    decode_source: str | None = None
    #: The server's decode rate for this request: (completion_tokens - 1) / its decode time.
    server_decode_tok_s: float | None = None
    #: Why the client's own decode figure was not used (it read the answer late).
    client_decode_not_measured: str | None = None
    server_prompt_tokens: int | None = None
    prefix_cache_hits: int | None = None
    killed_server: bool = False
    #: The structured smoke and health results a public report carries; set only on a rung
    #: read back from a report, where they win over the words they were derived from.
    post_probe_smoke_ok: bool | None = None
    health_after_ok: bool | None = None

    @property
    def verdict(self) -> RungVerdict:
        return rung_verdict(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RungRecord:
        return _from_dict(cls, data)


@dataclass(frozen=True)
class RungVerdict:
    """What one rung showed: the one reading every consumer of a rung uses."""

    #: A measured rung that was answered and has an API-reported size: it counts for capacity.
    completed: bool
    #: A measured rung that did not complete: retained as a real failed attempt.
    failed: bool
    #: The deliberate ``max_model_len + 1`` rung (``expected_rejection``): its ``ok`` says
    #: whether it was rejected as it must be.
    rejection_rung: bool
    #: The rejection rung was rejected with the over-length HTTP 400.
    rejected_as_expected: bool
    #: The server died or hung during this rung; nothing ran after it.
    killed_server: bool
    #: The post-probe smoke passed (True), failed (False) or did not run (None).
    smoke: bool | None
    #: /health answered 200 after the rung (True), did not (False), or was not asked (None).
    healthy: bool | None

    @property
    def kind(self) -> str:
        """How the page draws the rung: ``rejected`` (the rejection rung), ``ok`` or ``failed``."""
        if self.rejection_rung:
            return "rejected"
        return "failed" if self.failed else "ok"


def rung_verdict(rung: Mapping[str, Any]) -> RungVerdict:
    """The verdict of a rung dict (``RungRecord.to_dict()`` or a report's ``ladder`` entry).

    A report's structured ``post_probe_smoke_ok``/``health_after_ok`` flags win over the text
    fields they were derived from, never a substring match.
    """
    rejection = bool(rung.get("expected_rejection"))
    ok = bool(rung.get("ok"))
    smoke_flag, smoke = rung.get("post_probe_smoke_ok"), rung.get("post_probe_smoke")
    health_flag, health = rung.get("health_after_ok"), rung.get("health_after")
    return RungVerdict(
        completed=ok and not rejection and isinstance(rung.get("prompt_tokens"), int),
        failed=not ok and not rejection,
        rejection_rung=rejection,
        rejected_as_expected=ok and rejection,
        killed_server=bool(rung.get("killed_server")),
        smoke=smoke_flag if isinstance(smoke_flag, bool) else (None if smoke is None else smoke == "passed"),
        healthy=health_flag if isinstance(health_flag, bool) else (None if health is None else health in HEALTH_OK),
    )


@dataclass
class RunRecord:
    """Everything one run learned, before sanitizing. One per arm."""

    run_id: str
    arm: str
    recipe_name: str
    recipe_path: str
    recipe_sha256: str
    recipe_content: dict[str, Any]
    started_utc: str
    finished_utc: str | None = None
    mode: RunMode = RunMode.MANAGED
    status: str = "complete"
    status_reasons: list[str] = field(default_factory=list)
    reproduce: str = ""
    identity: dict[str, Any] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    lifecycle: dict[str, Any] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)
    endpoints: dict[str, Any] = field(default_factory=dict)
    gates: list[GateRecord] = field(default_factory=list)
    ladder: list[RungRecord] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    private_dir: str | None = None
    deselected_gates: list[dict[str, Any]] = field(default_factory=list)
    recipe_origin: str = "file"
    recipe_overrides: list[str] = field(default_factory=list)
    recipe_file_sha256: str | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.mode = RunMode.of(self.mode)

    def gates_named(self, name: str) -> list[GateRecord]:
        """Every record of the gate ``name`` (a gate may run more than once)."""
        return [g for g in self.gates if g.gate == name]

    @property
    def completed_rungs(self) -> list[RungRecord]:
        """The rungs that count for capacity (``RungVerdict.completed``), in ladder order."""
        return [r for r in self.ladder if r.verdict.completed]

    @property
    def largest_rung(self) -> RungRecord | None:
        """The completed rung with the most API-reported prompt tokens (None when none completed)."""
        completed = self.completed_rungs
        return max(completed, key=lambda r: int(r.prompt_tokens or 0)) if completed else None

    def recipe_value(self, *path: str) -> Any:
        """A value of the recipe's content by key path (None when absent)."""
        return value_at(self.recipe_content, *path)
