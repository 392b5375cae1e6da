"""The checkpoint field of the identity check: a local model path the server reports is the
recipe's checkpoint when it names the same files (the same directory once resolved against the
server's working directory, through a symlink, or a byte-identical copy); only different
content is a mismatch; a relative path whose base is unknown here is not checked, which caps
the verdict but fails no gate. Also the lookup of a loopback endpoint's working directory."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from support import ROOT

from pytest_vllmqual.gates.checkpoint import (
    compare_model_locations,
    is_local_location,
    model_directory_fingerprint,
)
from pytest_vllmqual.gates.engine import identity_gate
from pytest_vllmqual.gates.identity import UNRESOLVED_DIR, IdentityResult, check_identity
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.server_workdir import endpoint_server_directory
from pytest_vllmqual.recipe.loader import load_recipe
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import GateRecord
from pytest_vllmqual.vllm.log_facts import NOT_OBSERVABLE

RECIPES = ROOT / "fixtures" / "recipes"


def build_model(directory: Path) -> Path:
    """A small model directory: the files vLLM reads, with distinct content."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text('{"hidden_size": 64, "num_hidden_layers": 2}')
    (directory / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0, "b": 1}}}')
    (directory / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(range(256)) * 8)
    return directory


def recipe_with_model(model_dir: Path) -> Recipe:
    recipe = load_recipe(RECIPES / "tiny-cpu.yaml")
    return dataclasses.replace(recipe, identity=dataclasses.replace(recipe.identity, model_path=str(model_dir),
                                                                    content_digest_file=None))


def checkpoint_of(recipe: Recipe, reported: str, **kwargs: Any) -> IdentityResult:
    """The identity of a direct-only server whose /v1/models root is ``reported``."""
    return check_identity(recipe, version="0.32.0", launcher_kind="external", tp_size_seen=None,
                          models=[{"id": "tiny-chat", "root": reported, "max_model_len": 32768}], **kwargs)


def checkpoint_check(result: IdentityResult) -> Any:
    return next(c for c in result.checks if c.field == "checkpoint")


def gate_verdict(result: IdentityResult, recipe: Recipe, tmp_path: Path) -> Any:
    facts = {"identity": result.to_dict(recipe), "engine": {"sources": {"ranks": NOT_OBSERVABLE}}}
    return identity_gate(facts, recipe, GateRecorder(GateRecord(nodeid="t", gate="identity"), tmp_path))


def test_a_relative_path_is_resolved_against_the_server_s_directory_not_the_run_s(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "checkout"
    model = build_model(project / "fixtures" / "model" / "build" / "tiny-chat")
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "empty")  # the run starts elsewhere, as `pytest --pyargs` from an empty directory
    result = checkpoint_of(recipe_with_model(model), "fixtures/model/build/tiny-chat", server_cwd=project)
    check = checkpoint_check(result)
    assert (check.ok, check.note) == (True, "/v1/models root: the same directory")
    assert str(tmp_path) not in str(result.to_dict(recipe_with_model(model)))


def test_a_path_through_a_symlink_is_the_same_checkpoint(tmp_path: Path) -> None:
    model = build_model(tmp_path / "real" / "tiny-chat")
    os.symlink(model, tmp_path / "linked-model")
    check = checkpoint_check(checkpoint_of(recipe_with_model(model), str(tmp_path / "linked-model")))
    assert (check.ok, check.note) == (True, "/v1/models root: the same directory")


def test_a_byte_identical_copy_is_the_same_checkpoint(tmp_path: Path) -> None:
    model = build_model(tmp_path / "a" / "tiny-chat")
    shutil.copytree(model, tmp_path / "b" / "tiny-chat")
    result = checkpoint_of(recipe_with_model(model), "tiny-chat", server_cwd=tmp_path / "b")
    check = checkpoint_check(result)
    assert check.ok is True and check.note == "/v1/models root: a copy with the same content (3 files compared)"
    assert check.observed == "<model-dir>", "a matched directory is shown by placeholder (its model_path is absolute)"


def test_a_copy_with_one_changed_file_is_a_provenance_mismatch_naming_the_file(tmp_path: Path) -> None:
    model = build_model(tmp_path / "a" / "tiny-chat")
    copy = Path(shutil.copytree(model, tmp_path / "b" / "tiny-chat"))
    (copy / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0, "c": 1}}}')
    recipe = recipe_with_model(model)
    result = checkpoint_of(recipe, str(copy))
    assert result.status == "provenance_mismatch"
    check = checkpoint_check(result)
    assert check.ok is False and check.observed == "<another local directory>"
    assert check.note == "/v1/models root: different files: tokenizer.json differs"
    verdict = gate_verdict(result, recipe, tmp_path)
    assert verdict.failure and "tokenizer.json differs" in verdict.failure and str(tmp_path) not in verdict.failure


def test_a_missing_or_extra_file_is_a_mismatch(tmp_path: Path) -> None:
    model = build_model(tmp_path / "a" / "m")
    copy = Path(shutil.copytree(model, tmp_path / "b" / "m"))
    (copy / "config.json").unlink()
    (copy / "generation_config.json").write_text("{}")
    outcome = compare_model_locations(str(copy), str(model))
    assert outcome.ok is False
    assert outcome.note == ("different files: config.json missing on the server's side; "
                            "generation_config.json only on the server's side")


def test_a_relative_path_with_no_known_base_is_not_checked_and_fails_no_gate(tmp_path: Path) -> None:
    model = build_model(tmp_path / "m")
    recipe = recipe_with_model(model)
    result = checkpoint_of(recipe, "fixtures/model/build/tiny-chat",
                           server_cwd_unknown="the endpoint is not on loopback")
    check = checkpoint_check(result)
    assert check.ok is None and check.observable is False and check.observed == UNRESOLVED_DIR
    assert "working directory is not known here (the endpoint is not on loopback)" in check.note
    assert result.status == "partially-verified" and "checkpoint" in result.not_checked
    verdict = gate_verdict(result, recipe, tmp_path)
    assert verdict.passed, verdict.failure


def test_a_directory_that_cannot_be_read_from_here_is_not_checked(tmp_path: Path) -> None:
    model = build_model(tmp_path / "m")
    outcome = compare_model_locations(str(tmp_path / "not-on-this-machine"), str(model))
    assert (outcome.ok, outcome.observable) == (None, False)
    assert outcome.note == "the server's model directory cannot be read from here"


def test_hub_ids_are_compared_as_names() -> None:
    assert compare_model_locations("org/model", "org/model").ok is True
    other = compare_model_locations("org/other", "org/model")
    assert (other.ok, other.note) == (False, "a different model id")
    assert compare_model_locations("org/model", "/srv/models/m").ok is False


@pytest.mark.parametrize(("value", "local"), [
    ("deepseek-ai/DeepSeek-V4-Flash-0731", False), ("gpt2", False), ("/srv/m", True), ("./m", True),
    ("../m", True), ("~/m", True), ("fixtures/model/build/tiny-chat", True),
])
def test_what_counts_as_a_local_path(value: str, local: bool) -> None:
    assert is_local_location(value) is local


def test_a_relative_name_that_exists_in_the_server_s_directory_is_local(tmp_path: Path) -> None:
    build_model(tmp_path / "build" / "tiny-chat")
    assert is_local_location("build/tiny-chat") is False
    assert is_local_location("build/tiny-chat", tmp_path) is True


def test_the_fingerprint_names_every_visible_file_and_follows_symlinks(tmp_path: Path) -> None:
    model = build_model(tmp_path / "m")
    (model / ".cache").mkdir()
    (model / ".cache" / "lock").write_text("x")
    (tmp_path / "blob").write_text("shared blob")
    (model / "sub").mkdir()
    os.symlink(tmp_path / "blob", model / "sub" / "linked.json")
    assert sorted(model_directory_fingerprint(model)) == ["config.json", "model.safetensors", "sub/linked.json",
                                                          "tokenizer.json"]


def test_a_managed_docker_server_is_compared_by_the_argument_it_was_given(tmp_path: Path) -> None:
    recipe = load_recipe(RECIPES / "tiny-cpu.yaml")
    same = check_identity(recipe, version="0.32.0", models=[{"id": "tiny-chat", "root": "/model"}], tp_size_seen=2,
                          launcher_kind="docker", expected_model_arg="/model")
    other = check_identity(recipe, version="0.32.0", models=[{"id": "tiny-chat", "root": "/elsewhere"}],
                           tp_size_seen=2, launcher_kind="docker", expected_model_arg="/model")
    assert checkpoint_check(same).ok is True and checkpoint_check(other).ok is False


# -- the working directory of a loopback endpoint's process ---------------------------------------


def test_the_process_listening_on_a_loopback_port_gives_its_working_directory() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        found = endpoint_server_directory(f"http://127.0.0.1:{port}/")
        assert found.path == Path(os.getcwd()) and found.unknown_reason == ""
        assert endpoint_server_directory(f"http://localhost:{port}").path == Path(os.getcwd())


def test_an_endpoint_off_loopback_or_with_no_listener_gives_the_reason() -> None:
    away = endpoint_server_directory("http://10.1.2.3:8000")
    assert away.path is None and "not on loopback" in away.unknown_reason
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        unused = probe.getsockname()[1]  # bound, not listening
        silent = endpoint_server_directory(f"http://127.0.0.1:{unused}")
    assert silent.path is None and f"no listening socket on port {unused}" in silent.unknown_reason
