"""The external launcher: use an already running server as it is ("direct-only").

No lifecycle: nothing is started or stopped, there is no log, and liveness is only known
through HTTP. The identity check still runs against what the endpoint reports.
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import LauncherKind

from .base import Launcher, ProgressFn, RecipeProblem, ServerHandle, TeardownResult

__all__ = ["ExternalLauncher"]


class ExternalLauncher(Launcher):
    """Points the gates at ``endpoint``; ``stop`` leaves the server running."""

    kind = LauncherKind.EXTERNAL
    required = RecipeProblem("launcher.endpoint", "the external launcher needs the base URL of the running server. "
                           "Fix: add endpoint: http://127.0.0.1:8000, or pass --vllmqual-endpoint URL.")
    starts_server = False

    def __init__(self, recipe: Recipe, endpoint: str) -> None:
        self.recipe = recipe
        self.endpoint = endpoint.rstrip("/")

    @classmethod
    def create(cls, recipe: Recipe, *, run_id: str, artifacts_dir: Path, api_key: str | None,
               endpoint: str | None) -> Launcher:
        """The endpoint the user named, else the recipe's (the loader made sure it has one)."""
        return cls(recipe, str(endpoint or recipe.launcher.endpoint))

    @classmethod
    def command_line(cls, recipe: Recipe) -> list[str]:
        raise RecipeError(f"recipe {recipe.path} uses an external endpoint ({recipe.launcher.endpoint}): this run "
                          "starts nothing.", path=str(recipe.path))

    def server_directory(self, handle: ServerHandle) -> tuple[Path | None, str]:
        """The listening process's own working directory, for an endpoint on this machine."""
        from pytest_vllmqual.launch.server_workdir import endpoint_server_directory

        found = endpoint_server_directory(handle.base_url)
        return found.path, found.unknown_reason

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
