"""Cheapest gates first, the gates that can take the server down last, and which failures end
the rest of an arm (fail fast).

One order, derived from the gate registry, which lists the gates in the order they run: smoke,
then identity (each ends the arm's remaining gates when it fails), then each family in the
order it first appears there (functional, reasoning, quality, engine, lifecycle), and last the
gates that push the server to its limits (``SERVER_AT_RISK``: the equivalence probe, the
context ladder, concurrency, load), right after the item bank (``AFTER_THE_CHEAP_GATES``), so a server that dies under one of them keeps every cheap
gate's evidence gathered before it. Gates the registry does not know (users' own, the fault
kit's) and tests that are not gates run with the functional family, in collection order: their
authors chose that order (a fault scenario kills the server between two of them), so it is kept.
A failed smoke or identity gate ends the arm's remaining gates as "not run: …" unless
``--vllmqual-no-fail-fast``.
"""

from __future__ import annotations

import json
from pathlib import Path

from pytest_vllmqual.atomic_io import write_json_atomic
from pytest_vllmqual.gates.registry import REGISTRY, GateSpec

FAIL_FAST = {"smoke": "not run: smoke failed", "identity": "not run: identity mismatch"}
STOP_FILE = "fail_fast.json"
_UNKNOWN_GROUP = "functional"
SERVER_AT_RISK: tuple[str, ...] = ("equivalence", "ladder", "concurrency", "load")
"""Gates that can take the server down, in the order they run after every other gate: the probe
(prompt log probabilities are computed outside vLLM's memory budget), the ladder's largest rungs,
then many requests at once."""
AFTER_THE_CHEAP_GATES: tuple[str, ...] = ("items",)
"""Gates that run after every cheap gate and before ``SERVER_AT_RISK``: the item bank sends short
prompts, except its needle family's passages, the longest prompts before the probe (KV cache only,
no prompt log probabilities, so within the engine's budget); its answers are kept even when the
probe or the ladder then takes the server down."""
AFTER_THE_PROBE: tuple[str, ...] = ("load_floor",)
"""Gates that run right after the probe, before the ladder: the floor under load asks the probe and
the items again while its own load is in flight (short prompts at the load gate's length), so it
still sees a server the ladder's largest rungs have not strained."""
_LAST: tuple[str, ...] = AFTER_THE_CHEAP_GATES + SERVER_AT_RISK[:1] + AFTER_THE_PROBE + SERVER_AT_RISK[1:]


def _group(spec: GateSpec) -> str:
    """What a gate runs with: the fail-fast gates alone, every other gate with its family."""
    return spec.name if spec.name in FAIL_FAST else spec.family


_GROUPS: tuple[str, ...] = tuple(dict.fromkeys(_group(spec) for spec in REGISTRY
                                               if spec.name not in _LAST))
_RANK: dict[str, int] = {**{spec.name: _GROUPS.index(_group(spec)) for spec in REGISTRY
                            if spec.name not in _LAST},
                         **{name: len(_GROUPS) + i for i, name in enumerate(_LAST)}}


def run_rank(gate: str | None) -> int:
    """Where a gate runs (lower first; equal ranks keep their collection order)."""
    return _RANK.get(gate or "", _GROUPS.index(_UNKNOWN_GROUP))


def record_stop(private_dir: Path, gate: str) -> None:
    """After ``gate`` failed: the arm's remaining gates do not run (shared with xdist workers)."""
    reason = FAIL_FAST.get(gate)
    path = private_dir / STOP_FILE
    if reason is None or path.exists():
        return
    write_json_atomic({"gate": gate, "reason": reason}, path, what="fail-fast mark")


def stop_reason(private_dir: Path) -> str | None:
    """Why the arm's remaining gates must not run, or None."""
    try:
        data = json.loads((private_dir / STOP_FILE).read_text())
    except (OSError, ValueError):
        return None
    reason = data.get("reason") if isinstance(data, dict) else None
    return str(reason) if reason else None

__all__ = ["AFTER_THE_CHEAP_GATES", "AFTER_THE_PROBE", "FAIL_FAST", "SERVER_AT_RISK", "record_stop", "run_rank", "stop_reason"]
