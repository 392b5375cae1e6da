"""The external launcher: use an already running server as it is ("direct-only").

No lifecycle: nothing is started or stopped, there is no log, and liveness is only known
through HTTP. The identity check still runs against what the endpoint reports.
"""

from __future__ import annotations

import os

from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import LauncherKind

from .base import Launcher, ProgressFn, ServerHandle, TeardownResult

__all__ = ["ExternalLauncher"]


class ExternalLauncher(Launcher):
    """Points the gates at ``endpoint``; ``stop`` leaves the server running."""

    kind = LauncherKind.EXTERNAL

    def __init__(self, recipe: Recipe, endpoint: str) -> None:
        self.recipe = recipe
        self.endpoint = endpoint.rstrip("/")

    def start(self, progress: ProgressFn) -> ServerHandle:
        key_env = self.recipe.launcher.api_key_env or "VLLM_API_KEY"
        progress(f"direct-only: using the running server at {self.endpoint} (no lifecycle management)")
        return ServerHandle(
            base_url=self.endpoint,
            served_model_name=self.recipe.identity.served_model_name,
            launcher_kind=self.kind,
            api_key=os.environ.get(key_env) or None,
            direct_only=True,
        )

    def alive(self) -> bool | None:
        return None

    def exit_code(self) -> int | None:
        return None

    def stop(self, *, never_ready: bool = False) -> TeardownResult:
        return TeardownResult(launcher_kind=self.kind, stopped=False,
                              notes=["direct-only: the server was not started by this run and was left running"])
