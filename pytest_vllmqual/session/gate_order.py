"""Cheapest gates first, and which failures end the rest of an arm (fail fast).

One table, keyed by gate name and derived from the gate registry: the stage each shipped gate
runs in. Gates not in the table
(users' own, the fault kit's) and tests that are not gates stay in the functional stage, in
collection order: their authors chose that order (a fault scenario kills the server between
two of them), so it is kept. A failed smoke or identity gate
ends the arm's remaining gates as "not run: …" unless ``--vllmqual-no-fail-fast``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pytest_vllmqual.gates.registry import REGISTRY

STAGES = ("smoke", "identity", "functional", "reasoning", "quality", "engine", "capacity")

#: The stage of each shipped gate, from the gate registry (pytest_vllmqual.gates.registry): smoke and
#: identity first, then the registry's families in STAGES order.
_FAMILY_STAGE = {"preflight": "functional", "reasoning": "reasoning", "quality": "quality",
                 "engine": "engine", "lifecycle": "engine", "capacity": "capacity"}
GATE_STAGE: dict[str, str] = {
    spec.name: spec.name if spec.name in ("smoke", "identity") else _FAMILY_STAGE[spec.family]
    for spec in REGISTRY
}

FAIL_FAST = {"smoke": "not run: smoke failed", "identity": "not run: identity mismatch"}
STOP_FILE = "fail_fast.json"


def stage_rank(gate: str | None) -> int:
    """Position of a gate's stage in ``STAGES`` (lower runs first)."""
    return STAGES.index(GATE_STAGE.get(gate or "", "functional"))


def record_stop(private_dir: Path, gate: str) -> None:
    """After ``gate`` failed: the arm's remaining gates do not run (shared with xdist workers)."""
    reason = FAIL_FAST.get(gate)
    path = private_dir / STOP_FILE
    if reason is None or path.exists():
        return
    private_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"gate": gate, "reason": reason}))
    os.replace(tmp, path)


def stop_reason(private_dir: Path) -> str | None:
    """Why the arm's remaining gates must not run, or None."""
    try:
        data = json.loads((private_dir / STOP_FILE).read_text())
    except (OSError, ValueError):
        return None
    reason = data.get("reason") if isinstance(data, dict) else None
    return str(reason) if reason else None

__all__ = ["record_stop", "stage_rank", "stop_reason"]
