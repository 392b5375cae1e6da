"""Typed records of one qualification run.

These are the in-memory evidence: gates record attempts and measurements into them, the
plugin ships them between xdist workers as plain dicts, and ``report.public`` turns a RunRecord
into the sanitized public report. Records grow by adding optional fields; ``from_dict``
ignores keys it does not know so old and new workers interoperate. A rung's verdict
(``rung_verdict``) is derived here, once, for the ladder gate, the report builder, the
decision, the campaign and the HTML page alike, from a ``RungRecord`` or a report's rung dict.

The fixed words of a run are ``str`` enums here (:class:`Verdict`, :class:`GateOutcome`,
:class:`ServerStatus`, :class:`StartupStatus`, :class:`RunMode`, :class:`FailureKind`): each member *is* its string, so it compares equal to the word a report
read back from disk holds, and JSON writes it as that word.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

__all__ = [
    "HEALTH_OK",
    "ArmStatus",
    "Attempt",
    "Divergence",
    "EquivalenceVerdict",
    "FailureKind",
    "FigureSource",
    "FigureStatus",
    "GateOutcome",
    "GateRecord",
    "LauncherKind",
    "LevelJudgement",
    "RunMode",
    "RunRecord",
    "RungRecord",
    "RungSource",
    "RungVerdict",
    "ServerStatus",
    "StartupStatus",
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


class Word(str, Enum):
    """A fixed word: ``str()`` and f-strings give the word itself on every Python version."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Verdict(Word):
    """How far one run's (or one comparison's) evidence goes, lowest first."""

    #: A gate failed or errored, the run is incomplete, the identity differs, teardown was not
    #: clean, or no gate ran.
    NO_PROMOTION = "no-promotion"
    #: Every gate that ran passed on an endpoint this run neither started nor stopped.
    DIRECT_ONLY = "direct-only"
    #: Managed and every gate that ran passed, but the qualification evidence is incomplete.
    HEALTHY = "healthy"
    #: Every registered gate of every family passed, managed and verified: the most one run earns.
    #: The evidence can support a promotion (the opposite of ``no-promotion``); the run itself
    #: promotes nothing. Report schema 2 called this ``candidate``, the word that now only names
    #: the B arm of an A/B; ``qualified`` was not taken because a campaign's record already uses it
    #: for the arm that qualified the campaign (its requirements met and its verdict at least healthy).
    PROMOTABLE = "promotable"
    #: Awarded only by an A/B comparison: a promotable B arm that held up against its control.
    PRIORITY_CHALLENGER = "priority-challenger"


class EquivalenceVerdict(Word):
    """Whether a candidate answers as its control does, on the same checkpoint (a comparison's finding)."""

    #: Every exact figure measured on at least its minimum units, its far 95% bound within its threshold.
    EQUIVALENT = "equivalent"
    #: A figure's near 95% bound is beyond its threshold (or the KL lower bound's lower bound is).
    NOT_EQUIVALENT = "not equivalent"
    #: Measured, but some figure straddles its threshold, was not measured, or was measured on too
    #: few units: neither shown equivalent nor not.
    INCONCLUSIVE = "inconclusive"
    #: No comparison was possible: no probe, no log probabilities (K = 0), or the arms differ in
    #: checkpoint pin, tokenizer or probe.
    NOT_MEASURABLE = "not measurable"


class FigureStatus(Word):
    """One equivalence figure against its threshold."""

    WITHIN = "within"
    BEYOND = "beyond"
    UNDECIDED = "undecided"
    #: A figure that can only show a difference (the KL lower bound) and did not.
    NOT_SHOWN = "not shown"
    NOT_MEASURED = "not measured"
    #: Measured, not beyond, but on fewer units (chunks, prompts, items) than its minimum.
    TOO_FEW = "too few units"


class Divergence(Word):
    """How two greedy answers to one prompt compare."""

    IDENTICAL = "identical"
    #: The candidate's token was in the control's top-K, within 0.5 nats of the control's top token.
    NEAR_TIE = "near tie"
    HARD = "hard"


class GateOutcome(Word):
    """What pytest made of one gate (one test); ``ABSENT`` only in coverage, for a gate that did not run."""

    PENDING = "pending"
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    ABSENT = "absent"

    @property
    def failing(self) -> bool:
        """A failed or errored gate: it blocks any verdict above no-promotion."""
        return self in (GateOutcome.FAILED, GateOutcome.ERROR)


class FailureKind(Word):
    """Whose failure a gate's failure is: a recipe's declaration (``not_applicable``) excuses only
    the model's answers (``model_behaviour``); every other kind fails the gate even where declared."""

    #: The server answered as the API asks, and the model's answer broke the gate's rule (no tool
    #: call, wrong arguments, a wrong answer, a finish reason the recipe does not allow).
    MODEL_BEHAVIOUR = "model_behaviour"
    #: The server answered against the API: an HTTP error status, a broken stream contract, an
    #: error event inside the stream, or an engine figure below the recipe's bar.
    SERVER_ERROR = "server_error"
    #: No answer came back: a timeout, a refused or broken connection, while the server was
    #: not found gone.
    TRANSPORT = "transport"
    #: No usable server: it died or hung (``server_dead``, ``hung``), never started, or was stopped.
    SERVER_GONE = "server_gone"
    #: The recipe's own settings caused it: e.g. tools sent with ``tool_choice: auto`` to a server
    #: the recipe starts without ``--enable-auto-tool-choice`` or ``--tool-call-parser``.
    CONFIG = "config"

    @property
    def excused_by_declaration(self) -> bool:
        """Only a failure in the model's answers is what a declaration claims."""
        return self is FailureKind.MODEL_BEHAVIOUR

    @property
    def said(self) -> str:
        """The kind in a user's words, for a failure message."""
        return _FAILURE_KIND_WORDS[self]


_FAILURE_KIND_WORDS = {
    FailureKind.MODEL_BEHAVIOUR: "the model's answers",
    FailureKind.SERVER_ERROR: "a server error",
    FailureKind.TRANSPORT: "a request that got no answer (transport)",
    FailureKind.SERVER_GONE: "a server that was gone",
    FailureKind.CONFIG: "the recipe's own settings",
}
_FAILURE_RANK = (FailureKind.SERVER_GONE, FailureKind.TRANSPORT, FailureKind.SERVER_ERROR, FailureKind.CONFIG,
                 FailureKind.MODEL_BEHAVIOUR)


def worst_failure(kinds: Iterable[FailureKind | None]) -> FailureKind | None:
    """One kind for a gate whose requests failed in several ways: the server's or the transport's
    failure before the recipe's, and any of those before the model's (None when none failed)."""
    seen = {k for k in kinds if k is not None}
    return next((k for k in _FAILURE_RANK if k in seen), None)


_OUTCOME_RANK = (GateOutcome.ERROR, GateOutcome.FAILED, GateOutcome.PENDING, GateOutcome.SKIPPED)


def worst_outcome(outcomes: Iterable[str]) -> GateOutcome:
    """One outcome for a gate that ran more than once: error, failed, pending, skipped, then
    passed; ``absent`` when it never ran."""
    seen = [str(o) for o in outcomes]
    if not seen:
        return GateOutcome.ABSENT
    for worst in _OUTCOME_RANK:
        if worst in seen:
            return worst
    if all(o == GateOutcome.PASSED for o in seen):
        return GateOutcome.PASSED
    try:
        return GateOutcome(seen[0])
    except ValueError:
        return GateOutcome.ERROR


class ServerStatus(Word):
    """Whether the server a gate used is still usable: the guard's shared state."""

    OK = "ok"
    #: The process exited, /health is unreachable or not 200, or the engine core died.
    SERVER_DEAD = "server_dead"
    #: /health or a 1-token completion did not answer in time.
    HUNG = "hung"

    @property
    def gone(self) -> bool:
        return self is not ServerStatus.OK


class StartupStatus(Word):
    """Where an arm's server start stands, and why a start failed: the report's
    ``lifecycle.startup_status``, a ``LaunchError``'s status and a gate's status when its server
    never started. Every failure has its words in ``privacy.public_text.STARTUP_CAUSES``."""

    NOT_STARTED = "not_started"
    STARTING = "starting"
    READY = "ready"
    #: vLLM refused: the KV cache cannot hold one ``max_model_len`` request.
    KV_INSUFFICIENT = "kv_insufficient"
    #: Another process holds the GPUs' memory (the NVML preflight or the engine said so).
    GPU_BUSY = "gpu_busy"
    #: The CPU backend's node lacks the free memory asked for.
    CPU_MEMORY_BUSY = "cpu_memory_busy"
    OUT_OF_MEMORY = "out_of_memory"
    PORT_IN_USE = "port_in_use"
    ENGINE_CORE_FAILED = "engine_core_failed"
    #: The server process ended before it was ready.
    EXITED = "exited"
    STARTUP_TIMEOUT = "startup_timeout"
    #: The launch command, or the Docker SDK, is missing.
    COMMAND_NOT_FOUND = "command_not_found"
    PREPARE_FAILED = "prepare_failed"
    IMAGE_NOT_PINNED = "image_not_pinned"
    #: The GPU exclusivity preflight refused the start (a word older reports may hold).
    GPU_REFUSED = "gpu_refused"
    #: No Docker engine answered.
    DOCKER_UNAVAILABLE = "docker_unavailable"
    #: The image is not on the engine and could not be pulled (or was never built here).
    IMAGE_UNAVAILABLE = "image_unavailable"
    #: The engine could not create or start the container.
    DOCKER_ERROR = "docker_error"
    #: No server was handed to an xdist worker for its arm; also a gate stopped by fail-fast.
    NOT_RUN = "not_run"
    #: The arm's server had already been torn down when its tests ran.
    STOPPED = "stopped"
    #: A failure read back without its status.
    UNKNOWN = "unknown"

    @property
    def failed(self) -> bool:
        """A start that did not (or will not) reach readiness."""
        return self not in (StartupStatus.NOT_STARTED, StartupStatus.STARTING, StartupStatus.READY)


class RunMode(Word):
    """How a run used its server."""

    #: The run started the server, measured its cold start and stopped it.
    MANAGED = "managed"
    #: The run used an endpoint as it found it: no lifecycle management.
    DIRECT_ONLY = "direct-only"

    @classmethod
    def of(cls, value: object) -> RunMode:
        """A mode word read back (a report's ``run.mode``): anything but ``direct-only`` was managed."""
        return cls.DIRECT_ONLY if value == cls.DIRECT_ONLY else cls.MANAGED


class RungSource(Word):
    """Where the context ladder's rungs came from."""

    #: The recipe's ``gates.capacity.rungs``.
    RECIPE = "recipe"
    #: Derived from ``max_model_len`` for a managed run whose recipe sets no rungs.
    MAX_MODEL_LEN = "max_model_len"


class FigureSource(Word):
    """Whose view a timing figure is: the client's clock, or the server's own histograms."""

    CLIENT = "client"
    SERVER_METRICS = "server_metrics"
    #: Neither view could give it (the client read late and the server's view was not there).
    NOT_MEASURED = "not measured"


class LevelJudgement(Word):
    """A load level against its SLOs, judged only on figures that were measured."""

    MET = "met"
    MISSED = "missed"
    #: The level missed on the client's figures while the client itself fell behind (``client.lag``).
    NOT_MEASURED = "not measured"


def value_at(node: Any, *path: str) -> Any:
    """The value at a key path of nested mappings (a recipe's content), None where the path ends early."""
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


class LauncherKind(Word):
    """How a recipe's server is brought up (``launcher.kind``)."""

    #: A local process from the recipe's argv.
    SUBPROCESS = "subprocess"
    #: A container from a pinned image.
    DOCKER = "docker"
    #: A server this run neither starts nor stops: only its endpoint is known.
    EXTERNAL = "external"


class ArmStatus(Word):
    """What a campaign decided for one arm, from the reports so far."""

    #: It ran and met every requirement (``requires``).
    PASSED = "passed"
    #: It ran and missed a requirement.
    FAILED = "failed"
    #: It does not run: the campaign stopped, or it is a fallback that is not needed.
    SKIPPED = "skipped"
    #: It runs next.
    PENDING = "pending"
    #: An earlier arm has not run yet.
    WAITING = "waiting"

    @property
    def ran(self) -> bool:
        return self in (ArmStatus.PASSED, ArmStatus.FAILED)


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
