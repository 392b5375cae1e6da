"""Gates for the full-disk case (reliability case 21): a smoke passes, then the reports disk fills up.

``FAULT_FILL_DIR`` is a small tmpfs holding the reports dir; the last test fills it, so the
report written at the end of the session meets a real ENOSPC.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.recorder import GateRecorder


def test_smoke(qual_client: QualClient, gate: GateRecorder) -> None:
    """A gate that passes, so there is a report to write."""
    result = qual_client.chat({"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 4}, label="ok")
    assert result.status_code == 200


def test_zz_fill_the_disk() -> None:
    """Not a gate: fill the reports disk to the last byte."""
    directory = os.environ.get("FAULT_FILL_DIR")
    if not directory:
        return
    with open(Path(directory) / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with open(Path(directory) / "filler2", "wb", buffering=0) as handle:  # what a 64 KiB write left
        try:
            while True:
                handle.write(b"\0")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
