"""What a gate writes into: its attempts (the raw request and response bytes kept in the
run's private folder, named by SHA-256 in public outputs), measurements, thresholds and a
summary. The ``gate`` fixture hands one ``GateRecorder`` to each gate; the plugin turns the
filled ``GateRecord`` into the report's gate entry and the junit properties.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from pytest_vllmqual.records import Attempt, GateRecord

__all__ = ["GateRecorder"]


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
        safe_gate = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.record.gate)
        safe_label = re.sub(r"[^A-Za-z0-9_.-]+", "_", attempt.label)[:60]
        base = f"gates/{self.prefix}{safe_gate}/{number:03d}-{safe_label}"
        directory = self.private_dir / "gates" / f"{self.prefix}{safe_gate}"
        directory.mkdir(parents=True, exist_ok=True)
        (self.private_dir / f"{base}.request.json").write_bytes(request)
        (self.private_dir / f"{base}.response.txt").write_bytes(response)
        attempt.request_artifact = f"{base}.request.json"
        attempt.response_artifact = f"{base}.response.txt"

    def measure(self, **values: Any) -> None:
        self.record.measurements.update(values)

    def threshold(self, **values: Any) -> None:
        self.record.thresholds.update(values)

    def summary(self, text: str) -> None:
        self.record.summary = text
