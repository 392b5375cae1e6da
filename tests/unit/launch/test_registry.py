"""The launcher registry: one table from ``launcher.kind`` to its class, the built-ins and a
launcher added from outside the package (this process's ``register``, as the plugin does with a
conftest's hook, and the ``pytest_vllmqual.launchers`` entry-point group of an installed
package), with the loader checking a recipe's kind against it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support import ROOT, python_path
from support.fault_launcher import FAULT_SERVER_KIND, FaultServerLauncher

from pytest_vllmqual.cli import main
from pytest_vllmqual.errors import RecipeError, VllmQualError
from pytest_vllmqual.gates.identity import check_identity
from pytest_vllmqual.launch.command_line import command_line
from pytest_vllmqual.launch.docker.kind import DockerKind
from pytest_vllmqual.launch.external import ExternalLauncher
from pytest_vllmqual.launch.local_process import SubprocessLauncher
from pytest_vllmqual.launch.registry import (
    ENTRY_POINT_GROUP,
    launcher_class,
    register,
    registered_kinds,
    unregister,
)
from pytest_vllmqual.recipe.loader import load_recipe

RECIPES = ROOT / "fixtures" / "recipes"


def recipe_file(directory: Path, kind: str, *, command: bool = False) -> Path:
    """The tiny-cpu recipe with another launcher kind, its argv dropped unless ``command``."""
    data = yaml.safe_load((RECIPES / "tiny-cpu.yaml").read_text())
    data["name"] = f"tiny-{kind}"
    data["launcher"]["kind"] = kind
    data.pop("prepare", None)
    data["pinned"] = False
    data["identity"]["model_path"] = str(directory / "model")
    data["identity"].pop("content_digest_file", None)
    if not command:
        data["launcher"].pop("command", None)
    path = directory / f"tiny-{kind}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def fault_kind() -> Iterator[None]:
    register(FaultServerLauncher)
    try:
        yield
    finally:
        unregister(FAULT_SERVER_KIND)


def test_each_built_in_kind_maps_to_its_launcher_class() -> None:
    assert registered_kinds()[:3] == ["subprocess", "docker", "external"]
    assert launcher_class("subprocess") is SubprocessLauncher
    assert launcher_class("external") is ExternalLauncher and not ExternalLauncher.starts_server
    assert launcher_class("docker") is DockerKind and DockerKind.runs_container
    assert not SubprocessLauncher.runs_container and SubprocessLauncher.starts_server


def test_the_docker_kind_loads_and_writes_its_run_line_without_the_docker_sdk() -> None:
    code = ("import sys; sys.modules['docker'] = None\n"
            "from pathlib import Path\n"
            "from pytest_vllmqual.launch.command_line import command_line\n"
            "from pytest_vllmqual.recipe.loader import load_recipe\n"
            f"line = command_line(load_recipe(Path({str(RECIPES / 'tiny-docker.yaml')!r})))\n"
            "print(line[:2], 'pytest_vllmqual.launch.docker.launcher' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": python_path(), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['docker', 'run'] False"


def test_an_unregistered_kind_is_refused_at_load_time_naming_the_registered_kinds(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as refused:
        load_recipe(recipe_file(tmp_path, "podman", command=True))
    assert refused.value.key == "launcher.kind"
    assert "key 'launcher.kind' is 'podman'" in str(refused.value)
    assert "(registered: subprocess, docker, external)" in str(refused.value)


def test_a_registered_kind_loads_and_its_launcher_answers_for_it(tmp_path: Path, fault_kind: None) -> None:
    assert registered_kinds()[-1] == FAULT_SERVER_KIND
    recipe = load_recipe(recipe_file(tmp_path, FAULT_SERVER_KIND))
    assert recipe.launcher.kind == FAULT_SERVER_KIND and recipe.launcher.command == ()
    line = command_line(recipe)
    assert line[line.index(sys.executable) + 1].endswith("tests/faults/fault_server.py")
    assert line[line.index("--model") + 1] == recipe.model_location()
    identity = check_identity(recipe, version=recipe.identity.runtime_version, models=None, tp_size_seen=None,
                              launcher_kind=FAULT_SERVER_KIND)
    image = next(c for c in identity.checks if c.field == "image_digest")
    assert image.note == "not applicable: the fault-server launcher runs no container"


def test_a_registered_launcher_reads_its_own_settings_from_launcher_options(tmp_path: Path, fault_kind: None) -> None:
    path = recipe_file(tmp_path, FAULT_SERVER_KIND)
    data = yaml.safe_load(path.read_text())
    data["launcher"]["options"] = {"namespace": "qual", "replicas": 1}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_recipe(path).launcher.options == {"namespace": "qual", "replicas": 1}
    assert load_recipe(RECIPES / "tiny-cpu.yaml").launcher.options == {}


def test_the_built_in_required_keys_still_hold(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"key 'launcher\.command' is missing, and the subprocess launcher needs"):
        load_recipe(recipe_file(tmp_path, "subprocess"))
    with pytest.raises(RecipeError, match=r"key 'launcher\.endpoint' is missing, and the external launcher needs"):
        load_recipe(recipe_file(tmp_path, "external"))


def test_a_kind_taken_by_another_class_is_refused(fault_kind: None) -> None:
    register(FaultServerLauncher)  # the same class again: harmless
    fresh = type("FaultServerLauncher", (FaultServerLauncher,), {"__module__": FaultServerLauncher.__module__})
    register(fresh)  # the same name read afresh (a conftest in a second in-process session) replaces it
    assert launcher_class(FAULT_SERVER_KIND) is fresh

    class Impostor(SubprocessLauncher):
        kind = "docker"

    with pytest.raises(VllmQualError, match=r"kind 'docker' is already registered by "
                                            r"pytest_vllmqual\.launch\.docker\.kind:DockerKind"):
        register(Impostor)
    assert launcher_class("docker") is DockerKind


def installed(directory: Path, name: str, target: str) -> Path:
    """A distribution's metadata that names ``target`` under ``name`` in the launchers group."""
    info = directory / "vq_launcher_demo-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vq-launcher-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {target}\n")
    return directory


def test_an_installed_package_adds_a_kind_through_the_entry_point_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(installed(tmp_path / "site", FAULT_SERVER_KIND,
                                              "support.fault_launcher:FaultServerLauncher")))
    assert FAULT_SERVER_KIND in registered_kinds()
    assert launcher_class(FAULT_SERVER_KIND) is FaultServerLauncher
    path = recipe_file(tmp_path, FAULT_SERVER_KIND)
    assert main(["recipe", "show", str(path)]) == 0
    shown = capsys.readouterr().out.splitlines()[-1]
    assert "tests/faults/fault_server.py --model" in shown


def test_an_entry_point_named_after_another_kind_than_its_class_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(installed(tmp_path, "fault-srv", "support.fault_launcher:FaultServerLauncher")))
    with pytest.raises(VllmQualError, match="registered for kind 'fault-srv' but says its kind is 'fault-server'"):
        launcher_class("fault-srv")
