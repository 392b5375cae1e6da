"""Engine facts: what a vLLM server says about itself.

Three sources, all read-only:

* the server log (``parse_engine_log``): KV pool in tokens and the concurrency it allows,
  per-rank weights / KV / activation / CUDA-graph memory, engine init time, the effective
  non-default args (scrubbed), the version;
* the log of a server that failed to start (``classify_startup_failure``,
  ``last_startup_phase``);
* the HTTP endpoints (``parse_metrics``, ``fetch_engine_endpoints``): ``/metrics`` through
  ``prometheus_client``'s parser, ``/version`` and ``/v1/models``.

vLLM's log text is not an API. The patterns below were read from vLLM's own format strings
for 0.10.1 to 0.32 (the version that introduced or changed each one is noted next to it) and
are tested against one excerpt per version family in ``tests/unit/data/engine_logs/``. A fact
the log does not state stays ``None``: nothing is inferred or defaulted.

This module imports nothing from pytest.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .errors import VllmQualError

__all__ = [
    "EndpointFacts",
    "EngineEndpointError",
    "EngineFacts",
    "HistogramDelta",
    "HistogramSnapshot",
    "MetricsDelta",
    "MetricsParseError",
    "MetricsSnapshot",
    "RankFacts",
    "StartupFailure",
    "classify_startup_failure",
    "fetch_engine_endpoints",
    "last_startup_phase",
    "parse_engine_log",
    "parse_metrics",
    "redact_args",
    "strip_ansi",
]

GIB_BYTES = 1 << 30
_T = TypeVar("_T")
REDACTED = "<redacted>"


class EngineEndpointError(VllmQualError):
    """``/version`` or ``/v1/models`` did not answer with what every vLLM server returns."""


class MetricsParseError(VllmQualError):
    """A ``/metrics`` body is not Prometheus text exposition format."""


# --------------------------------------------------------------------------------------------
# Log lines
# --------------------------------------------------------------------------------------------

# CSI sequences (colours, cursor moves). ≤0.14 colour the process prefix even in files.
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")

# "(Worker_TP0 pid=123) " — the label is absent in some Ray lines, which add ", ip=…".
_PREFIX_RE = re.compile(r"^\((?:(?P<label>[^()]*?) )?pid=(?P<pid>\d+)(?:, ip=[^)]*)?\) ?")
# The same label anywhere before the header: an operator's VLLM_LOGGING_PREFIX, or a log
# collector's timestamp, may come first. The label itself is a process name (no spaces, no
# brackets), so a prefix that merely contains "pid=" is not taken for it.
_LABEL_ANYWHERE_RE = re.compile(r"(?:^|(?<=\s))\((?:(?P<label>[A-Za-z][\w.-]*(?: [A-Z]+\d+(?:_[A-Z]+\d+)*)?) )?"
                                r"pid=(?P<pid>\d+)(?:, ip=[^)]*)?\) ?")
# "INFO 11-30 01:50:54 [cpu_worker.py:260] message" (no year; some versions add milliseconds
# or a path in the brackets).
_HEADER_SOURCE = (
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) +\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? "
    r"\[(?P<source>[^\]]*)\] ?"
)
_HEADER_RE = re.compile("^" + _HEADER_SOURCE)
# The header after any text: VLLM_LOGGING_PREFIX is written before the level.
_HEADER_ANYWHERE_RE = re.compile(r"(?:^|(?<=[\s\]\)]))" + _HEADER_SOURCE)
# Suffixes the process name gets when that parallel size is >1 (≥0.10.2 "Worker_DP0_PP1_TP0",
# 0.10.1 "VllmWorker PP0_TP1").
_RANK_PART_RE = re.compile(r"(?:^|[ _])(DP|PP|PCP|TP|DCP|EP)(\d+)(?=$|[ _])")
_WORKER_LABEL_RE = re.compile(r"^(?:Vllm)?Worker|^RayWorker")


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences; vLLM colours prefixes and levels depending on version."""
    return _ANSI_RE.sub("", text)


@dataclass(frozen=True)
class _Line:
    label: str | None
    pid: int | None
    level: str | None
    source: str | None
    message: str


def _split_lines(text: str) -> list[_Line]:
    lines: list[_Line] = []
    for raw in strip_ansi(text).replace("\r", "\n").split("\n"):
        label, pid, level, source, body = _split_line(raw)
        lines.append(_Line(label, pid, level, source, body.strip()))
    return lines


def _split_line(raw: str) -> tuple[str | None, int | None, str | None, str | None, str]:
    """(label, pid, level, source, message) of one line; text before the label or the header
    (VLLM_LOGGING_PREFIX, a collector's timestamp) is dropped, never read as the message."""
    label: str | None = None
    pid: int | None = None
    body = raw
    header = _HEADER_ANYWHERE_RE.search(body)
    head = body[: header.start()] if header else body
    prefix = _PREFIX_RE.match(body) or _LABEL_ANYWHERE_RE.search(head)
    if prefix is not None and (header is None or prefix.end() <= header.start() + 1):
        label = (prefix.group("label") or "").strip() or None
        pid = int(prefix.group("pid"))
        if header is None:
            body = body[prefix.end():]
    level: str | None = None
    source: str | None = None
    if header is not None:
        level = header.group("level")
        source = header.group("source")
        body = body[header.end():]
    return label, pid, level, source, body


def _canonical_labels(lines: Iterable[_Line]) -> dict[int, str]:
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

_NUM = r"-?\d+(?:\.\d+)?"

# ≥0.30 one line "GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: Xx"
# (the pool is the device name, "CPU", or "GPU + host"); ≤0.27 two lines, and the pool is
# always "GPU", CPU backend included.
_KV_SIZE_RE = re.compile(r"(?P<pool>[A-Za-z]+(?: \+ [a-z]+)?) KV cache size: (?P<tokens>[\d,]+) tokens")
_CONCURRENCY_RE = re.compile(r"Maximum concurrency for (?P<length>[\d,]+) tokens per request: (?P<x>[\d.]+)x")
# ≤0.11 "Model loading took %.4f GiB and %.6f seconds"; ≥0.14 "%s GiB memory and …"
# (the V2 model runner of 0.14–0.27 still omits "memory").
_MODEL_LOADING_RE = re.compile(rf"Model loading took (?P<gib>{_NUM}) GiB(?: memory)? and (?P<s>{_NUM}) seconds")
_LOADING_WEIGHTS_RE = re.compile(rf"Loading weights took (?P<s>{_NUM}) seconds")
_AVAILABLE_KV_RE = re.compile(rf"Available KV cache memory: (?P<gib>{_NUM}) GiB")
# CPU ≥0.20: "Explicitly set (1.0/11.84) GiB for KV cache on node 0." / "Auto set (…) …".
_CPU_KV_RE = re.compile(
    rf"(?P<how>Explicitly|Auto) set \((?P<kv>{_NUM})/(?P<total>{_NUM})\) GiB for KV cache on node (?P<node>\d+)"
)
_GRAPH_RE = re.compile(rf"Graph capturing finished in (?P<s>{_NUM}) secs?, took (?P<gib>{_NUM}) GiB")
# Per-rank memory summary: INFO in 0.10.2, DEBUG in 0.11–0.20, INFO again from 0.27 with
# weights and non-torch memory merged into "consumed memory". ≥0.32 names the device.
_FREE_ON_START_RE = re.compile(
    rf"Free memory on device(?: \S+)? \((?P<free>{_NUM})/(?P<total>{_NUM}) GiB\) on startup\. "
    rf"Desired GPU memory utilization is \((?P<util>{_NUM}), (?P<req>{_NUM}) GiB\)"
)
_USAGE_SPLIT_RE = re.compile(
    rf"Actual usage is (?P<weights>{_NUM}) GiB for weight, (?P<peak>{_NUM}) GiB for peak activation, "
    rf"(?P<non_torch>{_NUM}) GiB for non-torch memory, and (?P<graph>{_NUM}) GiB for CUDAGraph memory"
)
_USAGE_CONSUMED_RE = re.compile(
    rf"Actual usage is (?P<consumed>{_NUM}) GiB for consumed memory \(weights \+ non-torch\), "
    rf"(?P<peak>{_NUM}) GiB for peak activation, and (?P<graph>{_NUM}) GiB for CUDAGraph memory"
)
# 0.10.2 prints bytes, later releases GiB.
_KV_IN_USE_RE = re.compile(rf"Current kv cache memory in use is (?P<value>{_NUM}) (?P<unit>GiB|bytes)")
# DEBUG repr of the memory profiling result (all versions).
_PROFILE_DEBUG_RE = re.compile(
    rf"torch peak memory increase: (?P<peak>{_NUM}) ?GiB; non-torch forward increase memory: "
    rf"(?P<non_torch>{_NUM}) ?GiB; weights memory: (?P<weights>{_NUM}) ?GiB"
)
# "… took 26.70 s" (≥0.20) or "… took 26.70 seconds" (≤0.14), optionally "(compilation: 8.08 s…".
_INIT_ENGINE_RE = re.compile(
    rf"init engine \(profile, create kv cache, warmup model\) took (?P<s>{_NUM}) (?:s|seconds)"
    rf"(?: \(compilation: (?P<c>{_NUM}) s)?"
)
_NON_DEFAULT_RE = re.compile(r"non-default args: (?P<args>\{.*\})\s*$")
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


@dataclass
class EngineFacts:
    """Engine facts parsed from one server log. ``None`` means the log did not say."""

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

    def rank(self, label: str) -> RankFacts | None:
        """The rank logged under ``label`` ("Worker_TP1", "EngineCore_DP0", …), if any."""
        return next((rank for rank in self.ranks if rank.label == label), None)

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
            "non_default_args": _json_safe(self.non_default_args),
            "redacted_arg_keys": list(self.redacted_arg_keys),
            "vllm_version": self.vllm_version,
            "last_phase": self.last_phase,
        }


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_engine_log(text: str) -> EngineFacts:
    """Parse a vLLM server log (any version 0.10.1–0.32, GPU or CPU, coloured or not).

    If the text holds several server starts (a restart appended to the same file), only the
    last one is read: it begins at the last "non-default args:" line, which every release
    prints once per start. The server's listen address is never kept.
    """
    lines = _split_lines(_last_boot(text))
    labels = _canonical_labels(lines)
    facts = EngineFacts()
    ranks: dict[str, RankFacts] = {}
    cpu_evidence = False
    gpu_evidence = False
    pools: list[str] = []

    def rank_for(line: _Line) -> RankFacts:
        label = labels.get(line.pid, line.label) if line.pid is not None else line.label
        key = label or "(unprefixed)"
        if key not in ranks:
            ranks[key] = RankFacts(label=key, tp_rank=_rank_parts(key).get("TP"))
        return ranks[key]

    for line in lines:
        msg = line.message
        if line.pid is not None:
            label = labels.get(line.pid, line.label or "")
            if _WORKER_LABEL_RE.match(label) or "TP" in _rank_parts(label):
                rank_for(line)  # a worker that logged nothing measurable still counts as a rank
        if line.source:
            if line.source.rsplit("/", 1)[-1].split(":")[0] in _CPU_SOURCES:
                cpu_evidence = True
            elif line.source.rsplit("/", 1)[-1].split(":")[0] in _GPU_SOURCES:
                gpu_evidence = True
        if not msg:
            continue

        if m := _KV_SIZE_RE.search(msg):
            pools.append(m.group("pool"))
            facts.kv_cache_tokens = _int(m.group("tokens"))
        if m := _CONCURRENCY_RE.search(msg):
            facts.concurrency_at_tokens = _int(m.group("length"))
            facts.max_concurrency = float(m.group("x"))
        if m := _MODEL_LOADING_RE.search(msg):
            rank = rank_for(line)
            rank.weights_gib = float(m.group("gib"))
            rank.load_seconds = float(m.group("s"))
        if m := _LOADING_WEIGHTS_RE.search(msg):
            rank_for(line).weights_read_seconds = float(m.group("s"))
        if m := _AVAILABLE_KV_RE.search(msg):
            rank_for(line).available_kv_gib = float(m.group("gib"))
            gpu_evidence = True
        if m := _CPU_KV_RE.search(msg):
            rank = rank_for(line)
            rank.available_kv_gib = float(m.group("kv"))
            rank.cpu_node_memory_gib = float(m.group("total"))
            cpu_evidence = True
        if m := _GRAPH_RE.search(msg):
            rank = rank_for(line)
            rank.graph_capture_seconds = float(m.group("s"))
            rank.cuda_graph_gib = float(m.group("gib"))
            gpu_evidence = True
        if m := _FREE_ON_START_RE.search(msg):
            rank = rank_for(line)
            rank.device_free_gib = float(m.group("free"))
            rank.device_total_gib = float(m.group("total"))
            gpu_evidence = True
        if m := _USAGE_SPLIT_RE.search(msg):
            rank = rank_for(line)
            if rank.weights_gib is None:
                rank.weights_gib = float(m.group("weights"))
            rank.peak_activation_gib = float(m.group("peak"))
            rank.non_torch_gib = float(m.group("non_torch"))
            rank.cuda_graph_gib = float(m.group("graph"))
        if m := _USAGE_CONSUMED_RE.search(msg):
            rank = rank_for(line)
            rank.consumed_gib = float(m.group("consumed"))
            rank.peak_activation_gib = float(m.group("peak"))
            rank.cuda_graph_gib = float(m.group("graph"))
        if m := _KV_IN_USE_RE.search(msg):
            value = float(m.group("value"))
            rank_for(line).kv_in_use_gib = round(value / GIB_BYTES, 2) if m.group("unit") == "bytes" else value
        if m := _PROFILE_DEBUG_RE.search(msg):
            rank = rank_for(line)
            if rank.peak_activation_gib is None:
                rank.peak_activation_gib = float(m.group("peak"))
            if rank.non_torch_gib is None:
                rank.non_torch_gib = float(m.group("non_torch"))
            if rank.weights_gib is None:
                rank.weights_gib = float(m.group("weights"))
        if m := _INIT_ENGINE_RE.search(msg):
            facts.init_engine_seconds = float(m.group("s"))
            facts.compilation_seconds = float(m.group("c")) if m.group("c") else None
        if m := _NON_DEFAULT_RE.search(msg):
            parsed = _parse_python_literal(m.group("args"))
            if isinstance(parsed, dict):
                for key in _LAUNCHER_ONLY_ARGS:
                    parsed.pop(key, None)
                for key in _LOCAL_DIR_ARGS:
                    if isinstance(parsed.get(key), str) and parsed[key].startswith(("/", "~", ".")):
                        parsed[key] = MODEL_DIR_PLACEHOLDER
                facts.non_default_args, redacted = redact_args(parsed)
                facts.redacted_arg_keys = sorted(set(redacted))
        if facts.vllm_version is None:
            for version_re in _VERSION_RES:
                if m := version_re.search(msg):
                    facts.vllm_version = m.group("v")
                    break

    if pools:
        facts.kv_pool = pools[-1]
    facts.device = _device(pools, cpu_evidence, gpu_evidence)
    facts.ranks = sorted(
        (rank for rank in ranks.values() if rank.has_facts() or _is_rank_label(rank.label)),
        key=_rank_sort_key,
    )
    facts.last_phase = last_startup_phase(text)
    return facts


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


# --------------------------------------------------------------------------------------------
# Effective args, scrubbed
# --------------------------------------------------------------------------------------------

# Chosen by the launcher for this run, not part of the recipe; the listen address is private.
_LAUNCHER_ONLY_ARGS = ("host", "port")
#: Args that name a local directory: its absolute path says where the operator keeps files, not
#: what was served (the identity block names the checkpoint), so the report shows a placeholder.
_LOCAL_DIR_ARGS = ("model", "tokenizer", "download_dir")
MODEL_DIR_PLACEHOLDER = "<model-dir>"
# A key is secret when one of its "_"-separated words is one of these ("hf_token", "api_key")
# or it contains "secret"/"password" anywhere. Word matching keeps "max_num_batched_tokens"
# and "tokenizer", which are configuration, not secrets.
_SECRET_WORDS = frozenset({"token", "key", "apikey", "secret", "password", "passwd", "credential", "credentials"})
_SECRET_SUBSTRINGS = ("secret", "password", "passwd")
_SECRET_KEYS = frozenset({"watermark_config"})  # vLLM ≥0.30 redacts it itself
_SECRET_VALUE_RE = re.compile(r"^(?:hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_\-]{8,}|(?:Bearer|bearer) \S+)$")


def _is_secret_key(key: str) -> bool:
    lowered = key.lower()
    if lowered in _SECRET_KEYS or any(part in lowered for part in _SECRET_SUBSTRINGS):
        return True
    return any(word in _SECRET_WORDS for word in re.split(r"[_\-.\s]+", lowered))


def redact_args(args: Mapping[str, Any], _path: str = "") -> tuple[dict[str, Any], list[str]]:
    """Copy of ``args`` with secret-named keys and token-looking strings replaced by ``<redacted>``.

    Returns the copy and the dotted key paths that were scrubbed (for the redaction summary).
    Nested dicts (``kv_transfer_config``, …) are scrubbed too. Values vLLM already masked
    (``***``) are normalised to the same placeholder.
    """
    out: dict[str, Any] = {}
    redacted: list[str] = []
    for key, value in args.items():
        path = f"{_path}{key}"
        if _is_secret_key(str(key)):
            if value is not None:
                out[key] = REDACTED
                redacted.append(path)
            else:
                out[key] = None
        elif isinstance(value, Mapping):
            out[key], inner = redact_args(value, f"{path}.")
            redacted.extend(inner)
        elif isinstance(value, str) and _SECRET_VALUE_RE.match(value):
            out[key] = REDACTED
            redacted.append(path)
        else:
            out[key] = value
    return out, redacted


def _parse_python_literal(text: str) -> Any:
    """``ast.literal_eval`` that tolerates ``<enum …>`` reprs (quoted) and ``Class(k=v, …)``
    reprs (read as ``{"type": "Class", "k": v, …}``), as vLLM ≥ 0.2x logs config objects
    such as ``StructuredOutputsConfig(backend='xgrammar', …)`` among the non-default args."""
    quoted = re.sub(r"<[^<>]*>", lambda m: repr(m.group(0)), text)
    for candidate in (text, quoted):
        try:
            return ast.literal_eval(candidate)
        except (ValueError, SyntaxError):
            pass
    try:
        tree = ast.parse(quoted, mode="eval")
    except SyntaxError:
        return None
    try:
        return _literal_with_calls(tree.body, quoted)
    except ValueError:
        return None


def _literal_with_calls(node: ast.expr, source: str) -> Any:
    """A literal expression in which keyword-only calls stand for config objects."""
    if isinstance(node, ast.Dict):
        return {_literal_with_calls(k, source): _literal_with_calls(v, source)
                for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal_with_calls(item, source) for item in node.elts]
    if isinstance(node, ast.Call) and not node.args:
        name = ast.get_source_segment(source, node.func) or "?"
        return {"type": name, **{kw.arg: _literal_with_calls(kw.value, source) for kw in node.keywords
                                 if kw.arg is not None}}
    try:
        return ast.literal_eval(node)
    except ValueError:
        segment = ast.get_source_segment(source, node)
        if segment is None:
            raise
        return segment


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in value]
    return repr(value)


# --------------------------------------------------------------------------------------------
# Startup phases and failures
# --------------------------------------------------------------------------------------------

# Checked per line; the phase of the last matching line is the one reached.
_PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Application startup complete"), "ready (application startup complete)"),
    (re.compile(r"Starting vLLM (?:API )?server|Route: /|Started server process|Waiting for application startup"),
     "API server starting"),
    (re.compile(r"EngineCore failed to start|Engine core initialization failed|EngineCore encountered a fatal error"),
     "engine core failed"),
    (re.compile(r"\[shutdown\]|Shutting down|shutdown triggered"), "shutting down"),
    (re.compile(r"init engine \(profile, create kv cache, warmup model\) took"), "engine initialized"),
    (re.compile(r"Graph capturing finished"), "CUDA graphs captured"),
    (re.compile(r"Capturing CUDA graph|Profiling CUDA graph memory|CUDA graph pool memory"), "capturing CUDA graphs"),
    (re.compile(r"KV cache size: [\d,]+ tokens|Maximum concurrency for [\d,]+ tokens"), "KV cache allocated"),
    (re.compile(r"Available KV cache memory|(?:Explicitly|Auto) set \(.*\) GiB for KV cache|Memory profiling takes"),
     "profiling / KV cache sizing"),
    (re.compile(r"Warming up model|warmup run took|Warming up done"), "warming up"),
    (re.compile(r"torch\.compile takes|Compiling a graph|Dynamo bytecode transform|Start compiling"),
     "compiling (torch.compile)"),
    (re.compile(r"Model loading took|Loading weights took"), "weights loaded"),
    (re.compile(r"Starting to load model|Loading safetensors checkpoint shards|Loading weights"), "loading weights"),
    (re.compile(r"Initializing a V1 LLM engine|Waiting for core engine|world_size=\d+ rank=\d+"
                r"|distributed_init_method"),
     "initializing engine"),
    (re.compile(r"non-default args:|vLLM (?:API )?server version|▀▄▀ █\s+version"), "API process started"),
)


def last_startup_phase(text: str) -> str | None:
    """The phase of the latest recognised startup line, as a short label for progress/timeouts."""
    for raw in reversed(strip_ansi(text).replace("\r", "\n").split("\n")):
        if not raw.strip():
            continue
        for pattern, label in _PHASES:
            if pattern.search(raw):
                return label
    return None


FailureKind = Literal["kv_insufficient", "gpu_busy", "out_of_memory", "port_in_use", "engine_core_failed"]


@dataclass(frozen=True)
class StartupFailure:
    """A startup failure recognised in the log, with the figures the error message states."""

    kind: FailureKind
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
        return dict(vars(self))


# ≤0.20 "the models's max seq len", ≥0.27 "the model's max seq len".
_KV_INSUFFICIENT_RE = re.compile(
    rf"To serve at least one request with the models?'s? max seq len \((?P<len>\d+)\), "
    rf"\((?P<needed>{_NUM}) GiB KV cache is needed, which is larger than the available KV cache memory "
    rf"\((?P<available>{_NUM}) GiB\)\.(?: Based on the available memory, the estimated maximum model "
    rf"length is (?P<estimated>\d+)\.)?"
)
_NO_KV_MEMORY_RE = re.compile(r"No available memory for the cache blocks")
_CPU_KV_SHORT_RE = re.compile(
    rf"Available memory on node \d+ \((?P<available>{_NUM})/(?P<total>{_NUM}) GiB\) on kv cache allocation is "
    rf"less than requested memory for kv \((?P<needed>{_NUM})(?:/{_NUM})? GiB\)"
)
_GPU_BUSY_RE = re.compile(
    rf"Free memory on device(?: \S+)? \((?P<free>{_NUM})/(?P<total>{_NUM}) GiB\) on startup is less than "
    rf"desired GPU memory utilization \((?P<util>{_NUM}), (?P<req>{_NUM}) GiB\)"
)
_OOM_RE = re.compile(r"OutOfMemoryError|CUDA out of memory")
_PORT_IN_USE_RE = re.compile(r"\[Errno 98\]|[Aa]ddress already in use")
_ENGINE_FAILED_RE = re.compile(r"Engine core initialization failed|EngineCore failed to start")
_ADDRESS_RE = re.compile(
    r"\('[^']*', \d+\)|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9a-fA-F]*:[0-9a-fA-F:]*\](?::\d+)?"
    r"|\blocalhost:\d+"
)


def _evidence(line: str) -> str:
    """The failing line without prefix, colour or addresses, truncated for a log tail."""
    *_, body = _split_line(strip_ansi(line).strip())
    body = _ADDRESS_RE.sub("<addr>", body.strip())
    return body[:500]


def classify_startup_failure(text: str) -> StartupFailure | None:
    """Recognise why a server failed to start, most specific cause first; None if no known cause.

    Order: KV cache cannot hold max_model_len, GPU memory taken by someone else, CUDA OOM,
    port already bound, then the generic "Engine core initialization failed".
    """
    clean = strip_ansi(text).replace("\r", "\n")

    def first(pattern: re.Pattern[str]) -> tuple[re.Match[str], str] | None:
        # One search over the whole text (no pattern spans a newline), then its line.
        m = pattern.search(clean)
        if m is None:
            return None
        start = clean.rfind("\n", 0, m.start()) + 1
        end = clean.find("\n", m.end())
        return m, clean[start:] if end == -1 else clean[start:end]

    if found := first(_KV_INSUFFICIENT_RE):
        m, raw = found
        estimated = int(m.group("estimated")) if m.group("estimated") else None
        return StartupFailure(
            kind="kv_insufficient",
            message=(f"KV cache cannot hold one request of max_model_len {m.group('len')}: "
                     f"{m.group('needed')} GiB needed, {m.group('available')} GiB available"
                     + (f", estimated maximum length {estimated}" if estimated is not None else "")),
            evidence=_evidence(raw),
            hint=("lower max_model_len to at most the estimated length, or give the KV cache more memory "
                  "(--gpu-memory-utilization, --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE on CPU)"),
            max_seq_len=int(m.group("len")),
            needed_gib=float(m.group("needed")),
            available_gib=float(m.group("available")),
            estimated_max_len=estimated,
        )
    if found := first(_CPU_KV_SHORT_RE):
        m, raw = found
        return StartupFailure(
            kind="kv_insufficient",
            message=(f"the CPU node has {m.group('available')} GiB available, less than the "
                     f"{m.group('needed')} GiB requested for the KV cache"),
            evidence=_evidence(raw),
            hint="lower VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes, or free memory on the node",
            needed_gib=float(m.group("needed")),
            available_gib=float(m.group("available")),
            total_gib=float(m.group("total")),
        )
    if found := first(_NO_KV_MEMORY_RE):
        _, raw = found
        return StartupFailure(
            kind="kv_insufficient",
            message="no memory was left for the KV cache after loading the model",
            evidence=_evidence(raw),
            hint="raise --gpu-memory-utilization, or use a smaller model / more tensor parallelism",
            available_gib=0.0,
        )
    if found := first(_GPU_BUSY_RE):
        m, raw = found
        return StartupFailure(
            kind="gpu_busy",
            message=(f"only {m.group('free')} of {m.group('total')} GiB were free on the GPU at startup, "
                     f"less than the {m.group('req')} GiB that gpu_memory_utilization {m.group('util')} asks for"),
            evidence=_evidence(raw),
            hint="another process holds GPU memory: stop it, or lower --gpu-memory-utilization",
            free_gib=float(m.group("free")),
            total_gib=float(m.group("total")),
            requested_gib=float(m.group("req")),
            gpu_memory_utilization=float(m.group("util")),
        )
    if found := first(_OOM_RE):
        _, raw = found
        return StartupFailure(
            kind="out_of_memory",
            message="the GPU ran out of memory during startup",
            evidence=_evidence(raw),
            hint="lower --gpu-memory-utilization, --max-num-batched-tokens or --max-num-seqs, or free the GPU",
        )
    if found := first(_PORT_IN_USE_RE):
        _, raw = found
        return StartupFailure(
            kind="port_in_use",
            message="the server could not bind its port: address already in use",
            evidence=_evidence(raw),
            hint="choose a free port (port 0 lets the launcher pick one), or stop the process holding it",
        )
    if found := first(_ENGINE_FAILED_RE):
        _, raw = found
        return StartupFailure(
            kind="engine_core_failed",
            message="the engine core failed to initialise; the root cause is earlier in the log",
            evidence=_evidence(raw),
            hint="read the traceback above 'Engine core initialization failed' in the log tail",
        )
    return None


# --------------------------------------------------------------------------------------------
# /metrics
# --------------------------------------------------------------------------------------------

# Older releases' names, read as the current ones when the current one is absent.
_METRIC_ALIASES = {
    "vllm:prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total": "vllm:gpu_prefix_cache_queries_total",
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds",  # ≤0.10.1
}


def _alias(table: dict[str, _T], current: str, legacy: str) -> bool:
    if current not in table and legacy in table:
        table[current] = table[legacy]
        return True
    return False


def _le(value: str) -> float:
    return math.inf if value in ("+Inf", "Inf", "inf") else float(value)


@dataclass(frozen=True)
class HistogramSnapshot:
    """A histogram summed over its label sets: cumulative bucket counts, sum and count."""

    sum: float
    count: float
    buckets: tuple[tuple[float, float], ...] = ()

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sum": self.sum,
            "count": self.count,
            "mean": self.mean,
            "buckets": [["+Inf" if math.isinf(le) else le, n] for le, n in self.buckets],
        }


@dataclass(frozen=True)
class HistogramDelta(HistogramSnapshot):
    """What one window of requests added to a histogram; ``mean`` is the mean of the new
    observations (e.g. the server-side TTFT of one request)."""


@dataclass(frozen=True)
class MetricsDelta:
    """``later - earlier`` for counters and histograms; gauges as they were at ``later``."""

    counters: dict[str, float]
    histograms: dict[str, HistogramDelta]
    gauges: dict[str, float]
    counter_resets: tuple[str, ...] = ()

    def counter(self, name: str) -> float:
        """The increase of a counter; 0.0 when neither snapshot had it."""
        return self.counters.get(name, 0.0)

    def histogram_mean(self, name: str) -> float | None:
        delta = self.histograms.get(name)
        return delta.mean if delta is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "histograms": {name: h.to_dict() for name, h in self.histograms.items()},
            "gauges": dict(self.gauges),
            "counter_resets": list(self.counter_resets),
        }


@dataclass(frozen=True)
class MetricsSnapshot:
    """The ``vllm:*`` series of one ``/metrics`` scrape, summed over label sets (engines, models)."""

    counters: dict[str, float]
    gauges: dict[str, float]
    histograms: dict[str, HistogramSnapshot]
    cache_config_info: dict[str, str]
    request_success_by_reason: dict[str, float] = field(default_factory=dict)
    aliases_used: dict[str, str] = field(default_factory=dict)

    def counter(self, name: str) -> float | None:
        return self.counters.get(name)

    def gauge(self, name: str) -> float | None:
        return self.gauges.get(name)

    @property
    def kv_cache_size_tokens(self) -> int | None:
        """``cache_config_info``'s ``kv_cache_size_tokens`` (≥0.27), else None."""
        value = self.cache_config_info.get("kv_cache_size_tokens")
        return int(float(value)) if value not in (None, "None", "") else None

    def delta(self, earlier: MetricsSnapshot) -> MetricsDelta:
        """Counter and histogram increases since ``earlier``; a decrease is recorded as a reset."""
        counters: dict[str, float] = {}
        resets: list[str] = []
        for name, value in self.counters.items():
            before = earlier.counters.get(name, 0.0)
            if value < before:
                resets.append(name)
                counters[name] = value
            else:
                counters[name] = value - before
        histograms: dict[str, HistogramDelta] = {}
        for name, hist in self.histograms.items():
            prior = earlier.histograms.get(name)
            if prior is None:
                histograms[name] = HistogramDelta(hist.sum, hist.count, hist.buckets)
                continue
            if hist.count < prior.count:
                resets.append(name)
                histograms[name] = HistogramDelta(hist.sum, hist.count, hist.buckets)
                continue
            prior_buckets = dict(prior.buckets)
            buckets = tuple((le, n - prior_buckets.get(le, 0.0)) for le, n in hist.buckets)
            histograms[name] = HistogramDelta(hist.sum - prior.sum, hist.count - prior.count, buckets)
        return MetricsDelta(counters, histograms, dict(self.gauges), tuple(resets))

    def to_dict(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "gauges": dict(self.gauges),
            "histograms": {name: h.to_dict() for name, h in self.histograms.items()},
            "cache_config_info": dict(self.cache_config_info),
            "request_success_by_reason": dict(self.request_success_by_reason),
            "aliases_used": dict(self.aliases_used),
        }


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse a ``/metrics`` body with ``prometheus_client``; keep the ``vllm:`` series.

    Counters and histograms are summed over label sets; gauges too, except ``*_perc`` ones
    (utilisation), where the maximum over engines is kept. ``*_created`` series are dropped.
    """
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    hist_sum: dict[str, float] = {}
    hist_count: dict[str, float] = {}
    hist_buckets: dict[str, dict[float, float]] = {}
    cache_info: dict[str, str] = {}
    success_by_reason: dict[str, float] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"the /metrics body is not Prometheus text format: {exc}") from exc
    for family in families:
        if not family.name.startswith("vllm:"):
            continue
        for sample in family.samples:
            name, value = sample.name, float(sample.value)
            if name.endswith("_created") or math.isnan(value):
                continue
            if family.type == "histogram":
                if name.endswith("_bucket"):
                    base = name[: -len("_bucket")]
                    buckets = hist_buckets.setdefault(base, {})
                    le = _le(sample.labels.get("le", "+Inf"))
                    buckets[le] = buckets.get(le, 0.0) + value
                elif name.endswith("_sum"):
                    base = name[: -len("_sum")]
                    hist_sum[base] = hist_sum.get(base, 0.0) + value
                elif name.endswith("_count"):
                    base = name[: -len("_count")]
                    hist_count[base] = hist_count.get(base, 0.0) + value
            elif family.type == "counter":
                counters[name] = counters.get(name, 0.0) + value
                if name == "vllm:request_success_total":
                    reason = sample.labels.get("finished_reason", "")
                    success_by_reason[reason] = success_by_reason.get(reason, 0.0) + value
            elif name == "vllm:cache_config_info":
                cache_info = dict(sample.labels)
            elif family.type in ("gauge", "untyped", "unknown") and not name.endswith("_info"):
                if name.endswith("_perc"):
                    gauges[name] = max(gauges.get(name, value), value)
                else:
                    gauges[name] = gauges.get(name, 0.0) + value
    histograms = {
        base: HistogramSnapshot(
            sum=hist_sum.get(base, 0.0),
            count=hist_count.get(base, 0.0),
            buckets=tuple(sorted(hist_buckets.get(base, {}).items())),
        )
        for base in sorted(set(hist_sum) | set(hist_count) | set(hist_buckets))
    }
    aliases: dict[str, str] = {}
    for current, legacy in _METRIC_ALIASES.items():
        if _alias(counters, current, legacy) or _alias(gauges, current, legacy) or _alias(
            histograms, current, legacy
        ):
            aliases[current] = legacy
    return MetricsSnapshot(counters, gauges, histograms, cache_info, success_by_reason, aliases)


# --------------------------------------------------------------------------------------------
# /version, /v1/models, /metrics
# --------------------------------------------------------------------------------------------


@dataclass
class EndpointFacts:
    """What the running server reports over HTTP about its identity and counters."""

    version: str | None
    models: list[dict[str, Any]]
    metrics: MetricsSnapshot | None = None
    metrics_error: str | None = None

    @property
    def served_model_ids(self) -> list[str]:
        return [str(m["id"]) for m in self.models]

    def max_model_len(self, model_id: str | None = None) -> int | None:
        """``max_model_len`` of ``model_id`` (or of the only served model)."""
        if model_id is None:
            return self.models[0].get("max_model_len") if len(self.models) == 1 else None
        entry = next((m for m in self.models if m.get("id") == model_id), None)
        return entry.get("max_model_len") if entry else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "models": [dict(m) for m in self.models],
            "metrics": self.metrics.to_dict() if self.metrics is not None else None,
            "metrics_error": self.metrics_error,
        }


def _get_json(client: httpx.Client, path: str) -> Any:
    try:
        response = client.get(path)
    except httpx.HTTPError as exc:
        raise EngineEndpointError(f"GET {path} failed: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        raise EngineEndpointError(
            f"GET {path} answered HTTP {response.status_code}; a vLLM OpenAI server always serves it. "
            "Check that the endpoint URL points at the vLLM server itself, not a proxy path."
        )
    try:
        return response.json()
    except ValueError as exc:
        raise EngineEndpointError(f"GET {path} did not return JSON: {response.text[:200]!r}") from exc


def fetch_engine_endpoints(client: httpx.Client, *, metrics: bool = True) -> EndpointFacts:
    """Read ``/version``, ``/v1/models`` and (optionally present) ``/metrics`` from ``client``'s base URL.

    ``/version`` and ``/v1/models`` are required (EngineEndpointError otherwise). A missing or
    unparsable ``/metrics`` gives ``metrics=None`` and says why in ``metrics_error``.
    """
    version_body = _get_json(client, "/version")
    version = version_body.get("version") if isinstance(version_body, dict) else None
    models_body = _get_json(client, "/v1/models")
    if not isinstance(models_body, dict) or not isinstance(models_body.get("data"), list):
        raise EngineEndpointError("GET /v1/models did not return an OpenAI model list ({'data': [...]})")
    models: list[dict[str, Any]] = []
    for entry in models_body["data"]:
        if isinstance(entry, dict) and "id" in entry:
            models.append({
                "id": entry["id"],
                "root": entry.get("root"),
                "parent": entry.get("parent"),
                "max_model_len": entry.get("max_model_len"),
            })
    snapshot: MetricsSnapshot | None = None
    metrics_error: str | None = None
    if metrics:
        try:
            response = client.get("/metrics")
        except httpx.HTTPError as exc:
            metrics_error = f"GET /metrics failed: {type(exc).__name__}"
        else:
            if response.status_code == 200:
                try:
                    snapshot = parse_metrics(response.text)
                except MetricsParseError as exc:
                    metrics_error = str(exc)
            else:
                metrics_error = f"GET /metrics answered HTTP {response.status_code}"
    return EndpointFacts(version=str(version) if version is not None else None, models=models,
                         metrics=snapshot, metrics_error=metrics_error)
