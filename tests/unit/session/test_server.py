"""The controller's server as an xdist worker receives it."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.recipes import tiny

from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.records import LauncherKind
from pytest_vllmqual.session.server import ServerManager


def test_the_handoff_to_xdist_workers_carries_fixed_words_as_plain_strings(tmp_path: Path) -> None:
    """execnet (xdist's transport) refuses an enum member: a launcher kind handed over typed ended
    every xdist session with an internal error before a worker started."""
    execnet = pytest.importorskip("execnet")
    manager = ServerManager(tiny(), run_id="r", private_dir=tmp_path, progress=lambda _line: None)
    manager.handle = ServerHandle("http://127.0.0.1:1", "tiny", LauncherKind.SUBPROCESS)
    info = manager.handoff("tiny-cpu")
    assert execnet.loads(execnet.dumps(info)) == info
    assert type(info["handle"]["launcher_kind"]) is str and info["handle"]["launcher_kind"] == "subprocess"
