"""An xdist worker's run: it never starts or stops a server. The controller started the session
recipe's server and handed it over at worker start (``ControllerRun.handoff``); the worker's
tests use that server, its facts and its liveness state, and send their gate records back to
the controller, which writes the reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_vllmqual.errors import LaunchError
from pytest_vllmqual.launch.base import ProgressFn, ServerHandle
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import StartupStatus

from .run import QualRun
from .server import ServerGuard, WorkerServer
from .settings import Settings

__all__ = ["WorkerRun"]


class WorkerRun(QualRun):
    """The worker side of the session; ``handoff`` is what the controller sent."""

    def __init__(self, settings: Settings, default_recipe: Recipe, *, progress: ProgressFn,
                 invocation_args: list[str], handoff: dict[str, Any]) -> None:
        super().__init__(settings, default_recipe, progress=progress, invocation_args=invocation_args)
        self.handoff = handoff
        self._server: WorkerServer | None = None

    def _worker_server(self, key: str) -> WorkerServer:
        """The controller's server, for arm ``key``: only the session recipe has one under xdist."""
        if key != self.handoff.get("arm"):
            raise LaunchError(f"recipe marker {key!r}: under xdist only the session recipe "
                              f"{self.handoff.get('arm')!r} has a server", status=StartupStatus.NOT_RUN,
                              hint="run recipe-marked tests without -n.")
        if self._server is None:
            self._server = WorkerServer(self.handoff, self.arm(key).recipe)
        return self._server

    def start_server(self, key: str) -> ServerHandle:
        """The controller's server, handed over at worker start (or its startup error, raised)."""
        return self._worker_server(key).ensure_ready()

    def finish_arm(self, key: str) -> None:
        """Nothing to do: the controller stops the server and writes the report."""

    def server_facts(self, key: str) -> dict[str, Any]:
        return self._worker_server(key).facts_dict()

    def guard(self, key: str) -> ServerGuard | None:
        return self._worker_server(key).guard

    def private_dir(self, key: str) -> Path:
        """The controller's private run directory (the worker writes its artifacts there)."""
        return Path(self.handoff.get("private_dir", "."))

    def api_keys(self) -> list[str]:
        key = (self.handoff.get("handle") or {}).get("api_key")
        return [key] if key else []

    def campaign_skip_reason(self, key: str) -> str | None:
        """None: a campaign runs without xdist, so a worker never has one."""
        return None
