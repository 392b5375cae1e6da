"""One arm's server, without pytest: its lifecycle, its liveness and the traffic lock.

``ServerManager`` owns the managed server of an arm (prepare → start → ready → facts → stop);
only ``controller.ControllerRun.start_server`` / ``stop_server`` drive it. ``ServerGuard`` decides whether a
failed request means the server is gone, and shares that verdict with every gate (and every
xdist worker, through a state file in the private run directory) so later gates end at once
as ``server_dead`` or ``hung``. ``WorkerServer`` is an xdist worker's view of the controller's
server.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from pytest_vllmqual.atomic_io import write_text_atomic
from pytest_vllmqual.client.probes import ServerProbe
from pytest_vllmqual.client.qual_client import http_client
from pytest_vllmqual.client.stream_transport import shared_ssl_context
from pytest_vllmqual.clock import utc_now
from pytest_vllmqual.errors import LaunchError, RecipeError, ServerGoneError
from pytest_vllmqual.gates.identity import check_identity
from pytest_vllmqual.gates.schema_checks import warm_up_validation
from pytest_vllmqual.gates.tool_fixtures import recipe_tool_fixtures
from pytest_vllmqual.hashing import sha256_file
from pytest_vllmqual.launch.base import Launcher, ProgressFn, ServerHandle, TeardownResult, new_api_key
from pytest_vllmqual.launch.oom import KernelWatch, request_words
from pytest_vllmqual.launch.readiness import wait_until_ready
from pytest_vllmqual.launch.registry import launcher_class, serving_kind
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import ServerStatus, StartupStatus
from pytest_vllmqual.vllm.endpoints import fetch_engine_endpoints
from pytest_vllmqual.vllm.engine_death import ENGINE_DEAD, classify_engine_death
from pytest_vllmqual.vllm.log_facts import parse_engine_log
from pytest_vllmqual.vllm.server_log import log_tail

STATE_FILE = "server_state.json"
LOCK_FILE = "traffic.lock"


# -- liveness -------------------------------------------------------------------------------


def death_words(state: dict[str, Any]) -> str:
    """How the server went, in one sentence from its state file: the status, during which gate and
    request, what the kernel said (an OOM kill) and what the harness saw."""
    status = str(state.get("status", ServerStatus.OK))
    words = "the server died" if status == ServerStatus.SERVER_DEAD else f"the server became {status.replace('_', ' ')}"
    kernel = state.get("kernel") or {}
    if kernel.get("words"):
        words += f": {kernel['words']}"
    if state.get("request"):
        words += f", while answering {request_words(state['request'])}"
    if state.get("during_gate"):
        words += f", during gate {state['during_gate']}"
    return f"{words} ({state.get('detail', '')})"


class ServerGuard:
    """Shared verdict on whether the server is usable; see the module docstring."""

    def __init__(self, handle: ServerHandle, state_file: Path, *, launcher: Launcher | None = None,
                 probe_timeout_s: float = 30.0) -> None:
        self.handle = handle
        self.state_file = state_file
        self.launcher = launcher
        self.probe_timeout_s = probe_timeout_s
        self._lock = threading.Lock()
        self.current_gate: str | None = None
        """The gate this process is running (a death is said to happen during it)."""
        self.kernel = KernelWatch.start(handle.pid) if launcher is not None and handle.pid else None

    def gate_started(self, gate: str | None) -> None:
        """A gate begins: a death from now on happened during it."""
        self.current_gate = gate
        if self.kernel is not None:
            self.kernel.refresh()

    def state(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.state_file.read_text())
            return data
        except (OSError, ValueError):
            return {"status": ServerStatus.OK}

    def mark(self, status: str, detail: str, *, request: str | None = None) -> None:
        """Record the server as gone, with the gate and request during which it went and what the
        kernel says (an OOM kill); a later failed request only adds the request in flight when
        the first mark (the death monitor's) did not know it."""
        with self._lock:
            state = self.state()
            if state.get("status") not in (None, ServerStatus.OK):
                if request and not state.get("request"):
                    write_text_atomic(json.dumps({**state, "request": request}), self.state_file,
                                      what="server state file")
                return
            log_text = self.launcher.log_text() if self.launcher is not None else ""
            tail = log_tail(log_text, 15) if self.launcher is not None else ""
            death = classify_engine_death(log_text) if status in (ServerStatus.SERVER_DEAD, ServerStatus.HUNG) else None
            if death is not None:
                detail = f"{detail}; cause found in the log: {death.describe()}"
            kernel = self.kernel.verdict() if self.kernel is not None and status == ServerStatus.SERVER_DEAD else None
            write_text_atomic(json.dumps({"status": status, "detail": detail, "log_tail": tail, "at": utc_now(),
                                          "death": death.to_dict() if death is not None else None,
                                          "during_gate": self.current_gate, "request": request,
                                          "kernel": kernel}),
                              self.state_file, what="server state file")

    def gone_error(self) -> ServerGoneError | None:
        state = self.state()
        status = state.get("status", ServerStatus.OK)
        if status == ServerStatus.OK:
            return None
        return ServerGoneError(f"{death_words(state)}; this gate was not run against it", status=status,
                               log_tail=state.get("log_tail", ""), during=state.get("during_gate"))

    def assert_usable(self) -> None:
        gone = self.gone_error()
        if gone is not None:
            raise gone

    def after_failure(self, error: Exception | None, status_code: int | None, text: str,
                      request: str | None = None) -> ServerGoneError | None:
        """Whether a failed ``request`` (its label) means the server is gone; if so, it is marked."""
        if self.launcher is not None and self.launcher.alive() is False:
            self.mark(ServerStatus.SERVER_DEAD, f"the server process exited with status {self.launcher.exit_code()}",
                      request=request)
            return self.gone_error()
        if error is None:
            if status_code is not None and status_code >= 500 and (
                    ENGINE_DEAD.search(text)
                    or (self.launcher is not None and self._engine_died())):
                self.mark(ServerStatus.SERVER_DEAD, "the engine core died (EngineDeadError)", request=request)
                return self.gone_error()
            return None
        verdict = self.probe(after_timeout=isinstance(error, httpx.TimeoutException))
        if verdict is not None:
            self.mark(*verdict, request=request)
            return self.gone_error()
        return None

    def _engine_died(self) -> bool:
        """The log says the engine core is dead, though the API process may still answer."""
        assert self.launcher is not None
        death = classify_engine_death(self.launcher.log_text())
        return death is not None and "engine_dead" in death.kinds

    def probe(self, *, after_timeout: bool) -> tuple[str, str] | None:
        """Ask the server directly: refused → dead; a 1-token completion that hangs → hung."""
        with ServerProbe.open(self.handle) as probe:
            health = probe.health(5.0)
            if health.timed_out:
                return (ServerStatus.HUNG, "/health did not answer within 5 s")
            if health.error is not None:
                return (ServerStatus.SERVER_DEAD, f"/health unreachable: {health.error}")
            if health.status_code != 200:
                return (ServerStatus.SERVER_DEAD, f"/health answered {health.status_code}")
            if not after_timeout:
                return None
            response = probe.one_token(self.probe_timeout_s)
            if response.timed_out:
                return (ServerStatus.HUNG, f"a 1-token completion did not answer within {self.probe_timeout_s:g} s")
            if response.error is not None:
                return (ServerStatus.SERVER_DEAD, f"1-token completion failed: {response.error}")
            if response.status_code is not None and response.status_code >= 500:
                return (ServerStatus.SERVER_DEAD, f"1-token completion answered {response.status_code}")
        return None


class DeathMonitor:
    """Polls the managed process so a death is noticed even between requests."""

    def __init__(self, launcher: Launcher, guard: ServerGuard, interval_s: float = 0.5) -> None:
        self.launcher = launcher
        self.guard = guard
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllmqual-death-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.launcher.alive() is False:
                self.guard.mark(ServerStatus.SERVER_DEAD, f"the server process exited with status {self.launcher.exit_code()}")
                return


# -- traffic isolation ----------------------------------------------------------------------


@contextlib.contextmanager
def traffic_lock(private_dir: Path, *, exclusive: bool) -> Iterator[None]:
    """Measurements hold the lock exclusively; other gates share it. Works across xdist workers."""
    private_dir.mkdir(parents=True, exist_ok=True)
    with open(private_dir / LOCK_FILE, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def warm_up_while_booting(recipe: Recipe) -> None:
    """One-time client costs (the shared SSL context, jsonschema's first validator, the recipe's
    typed tools, whose later reads are cached) paid while the server boots instead of between
    requests, where they would wait for a busy CPU."""
    shared_ssl_context()
    warm_up_validation()
    with contextlib.suppress(RecipeError, OSError):  # a broken tool file fails its gates, with its own message
        recipe_tool_fixtures(recipe)


# -- the managed server ---------------------------------------------------------------------


@dataclass
class ServerFacts:
    """What is known about the running server once it is ready."""

    cold_start_s: float | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    endpoints: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)


class ServerManager:
    """Owns at most one managed server (the GPUs are exclusive) for the current recipe."""

    def __init__(self, recipe: Recipe, *, run_id: str, private_dir: Path, endpoint: str | None = None,
                 progress: ProgressFn) -> None:
        self.recipe = recipe
        self.run_id = run_id
        self.private_dir = private_dir
        self.endpoint = endpoint or (None if launcher_class(recipe.launcher.kind).starts_server
                                     else recipe.launcher.endpoint)
        self.progress = progress
        self.launcher: Launcher | None = None
        self.handle: ServerHandle | None = None
        self.guard: ServerGuard | None = None
        self.monitor: DeathMonitor | None = None
        self.startup_error: LaunchError | None = None
        self.startup_status = StartupStatus.NOT_STARTED
        self.facts = ServerFacts()
        self.gpu_preflight: dict[str, Any] | None = None
        self.teardown: TeardownResult | None = None
        self.started_at: float | None = None

    @property
    def direct_only(self) -> bool:
        return self.endpoint is not None

    def _make_launcher(self) -> Launcher:
        """The registered launcher of the kind that serves this run (``launch.registry``)."""
        api_key = os.environ.get(self.recipe.launcher.api_key_env) if self.recipe.launcher.api_key_env else None
        cls = launcher_class(serving_kind(self.recipe.launcher.kind, self.endpoint))
        launcher: Launcher = cls.create(self.recipe, run_id=self.run_id, artifacts_dir=self.private_dir,
                                        api_key=api_key or new_api_key(), endpoint=self.endpoint)
        return launcher

    def run_prepare(self) -> None:
        """Run the recipe's prepare command (e.g. build the fixture model; cached)."""
        if not self.recipe.prepare or self.direct_only:
            return
        import sys

        from pytest_vllmqual.layout import expand_placeholders

        argv = [expand_placeholders(part) for part in self.recipe.prepare]
        self.progress(f"prepare: {' '.join(argv[1:] if argv[0] == sys.executable else argv)}")
        log_path = self.private_dir / "prepare.log"
        self.private_dir.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, cwd=str(self.recipe.project_root), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                text = line.decode(errors="replace").rstrip()
                if text:
                    self.progress(f"prepare: {text}")
            code = proc.wait()
        if code != 0:
            raise LaunchError(
                f"recipe {self.recipe.path}: the 'prepare' command exited with status {code}",
                status=StartupStatus.PREPARE_FAILED, exit_code=code, log_tail=log_tail(log_path.read_text(errors="replace")),
                hint="run the prepare command by hand to see the whole output.")

    def check_gpus(self) -> None:
        """Exclusivity preflight through NVML before a managed start ("n/a" without a GPU)."""
        from pytest_vllmqual.launch.gpu import exclusivity_preflight, raise_if_refused

        self.gpu_preflight = exclusivity_preflight(self.recipe.gpu_indexes(),
                                                   self.recipe.launcher.require_exclusive_gpus)
        self.progress(f"GPU exclusivity preflight: {self.gpu_preflight['status']} "
                      f"({self.gpu_preflight.get('reason', '')})")
        raise_if_refused(self.gpu_preflight)

    def ensure_ready(self) -> ServerHandle:
        """Start the server if needed and return its handle; a failed start is remembered.

        Only ``ControllerRun.start_server`` calls this. On a failed start the caller stops what was
        started (``ControllerRun.stop_server``) and then names the private log (``name_private_log``).
        Engine facts are read once, here, after readiness (the server is idle then).
        """
        if self.startup_error is not None:
            raise self.startup_error
        if self.teardown is not None and self.launcher is not None and not self.direct_only:
            raise LaunchError(
                f"the server of recipe {self.recipe.name!r} was already torn down in this session; "
                "its tests must run together (the plugin groups them by arm)", status=StartupStatus.STOPPED)
        if self.handle is not None and self.startup_status is StartupStatus.READY:
            return self.handle
        self.started_at = time.monotonic()
        try:
            self.run_prepare()
            if not self.direct_only:
                self.check_gpus()
            self.launcher = self._make_launcher()
            self.startup_status = StartupStatus.STARTING
            handle = self.launcher.start(self.progress)
            self.handle = handle
            warm_up_while_booting(self.recipe)
            if not self.direct_only:
                with ServerProbe.open(handle) as probe:
                    self.facts.cold_start_s = wait_until_ready(self.launcher, handle, self.recipe.startup,
                                                               self.progress, probe, recipe_name=self.recipe.name)
                handle.cold_start_s = self.facts.cold_start_s
                self.progress(f"{self.recipe.name} ready in {self.facts.cold_start_s:.1f} s at {handle.base_url}")
            self.collect_facts()
        except LaunchError as exc:
            self.startup_error = exc
            self.startup_status = exc.status
            raise
        self.startup_status = StartupStatus.READY
        self.guard = ServerGuard(handle, self.private_dir / STATE_FILE, launcher=self.launcher,
                                 probe_timeout_s=self.recipe.startup.ready_completion_timeout_s)
        if self.launcher is not None and self.launcher.alive() is not None:
            self.monitor = DeathMonitor(self.launcher, self.guard)
            self.monitor.start()
        return handle

    def collect_facts(self) -> None:
        """Engine facts from the log and the endpoints, then the identity check."""
        assert self.handle is not None and self.launcher is not None
        log = self.launcher.log_text()
        facts = parse_engine_log(log)
        self.facts.engine = facts.to_dict()
        with http_client(self.handle) as client:
            endpoints = fetch_engine_endpoints(client)
        self.facts.endpoints = endpoints.to_dict()
        from pytest_vllmqual.vllm.fact_sources import with_sources

        self.facts.engine = with_sources(self.facts.engine, self.facts.endpoints, has_log=not self.direct_only)
        identity = check_identity(
            self.recipe,
            version=endpoints.version,
            models=endpoints.models,
            tp_size_seen=facts.tp_size_seen if not self.direct_only else None,
            image_digest=self.handle.image_digest,
            launcher_kind=self.launcher.kind,
            log_text=log,
            log_version=facts.vllm_version,
            expected_model_arg=self._model_argument(),
            progress=self.progress,
            **self._server_directory(),
        )
        self.facts.identity = identity.to_dict(self.recipe)
        self.facts.fingerprint = self._fingerprint()

    def _fingerprint(self) -> dict[str, Any]:
        """The server's numerics fingerprint; never a reason to fail the start."""
        from pytest_vllmqual.launch.fingerprint import not_measured

        assert self.launcher is not None and self.handle is not None
        if self.direct_only:
            return not_measured("this run did not start the server (an endpoint was given)")
        try:
            return self.launcher.fingerprint(self.handle)
        except Exception as exc:  # a fact, never the run's outcome
            return not_measured(f"reading it failed ({type(exc).__name__})")

    def _server_directory(self) -> dict[str, Any]:
        """The server's working directory, against which a relative model path it reports is
        resolved, as the launcher knows it (``Launcher.server_directory``)."""
        assert self.launcher is not None and self.handle is not None
        path, unknown = self.launcher.server_directory(self.handle)
        return {"server_cwd": path, "server_cwd_unknown": unknown}

    def private_log(self) -> dict[str, str] | None:
        """{name, sha256} of the server log in the private folder (after the server stopped)."""
        path = getattr(self.launcher, "log_path", None) if self.launcher is not None else None
        if not isinstance(path, Path) or not path.is_file():
            return None
        try:
            name = path.relative_to(self.private_dir).as_posix()
        except ValueError:
            name = path.name
        return {"name": name, "sha256": sha256_file(path)}

    def name_private_log(self, exc: LaunchError) -> None:
        """After the failed server stopped: its exit code (a failure seen in the log is raised
        while the process still runs), and the full log named by its SHA-256 for public outputs;
        only this terminal sees the log's path."""
        if exc.exit_code is None and self.launcher is not None:
            exc.exit_code = self.launcher.exit_code()
        log = self.private_log()
        if log is None:
            return
        exc.details["private_log"] = log
        self.progress(f"startup failed ({exc.status}); the full server log is {self.private_dir / log['name']}")

    def _model_argument(self) -> str | None:
        """The model argument the launcher gave vLLM; None for a server this run did not start."""
        if self.direct_only or self.launcher is None:
            return None
        return self.launcher.model_argument(self.recipe)

    def stop(self) -> TeardownResult | None:
        """Tear down (idempotent); only ``ControllerRun.stop_server`` calls it. External servers are
        left running."""
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        if self.launcher is None:
            return self.teardown
        if self.teardown is None:
            # startup_status keeps the startup outcome (ready); the teardown has its own record.
            self.teardown = self.launcher.stop(never_ready=self.startup_status is not StartupStatus.READY)
        return self.teardown

    def handoff(self, arm_key: str) -> dict[str, Any]:
        """What an xdist worker needs to use this server (after ``ensure_ready``): the handle and
        facts, or the startup error. The controller owns the server; workers never start one."""
        info: dict[str, Any] = {"arm": arm_key, "private_dir": str(self.private_dir)}
        if self.startup_error is not None:
            info["startup_error"] = self.startup_error.to_dict()
        elif self.handle is not None:
            handle = self.handle
            info["handle"] = {"base_url": handle.base_url, "served_model_name": handle.served_model_name,
                              "launcher_kind": handle.launcher_kind, "api_key": handle.api_key,
                              "direct_only": handle.direct_only, "cold_start_s": handle.cold_start_s}
            info["facts"] = self.facts_dict()
        # xdist ships this through execnet, which refuses any type but the plain ones: a fixed word
        # (a str enum such as the launcher kind) goes as its string.
        return dict(json.loads(json.dumps(info)))

    def facts_dict(self) -> dict[str, Any]:
        """The facts as the ``server_facts`` fixture hands them to gates."""
        return {"engine": self.facts.engine, "endpoints": self.facts.endpoints,
                "identity": self.facts.identity, "cold_start_s": self.facts.cold_start_s,
                "fingerprint": self.facts.fingerprint}


class WorkerServer:
    """An xdist worker's view of the controller's server (``ServerManager.handoff``): the same
    handle, facts and liveness state file, no lifecycle."""

    def __init__(self, info: dict[str, Any], recipe: Recipe) -> None:
        self.info = info
        self.private_dir = Path(info.get("private_dir", "."))
        self.handle = ServerHandle(**info["handle"]) if "handle" in info else None
        self.guard = (ServerGuard(self.handle, self.private_dir / STATE_FILE,
                                  probe_timeout_s=recipe.startup.ready_completion_timeout_s)
                      if self.handle else None)

    def ensure_ready(self) -> ServerHandle:
        if self.handle is None:
            raise LaunchError.from_dict(self.info.get("startup_error", {}))
        return self.handle

    def facts_dict(self) -> dict[str, Any]:
        facts: dict[str, Any] = self.info.get("facts", {})
        return facts


__all__ = ["ServerFacts", "ServerGuard", "ServerManager", "WorkerServer", "traffic_lock"]
