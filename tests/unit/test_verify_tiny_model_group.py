"""The fixture model's verifier checks that no process of the server's group survived its
teardown (``group_members``, read through psutil): a live group has its members, an ended one none."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

VERIFIER = Path(__file__).resolve().parents[2] / "fixtures" / "model" / "verify_tiny_model.py"


@pytest.fixture
def verifier(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("verify_tiny_model_under_test", VERIFIER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_groups_members_until_it_is_killed(verifier: ModuleType) -> None:
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                               "print('up', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert leader.stdout is not None and leader.stdout.readline() == "up\n"
        members = verifier.group_members(leader.pid)
        assert leader.pid in members and len(members) == 2, members
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
    for _ in range(100):  # the killed child ends a moment later (a zombie is no member)
        if not verifier.group_members(leader.pid):
            break
        time.sleep(0.05)
    assert verifier.group_members(leader.pid) == []
