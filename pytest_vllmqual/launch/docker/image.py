"""The image a docker arm runs: read from the recipe, checked, and pulled when the engine lacks it.

A tag can move to another build, so a pinned recipe names its image by digest
(``repo@sha256:…``) and one with a tag is refused before anything is sent to the engine
(``image_not_pinned``); an image built on this machine, whose digest file is missing, has not
been built here (``image_unavailable``). An image the engine does not have is pulled through
the API stream, with one progress line per layer and state change; its id and repo digest
are what the identity check records.
"""

from __future__ import annotations

import re
import time
from typing import Any

import docker
import docker.errors

from pytest_vllmqual.errors import LaunchError, RecipeError
from pytest_vllmqual.launch.base import ProgressFn
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import StartupStatus

from .spec import DOCKER_FIX, pull_progress_line

__all__ = ["IMAGE_FIX", "image_reference", "local_image", "pinned_by_digest"]

_DIGEST_REF = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
_PULL_PROGRESS_EVERY_S = 5.0
IMAGE_FIX = ("build and push it with `make docker-image` (fixtures/docker/build_image.sh), which also "
             "rewrites the digest the recipe reads, or correct identity.image")


def pinned_by_digest(reference: str) -> bool:
    """Whether ``reference`` names one build (``repo@sha256:<64 hex>``), not a tag that can move."""
    return _DIGEST_REF.match(reference) is not None


def image_reference(recipe: Recipe) -> str:
    """The image to run; refuses a tag in a pinned recipe before any request is sent."""
    image = recipe.identity.image
    if not image:
        raise RecipeError(
            f"recipe {recipe.path}: key 'identity.image' is missing, and the docker launcher "
            "needs an image. Fix: add identity.image: repo@sha256:<digest>.",
            path=str(recipe.path), key="identity.image",
        )
    digest_file = recipe.launcher.docker.image_digest_file
    if digest_file and not pinned_by_digest(image):
        raise LaunchError(
            f"recipe {recipe.name}: its image {image} is built on this machine and pinned by the digest "
            f"in {digest_file} (launcher.docker.image_digest_file), which does not exist: the image has not "
            "been built here. Nothing was started.",
            status=StartupStatus.IMAGE_UNAVAILABLE,
            hint=f"{IMAGE_FIX}; the docker engine and the local registry must run first ({DOCKER_FIX}).",
        )
    if recipe.pinned and not pinned_by_digest(image):
        raise LaunchError(
            f"recipe {recipe.name}: image {image!r} is not pinned by digest, and the recipe is "
            "marked pinned; a tag can move to another build.",
            status=StartupStatus.IMAGE_NOT_PINNED,
            hint="replace the tag with repo@sha256:<digest> (`docker buildx imagetools inspect "
            "IMAGE` shows it), or set 'pinned: false' for an unpinned experiment.",
        )
    return image


def local_image(client: docker.DockerClient, reference: str, recipe_name: str,
                progress: ProgressFn) -> tuple[str, str | None]:
    """(image id, repo digest) of ``reference`` on the engine; pulls it, with progress per layer,
    when the engine lacks it."""
    try:
        image = client.images.get(reference)
    except docker.errors.ImageNotFound:
        _pull(client, reference, recipe_name, progress)
        try:
            image = client.images.get(reference)
        except docker.errors.ImageNotFound:
            raise _image_missing(recipe_name, reference, "the pull ended without the image") from None
    digests: list[str] = list(image.attrs.get("RepoDigests") or [])
    digest = reference if reference in digests else (digests[0] if digests else None)
    return str(image.id), digest


def _image_missing(recipe_name: str, reference: str, reason: str) -> LaunchError:
    return LaunchError(
        f"recipe {recipe_name}: image {reference} is not on this Docker engine and could not be "
        f"pulled: {reason}. Nothing was started.",
        status=StartupStatus.IMAGE_UNAVAILABLE,
        hint=IMAGE_FIX + ".",
    )


def _pull(client: docker.DockerClient, reference: str, recipe_name: str, progress: ProgressFn) -> None:
    """``docker pull`` through the API stream, one progress line per layer and state change."""
    progress(f"pulling {reference} (a vLLM image is several GiB; progress per layer follows)")
    started = time.monotonic()
    last: dict[str, tuple[str, float]] = {}
    try:
        for event in client.api.pull(reference, stream=True, decode=True):
            if "error" in event:
                raise _image_missing(recipe_name, reference, str(event.get("error"))[:300])
            _layer_progress(event, last, progress)
    except docker.errors.APIError as exc:
        raise _image_missing(recipe_name, reference, str(exc.explanation or exc)[:300]) from None
    progress(f"pulled {reference}: {len(last)} layer(s) in {time.monotonic() - started:.1f} s")


def _layer_progress(event: dict[str, Any], last: dict[str, tuple[str, float]], progress: ProgressFn) -> None:
    """One pull event's line, when its layer changed state or was last reported a while ago."""
    line = pull_progress_line(event)
    layer = str(event.get("id") or "")
    if line is None or not layer:
        return
    status = str(event.get("status"))
    now = time.monotonic()
    previous = last.get(layer)
    if previous is None or previous[0] != status or now - previous[1] >= _PULL_PROGRESS_EVERY_S:
        last[layer] = (status, now)
        progress(line)
