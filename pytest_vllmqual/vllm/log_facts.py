"""Engine facts from the server log: what a vLLM server says about itself while it starts.

``parse_engine_log`` reads the log of the last server start (``_last_boot``): the KV pool in
tokens and the concurrency it allows, per-rank weights / KV / activation / CUDA-graph memory
(``RankFacts``, one per process label, a worker's generic label folded into its ranked one),
engine init time, the effective non-default args (scrubbed through ``privacy.secret_policy.redact_args``)
and the version. ``vllm.engine_args`` reads those args as vLLM prints them (its names are
re-exported here, where they were first defined, for a release).

vLLM's log text is not an API. The patterns below were read from vLLM's own format strings
for 0.10.1 to 0.32 (the version that introduced or changed each one is noted next to it) and
are tested against one excerpt per version family in ``tests/unit/data/engine_logs/``. A fact
the log does not state stays ``None``: nothing is inferred or defaulted.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.privacy.secret_policy import redact_args

from .engine_args import (
    MODEL_DIR_PLACEHOLDER,
    NON_DEFAULT_ARGS_RE,
    json_safe,
    parse_python_literal,
    public_args,
)
from .server_log import NUMBER, LogLine, split_lines
from .startup_failure import last_startup_phase

__all__ = ["MODEL_DIR_PLACEHOLDER", "NON_DEFAULT_ARGS_RE", "NOT_OBSERVABLE", "NOT_REPORTED", "SOURCE_ENDPOINT",
           "SOURCE_LOG", "SOURCE_METRICS", "EngineFacts", "RankFacts", "parse_engine_log", "parse_python_literal"]

#: Where an engine fact came from (``EngineFacts.sources``; ``fact_sources`` fills them).
SOURCE_LOG = "log"
SOURCE_METRICS = "metrics"
SOURCE_ENDPOINT = "endpoint"
NOT_OBSERVABLE = "not observable from the endpoint"
NOT_REPORTED = "not reported"

_GIB_BYTES = 1 << 30

# --------------------------------------------------------------------------------------------
# Process labels
# --------------------------------------------------------------------------------------------

# Suffixes the process name gets when that parallel size is >1 (≥0.10.2 "Worker_DP0_PP1_TP0",
# 0.10.1 "VllmWorker PP0_TP1").
_RANK_PART_RE = re.compile(r"(?:^|[ _])(DP|PP|PCP|TP|DCP|EP)(\d+)(?=$|[ _])")
_WORKER_LABEL_RE = re.compile(r"^(?:Vllm)?Worker|^RayWorker")


def _canonical_labels(lines: Iterable[LogLine]) -> dict[int, str]:
    """Map each pid to its most specific label.

    A worker logs under a generic name ("VllmWorker-0", "Worker") until it knows its rank,
    then under "Worker_TP0". Facts printed before the rename belong to the same rank.
    """
    seen: dict[int, list[str]] = {}
    for line in lines:
        if line.pid is not None and line.label:
            labels = seen.setdefault(line.pid, [])
            if line.label not in labels:
                labels.append(line.label)
    canonical: dict[int, str] = {}
    for pid, labels in seen.items():
        ranked = [lab for lab in labels if _RANK_PART_RE.search(lab)]
        plain = [lab for lab in labels if not re.fullmatch(r"VllmWorker-\d+", lab)]
        canonical[pid] = (ranked or plain or labels)[-1]
    # Two live processes with the same generic label (Ray workers, say) stay apart; a ranked
    # label seen under two pids is a restart of that rank, and later lines overwrite.
    counts: dict[str, int] = {}
    for label in canonical.values():
        counts[label] = counts.get(label, 0) + 1
    return {
        pid: (label if counts[label] == 1 or _RANK_PART_RE.search(label) else f"{label} pid={pid}")
        for pid, label in canonical.items()
    }


def _rank_parts(label: str) -> dict[str, int]:
    return {kind: int(number) for kind, number in _RANK_PART_RE.findall(label)}


# --------------------------------------------------------------------------------------------
# Engine facts from the log
# --------------------------------------------------------------------------------------------

# ≥0.30 one line "GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: Xx"
# (the pool is the device name, "CPU", or "GPU + host"); ≤0.27 two lines, and the pool is
# always "GPU", CPU backend included.
_KV_SIZE_RE = re.compile(r"(?P<pool>[A-Za-z]+(?: \+ [a-z]+)?) KV cache size: (?P<tokens>[\d,]+) tokens")
_CONCURRENCY_RE = re.compile(r"Maximum concurrency for (?P<length>[\d,]+) tokens per request: (?P<x>[\d.]+)x")
# ≤0.11 "Model loading took %.4f GiB and %.6f seconds"; ≥0.14 "%s GiB memory and …"
# (the V2 model runner of 0.14–0.27 still omits "memory").
_MODEL_LOADING_RE = re.compile(rf"Model loading took (?P<gib>{NUMBER}) GiB(?: memory)? and (?P<s>{NUMBER}) seconds")
_LOADING_WEIGHTS_RE = re.compile(rf"Loading weights took (?P<s>{NUMBER}) seconds")
_AVAILABLE_KV_RE = re.compile(rf"Available KV cache memory: (?P<gib>{NUMBER}) GiB")
# CPU ≥0.20: "Explicitly set (1.0/11.84) GiB for KV cache on node 0." / "Auto set (…) …".
_CPU_KV_RE = re.compile(
    rf"(?P<how>Explicitly|Auto) set \((?P<kv>{NUMBER})/(?P<total>{NUMBER})\) GiB for KV cache on node (?P<node>\d+)"
)
_GRAPH_RE = re.compile(rf"Graph capturing finished in (?P<s>{NUMBER}) secs?, took (?P<gib>{NUMBER}) GiB")
# Per-rank memory summary: INFO in 0.10.2, DEBUG in 0.11–0.20, INFO again from 0.27 with
# weights and non-torch memory merged into "consumed memory". ≥0.32 names the device.
_FREE_ON_START_RE = re.compile(
    rf"Free memory on device(?: \S+)? \((?P<free>{NUMBER})/(?P<total>{NUMBER}) GiB\) on startup\. "
    rf"Desired GPU memory utilization is \((?P<util>{NUMBER}), (?P<req>{NUMBER}) GiB\)"
)
_USAGE_SPLIT_RE = re.compile(
    rf"Actual usage is (?P<weights>{NUMBER}) GiB for weight, (?P<peak>{NUMBER}) GiB for peak activation, "
    rf"(?P<non_torch>{NUMBER}) GiB for non-torch memory, and (?P<graph>{NUMBER}) GiB for CUDAGraph memory"
)
_USAGE_CONSUMED_RE = re.compile(
    rf"Actual usage is (?P<consumed>{NUMBER}) GiB for consumed memory \(weights \+ non-torch\), "
    rf"(?P<peak>{NUMBER}) GiB for peak activation, and (?P<graph>{NUMBER}) GiB for CUDAGraph memory"
)
# 0.10.2 prints bytes, later releases GiB.
_KV_IN_USE_RE = re.compile(rf"Current kv cache memory in use is (?P<value>{NUMBER}) (?P<unit>GiB|bytes)")
# DEBUG repr of the memory profiling result (all versions).
_PROFILE_DEBUG_RE = re.compile(
    rf"torch peak memory increase: (?P<peak>{NUMBER}) ?GiB; non-torch forward increase memory: "
    rf"(?P<non_torch>{NUMBER}) ?GiB; weights memory: (?P<weights>{NUMBER}) ?GiB"
)
# "… took 26.70 s" (≥0.20) or "… took 26.70 seconds" (≤0.14), optionally "(compilation: 8.08 s…".
_INIT_ENGINE_RE = re.compile(
    rf"init engine \(profile, create kv cache, warmup model\) took (?P<s>{NUMBER}) (?:s|seconds)"
    rf"(?: \(compilation: (?P<c>{NUMBER}) s)?"
)
_VERSION_RES = (
    re.compile(r"vLLM (?:API |gRPC )?server version (?P<v>[^\s,]+)"),  # ≤0.14 / ≥0.20 without logo
    re.compile(r"▀▄▀ █\s+version\s+(?P<v>\S+)"),  # ≥0.20 logo
    re.compile(r"Initializing a V1 LLM engine \(v(?P<v>[^)\s]+)\)"),  # every V1 engine core
)
_CPU_SOURCES = ("cpu_worker.py", "cpu_model_runner.py")
_GPU_SOURCES = ("gpu_worker.py", "gpu_model_runner.py")


@dataclass
class RankFacts:
    """What one engine process (a TP rank, or EngineCore at TP=1) logged about its memory.

    vLLM ≥0.14 prints "Model loading took", "Available KV cache memory" and "Graph capturing
    finished" on local rank 0 only; the per-rank "Actual usage is …" summary (INFO in 0.10.2
    and ≥0.27) is the only line every GPU rank prints.
    """

    label: str
    tp_rank: int | None = None
    weights_gib: float | None = None
    load_seconds: float | None = None
    weights_read_seconds: float | None = None
    available_kv_gib: float | None = None
    kv_in_use_gib: float | None = None
    consumed_gib: float | None = None
    cuda_graph_gib: float | None = None
    graph_capture_seconds: float | None = None
    peak_activation_gib: float | None = None
    non_torch_gib: float | None = None
    device_free_gib: float | None = None
    device_total_gib: float | None = None
    cpu_node_memory_gib: float | None = None

    @property
    def kv_gib(self) -> float | None:
        """KV memory of this rank: the profiler's figure, else the summary's "in use" figure."""
        return self.available_kv_gib if self.available_kv_gib is not None else self.kv_in_use_gib

    def has_facts(self) -> bool:
        """Whether this rank logged any figure (≥0.14 non-zero GPU ranks usually log none)."""
        return any(
            value is not None
            for name, value in vars(self).items()
            if name not in ("label", "tp_rank")
        )

    def to_dict(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["kv_gib"] = self.kv_gib
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RankFacts:
        """A rank back from its ``to_dict`` form; a value of the wrong type reads as absent."""
        return cls(label=str(data.get("label")), tp_rank=_as_int(data.get("tp_rank")),
                   **{name: _as_float(data.get(name)) for name in _RANK_FIGURES})


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_RANK_FIGURES = tuple(name for name in RankFacts.__dataclass_fields__ if name not in ("label", "tp_rank"))


@dataclass
class EngineFacts:
    """The engine facts of one server: parsed from its log (``parse_engine_log``), completed from
    its endpoints with the source of each fact (``fact_sources.with_sources``), and read back by
    the gates from the run's server facts (``from_dict``). ``None`` means nothing said."""

    device: str | None = None
    kv_pool: str | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_at_tokens: int | None = None
    ranks: list[RankFacts] = field(default_factory=list)
    init_engine_seconds: float | None = None
    compilation_seconds: float | None = None
    non_default_args: dict[str, Any] | None = None
    redacted_arg_keys: list[str] = field(default_factory=list)
    vllm_version: str | None = None
    last_phase: str | None = None
    kv_cache_memory_gib: float | None = None
    """Only ``/metrics`` gives it (``vllm:cache_config_info``)."""
    sources: dict[str, str] = field(default_factory=dict)
    """Fact name -> log / metrics / endpoint / not observable from the endpoint."""

    def source(self, name: str, default: str = SOURCE_LOG) -> str:
        return str(self.sources.get(name, default))

    @property
    def ranks_observable(self) -> bool:
        """Per-rank facts need the server log: a direct-only run does not have one."""
        return self.source("ranks", "") != NOT_OBSERVABLE

    def get(self, name: str) -> Any:
        """A fact by its name in the public dict (it goes to a gate's measurements as is)."""
        return self.to_dict().get(name)

    @property
    def min_rank_kv_gib(self) -> float | None:
        """The smallest per-rank KV memory: vLLM sizes the pool for every rank from it."""
        values = [rank.kv_gib for rank in self.ranks if rank.kv_gib is not None]
        return min(values) if values else None

    @property
    def tp_size_seen(self) -> int | None:
        """Distinct TP ranks that logged; 1 for a worker without a TP suffix; None if none logged."""
        tp_ranks = {rank.tp_rank for rank in self.ranks if rank.tp_rank is not None}
        if tp_ranks:
            return len(tp_ranks)
        return 1 if self.ranks else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "kv_pool": self.kv_pool,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "concurrency_at_tokens": self.concurrency_at_tokens,
            "ranks": [rank.to_dict() for rank in self.ranks],
            "min_rank_kv_gib": self.min_rank_kv_gib,
            "tp_size_seen": self.tp_size_seen,
            "init_engine_seconds": self.init_engine_seconds,
            "compilation_seconds": self.compilation_seconds,
            "non_default_args": json_safe(self.non_default_args),
            "redacted_arg_keys": list(self.redacted_arg_keys),
            "vllm_version": self.vllm_version,
            "last_phase": self.last_phase,
            **({"kv_cache_memory_gib": self.kv_cache_memory_gib} if self.kv_cache_memory_gib is not None else {}),
            **({"sources": dict(self.sources)} if self.sources else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineFacts:
        """The facts back from their ``to_dict`` form (as the run's server facts carry them); a
        value of the wrong type reads as absent."""
        args = data.get("non_default_args")
        sources = data.get("sources")
        return cls(
            device=_as_str(data.get("device")), kv_pool=_as_str(data.get("kv_pool")),
            kv_cache_tokens=_as_int(data.get("kv_cache_tokens")),
            max_concurrency=_as_float(data.get("max_concurrency")),
            concurrency_at_tokens=_as_int(data.get("concurrency_at_tokens")),
            ranks=[RankFacts.from_dict(rank) for rank in data.get("ranks") or [] if isinstance(rank, Mapping)],
            init_engine_seconds=_as_float(data.get("init_engine_seconds")),
            compilation_seconds=_as_float(data.get("compilation_seconds")),
            non_default_args=dict(args) if isinstance(args, Mapping) else None,
            redacted_arg_keys=[str(key) for key in data.get("redacted_arg_keys") or []],
            vllm_version=_as_str(data.get("vllm_version")), last_phase=_as_str(data.get("last_phase")),
            kv_cache_memory_gib=_as_float(data.get("kv_cache_memory_gib")),
            sources={str(k): str(v) for k, v in sources.items()} if isinstance(sources, Mapping) else {},
        )


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_engine_log(text: str) -> EngineFacts:
    """Parse a vLLM server log (any version 0.10.1–0.32, GPU or CPU, coloured or not).

    If the text holds several server starts (a restart appended to the same file), only the
    last one is read: it begins at the last "non-default args:" line, which every release
    prints once per start. The server's listen address is never kept.
    """
    lines = split_lines(_last_boot(text))
    labels = _canonical_labels(lines)
    facts = EngineFacts()
    ranks: dict[str, RankFacts] = {}
    device = _DeviceEvidence()

    def rank_for(line: LogLine) -> RankFacts:
        label = labels.get(line.pid, line.label) if line.pid is not None else line.label
        key = label or "(unprefixed)"
        if key not in ranks:
            ranks[key] = RankFacts(label=key, tp_rank=_rank_parts(key).get("TP"))
        return ranks[key]

    for line in lines:
        if line.pid is not None:
            label = labels.get(line.pid, line.label or "")
            if _WORKER_LABEL_RE.match(label) or "TP" in _rank_parts(label):
                rank_for(line)  # a worker that logged nothing measurable still counts as a rank
        device.read_source(line.source)
        if not line.message:
            continue
        _read_engine_line(line.message, facts, device)
        _read_rank_line(line.message, functools.partial(rank_for, line), device)

    if device.pools:
        facts.kv_pool = device.pools[-1]
    facts.device = _device(device.pools, device.cpu, device.gpu)
    facts.ranks = sorted(
        (rank for rank in ranks.values() if rank.has_facts() or _is_rank_label(rank.label)),
        key=_rank_sort_key,
    )
    facts.last_phase = last_startup_phase(text)
    return facts


@dataclass
class _DeviceEvidence:
    """What the lines say about the device: the KV pools named, and CPU or GPU markers."""

    pools: list[str] = field(default_factory=list)
    cpu: bool = False
    gpu: bool = False

    def read_source(self, source: str | None) -> None:
        """The source file a line names (``cpu_worker.py:…``) marks the backend."""
        if not source:
            return
        name = source.rsplit("/", 1)[-1].split(":")[0]
        if name in _CPU_SOURCES:
            self.cpu = True
        elif name in _GPU_SOURCES:
            self.gpu = True


def _read_engine_line(msg: str, facts: EngineFacts, device: _DeviceEvidence) -> None:
    """The engine-wide facts one line states: KV pool, concurrency, init time, args, version."""
    if m := _KV_SIZE_RE.search(msg):
        device.pools.append(m.group("pool"))
        facts.kv_cache_tokens = _int(m.group("tokens"))
    if m := _CONCURRENCY_RE.search(msg):
        facts.concurrency_at_tokens = _int(m.group("length"))
        facts.max_concurrency = float(m.group("x"))
    if m := _INIT_ENGINE_RE.search(msg):
        facts.init_engine_seconds = float(m.group("s"))
        facts.compilation_seconds = float(m.group("c")) if m.group("c") else None
    if m := NON_DEFAULT_ARGS_RE.search(msg):
        parsed = parse_python_literal(m.group("args"))
        if isinstance(parsed, dict):
            facts.non_default_args, redacted = redact_args(public_args(parsed))
            facts.redacted_arg_keys = sorted(set(redacted))
    if facts.vllm_version is None:
        for version_re in _VERSION_RES:
            if m := version_re.search(msg):
                facts.vllm_version = m.group("v")
                break


def _read_rank_line(msg: str, rank: Callable[[], RankFacts], device: _DeviceEvidence) -> None:
    """The memory and timing figures one line states for the rank that logged it."""
    _read_rank_loading(msg, rank, device)
    _read_rank_usage(msg, rank)


def _read_rank_loading(msg: str, rank: Callable[[], RankFacts], device: _DeviceEvidence) -> None:
    """Weights, KV memory, CUDA graphs and free memory at start: the lines of a rank's startup."""
    if m := _MODEL_LOADING_RE.search(msg):
        facts = rank()
        facts.weights_gib = float(m.group("gib"))
        facts.load_seconds = float(m.group("s"))
    if m := _LOADING_WEIGHTS_RE.search(msg):
        rank().weights_read_seconds = float(m.group("s"))
    if m := _AVAILABLE_KV_RE.search(msg):
        rank().available_kv_gib = float(m.group("gib"))
        device.gpu = True
    if m := _CPU_KV_RE.search(msg):
        facts = rank()
        facts.available_kv_gib = float(m.group("kv"))
        facts.cpu_node_memory_gib = float(m.group("total"))
        device.cpu = True
    if m := _GRAPH_RE.search(msg):
        facts = rank()
        facts.graph_capture_seconds = float(m.group("s"))
        facts.cuda_graph_gib = float(m.group("gib"))
        device.gpu = True
    if m := _FREE_ON_START_RE.search(msg):
        facts = rank()
        facts.device_free_gib = float(m.group("free"))
        facts.device_total_gib = float(m.group("total"))
        device.gpu = True


def _read_rank_usage(msg: str, rank: Callable[[], RankFacts]) -> None:
    """The memory summaries (actual usage, KV in use, the profiler's debug line); a figure an
    earlier line gave is kept where the summary only repeats it."""
    if m := _USAGE_SPLIT_RE.search(msg):
        facts = rank()
        if facts.weights_gib is None:
            facts.weights_gib = float(m.group("weights"))
        facts.peak_activation_gib = float(m.group("peak"))
        facts.non_torch_gib = float(m.group("non_torch"))
        facts.cuda_graph_gib = float(m.group("graph"))
    if m := _USAGE_CONSUMED_RE.search(msg):
        facts = rank()
        facts.consumed_gib = float(m.group("consumed"))
        facts.peak_activation_gib = float(m.group("peak"))
        facts.cuda_graph_gib = float(m.group("graph"))
    if m := _KV_IN_USE_RE.search(msg):
        value = float(m.group("value"))
        rank().kv_in_use_gib = round(value / _GIB_BYTES, 2) if m.group("unit") == "bytes" else value
    if m := _PROFILE_DEBUG_RE.search(msg):
        facts = rank()
        if facts.peak_activation_gib is None:
            facts.peak_activation_gib = float(m.group("peak"))
        if facts.non_torch_gib is None:
            facts.non_torch_gib = float(m.group("non_torch"))
        if facts.weights_gib is None:
            facts.weights_gib = float(m.group("weights"))


_BOOT_MARK = "non-default args: {"
_VERSION_LINE_RE = re.compile(r"vLLM (?:API |gRPC )?server version ")


def _last_boot(text: str) -> str:
    """The log from the start of the last server run on (the whole text if it shows none).

    0.10–0.14 print "vLLM API server version X" just before "non-default args:"; the cut keeps
    it when it comes after the previous start's mark, so the version of the last start is read.
    """
    mark = text.rfind(_BOOT_MARK)
    if mark <= 0:
        return text
    start = text.rfind("\n", 0, mark) + 1
    previous = text.rfind(_BOOT_MARK, 0, start)
    versions = list(_VERSION_LINE_RE.finditer(text, max(previous, 0), start))
    if versions:
        start = text.rfind("\n", 0, versions[-1].start()) + 1
    return text[start:]


def _is_rank_label(label: str) -> bool:
    return bool(_WORKER_LABEL_RE.match(label) or "TP" in _rank_parts(label))


def _rank_sort_key(rank: RankFacts) -> tuple[int, int, int, str]:
    parts = _rank_parts(rank.label)
    return (parts.get("DP", 0), parts.get("PP", 0), parts.get("TP", 0), rank.label)


def _device(pools: list[str], cpu_evidence: bool, gpu_evidence: bool) -> str | None:
    # ≤0.27 prints "GPU KV cache size" on the CPU backend too, so CPU markers win over it.
    if cpu_evidence or (pools and pools[-1] == "CPU"):
        return "CPU"
    if pools:
        return pools[-1].split(" + ")[0]
    return "GPU" if gpu_evidence else None
