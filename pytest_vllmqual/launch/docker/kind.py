"""What the docker launcher answers without the Docker SDK: what a recipe must say for it, the
``docker run`` line it amounts to, the model argument the container gets. The registry names
this class for the ``docker`` kind, so a recipe loads, and ``vllmqual recipe show`` prints, on
a machine without the SDK; ``create`` imports the SDK-backed ``DockerLauncher`` (a subclass).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_vllmqual.errors import LaunchError
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import LauncherKind, StartupStatus

from ..base import Launcher, RecipeProblem, ServerHandle
from .spec import MODEL_DIR_IN_CONTAINER

__all__ = ["DockerKind"]

_DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


class DockerKind(Launcher):
    """The docker launcher's class-level answers; ``DockerLauncher`` runs the container."""

    kind = LauncherKind.DOCKER
    required = RecipeProblem("identity.image", "the docker launcher needs an image. Fix: add "
                           "identity.image: repo@sha256:<digest>.")
    runs_container = True

    @classmethod
    def create(cls, recipe: Recipe, *, run_id: str, artifacts_dir: Path, api_key: str | None,
               endpoint: str | None) -> Launcher:
        try:
            from pytest_vllmqual.launch.docker.launcher import DockerLauncher
        except ImportError as exc:
            raise LaunchError(f"recipe {recipe.name}: launcher.kind is docker, but the Docker SDK is not "
                              f"installed ({exc}).", status=StartupStatus.COMMAND_NOT_FOUND,
                              hint="pip install 'pytest-vllmqual[docker]'") from None
        return DockerLauncher(recipe, run_id=run_id, artifacts_dir=artifacts_dir, api_key=str(api_key))

    @classmethod
    def unpinned_reason(cls, raw: Mapping[str, Any]) -> RecipeProblem | None:
        """A tag can move: a pinned recipe names its image by digest (or by the file a local build writes it to)."""
        image = raw["identity"].get("image")
        if (raw["launcher"].get("docker") or {}).get("image_digest_file") or (isinstance(image, str)
                                                                             and _DIGEST.match(image)):
            return None
        return RecipeProblem("identity.image", f"key 'identity.image' is {image!r}, but a pinned docker recipe must "
                             "name the image by digest (repo@sha256:<64 hex>); a tag can move. Fix: replace the tag "
                             "with the digest, e.g. `docker buildx imagetools inspect IMAGE` shows it.")

    @classmethod
    def command_line(cls, recipe: Recipe) -> list[str]:
        from pytest_vllmqual.launch.command_line import docker_run_line

        return docker_run_line(recipe)

    @classmethod
    def command_line_note(cls) -> str | None:
        return "container spec, as the equivalent docker run line (the image's entrypoint is `vllm serve`):"

    @classmethod
    def model_argument(cls, recipe: Recipe) -> str | None:
        """The container sees a local model folder at its own mount point."""
        return MODEL_DIR_IN_CONTAINER if recipe.identity.model_path else recipe.model_location()

    def server_directory(self, handle: ServerHandle) -> tuple[Path | None, str]:
        return None, f"the {self.kind} launcher's server has its own paths"
