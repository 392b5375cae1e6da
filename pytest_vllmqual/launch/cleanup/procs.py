"""The one module that reads the process table: every process fact the package acts on.

vLLM's API server spawns an EngineCore, which spawns one worker per TP rank. Killing only
the direct child (vLLM's own test helper does) leaves workers holding memory. Each run's
server is therefore started in its own session *and* with ``VLLMQUAL_RUN_ID`` in its
environment; a process belongs to the run when either mark matches. The process facts come
from psutil (the watchdog runs in this package's interpreter, which has it); the session id,
which psutil does not give, from ``os.getsid``. The scan over every process (the shm ledgers
run it every second while a server runs) asks only for the two marks, and reads the environment
as the raw ``/proc/PID/environ`` bytes: psutil's parse of it costs five times as much per process.

``process_start`` reads field 22 of ``/proc/PID/stat`` (clock ticks since boot) itself rather
than through psutil: psutil's ``create_time`` adds the boot time as the wall clock puts it now,
which moves when the clock is set, so a start written into a label hours earlier could stop
matching a live owner, and its server would be taken for abandoned.

Also here: who maps or holds open a file (the shared-memory reclaim), which process listens on
a port and its working directory (the identity check), and ``terminate_then_kill``, the one
SIGTERM, grace period, SIGKILL sequence of the package.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

RUN_ENV = "VLLMQUAL_RUN_ID"
PROC = Path("/proc")
BOOT_ID = PROC / "sys/kernel/random/boot_id"
_GONE = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})
_STOPPED = frozenset({psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP})
KILL_WAIT_S = 30.0
"""How long a SIGKILLed process may take to go. On a busy machine a killed vLLM worker must still
be scheduled to run its exit and free its memory, which took more than 5 s on the two-core CI
machine; a process still there after this long is reported as a survivor."""


@dataclass(frozen=True)
class ProcInfo:
    """The facts about one process needed to decide whether it is ours."""

    pid: int
    ppid: int
    session: int
    status: str
    """psutil's word for the process's state (``running``, ``sleeping``, ``stopped``, ``zombie``, ...)."""
    name: str

    @property
    def gone(self) -> bool:
        """A zombie or dead process: it runs no more, whatever its pid still shows."""
        return self.status in _GONE

    @property
    def stopped(self) -> bool:
        """Stopped (SIGSTOP) or stopped by a tracer, or gone: it cannot run until continued."""
        return self.status in _STOPPED or self.gone

    def describe(self) -> str:
        return f"pid {self.pid} {self.name}"

    def describe_state(self) -> str:
        """``describe`` with the state, for the note that names a survivor."""
        return f"{self.describe()} ({self.status})"


def read_proc(pid: int) -> ProcInfo | None:
    """The process's facts; None when it is gone (or this user may not read them)."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return ProcInfo(pid=pid, ppid=process.ppid(), session=os.getsid(pid), status=process.status(),
                            name=process.name())
    except (psutil.Error, OSError):
        return None


def _has_run_env(pid: int, run_id: str) -> bool:
    try:
        with open(PROC / str(pid) / "environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return False
    return b"\0" + f"{RUN_ENV}={run_id}".encode() + b"\0" in b"\0" + environ + b"\0"


def environment_at_start(pid: int | None = None, proc: Path = PROC) -> dict[str, str] | None:
    """The environment the process was started with (``/proc/PID/environ``: what its exec was given,
    not what it has set since; this process when ``pid`` is None); None where unreadable."""
    try:
        raw = (proc / (str(pid) if pid is not None else "self") / "environ").read_bytes()
    except OSError:
        return None
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if b"=" in entry)
    return {name: value for name, _sep, value in pairs}


def _in_session(pid: int, session: int | None) -> bool:
    try:
        return session is not None and os.getsid(pid) == session
    except OSError:  # gone
        return False


def processes_of_run(run_id: str, session: int | None = None, *, exclude: set[int] | None = None) -> list[ProcInfo]:
    """Live (non-zombie) processes that carry the run's env mark or belong to its session.

    The shm ledgers call this every second while a server runs, over every process of the
    machine: the marks are checked first, and only the run's processes are read in full."""
    skip = {os.getpid()} | (exclude or set())
    found: list[ProcInfo] = []
    for pid in psutil.pids():
        if pid in skip or not (_in_session(pid, session) or _has_run_env(pid, run_id)):
            continue
        info = read_proc(pid)
        if info is not None and not info.gone:
            found.append(info)
    return found


def kill_run(run_id: str, session: int | None, *, grace_s: float, exclude: set[int] | None = None,
             observe: Callable[[list[int]], None] | None = None) -> list[ProcInfo]:
    """SIGTERM the run's processes, SIGKILL what is left after ``grace_s``; return survivors.

    Stopped (SIGSTOP) processes ignore SIGTERM until continued, so they are sent SIGCONT
    with it; SIGKILL works on them regardless. ``observe`` (the shm ledger) is called with
    the run's pids before the SIGTERM, at each poll of the grace period, and once more with
    the survivors frozen right before the SIGKILL, so nothing the run creates meanwhile is
    unseen.
    """
    procs = processes_of_run(run_id, session, exclude=exclude)
    if observe is not None:
        observe([p.pid for p in procs])
    if not procs:
        return procs

    def send(sig: signal.Signals) -> None:
        for proc in procs:
            signal_quietly(proc.pid, sig)
            if sig == signal.SIGTERM:
                signal_quietly(proc.pid, signal.SIGCONT)

    frozen = False

    def left() -> bool:
        nonlocal procs
        procs = processes_of_run(run_id, session, exclude=exclude)
        if observe is not None and procs and not frozen:  # the frozen look is the last one
            observe([p.pid for p in procs])
        return bool(procs)

    def freeze() -> None:
        nonlocal procs, frozen
        frozen = True
        procs = freeze_run(run_id, session, exclude=exclude)
        if observe is not None:
            observe([p.pid for p in procs])

    terminate_then_kill(send, left, grace_s=grace_s, poll_s=0.1, before_kill=freeze)
    return processes_of_run(run_id, session, exclude=exclude)


def terminate_then_kill(send: Callable[[signal.Signals], None], alive: Callable[[], bool], *, grace_s: float,
                        poll_s: float = 0.1, kill_wait_s: float = KILL_WAIT_S,
                        before_kill: Callable[[], None] | None = None) -> bool:
    """The package's one SIGTERM, grace, SIGKILL: ``send`` SIGTERM, poll ``alive`` for up to
    ``grace_s``, then (after ``before_kill``, e.g. freezing the survivors) ``send`` SIGKILL and
    wait up to ``kill_wait_s``, sending SIGKILL again after each look. True when nothing is left.

    SIGTERM first so a server drains and a pytest writes its report; SIGKILL only for what
    ignores it, so a stuck process never holds the caller past the grace period. SIGKILL is sent
    again after each look because ``alive`` may find a process the first one missed (one the
    last scan could not read yet); to a process already dying it does nothing.
    """
    send(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        if not alive():
            return True
    if before_kill is not None:
        before_kill()
    send(signal.SIGKILL)
    deadline = time.monotonic() + kill_wait_s
    while time.monotonic() < deadline:
        if not alive():
            return True
        time.sleep(min(poll_s, 0.05))
        send(signal.SIGKILL)
    return not alive()


def freeze_run(run_id: str, session: int | None, *, exclude: set[int] | None = None) -> list[ProcInfo]:
    """SIGSTOP every process of the run, again until no new one appears; the frozen processes.

    A child forked while its parent was being stopped shows up in the next scan, so the scan
    repeats until it finds no pid it has not stopped (a few rounds at most).
    """
    stopped: dict[int, ProcInfo] = {}
    for _ in range(10):
        fresh = [p for p in processes_of_run(run_id, session, exclude=exclude) if p.pid not in stopped]
        if not fresh:
            break
        for proc in fresh:
            signal_quietly(proc.pid, signal.SIGSTOP)
            stopped[proc.pid] = proc
    # SIGSTOP is delivered asynchronously: wait (briefly) until each one reports itself stopped
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        states = [read_proc(pid) for pid in stopped]
        if all(info is None or info.stopped for info in states):
            break
        time.sleep(0.01)
    return list(stopped.values())


def signal_quietly(pid: int, sig: signal.Signals) -> None:
    """Send ``sig``; a process that is gone, or not ours to signal, is not an error."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def boot_id() -> str:
    """This boot's id: start ticks count from boot, so they name a process only within one boot."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return "unknown-boot"


def process_start(pid: int) -> str | None:
    """``<boot id>/<start ticks>`` of a live process, or None when it is gone (or a zombie):
    with the pid, it names one process for the life of the boot, whatever reuses the pid later."""
    try:
        with open(PROC / str(pid) / "stat", encoding="utf-8", errors="replace") as handle:
            raw = handle.read()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()  # after the name, which may hold spaces and parentheses
    # fields[0] is the state (field 3), fields[19] the start time in clock ticks (field 22)
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return f"{boot_id()}/{fields[19]}"


def group_alive(pgid: int) -> bool:
    """Whether any process is left in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to a process group; a group that is gone, or not ours, is not an error."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Holders:
    """Which of the watched files some process maps or holds open, from one pass over /proc."""

    held: set[tuple[int, int]]
    unreadable_uids: set[int]
    unreadable_processes: int


def _process_uid(status_path: Path) -> int | None:
    try:
        for line in status_path.read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[2])  # effective uid
    except (OSError, ValueError, IndexError):
        return None
    return None


def lines_with(text: str, needle: str) -> Iterator[str]:
    """The lines of ``text`` that contain ``needle``, found by substring search (no per-line loop)."""
    at = text.find(needle)
    while at != -1:
        begin = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end == -1 else end
        yield text[begin:end]
        at = text.find(needle, end)


def mapped_keys(maps_text: str, wanted: set[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    """The watched (device, inode) pairs that /proc/PID/maps lines map.

    Only the lines of the watched files' devices are parsed: a vLLM process maps thousands of
    library pages, none of them on the tmpfs, and the ledger samples every second (parsing
    every line took most of a sample)."""
    for device in {dev for dev, _ in wanted}:
        field = f"{os.major(device):02x}:{os.minor(device):02x}"
        for line in lines_with(maps_text, f" {field} "):
            fields = line.split(maxsplit=5)
            if len(fields) >= 5 and fields[3] == field and fields[4].isdigit():
                key = (device, int(fields[4]))
                if key in wanted:
                    yield key


def mapped_names(maps_text: str, prefix: str) -> Iterable[str]:
    """Names of the files directly under ``prefix`` that /proc/PID/maps lines map (by path)."""
    for line in lines_with(maps_text, " " + prefix):
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith(prefix):
            name = fields[5][len(prefix):].removesuffix(" (deleted)")
            if name and "/" not in name:
                yield name


def _ancestor_pids(proc: Path) -> set[int]:
    """This process and its ancestors: the session that started us, never a vLLM engine."""
    pids: set[int] = set()
    pid = os.getpid()
    while pid > 0 and pid not in pids:
        pids.add(pid)
        try:
            status = (proc / str(pid) / "status").read_text()
        except OSError:
            break
        ppid = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), "0")
        pid = int(ppid)
    return pids


def find_holders(wanted: set[tuple[int, int]], proc: Path = PROC) -> Holders:
    """One pass over /proc: which watched files ((device, inode) pairs) are mapped or open, and which processes could not be read.

    A process whose maps or fds cannot be read (another user's, or a sandbox init that hides
    its maps even from root) makes files of its uid unverifiable, unless it is this process's
    ancestor: the session that started the run does not map an engine's offload region.
    """
    holders = Holders(held=set(), unreadable_uids=set(), unreadable_processes=0)
    if not wanted:
        return holders
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return holders
    ancestors = _ancestor_pids(proc)
    for pid in pids:
        base = proc / pid
        unreadable = False
        try:
            holders.held.update(mapped_keys((base / "maps").read_text(), wanted))
        except FileNotFoundError:
            continue  # the process ended
        except (PermissionError, ProcessLookupError, OSError):
            unreadable = True
        try:
            for entry in os.scandir(base / "fd"):
                try:
                    target = os.readlink(entry.path)
                    if not target.startswith("/"):
                        continue  # socket:, pipe:, anon_inode:
                    st = os.stat(entry.path)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) in wanted:
                    holders.held.add((st.st_dev, st.st_ino))
        except FileNotFoundError:
            continue
        except (PermissionError, OSError):
            unreadable = True
        if unreadable and int(pid) not in ancestors:
            holders.unreadable_processes += 1
            uid = _process_uid(base / "status")
            if uid is not None:
                holders.unreadable_uids.add(uid)
    return holders



def names_held_by(pids: list[int], present: dict[tuple[int, int], str], prefix: str, proc: Path = PROC) -> set[str]:
    """Names of the files under ``prefix`` (``present``: (device, inode) -> name) that ``pids`` map or hold open."""
    keys = set(present)
    names: set[str] = set()
    for pid in pids:
        base = proc / str(pid)
        try:
            maps = (base / "maps").read_text()
        except OSError:
            maps = ""
        names.update(mapped_names(maps, prefix))
        names.update(present[key] for key in mapped_keys(maps, keys))
        names.update(_open_names(base, present, prefix))
    return names


def _open_names(base: Path, present: dict[tuple[int, int], str], prefix: str) -> set[str]:
    """Names of the files under ``prefix`` that the process at ``base`` (/proc/PID) holds open:
    by path, and by (device, inode) for a file linked under another name since it was opened."""
    names: set[str] = set()
    try:
        entries = list(os.scandir(base / "fd"))
    except OSError:
        return names
    for entry in entries:
        try:
            target = os.readlink(entry.path)
            if not target.startswith("/"):
                continue  # socket:, pipe:, anon_inode:
            opened = os.stat(entry.path)
        except OSError:
            continue
        if (opened.st_dev, opened.st_ino) in present:
            names.add(present[(opened.st_dev, opened.st_ino)])
        if target.startswith(prefix):
            name = target[len(prefix):].removesuffix(" (deleted)")
            if name and "/" not in name:
                names.add(name)
    return names



def listening_socket_inodes(port: int, proc: Path = PROC) -> set[str]:
    """Inodes of the TCP sockets (IPv4 and IPv6) listening on ``port`` on this machine."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A: LISTEN
                continue
            local_port = fields[1].rsplit(":", 1)[-1]
            if int(local_port, 16) == port and fields[9] != "0":
                inodes.add(fields[9])
    return inodes


def processes_holding(inodes: set[str], proc: Path = PROC) -> list[int]:
    """Pids of the processes this run may inspect that hold one of the sockets ``inodes``."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    found: list[int] = []
    try:
        entries = [entry for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return found
    for entry in entries:
        try:
            fds = os.scandir(os.path.join(entry.path, "fd"))
        except OSError:
            continue  # another user's process, or gone
        with fds:
            for fd in fds:
                try:
                    if os.readlink(fd.path) in wanted:
                        found.append(int(entry.name))
                        break
                except OSError:
                    continue
    return sorted(found)


def process_cwd(pid: int, proc: Path = PROC) -> str | None:
    """The working directory of ``pid``; None when it is gone or this user may not read it."""
    try:
        return os.readlink(proc / str(pid) / "cwd")
    except OSError:
        return None


def process_executable(pid: int, proc: Path = PROC) -> str | None:
    """The program ``pid`` was started as: its first argument when that is an absolute path that
    exists (a virtual environment's ``bin/python`` link, which makes that environment's packages
    the interpreter's), else the file it runs; None when it is gone or unreadable."""
    try:
        first = (proc / str(pid) / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        if first.startswith("/") and Path(first).exists():
            return first
        return os.readlink(proc / str(pid) / "exe")
    except OSError:
        return None

__all__ = ["BOOT_ID", "PROC", "RUN_ENV", "Holders", "ProcInfo", "boot_id", "environment_at_start", "find_holders", "freeze_run", "group_alive", "kill_run",
           "lines_with", "listening_socket_inodes", "names_held_by", "process_cwd", "process_executable",
           "process_start", "processes_holding",
           "processes_of_run", "read_proc", "signal_group", "signal_quietly", "terminate_then_kill"]


def cgroup_lines(pid: int, proc: Path = PROC) -> list[str] | None:
    """The lines of ``/proc/PID/cgroup`` (which cgroups hold the process), None where unreadable."""
    try:
        return (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None


def uptime_s(proc: Path = PROC) -> float | None:
    """Seconds since boot, the clock the kernel log's timestamps count in; None where unreadable."""
    try:
        return float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
