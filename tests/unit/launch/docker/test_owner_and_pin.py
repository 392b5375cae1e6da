"""Owner labels and the provably-gone test (real processes), and the recipe's locally built
image pin (``launcher.docker.image_digest_file``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support import ROOT

from pytest_vllmqual.errors import LaunchError, RecipeError
from pytest_vllmqual.launch.cleanup.owner import (
    OWNER_HOST_LABEL,
    OWNER_PID_LABEL,
    OWNER_START_LABEL,
    boot_id,
    owner_gone,
    owner_labels,
    process_start,
)
from pytest_vllmqual.launch.docker.image import image_reference, pinned_by_digest
from pytest_vllmqual.launch.docker.launcher import DockerLauncher
from pytest_vllmqual.recipe.loader import load_recipe
from pytest_vllmqual.records import StartupStatus

DIGEST = "sha256:" + "ab" * 32


def sleeper() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    deadline = time.monotonic() + 5
    while process_start(proc.pid) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def test_a_live_owner_is_never_gone() -> None:
    labels = owner_labels()
    assert labels[OWNER_HOST_LABEL] == socket.gethostname()
    assert labels[OWNER_START_LABEL].startswith(boot_id() + "/")
    assert owner_gone(labels) is None


def test_a_dead_owner_is_provably_gone() -> None:
    proc = sleeper()
    labels = owner_labels(proc.pid)
    assert owner_gone(labels) is None
    proc.kill()
    proc.wait()
    assert owner_gone(labels) == f"its owner pid {proc.pid} is not running"


def test_a_reused_pid_is_not_the_owner() -> None:
    proc = sleeper()
    try:
        labels = owner_labels(proc.pid)
        ticks = int(labels[OWNER_START_LABEL].rsplit("/", 1)[1])
        earlier = {**labels, OWNER_START_LABEL: f"{boot_id()}/{ticks - 1}"}
        assert "started later than its owner" in str(owner_gone(earlier))
        rebooted = {**labels, OWNER_START_LABEL: f"another-boot/{ticks}"}
        assert "rebooted" in str(owner_gone(rebooted))
    finally:
        proc.kill()
        proc.wait()


def test_nothing_is_provable_about_other_hosts_or_unlabelled_containers() -> None:
    proc = sleeper()
    labels = owner_labels(proc.pid)
    proc.kill()
    proc.wait()
    assert owner_gone({**labels, OWNER_HOST_LABEL: "another-host"}) is None
    assert owner_gone({"vllmqual.run": "old-run", "vllmqual.recipe": "x"}) is None
    assert owner_gone({**labels, OWNER_PID_LABEL: "not-a-pid"}) is None


def write_recipe(tmp_path: Path, digest: str | None, image: str = "localhost:5000/vllmqual/vllm-cpu") -> Path:
    data = yaml.safe_load((ROOT / "fixtures" / "recipes" / "tiny-docker.yaml").read_text())
    data["identity"]["image"] = image
    data["launcher"]["docker"]["image_digest_file"] = "vllm-cpu.digest"
    if digest is not None:
        (tmp_path / "vllm-cpu.digest").write_text(digest + "\n")
    path = tmp_path / "tiny-docker.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_digest_file_pins_the_image(tmp_path: Path) -> None:
    recipe = load_recipe(write_recipe(tmp_path, DIGEST))
    assert recipe.identity.image == f"localhost:5000/vllmqual/vllm-cpu@{DIGEST}"
    assert recipe.raw["identity"]["image"] == recipe.identity.image  # the report's recipe content says it too


def test_an_image_not_built_here_names_the_fix(tmp_path: Path) -> None:
    recipe = load_recipe(write_recipe(tmp_path, None))
    launcher = DockerLauncher(recipe, run_id="r", artifacts_dir=tmp_path, api_key="k")
    with pytest.raises(LaunchError) as info:
        launcher.start(lambda _line: None)
    assert info.value.status == "image_unavailable"
    assert "make docker-image" in info.value.hint and "vllm-cpu.digest" in str(info.value)


def test_image_resolution_needs_no_engine(tmp_path: Path) -> None:
    """The image is resolved from the recipe alone (``launch.docker.image``): a digest is one
    build, a tag is not, and an image whose digest file is missing was never built here."""
    assert pinned_by_digest(f"localhost:5000/vllmqual/vllm-cpu@{DIGEST}")
    assert not pinned_by_digest("localhost:5000/vllmqual/vllm-cpu:latest")
    assert not pinned_by_digest("vllm-cpu@sha256:" + "ab" * 31)
    built, never_built = tmp_path / "built", tmp_path / "never-built"
    built.mkdir(), never_built.mkdir()
    assert image_reference(load_recipe(write_recipe(built, DIGEST))) == f"localhost:5000/vllmqual/vllm-cpu@{DIGEST}"
    with pytest.raises(LaunchError) as info:
        image_reference(load_recipe(write_recipe(never_built, None)))
    assert info.value.status is StartupStatus.IMAGE_UNAVAILABLE


def test_a_bad_digest_file_or_a_pinned_repository_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as bad:
        load_recipe(write_recipe(tmp_path, "latest"))
    assert bad.value.key == "launcher.docker.image_digest_file" and "make docker-image" in str(bad.value)
    with pytest.raises(RecipeError) as tagged:
        load_recipe(write_recipe(tmp_path, DIGEST, image="localhost:5000/vllmqual/vllm-cpu:latest@" + DIGEST))
    assert tagged.value.key == "identity.image"
