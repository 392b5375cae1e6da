"""The outer side of the real docker tests: the engine, the tiny-docker image, derived recipes.

These tests start real containers on a real Docker engine, from the image that
``fixtures/docker/build_image.sh`` built and pushed to the local registry (``make test`` runs
``scripts/docker_setup.sh`` first). Where no engine can run, the set-up wrote the reason to
``fixtures/docker/build/UNAVAILABLE`` and every test here skips with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker
import docker.errors
import yaml
from support.fault_harness import Recipe, deep_merge, model_pin, tiny_model_dir
from support.gatekit import wait_for

from pytest_vllmqual.launch.cleanup.owner import (
    OWNER_HOST_LABEL,
    OWNER_PID_LABEL,
    OWNER_START_LABEL,
    process_start,
)
from pytest_vllmqual.launch.cleanup.procs import read_proc
from pytest_vllmqual.launch.docker.reaper import labelled_containers

ROOT = Path(__file__).resolve().parents[2]
TINY_DOCKER = ROOT / "fixtures" / "recipes" / "tiny-docker.yaml"
BUILD = ROOT / "fixtures" / "docker" / "build"
DIGEST_FILE = BUILD / "vllm-cpu.digest"
UNAVAILABLE = BUILD / "UNAVAILABLE"
REPOSITORY = "localhost:5000/vllmqual/vllm-cpu"
RUN_LABEL = "vllmqual.run"
RECIPE_LABEL = "vllmqual.recipe"


def unavailable_reason() -> str | None:
    """Why the real docker tests cannot run here, or None when they can."""
    if UNAVAILABLE.is_file():
        return f"no Docker engine here: {UNAVAILABLE.read_text().strip()} (scripts/docker_setup.sh)"
    try:
        docker.from_env(timeout=10).ping()
    except Exception as exc:
        return (f"no Docker engine answers ({type(exc).__name__}); as root, scripts/docker_setup.sh "
                "installs and starts dockerd, the registry and the image")
    if not DIGEST_FILE.is_file():
        return f"the tiny-docker image is not built ({DIGEST_FILE} is missing); run `make docker-image`"
    return None


ENGINE_TIMEOUT_S = 60
"""docker-py's read timeout for the engine's answers to the tests' own calls."""
IMAGE_REMOVAL_TIMEOUT_S = 600
"""Removing the several-GiB image deletes its unpacked layers, tens of thousands of files: a busy
CI machine took more than a minute for it (docker-py's ReadTimeout at 60 s failed the container
session's setup)."""


def engine(timeout_s: int = ENGINE_TIMEOUT_S) -> docker.DockerClient:
    return docker.from_env(timeout=timeout_s)


def image_reference() -> str:
    return f"{REPOSITORY}@{DIGEST_FILE.read_text().strip()}"


def derive_docker_recipe(directory: Path, name: str, overrides: dict[str, Any] | None = None) -> Recipe:
    """The repo's tiny-docker recipe named ``name``, with absolute paths and ``overrides``.

    Like ``fault_harness.derive_recipe`` for tiny-cpu: the copy lives outside fixtures/recipes,
    so the model and its content pin, the cache and the image digest file are made absolute and
    ``prepare`` is dropped.
    """
    data: dict[str, Any] = yaml.safe_load(TINY_DOCKER.read_text())
    data["name"] = name
    data.pop("prepare", None)
    model = tiny_model_dir()
    data["identity"]["model_path"] = str(model)
    pin = model_pin(model)
    data["pinned"], data["identity"]["content_digest_file"] = pin["pinned"], pin["content_digest_file"]
    options = data["launcher"]["docker"]
    options["model_cache"] = str(ROOT / options["model_cache"])
    options["image_digest_file"] = str(ROOT / options["image_digest_file"])
    data = deep_merge(data, overrides or {})
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return Recipe(path=path, name=name, tag="", data=data)


def containers(client: docker.DockerClient, label: str) -> list[Any]:
    """Containers (any state) carrying ``label`` (``key`` or ``key=value``), as the package lists them
    (one removed between the listing and its inspection is left out)."""
    return labelled_containers(client, label)


def owned_sleeper(client: docker.DockerClient, run_id: str, owner_pid: int, owner_start: str) -> Any:
    """A cheap container of the tiny-docker image labelled as a vllmqual run owned by ``owner_pid``."""
    labels = {RUN_LABEL: run_id, RECIPE_LABEL: "tiny-docker", OWNER_HOST_LABEL: os.uname().nodename,
              OWNER_PID_LABEL: str(owner_pid), OWNER_START_LABEL: owner_start}
    return client.containers.run(image_reference(), entrypoint=["sleep", "600"], labels=labels, detach=True,
                                 name=f"vllmqual-{run_id}")


def live_process() -> tuple[subprocess.Popen[bytes], str]:
    """A process that runs until killed, and its start (what an owner label records)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"])
    start = wait_for(lambda: process_start(proc.pid), 5.0, 0.02)
    return proc, str(start)


def dead_process() -> tuple[int, str]:
    """The pid and start of a process that has exited: an owner that is provably gone."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"])
    start = str(wait_for(lambda: process_start(proc.pid), 5.0, 0.02))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert read_proc(proc.pid) is None
    return proc.pid, start
