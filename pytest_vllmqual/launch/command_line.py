"""The command a recipe will run, written out by its launcher (``docker run …`` for docker,
``env … argv`` for a local process; ``launch.registry`` finds the launcher).

``vllmqual recipe show`` prints it, so an operator can start the same server by hand.
"""

from __future__ import annotations

from pytest_vllmqual.launch.docker.spec import (
    CONTAINER_HOST,
    CONTAINER_PORT,
    HF_CACHE_IN_CONTAINER,
    MODEL_DIR_IN_CONTAINER,
)
from pytest_vllmqual.launch.registry import launcher_class
from pytest_vllmqual.recipe.model import Recipe

__all__ = ["command_line", "docker_run_line"]


def command_line(recipe: Recipe) -> list[str]:
    """The argv a run starts for ``recipe``, as its launcher writes it (a RecipeError for one that
    starts nothing). The API key is never shown: each run generates one and passes it as VLLM_API_KEY."""
    return launcher_class(recipe.launcher.kind).command_line(recipe)


def docker_run_line(recipe: Recipe) -> list[str]:
    """The container spec of a docker recipe, written as the equivalent ``docker run`` line."""
    options = recipe.launcher.docker
    line = ["docker", "run", "--rm"]
    if options.container_name:
        line += ["--name", options.container_name]
    if isinstance(options.gpus, list):
        line += ["--gpus", "device=" + ",".join(options.gpus)]
    else:
        line += ["--gpus", str(options.gpus if options.gpus is not None else recipe.serve.tensor_parallel_size)]
    line += ["--ipc", "host"] if options.ipc_host else (["--shm-size", options.shm_size] if options.shm_size else [])
    line += ["--stop-timeout", str(options.stop_timeout_s)]
    line += ["-p", f"{recipe.launcher.host}:{recipe.launcher.port}:{CONTAINER_PORT}"]
    if options.model_cache:
        line += ["-v", f"{options.model_cache}:{HF_CACHE_IN_CONTAINER}"]
    if recipe.identity.model_path:
        line += ["-v", f"{recipe.model_location()}:{MODEL_DIR_IN_CONTAINER}:ro"]
    for key, value in recipe.server_env().items():
        line += ["-e", f"{key}={value}"]
    line += ["-e", "VLLM_API_KEY", "-e", "HF_TOKEN", "-e", "HUGGING_FACE_HUB_TOKEN"]
    model = MODEL_DIR_IN_CONTAINER if recipe.identity.model_path else recipe.identity.checkpoint
    flags = recipe.serve_flags(host=CONTAINER_HOST, port=CONTAINER_PORT)
    return [*line, str(recipe.identity.image), model, *flags]
