"""The kernel's word on a dead server, read from recorded files: the memory cgroup's ``oom_kill``
counter (v1's ``memory.oom_control``, recorded on the development machine after a 64 MiB cgroup
killed a Python process; v2's ``memory.events`` in the kernel's documented format) and the
kernel log's "Killed process" line (recorded from ``dmesg`` for that kill)."""

from __future__ import annotations

import shutil
from pathlib import Path

from pytest_vllmqual.launch.oom import KernelWatch, oom_kill_count, parse_kernel_kills, request_words

DATA = Path(__file__).resolve().parents[1] / "data" / "oom"


def _cgroup(tmp_path: Path, recorded: str, name: str) -> Path:
    shutil.copy(DATA / recorded, tmp_path / name)
    return tmp_path


def test_the_oom_kill_counter_is_read_from_v2_memory_events(tmp_path: Path) -> None:
    assert oom_kill_count(_cgroup(tmp_path, "memory.events.v2", "memory.events")) == 2


def test_the_oom_kill_counter_is_read_from_v1_memory_oom_control(tmp_path: Path) -> None:
    assert oom_kill_count(_cgroup(tmp_path, "memory.oom_control.v1", "memory.oom_control")) == 1


def test_an_unreadable_cgroup_says_nothing(tmp_path: Path) -> None:
    assert oom_kill_count(tmp_path) is None


def test_the_kernel_log_gives_the_process_and_its_resident_size() -> None:
    (kill,) = parse_kernel_kills((DATA / "dmesg.txt").read_text())
    assert (kill.pid, kill.name, kill.resident_bytes) == (30725, "python3", (65280 + 6684) * 1024)
    assert kill.words() == "at 0.1 GB resident (python3, pid 30725)"


def test_a_death_is_an_oom_kill_only_of_the_servers_processes_and_after_its_start(tmp_path: Path) -> None:
    cgroup = _cgroup(tmp_path, "memory.oom_control.v1", "memory.oom_control")
    log = (DATA / "dmesg.txt").read_text()
    watch = KernelWatch(pid=30000, cgroup=cgroup, kills_at_start=0, since_s=7000.0, pids={30000, 30725})
    verdict = watch.verdict(log)
    assert verdict is not None and verdict["oom_killed"] is True and verdict["pid"] == 30725
    assert verdict["words"] == ("killed by the kernel's OOM killer at 0.1 GB resident (python3, pid 30725), read "
                                "from the cgroup's oom_kill counter and the kernel log")
    assert KernelWatch(pid=1, cgroup=cgroup, kills_at_start=1, since_s=7000.0, pids={1}).verdict(log) is None
    assert KernelWatch(pid=1, cgroup=None, since_s=8000.0, pids={30725}).verdict(log) is None  # an older kill


def test_a_probe_request_is_said_in_words() -> None:
    assert request_words("equivalence-chunk05-1024") == \
        "the equivalence probe's 1,024-token prompt-log-probability request (equivalence-chunk05-1024)"
    assert request_words("smoke") == "request smoke"
    assert request_words(None) == "no request known to be in flight"
