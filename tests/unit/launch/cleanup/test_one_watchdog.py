"""One watchdog per owner, one SIGTERM-to-SIGKILL helper, one module that reads the process table.

The source checks read the package's code (docstrings and comments left out); the watchdog
check uses real processes: an owner that registers a server tree and a process group, then is
SIGKILLed, as a pytest or a Ray worker can be.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from support import ROOT
from support.fault_harness import watchdogs_of

from pytest_vllmqual.launch.cleanup.procs import group_alive, processes_of_run, psutil

PACKAGE = ROOT / "pytest_vllmqual"
PROCS = PACKAGE / "launch" / "cleanup" / "procs.py"
WATCHDOG = PACKAGE / "launch" / "cleanup" / "watchdog.py"


def code_strings(tree: ast.AST) -> list[str]:
    """String constants of the code, docstrings excluded."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in sorted(PACKAGE.rglob("*.py"))]


def test_proc_is_read_in_one_module() -> None:
    """Every path into /proc is spelled in ``launch.cleanup.procs``; kernel settings (``/proc/sys``)
    are not the process table and stay with their users."""
    readers = {path.relative_to(PACKAGE).as_posix() for path, tree in modules()
               if any(s.startswith("/proc") and not s.startswith("/proc/sys/") for s in code_strings(tree))}
    assert readers == {"launch/cleanup/procs.py"}


def test_sigterm_then_sigkill_is_written_once() -> None:
    """Only one function of the package sends both SIGTERM and SIGKILL: ``procs.terminate_then_kill``."""
    escalations = []
    for path, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
                names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                if {"SIGTERM", "SIGKILL"} <= names:
                    escalations.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.name}")
    assert escalations == ["launch/cleanup/procs.py:terminate_then_kill"]


def test_one_watchdog_entry_point() -> None:
    """The package starts a watchdog from one command line; the old command lines are aliases
    whose ``main`` is the watchdog's."""
    starters = []
    for path, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                if name in ("reaper_command", "watchdog_command"):
                    starters.append(f"{path.relative_to(PACKAGE).as_posix()}:{name}")
    assert starters == ["launch/cleanup/watchdog.py:watchdog_command"]
    aliases = [PACKAGE / "launch" / "cleanup" / "reaper.py", PACKAGE / "launch" / "docker" / "reaper.py",
               PACKAGE / "fleet" / "watchdog.py"]
    for alias in aliases:
        text = alias.read_text(encoding="utf-8")
        assert "watchdog.main(" in text or "from pytest_vllmqual.launch.cleanup.watchdog import main" in text, alias
        assert "owner_alive(" not in text and "select." not in text, f"{alias} still polls an owner itself"


OWNER = """
import os, subprocess, sys, time
from pytest_vllmqual.launch.cleanup.procs import RUN_ENV
from pytest_vllmqual.launch.cleanup.watchdog import WATCHDOG
run_id = sys.argv[1]
server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                          env={**os.environ, RUN_ENV: run_id})
group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
WATCHDOG.watch_run(run_id, server.pid, time.time())
WATCHDOG.watch_group(group.pid)
first = WATCHDOG.pid
WATCHDOG.watch_run(run_id + "-b", server.pid, time.time())
print(first, WATCHDOG.pid, server.pid, group.pid, flush=True)
time.sleep(120)
"""


def test_one_watchdog_per_owner_ends_what_it_registered_when_the_owner_is_killed() -> None:
    run_id = f"watchdog-{uuid.uuid4().hex[:8]}"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, run_id], stdout=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    pids: list[int] = []
    try:
        assert owner.stdout is not None
        first, again, server, group = (int(word) for word in owner.stdout.readline().split())
        pids = [server, group, first]
        assert first == again, "a second registration started a second watchdog"
        # Popen returns once the watchdog's exec has begun; until the kernel has set up its new
        # command line, /proc/PID/cmdline reads empty (seen under the unit tier's load: state R,
        # parent the owner, cmdline b''), so wait for it to read as the watchdog's.
        deadline = time.monotonic() + 10
        while watchdogs_of(owner.pid) != [first] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert watchdogs_of(owner.pid) == [first]
        time.sleep(1.0)
        assert processes_of_run(run_id) and group_alive(group), "the owner lives: nothing is ended"
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 30
        while (processes_of_run(run_id) or group_alive(group) or psutil.pid_exists(first)) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
            if psutil.pid_exists(first) and psutil.Process(first).status() == psutil.STATUS_ZOMBIE:
                break
        assert processes_of_run(run_id) == [] and not group_alive(group)
        assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE, \
            "the watchdog outlived its owner's leftovers"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if owner.poll() is None:
            owner.kill()


def test_done_forgets_what_the_owner_cleaned_up_itself() -> None:
    """A run and a group the owner ended itself are not the watchdog's: after ``done`` they are
    left alone when the owner dies."""
    from pytest_vllmqual.launch.cleanup.watchdog import Registry

    registry = Registry()
    registry.apply("watch group 4242")
    registry.apply("watch 4243")
    registry.apply("watch containers run-x 1.5 1 -")
    registry.apply("watch shm psm_abc")
    assert registry.groups == {4242, 4243} and registry.containers == {"run-x": (1.5, True, "-")}
    for line in ("done group 4242", "done 4243", "done containers run-x", "done shm psm_abc", "nonsense"):
        registry.apply(line)
    assert registry.empty()

