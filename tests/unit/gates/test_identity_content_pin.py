"""Pinned by content: a local model folder is pinned by its content digest (weights, tokenizer,
template, configuration; not a writer's version stamp), the identity check compares the folder
the server loads with that pin, and a pinned recipe must name its model by content."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from safetensors.numpy import save_file
from support import ROOT

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.gates.engine import identity_gate
from pytest_vllmqual.gates.identity import IdentityResult, check_identity, content_digest
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.recipe.loader import load_recipe
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import GateRecord

RECIPES = ROOT / "fixtures" / "recipes"
CPU_RECIPES = ("tiny-cpu", "tiny-cpu-4096", "tiny-cpu-kvfail", "tiny-docker")


def write_model(directory: Path, *, writer: str = "5.19.0", weights: float = 0.5,
                metadata: dict[str, str] | None = None) -> Path:
    """A converted model folder as transformers writes one: its version stamped into the configs and
    the safetensors metadata, its loading flags into the tokenizer's config (newer writers only), and
    a build stamp beside the files."""
    directory.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "transformers_version": writer}
    (directory / "config.json").write_text(json.dumps(config, indent=2 if writer >= "5.18" else None))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": 2, "transformers_version": writer}))
    (directory / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0, "b": 1}}}')
    (directory / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    tokenizer_config = {"eos_token": "<|im_end|>", **({"is_local": True, "local_files_only": False}
                                                      if writer >= "5.18" else {})}
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    tensors = {"embed.weight": np.full((4, 8), weights, dtype=np.float32), "norm.weight": np.ones(8, dtype=np.float32)}
    save_file(tensors, str(directory / "model.safetensors"), metadata=metadata or {"format": "pt"})
    (directory / "BUILD_STAMP.json").write_text(json.dumps({"input_hash": writer, "seconds": 35.2}))
    return directory


def pinned_to(model: Path, pin: str | None = None, pin_file: Path | None = None) -> Recipe:
    recipe = load_recipe(RECIPES / "tiny-cpu.yaml")
    return dataclasses.replace(recipe, identity=dataclasses.replace(
        recipe.identity, model_path=str(model), content_digest=pin,
        content_digest_file=str(pin_file) if pin_file else None))


def served(recipe: Recipe) -> IdentityResult:
    location = recipe.model_location()
    return check_identity(recipe, version="0.32.0", launcher_kind="subprocess", tp_size_seen=2,
                          models=[{"id": "tiny-chat", "root": location, "max_model_len": 32768}])


def gate(result: IdentityResult, recipe: Recipe, tmp_path: Path) -> Any:
    facts = {"identity": result.to_dict(recipe), "engine": {"sources": {}}}
    return identity_gate(facts, recipe, GateRecorder(GateRecord(nodeid="t", gate="identity"), tmp_path / "gate"))


def content_check(result: IdentityResult) -> Any:
    return next(c for c in result.checks if c.field == "content_digest")


def test_the_same_tensors_written_by_another_transformers_version_have_the_same_content_digest(
        tmp_path: Path) -> None:
    ours = write_model(tmp_path / "5.19", writer="5.19.0")
    theirs = write_model(tmp_path / "5.17", writer="5.17.0", metadata={"format": "pt", "writer": "transformers 5.17"})
    assert (ours / "config.json").read_bytes() != (theirs / "config.json").read_bytes()
    assert (ours / "model.safetensors").read_bytes() != (theirs / "model.safetensors").read_bytes()
    assert content_digest(ours) == content_digest(theirs)
    other = write_model(tmp_path / "retrained", weights=0.25)
    assert content_digest(other) != content_digest(ours), "other tensors are another model"
    (theirs / "chat_template.jinja").write_text("{{ messages[-1]['content'] }}")
    assert content_digest(theirs) != content_digest(ours), "the chat template is part of the model"


def test_a_model_folder_whose_tensors_changed_fails_identity_against_the_pin(tmp_path: Path) -> None:
    model = write_model(tmp_path / "model")
    pin = content_digest(model)
    assert pin is not None and pin.startswith("sha256:")
    recipe = pinned_to(model, pin)
    result = served(recipe)
    assert (result.status, content_check(result).status, result.unpinned) == ("verified", "matched", [])
    assert gate(result, recipe, tmp_path).passed
    payload = model / "model.safetensors"
    data = bytearray(payload.read_bytes())
    data[-1] ^= 0x01  # one bit of the last tensor
    payload.write_bytes(bytes(data))
    changed = served(recipe)
    check = content_check(changed)
    assert (changed.status, check.ok, check.expected) == ("provenance_mismatch", False, pin)
    verdict = gate(changed, recipe, tmp_path)
    assert not verdict.passed and f"content_digest: recipe says {pin!r}" in str(verdict.failure)


def test_the_pin_a_build_wrote_beside_the_model_is_read_when_the_identity_is_checked(tmp_path: Path) -> None:
    model = write_model(tmp_path / "model")
    pin_file = tmp_path / "model.content-digest"
    recipe = pinned_to(model, pin_file=pin_file)
    missing = served(recipe)
    assert content_check(missing).ok is None and "model.content-digest does not exist" in content_check(missing).note
    verdict = gate(missing, recipe, tmp_path)
    assert not verdict.passed and "content_digest" in str(verdict.failure)
    assert str(tmp_path) not in json.dumps(missing.to_dict(recipe)), "no local path in the record"
    pin_file.write_text(f"{content_digest(model)}\n")
    assert content_check(served(recipe)).status == "matched"


def test_a_pinned_recipe_names_its_model_by_content(tmp_path: Path) -> None:
    data = yaml.safe_load((RECIPES / "tiny-cpu.yaml").read_text())
    data["name"] = "nopin"
    del data["identity"]["content_digest_file"]
    (tmp_path / "nopin.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError, match="no content pin either") as refused:
        load_recipe(tmp_path / "nopin.yaml")
    assert refused.value.key == "identity.revision"
    data["name"] = "both"
    data["identity"].update(content_digest="sha256:" + "a" * 64, content_digest_file="x.content-digest")
    (tmp_path / "both.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError, match="both set"):
        load_recipe(tmp_path / "both.yaml")
    data["name"] = "short"
    data["identity"].update(content_digest="sha256:abc", content_digest_file=None)
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError, match=r"identity\.content_digest"):
        load_recipe(tmp_path / "short.yaml")


@pytest.mark.parametrize("name", CPU_RECIPES)
def test_the_shipped_cpu_recipes_are_pinned_by_the_digest_their_build_writes(name: str) -> None:
    recipe = load_recipe(RECIPES / f"{name}.yaml")
    assert recipe.pinned and recipe.identity.revision is None
    assert recipe.identity.content_digest_file == f"{recipe.identity.model_path}.content-digest"


def test_the_terminal_header_names_the_content_pin() -> None:
    from pytest_vllmqual.session.invocation import header_lines

    def identity_line(name: str) -> str:
        recipe = load_recipe(RECIPES / f"{name}.yaml")
        return header_lines(recipe, recipe_source="--recipe", endpoint=None, reproduce="pytest")[1]

    assert identity_line("tiny-cpu").startswith("vllmqual: identity vllmqual/tiny-chat@content from "
                                                "tiny-chat.content-digest, ")
    assert identity_line("smollm2-cpu").startswith("vllmqual: identity smollm2-135m-instruct@content sha256:faa9cfc8")
