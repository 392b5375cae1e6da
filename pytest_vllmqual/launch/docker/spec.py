"""The docker container spec without the docker SDK: its labels, ports and mounts, what the
launcher derives from the recipe and from the engine, and how to get an engine here.

The shutdown budget vLLM needs for a recipe (so ``docker stop`` never SIGKILLs a draining
engine), the host clients connect to for a bind address, the NVML indexes of the recipe's
GPUs, and one progress line per image-pull event. Pure functions, tested without an engine.
"""

from __future__ import annotations

from typing import Any

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.recipe.model import Recipe

__all__ = [
    "CONTAINER_HOST",
    "CONTAINER_PORT",
    "DOCKER_FIX",
    "HF_CACHE_IN_CONTAINER",
    "MODEL_DIR_IN_CONTAINER",
    "PASSTHROUGH_ENV",
    "RECIPE_LABEL",
    "RUN_LABEL",
    "VLLM_WORKER_SHUTDOWN_DEFAULT_S",
    "gpu_indexes",
    "pull_progress_line",
    "url_host",
    "vllm_shutdown_budget_s",
]

RUN_LABEL = "vllmqual.run"
RECIPE_LABEL = "vllmqual.recipe"
CONTAINER_PORT = 8000
CONTAINER_HOST = "0.0.0.0"
HF_CACHE_IN_CONTAINER = "/root/.cache/huggingface"
MODEL_DIR_IN_CONTAINER = "/vllmqual-model"
PASSTHROUGH_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
"""Host variables handed to the container when set (gated checkpoints need them)."""
DOCKER_FIX = ("as root, scripts/docker_setup.sh installs Debian's docker.io and docker-registry and starts "
              "dockerd and the local registry; elsewhere start the engine (`sudo systemctl start docker`) "
              "or point DOCKER_HOST at a running one")
"""How to get a Docker engine answering here: the hint of every failure that found none."""
VLLM_WORKER_SHUTDOWN_DEFAULT_S = 5
"""vLLM's VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS default; ``--shutdown-timeout`` defaults to 0."""


def _flag_value(args: list[str], flag: str) -> str | None:
    """The value of ``--flag V`` or ``--flag=V`` in an argv, last one winning."""
    value: str | None = None
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def vllm_shutdown_budget_s(recipe: Recipe) -> int:
    """Seconds vLLM may take to shut down for this recipe: its --shutdown-timeout plus the worker timeout."""
    env = recipe.server_env()
    flags = list(recipe.serve.extra_args)
    try:
        drain = int(_flag_value(flags, "--shutdown-timeout") or 0)
        workers = int(env.get("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", VLLM_WORKER_SHUTDOWN_DEFAULT_S))
    except ValueError:
        raise RecipeError(
            f"recipe {recipe.path}: --shutdown-timeout or VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS is not an "
            "integer. Fix: write whole seconds.",
            path=str(recipe.path), key="serve.extra_args",
        ) from None
    return drain + workers


def url_host(host: str) -> str:
    """The host clients connect to for a bind address (0.0.0.0 → loopback, IPv6 bracketed)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def pull_progress_line(event: dict[str, Any]) -> str | None:
    """One pull event as a progress line about its layer (None for events about no layer)."""
    layer, status = event.get("id"), event.get("status")
    if not layer or not status or str(status).startswith("Pulling from"):
        return None
    detail = event.get("progressDetail") or {}
    current, total = detail.get("current"), detail.get("total")
    if current and total:
        return (f"pull layer {layer}: {status} {current / 2**20:,.1f}/{total / 2**20:,.1f} MiB "
                f"({100 * current / total:.0f}%)")
    return f"pull layer {layer}: {status}"


def gpu_indexes(gpus: int | list[str] | None) -> list[int] | None:
    """NVML indexes when the recipe lists numeric device ids; None (all GPUs) otherwise."""
    if isinstance(gpus, list) and all(g.isdigit() for g in gpus):
        return [int(g) for g in gpus]
    return None
