"""How long a probe chunk the server can afford: its memory outside the KV budget, against an
estimate of what one prompt-log-probability request costs.

vLLM computes a prompt's log probabilities outside the memory it budgets for the KV cache: the
logits of every prompt position over the whole vocabulary (float32, with the log-softmax and
top-K working copies), then, in the API server, a Python object per position and returned
entry. So the cost of a chunk grows with its length times (the vocabulary + the returned
entries): ``chunk_cost_bytes``. The server has for it what its host has available outside the
KV space it reserved (on the CPU build: the machine's or the server's cgroup's available memory,
less the part of the KV space not yet resident; on a GPU: what ``gpu_memory_utilization`` leaves).
The probe keeps the context lengths whose chunk costs at most ``SAFETY`` of that headroom, and
records the limit and why; when none fits it is not measured, with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from pytest_vllmqual.launch.oom import cgroup_dir, process_tree
from pytest_vllmqual.vllm.log_facts import EngineFacts

from .probe import ProbeSettings

__all__ = ["ProbeMemory", "chunk_cost_bytes", "cpu_memory", "gpu_memory", "model_vocab", "server_memory", "size_probe"]

VOCAB_BYTES = 12
"""Per prompt position and vocabulary entry: float32 logits, their log-softmax and a top-K copy."""
ENTRY_BYTES = 600
"""Per returned log probability in the API server: a Logprob object, its dict slot, the decoded
token text, and its JSON on the way out (calibrated on the tiny-cpu server, see the README)."""
SAFETY = 0.5
"""A chunk may use at most this share of the headroom: other requests and the allocator need some."""
ASSUMED_VOCAB = 152_064
"""The vocabulary assumed when the model's config cannot be read (a large current one)."""


def chunk_cost_bytes(tokens: int, vocab: int, top_k: int) -> int:
    """Estimated extra memory of one prompt-log-probability request of ``tokens`` tokens."""
    return tokens * (vocab * VOCAB_BYTES + (top_k + 1) * ENTRY_BYTES)


@dataclass(frozen=True)
class ProbeMemory:
    """What the server has outside its KV budget (None: not readable) and where that figure comes from."""

    headroom_bytes: int | None
    how: str


def _meminfo_available() -> int | None:
    try:
        return int(psutil.virtual_memory().available)
    except (OSError, psutil.Error):
        return None


def _cgroup_room(pid: int) -> int | None:
    """limit - usage of the server's memory cgroup, when it has a limit (v2 or v1)."""
    directory = cgroup_dir(pid)
    if directory is None:
        return None
    for limit_name, usage_name in (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")):
        try:
            limit_text = (directory / limit_name).read_text().strip()
            usage = int((directory / usage_name).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit_text == "max" or int(limit_text) >= 2**62:
            return None
        return int(limit_text) - usage
    return None


def _resident_bytes(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            continue
    return total


def cpu_memory(pid: int | None, kv_bytes: int | None) -> ProbeMemory:
    """The CPU build's headroom: available memory (the machine's, or the server's cgroup's room if
    smaller) less the part of the KV space (``kv_bytes``, as the engine logged it) not yet resident."""
    if pid is None:
        return ProbeMemory(None, "the server is not a process of this machine, so its memory is not readable")
    available = _meminfo_available()
    room = _cgroup_room(pid)
    if available is None:
        return ProbeMemory(None, "the machine's available memory is not readable")
    how = f"{available / 2**30:.2f} GiB available on the machine"
    if room is not None and room < available:
        available, how = room, f"{room / 2**30:.2f} GiB left under the server's cgroup memory limit"
    if kv_bytes is None:
        return ProbeMemory(None, f"{how}, but the server's KV space is not known from its log")
    resident = _resident_bytes(process_tree(pid))
    unresident_kv = max(0, kv_bytes - resident)
    return ProbeMemory(available - unresident_kv,
                       f"{how}, less {unresident_kv / 2**30:.2f} GiB of the {kv_bytes / 2**30:.2f} GiB KV space "
                       f"not yet resident (the server holds {resident / 2**30:.2f} GiB)")


def gpu_memory(total_bytes: int | None, utilization: float | None) -> ProbeMemory:
    """A GPU's headroom: what ``gpu_memory_utilization`` leaves of the card's memory."""
    if total_bytes is None or utilization is None:
        return ProbeMemory(None, "the GPU's memory or the server's gpu_memory_utilization is not known")
    return ProbeMemory(int(total_bytes * (1 - utilization)),
                       f"{1 - utilization:.0%} of {total_bytes / 2**30:.1f} GiB left by gpu_memory_utilization {utilization:g}")


def model_vocab(model_path: str | None) -> tuple[int, str]:
    """The model's vocabulary size from its config.json, else ``ASSUMED_VOCAB`` (and which)."""
    try:
        config: Any = json.loads((Path(str(model_path)) / "config.json").read_text())
        config = config.get("text_config", config) if "vocab_size" not in config else config
        return int(config["vocab_size"]), "the model's config.json"
    except (OSError, ValueError, KeyError, TypeError):
        return ASSUMED_VOCAB, f"assumed ({ASSUMED_VOCAB:,}): the model's config.json is not readable"


def size_probe(settings: ProbeSettings, memory: ProbeMemory, vocab: int,
               vocab_source: str) -> tuple[ProbeSettings, dict[str, Any]]:
    """The settings with every context length whose chunk fits, and the record of why."""
    record: dict[str, Any] = {"headroom_bytes": memory.headroom_bytes, "headroom": memory.how, "vocab": vocab,
                              "vocab_source": vocab_source, "safety_share": SAFETY,
                              "bytes_per_token": chunk_cost_bytes(1, vocab, settings.top_k)}
    if memory.headroom_bytes is None:
        record["chunk_limit_tokens"] = None
        record["why"] = f"not sized: {memory.how}; the recipe's chunk cap stands"
        return settings, record
    limit = max(0, int(memory.headroom_bytes * SAFETY) // record["bytes_per_token"])
    kept = tuple(n for n in settings.context_lengths if n <= limit)
    record["chunk_limit_tokens"] = limit
    record["why"] = (f"a chunk may use {SAFETY:.0%} of {memory.headroom_bytes / 1e9:.2f} GB ({memory.how}) at an "
                     f"estimated {record['bytes_per_token']:,} bytes per token (vocabulary {vocab:,}, "
                     f"top-{settings.top_k}): at most {limit:,} tokens")
    dropped = tuple(sorted(set(settings.dropped_lengths) | (set(settings.context_lengths) - set(kept))))
    return replace(settings, context_lengths=kept, dropped_lengths=dropped), record


def server_memory(pid: int | None, engine: dict[str, Any] | None, device: str | None) -> ProbeMemory:
    """The headroom of a managed server from its pid and the engine facts its log gave: the CPU
    build's rule on a CPU; on a GPU the engine facts carry no card size, so it is not sized."""
    facts = EngineFacts.from_dict(engine or {})
    kv = [rank.kv_gib for rank in facts.ranks if rank.kv_gib is not None]
    if (facts.device or device or "cpu").lower() != "cpu":
        return gpu_memory(None, None)
    return cpu_memory(pid, int(sum(kv) * 2**30) if kv else None)
