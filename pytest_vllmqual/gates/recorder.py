"""What a gate writes into: its attempts (the raw request and response bytes kept in the
run's private folder, named by SHA-256 in public outputs), measurements, thresholds and a
summary. The ``gate`` fixture hands one ``GateRecorder`` to each gate; the plugin turns the
filled ``GateRecord`` into the report's gate entry and the junit properties.

The recorder is the one writer of gate artifacts, and names them: ``gates/<gate>/<n>-<label>``
with every character outside ``A-Za-z0-9_.-`` (and a leading dot) folded to ``_``, so any gate
name or label gives a relative name inside the gate's folder. ``report.artifacts`` lists and verifies them.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from pytest_vllmqual.errors import ArtifactError
from pytest_vllmqual.records import Attempt, GateRecord

__all__ = ["GateRecorder", "artifact_part"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def artifact_part(text: str, limit: int | None = None) -> str:
    """One safe path part of an artifact name: never empty, never ``..``, never hidden (a
    leading dot would hide it from the artifact list)."""
    part = _UNSAFE.sub("_", text)[:limit]
    visible = part.lstrip(".")
    return "_" * (len(part) - len(visible)) + visible or "_"


class GateRecorder:
    """What a gate writes into: attempts (raw bytes kept privately), measurements, a summary."""

    def __init__(self, record: GateRecord, private_dir: Path, *, prefix: str = "") -> None:
        self.record = record
        self.private_dir = private_dir
        self.prefix = prefix
        self._lock = threading.Lock()

    def record_attempt(self, attempt: Attempt, request: bytes, response: bytes) -> None:
        with self._lock:
            number = len(self.record.attempts) + 1
            self.record.attempts.append(attempt)
        folder = f"gates/{artifact_part(self.prefix + self.record.gate)}"
        base = f"{folder}/{number:03d}-{artifact_part(attempt.label, 60)}"
        try:
            (self.private_dir / folder).mkdir(parents=True, exist_ok=True)
            (self.private_dir / f"{base}.request.json").write_bytes(request)
            (self.private_dir / f"{base}.response.txt").write_bytes(response)
        except OSError as exc:
            raise ArtifactError(f"cannot write the artifacts {self.private_dir / base}.*: "
                                f"{exc.strerror or exc}") from None
        attempt.request_artifact = f"{base}.request.json"
        attempt.response_artifact = f"{base}.response.txt"

    def measure(self, **values: Any) -> None:
        self.record.measurements.update(values)

    def threshold(self, **values: Any) -> None:
        self.record.thresholds.update(values)

    def summary(self, text: str) -> None:
        self.record.summary = text
