"""Cheapest gates first, and which failures end the rest of an arm (fail fast).

One table, keyed by gate name: the stage each shipped gate runs in. Gates not in the table
(users' own, the fault kit's) and tests that are not gates stay in the functional stage, in
collection order: their authors chose that order (a fault scenario kills the server between
two of them), so it is kept. A failed smoke or identity gate
ends the arm's remaining gates as "not run: …" unless ``--vllmqual-no-fail-fast``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STAGES = ("smoke", "identity", "functional", "reasoning", "quality", "engine", "capacity")

GATE_STAGE: dict[str, str] = {
    "smoke": "smoke",
    "identity": "identity",
    "json": "functional",
    "tools": "functional",
    "streaming_tool": "functional",
    "tool_continuation": "functional",
    "responses": "functional",
    "openai_sdk": "functional",
    "reasoning_fingerprints": "reasoning",
    "quality_intelligence": "quality",
    "quality_session_recall": "quality",
    "quality_tools": "quality",
    "quality_long_context": "quality",
    "engine_ranks": "engine",
    "kv_pool": "engine",
    "cold_start": "engine",
    "ladder": "capacity",
    "concurrency": "capacity",
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
