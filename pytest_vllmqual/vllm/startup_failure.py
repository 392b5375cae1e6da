"""Startup failures and phases, read from the log of a server that is starting.

Two readers, both tables walked in order: ``last_startup_phase`` names the phase of the
latest recognised startup line (progress lines, the timeout message), and
``classify_startup_failure`` recognises why a start failed (KV cache too small, GPU taken,
CUDA OOM, port bound, engine core failed) so readiness can stop at once instead of waiting out
the deadline. A new cause is one more row of ``_FAILURES``: its pattern, its kind, the
message and the figures built from the match, and the hint.

vLLM's log text is not an API; each pattern notes the versions it was read from, and the
unit tests hold one excerpt per version family (``tests/unit/data/engine_logs/``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.privacy.public_text import STARTUP_PHASES
from pytest_vllmqual.records import StartupStatus

from .server_log import NUMBER, split_line, strip_ansi

__all__ = ["FAILURE_KINDS", "PHASE_KEYS", "StartupFailure", "classify_startup_failure", "exception_at_exit",
           "exception_hint", "last_startup_phase"]

#: Checked per line, in this order; the phase of the last matching line is the one reached. The
#: phases and their words are ``privacy.public_text.STARTUP_PHASES``'s: each key here is one of
#: them (a key without words fails at import), and every phase there but ``none`` has a row.
_PHASE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Application startup complete"), "ready"),
    (re.compile(r"Starting vLLM (?:API )?server|Route: /|Started server process|Waiting for application startup"),
     "api_starting"),
    (re.compile(r"EngineCore failed to start|Engine core initialization failed|EngineCore encountered a fatal error"),
     "engine_failed"),
    (re.compile(r"\[shutdown\]|Shutting down|shutdown triggered"), "shutting_down"),
    (re.compile(r"init engine \(profile, create kv cache, warmup model\) took"), "engine_initialized"),
    (re.compile(r"Graph capturing finished"), "graphs_captured"),
    (re.compile(r"Capturing CUDA graph|Profiling CUDA graph memory|CUDA graph pool memory"), "capturing_graphs"),
    (re.compile(r"KV cache size: [\d,]+ tokens|Maximum concurrency for [\d,]+ tokens"), "kv_allocated"),
    (re.compile(r"Available KV cache memory|(?:Explicitly|Auto) set \(.*\) GiB for KV cache|Memory profiling takes"),
     "kv_sizing"),
    (re.compile(r"Warming up model|warmup run took|Warming up done"), "warming_up"),
    (re.compile(r"torch\.compile takes|Compiling a graph|Dynamo bytecode transform|Start compiling"), "compiling"),
    (re.compile(r"Model loading took|Loading weights took"), "weights_loaded"),
    (re.compile(r"Starting to load model|Loading safetensors checkpoint shards|Loading weights"), "loading_weights"),
    (re.compile(r"Initializing a V1 LLM engine|Waiting for core engine|world_size=\d+ rank=\d+"
                r"|distributed_init_method"),
     "initializing"),
    (re.compile(r"non-default args:|vLLM (?:API )?server version|▀▄▀ █\s+version"), "api_process_started"),
)

PHASE_KEYS: tuple[str, ...] = tuple(key for _, key in _PHASE_PATTERNS)
"""The phases the log patterns recognise, by their key in ``STARTUP_PHASES``."""
_PHASES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (pattern, STARTUP_PHASES[key]) for pattern, key in _PHASE_PATTERNS)


def last_startup_phase(text: str) -> str | None:
    """The phase of the latest recognised startup line, as a short label for progress/timeouts."""
    for raw in reversed(strip_ansi(text).replace("\r", "\n").split("\n")):
        if not raw.strip():
            continue
        for pattern, words in _PHASES:
            if pattern.search(raw):
                return words
    return None




@dataclass(frozen=True)
class StartupFailure:
    """A startup failure recognised in the log, with the figures the error message states."""

    kind: StartupStatus
    message: str
    evidence: str
    hint: str = ""
    max_seq_len: int | None = None
    needed_gib: float | None = None
    available_gib: float | None = None
    estimated_max_len: int | None = None
    free_gib: float | None = None
    total_gib: float | None = None
    requested_gib: float | None = None
    gpu_memory_utilization: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain values (the kind as its word): a failed start's details travel to xdist workers."""
        return {**vars(self), "kind": str(self.kind)}


def _kv_insufficient(m: re.Match[str]) -> tuple[str, dict[str, Any]]:
    estimated = int(m.group("estimated")) if m.group("estimated") else None
    message = (f"KV cache cannot hold one request of max_model_len {m.group('len')}: "
               f"{m.group('needed')} GiB needed, {m.group('available')} GiB available"
               + (f", estimated maximum length {estimated}" if estimated is not None else ""))
    return message, {"max_seq_len": int(m.group("len")), "needed_gib": float(m.group("needed")),
                     "available_gib": float(m.group("available")), "estimated_max_len": estimated}


def _cpu_kv_short(m: re.Match[str]) -> tuple[str, dict[str, Any]]:
    message = (f"the CPU node has {m.group('available')} GiB available, less than the "
               f"{m.group('needed')} GiB requested for the KV cache")
    return message, {"needed_gib": float(m.group("needed")), "available_gib": float(m.group("available")),
                     "total_gib": float(m.group("total"))}


def _gpu_busy(m: re.Match[str], where: str = "on the GPU") -> tuple[str, dict[str, Any]]:
    message = (f"only {m.group('free')} of {m.group('total')} GiB were free {where} at startup, "
               f"less than the {m.group('req')} GiB that gpu_memory_utilization {m.group('util')} asks for")
    return message, {"free_gib": float(m.group("free")), "total_gib": float(m.group("total")),
                     "requested_gib": float(m.group("req")), "gpu_memory_utilization": float(m.group("util"))}


def _fixed(message: str, **figures: Any) -> Callable[[re.Match[str]], tuple[str, dict[str, Any]]]:
    """A row whose message names no figure of the matched line."""
    return lambda _m: (message, dict(figures))


@dataclass(frozen=True)
class _Failure:
    """One row of the classification table: a log pattern and what the harness says about it."""

    pattern: re.Pattern[str]
    kind: StartupStatus
    describe: Callable[[re.Match[str]], tuple[str, dict[str, Any]]]
    hint: str


#: Most specific cause first: KV cache cannot hold max_model_len, GPU memory taken by someone
#: else, CUDA OOM, port already bound, an empty kernel in torch's compile cache, then the
#: generic "Engine core initialization failed".
_FAILURES: tuple[_Failure, ...] = (
    _Failure(
        # ≤0.20 "the models's max seq len", ≥0.27 "the model's max seq len".
        re.compile(
            rf"To serve at least one request with the models?'s? max seq len \((?P<len>\d+)\), "
            rf"\((?P<needed>{NUMBER}) GiB KV cache is needed, which is larger than the available KV cache memory "
            rf"\((?P<available>{NUMBER}) GiB\)\.(?: Based on the available memory, the estimated maximum model "
            rf"length is (?P<estimated>\d+)\.)?"
        ),
        StartupStatus.KV_INSUFFICIENT, _kv_insufficient,
        "lower max_model_len to at most the estimated length, or give the KV cache more memory "
        "(--gpu-memory-utilization, --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE on CPU)",
    ),
    _Failure(
        re.compile(
            rf"Available memory on node \d+ \((?P<available>{NUMBER})/(?P<total>{NUMBER}) GiB\) on kv cache "
            rf"allocation is less than requested memory for kv \((?P<needed>{NUMBER})(?:/{NUMBER})? GiB\)"
        ),
        StartupStatus.KV_INSUFFICIENT, _cpu_kv_short,
        "lower VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes, or free memory on the node",
    ),
    _Failure(
        re.compile(r"No available memory for the cache blocks"),
        StartupStatus.KV_INSUFFICIENT, _fixed("no memory was left for the KV cache after loading the model", available_gib=0.0),
        "raise --gpu-memory-utilization, or use a smaller model / more tensor parallelism",
    ),
    _Failure(
        re.compile(
            rf"Free memory on device(?: \S+)? \((?P<free>{NUMBER})/(?P<total>{NUMBER}) GiB\) on startup is less "
            rf"than desired GPU memory utilization \((?P<util>{NUMBER}), (?P<req>{NUMBER}) GiB\)"
        ),
        StartupStatus.GPU_BUSY, _gpu_busy,
        "another process holds GPU memory: stop it, or lower --gpu-memory-utilization",
    ),
    _Failure(
        # vllm-cpu 0.32: on the CPU backend gpu_memory_utilization is a fraction of the node's memory.
        re.compile(
            rf"Available memory on node \S+ \((?P<free>{NUMBER})/(?P<total>{NUMBER}) GiB\) on startup is less "
            rf"than desired CPU memory utilization \((?P<util>{NUMBER}), (?P<req>{NUMBER}) GiB\)"
        ),
        StartupStatus.CPU_MEMORY_BUSY, lambda m: _gpu_busy(m, where="on the CPU node"),
        "on the CPU backend --gpu-memory-utilization is the share of the node's memory (0.92 unless set): lower it "
        "(serve.gpu_memory_utilization, e.g. 0.3), or free memory held by other processes",
    ),
    _Failure(
        re.compile(r"OutOfMemoryError|CUDA out of memory"),
        StartupStatus.OUT_OF_MEMORY, _fixed("the GPU ran out of memory during startup"),
        "lower --gpu-memory-utilization, --max-num-batched-tokens or --max-num-seqs, or free the GPU",
    ),
    _Failure(
        re.compile(r"\[Errno 98\]|[Aa]ddress already in use"),
        StartupStatus.PORT_IN_USE, _fixed("the server could not bind its port: address already in use"),
        "choose a free port (port 0 lets the launcher pick one), or stop the process holding it",
    ),
    _Failure(
        # torch's compile cache (even --enforce-eager compiles a few kernels on CPU) keeps a kernel
        # as a .so; a server stopped while the compiler wrote one leaves it empty, and every later
        # start that needs that kernel fails to load it (seen on vllm-cpu 0.32 after a Ctrl-C).
        re.compile(r"ImportError: \S+\.so: file too short"),
        StartupStatus.ENGINE_CORE_FAILED,
        _fixed("a kernel in torch's compile cache is an empty file, left by a server that was stopped "
               "while it compiled; every start that needs that kernel fails to load it"),
        "delete the empty .so files in torch's compile cache (TORCHINDUCTOR_CACHE_DIR, by default "
        "/tmp/torchinductor_<user>): find DIR -name '*.so' -size 0 -delete; the next start compiles them again",
    ),
    _Failure(
        re.compile(r"Engine core initialization failed|EngineCore failed to start"),
        StartupStatus.ENGINE_CORE_FAILED,
        _fixed("the engine core failed to initialise; the root cause is earlier in the log"),
        "read the traceback above 'Engine core initialization failed' in the log tail",
    ),
)

FAILURE_KINDS: frozenset[StartupStatus] = frozenset(row.kind for row in _FAILURES)
"""The startup statuses a server's log can show (the rest are the harness's own findings)."""

_ADDRESS_RE = re.compile(
    r"\('[^']*', \d+\)|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9a-fA-F]*:[0-9a-fA-F:]*\](?::\d+)?"
    r"|\blocalhost:\d+"
)


def _evidence(line: str) -> str:
    """The failing line without prefix, colour or addresses, truncated for a log tail."""
    body = split_line(strip_ansi(line).strip()).message
    return _ADDRESS_RE.sub("<addr>", body)[:500]


def classify_startup_failure(text: str) -> StartupFailure | None:
    """Recognise why a server failed to start, most specific cause first; None if no known cause."""
    clean = strip_ansi(text).replace("\r", "\n")
    for row in _FAILURES:
        # One search over the whole text (no pattern spans a newline), then its line.
        m = row.pattern.search(clean)
        if m is None:
            continue
        start = clean.rfind("\n", 0, m.start()) + 1
        end = clean.find("\n", m.end())
        message, figures = row.describe(m)
        return StartupFailure(kind=row.kind, message=message, evidence=_evidence(clean[start:end if end != -1 else None]),
                              hint=row.hint, **figures)
    return None


_PROCESS_PREFIX = re.compile(r"^\([A-Za-z][\w ]*pid=\d+\) ?")
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?P<name>[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Iteration|Failure))(?::\s|:?$)")

_EXCEPTION_HINTS: dict[str, str] = {
    "PackageNotFoundError": (
        "the installed vLLM has no package metadata under the name its `vllm` console script asks for (the CPU "
        "build installs as vllm-cpu), so `vllm serve` cannot start: use the module form, launcher.command: "
        "['{python}', '-m', 'vllm.entrypoints.openai.api_server'] (`vllmqual recipe from-command` writes it "
        "where the console script cannot start)"),
    "ModuleNotFoundError": (
        "a module the server imports is not installed for the interpreter that ran it: install it there, or "
        "point launcher.command at the interpreter that has vLLM"),
}


def exception_at_exit(text: str) -> str | None:
    """The type of the Python exception a server died of at startup: the exception line of the
    log's last traceback, by its class name alone (``PackageNotFoundError``; never the message,
    which is server text). None when the log ends without a traceback."""
    lines = [_PROCESS_PREFIX.sub("", raw) for raw in strip_ansi(text).replace("\r", "\n").split("\n")]
    starts = [i for i, line in enumerate(lines) if line.strip() == _TRACEBACK]
    if not starts:
        return None
    name: str | None = None
    for line in lines[starts[-1] + 1:]:
        m = _EXCEPTION_LINE.match(line)
        if m:
            name = m.group("name")
    return name


def exception_hint(name: str) -> str:
    """What to do about a server that died of exception ``name`` at startup."""
    return _EXCEPTION_HINTS.get(name, f"the server raised {name} before it was ready: its traceback is at the end "
                                      "of the server log in the run's private folder (its path is printed above)")
