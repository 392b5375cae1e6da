"""The kernel's word on a dead server: was it killed by the out-of-memory killer, and how large.

When the server's process dies, its log often says nothing (a process killed with SIGKILL
writes no last line). The kernel keeps two records: the memory cgroup's counter of OOM kills
(``oom_kill`` in ``memory.events`` under cgroup v2, in ``memory.oom_control`` under v1) and, when
the kernel log is readable, the "Killed process PID (NAME) … anon-rss:…kB" line with the
resident size at the kill. ``KernelWatch`` snapshots the server's cgroup, its counter and its
process tree once the server is ready; ``KernelWatch.verdict`` reads them again after a death.
Neither source needs privileges the run does not already have; an unreadable one says nothing.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from pytest_vllmqual.launch.cleanup.procs import cgroup_lines, uptime_s

__all__ = ["KernelWatch", "OomKill", "cgroup_dir", "oom_kill_count", "parse_kernel_kills", "request_words"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
_KILLED = re.compile(r"^\[\s*(?P<at>\d+\.\d+)\][^\n]*?Killed process (?P<pid>\d+) \((?P<name>[^)]*)\)"
                     r"[^\n]*?anon-rss:(?P<anon>\d+)kB, file-rss:(?P<file>\d+)kB, shmem-rss:(?P<shmem>\d+)kB",
                     re.MULTILINE)
_CHUNK_LABEL = re.compile(r"equivalence-chunk(\d+)-(\d+)")


@dataclass(frozen=True)
class OomKill:
    """One kill the kernel logged: the process, and its resident size at the kill."""

    pid: int
    name: str
    resident_bytes: int
    at_s: float

    def words(self) -> str:
        return f"at {self.resident_bytes / 1e9:.1f} GB resident ({self.name}, pid {self.pid})"


def oom_kill_count(directory: Path) -> int | None:
    """The cgroup's count of OOM kills: ``oom_kill`` of ``memory.events`` (v2) or of
    ``memory.oom_control`` (v1); None when neither is readable or carries it."""
    for name in ("memory.events", "memory.oom_control"):
        try:
            text = (directory / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value.strip())
    return None


def cgroup_dir(pid: int, root: Path = CGROUP_ROOT) -> Path | None:
    """The memory cgroup folder of process ``pid`` (v2's unified line, else v1's ``memory``)."""
    lines = cgroup_lines(pid)
    if lines is None:
        return None
    v1 = [line.split(":", 2)[2] for line in lines if line.count(":") >= 2 and "memory" in line.split(":")[1].split(",")]
    if v1 and (root / "memory").is_dir():
        return root / "memory" / v1[0].lstrip("/")
    unified = [line.split(":", 2)[2] for line in lines if line.startswith("0::")]
    return root / unified[0].lstrip("/") if unified else None


def parse_kernel_kills(log: str) -> list[OomKill]:
    """Every "Killed process" line of a kernel log (``dmesg``'s text)."""
    return [OomKill(int(m["pid"]), m["name"], (int(m["anon"]) + int(m["file"]) + int(m["shmem"])) * 1024,
                    float(m["at"])) for m in _KILLED.finditer(log)]


def _kernel_log() -> str:
    try:
        return subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def process_tree(pid: int) -> set[int]:
    """``pid`` and every descendant alive now (vLLM's engine core and workers are children)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return {pid}
    return {pid, *(child.pid for child in children)}


def request_words(label: str | None) -> str:
    """A request's label in words: an equivalence chunk says its length and what it asks for."""
    if not label:
        return "no request known to be in flight"
    match = _CHUNK_LABEL.search(label)
    if match:
        return f"the equivalence probe's {int(match[2]):,}-token prompt-log-probability request ({label})"
    return f"request {label}"


@dataclass
class KernelWatch:
    """The server's cgroup, OOM-kill count and process tree when it became ready."""

    pid: int
    cgroup: Path | None = None
    kills_at_start: int | None = None
    since_s: float | None = None
    pids: set[int] = field(default_factory=set)

    @classmethod
    def start(cls, pid: int) -> KernelWatch:
        directory = cgroup_dir(pid)
        return cls(pid, directory, oom_kill_count(directory) if directory else None, uptime_s(), process_tree(pid))

    def refresh(self) -> None:
        """Add the server's processes started since (workers may start after readiness)."""
        if psutil.pid_exists(self.pid):
            self.pids |= process_tree(self.pid)

    def verdict(self, kernel_log: str | None = None) -> dict[str, object] | None:
        """What the kernel says of a death, or None when it says nothing readable."""
        kills = oom_kill_count(self.cgroup) if self.cgroup is not None else None
        new_kills = None if kills is None or self.kills_at_start is None else kills - self.kills_at_start
        log = _kernel_log() if kernel_log is None else kernel_log
        ours = [k for k in parse_kernel_kills(log)
                if k.pid in self.pids and (self.since_s is None or k.at_s >= self.since_s)]
        if not ours and not new_kills:
            return None
        out: dict[str, object] = {"oom_killed": True, "cgroup_oom_kills": new_kills}
        if ours:
            out.update(process=ours[-1].name, pid=ours[-1].pid, resident_bytes=ours[-1].resident_bytes)
        source = " and ".join(s for s, ok in (("the cgroup's oom_kill counter", bool(new_kills)),
                                               ("the kernel log", bool(ours))) if ok)
        resident = f" {ours[-1].words()}" if ours else ""
        out["words"] = f"killed by the kernel's OOM killer{resident}, read from {source}"
        return out
