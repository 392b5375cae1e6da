"""The fixture model's verifier checks that no process of the server's group survived its
teardown (``group_members``, read through psutil): a live group has its members, an ended one none."""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

VERIFIER = Path(__file__).resolve().parents[2] / "fixtures" / "model" / "verify_tiny_model.py"


def test_a_groups_members_until_it_is_killed() -> None:
    group_members = runpy.run_path(str(VERIFIER))["group_members"]
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                               "print('up', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert leader.stdout is not None and leader.stdout.readline() == "up\n"
        members = group_members(leader.pid)
        assert leader.pid in members and len(members) == 2, members
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.communicate()
    for _ in range(100):  # the killed child ends a moment later (a zombie is no member)
        if not group_members(leader.pid):
            break
        time.sleep(0.05)
    assert group_members(leader.pid) == []
