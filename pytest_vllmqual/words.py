"""The fixed words of a run: every ``str`` enum of the package, on one base (:class:`Word`).

Each member *is* its string, so it compares equal to the word a report read back from disk
holds, and JSON and YAML write it as that word. The words live apart from the records that
carry them (``records``) so that a module needing a word need not read the records; ``records``
re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

__all__ = [
    "AnswerCause",
    "ArmStatus",
    "Divergence",
    "EquivalenceVerdict",
    "FailureKind",
    "FigureSource",
    "FigureStatus",
    "FloorNodes",
    "GateOutcome",
    "ItemFamily",
    "ItemJudge",
    "LauncherKind",
    "LevelJudgement",
    "PromotionRule",
    "ResultLayer",
    "RunMode",
    "RungSource",
    "ServerStatus",
    "StartupStatus",
    "TaskVerdict",
    "Verdict",
    "Word",
    "worst_failure",
    "worst_outcome",
]


class Word(str, Enum):
    """A fixed word: ``str()`` and f-strings give the word itself on every Python version."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class AnswerCause(Word):
    """Why two fleet nodes' answers to one probe differ."""

    #: A node ran with overrides of its own (a fleet file's ``node_set``): the recipe differs.
    RECIPE = "recipe"
    #: The nodes' numerics fingerprints differ; the fields that do are named.
    EXPLAINED = "explained"
    #: Same recipe, same fingerprint: a suspect host.
    UNEXPLAINED = "unexplained"


class FloorNodes(Word):
    """On which nodes a fleet job runs twice, to measure what a node gives against itself."""

    ONE = "one"
    EVERY = "every"
    NONE = "none"


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


class TaskVerdict(Word):
    """Whether the candidate's task answers are non-inferior to the control's at the recipe's margin
    (a family, a block of items, or the whole task layer of a comparison)."""

    #: The upper 95% bound of (control − candidate) accuracy lies below the margin.
    NON_INFERIOR = "non-inferior"
    #: The lower 95% bound of (control − candidate) accuracy lies above the margin: the candidate
    #: loses more than the margin, on any number of items.
    INFERIOR = "inferior"
    #: Measured, but the interval straddles the margin, or the items cannot tell the arms apart.
    INCONCLUSIVE = "inconclusive"
    #: Measured, not inferior, but on fewer paired items than the recipe's minimum.
    TOO_FEW = "too few units"
    #: No comparison: a block absent from an arm, different banks (hashes), or answers over the
    #: caps on unparsed or truncated answers.
    NOT_MEASURED = "not measured"


class PromotionRule(Word):
    """Which rule of a comparison may block the candidate (the recipe's ``compare.promotion``); the
    others are reported, never blocking."""

    #: Every figure within the A/A floor (the control against its bracketed replay): for a change
    #: that should not move the numerics at all, such as a rebuilt image.
    EXACT = "exact"
    #: The token figures within their thresholds (the probe's verdict ``equivalent``).
    TOKENS = "tokens"
    #: The scored items non-inferior at the margin, the tool-call replay too where both arms ran it,
    #: and no depth bucket worse than the shallowest.
    TASKS = "tasks"


class ResultLayer(Word):
    """The three layers a comparison reports, each with its own verdict."""

    #: The probe's token figures (top-1 agreement, ln PPL ratio, KL lower bound, greedy answers, flips).
    TOKENS = "tokens"
    #: The paired task statistics over the item bank and the tool-call replay.
    TASKS = "tasks"
    #: The token figures per depth bucket, deep in one cached prefix.
    DEPTH = "depth"


class Divergence(Word):
    """How two greedy answers to one prompt compare."""

    IDENTICAL = "identical"
    #: The candidate's token was in the control's top-K, within 0.5 nats of the control's top token.
    NEAR_TIE = "near tie"
    HARD = "hard"


class ItemFamily(Word):
    """A family of the item bank's questions (each judged per family: accuracy, unparsed, cut off)."""

    #: Multi-digit arithmetic at graded difficulty, judged by the answer's final number.
    ARITHMETIC = "arithmetic"
    #: A value stated earlier, asked for after a growing number of other statements.
    RECALL = "recall"
    #: Sorting, counting or the largest of a short list of numbers.
    LISTS = "lists"
    #: One field of a JSON object.
    JSON_FIELD = "json_field"
    #: A number hidden at a chosen depth of a long text.
    NEEDLE = "needle"
    #: An operator's own items (the recipe's JSONL file).
    OPERATOR = "operator"


class ItemJudge(Word):
    """How an item's answer is judged (an operator's item names one)."""

    #: The final number the answer affirms equals the expected number.
    FINAL_NUMBER = "final_number"
    #: The answer's last integers are the expected list, in order.
    NUMBER_LIST = "number_list"
    #: The answer (or its first line) is the expected text, case and punctuation aside.
    EXACT_TEXT = "exact_text"


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
