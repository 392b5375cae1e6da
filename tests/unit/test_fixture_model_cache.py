"""The fixture model's user cache: a fresh clone on the same machine copies the build instead of
training again, and only a build whose input hash matches is ever reused."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BUILDER = Path(__file__).resolve().parents[2] / "fixtures" / "model" / "build_tiny_model.py"


@pytest.fixture
def builder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("VLLMQUAL_CACHE_DIR", str(tmp_path / "cache"))
    spec = importlib.util.spec_from_file_location("build_tiny_model_under_test", BUILDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def fake_build(calls: list[Path]):  # type: ignore[no-untyped-def]
    def build(out_dir: Path, digest: str) -> None:
        calls.append(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "model.safetensors").write_bytes(b"weights " + digest.encode())
        (out_dir / "BUILD_STAMP.json").write_text(json.dumps({"input_hash": digest}))
    return build


def test_a_second_clone_copies_the_build_from_the_cache(builder: ModuleType, tmp_path: Path) -> None:
    calls: list[Path] = []
    first = tmp_path / "clone-1" / "fixtures" / "model" / "build" / "tiny-chat"
    second = tmp_path / "clone-2" / "fixtures" / "model" / "build" / "tiny-chat"
    assert builder.ensure_model(first, "a" * 64, build_fn=fake_build(calls)) == "built"
    assert builder.ensure_model(second, "a" * 64, build_fn=fake_build(calls)) == "cached"
    assert calls == [first], "the second clone must not train again"
    assert (second / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    assert builder.ensure_model(second, "a" * 64, build_fn=fake_build(calls)) == "current"
    assert not list(second.parent.glob("*.partial*")), "no staging folder is left behind"


def test_a_changed_input_hash_builds_again(builder: ModuleType, tmp_path: Path) -> None:
    calls: list[Path] = []
    out = tmp_path / "clone" / "tiny-chat"
    builder.ensure_model(out, "a" * 64, build_fn=fake_build(calls))
    assert builder.ensure_model(out, "b" * 64, build_fn=fake_build(calls)) == "built"
    assert len(calls) == 2
    assert json.loads((out / "BUILD_STAMP.json").read_text())["input_hash"] == "b" * 64
    cached = sorted(p.name for p in (tmp_path / "cache" / "models").iterdir())
    assert cached == ["tiny-chat-" + "a" * 16, "tiny-chat-" + "b" * 16]


def test_a_cache_entry_without_a_matching_stamp_is_not_used(builder: ModuleType, tmp_path: Path) -> None:
    calls: list[Path] = []
    entry = builder.cached_build_dir(tmp_path / "x" / "tiny-chat", "c" * 64)
    entry.mkdir(parents=True)
    (entry / "model.safetensors").write_bytes(b"half-written")  # no BUILD_STAMP.json: an interrupted copy
    out = tmp_path / "clone" / "tiny-chat"
    assert builder.ensure_model(out, "c" * 64, build_fn=fake_build(calls)) == "built"
    assert calls == [out]


def test_force_rebuilds_even_with_a_cached_copy(builder: ModuleType, tmp_path: Path) -> None:
    calls: list[Path] = []
    out = tmp_path / "clone" / "tiny-chat"
    builder.ensure_model(out, "d" * 64, build_fn=fake_build(calls))
    assert builder.ensure_model(out, "d" * 64, force=True, build_fn=fake_build(calls)) == "built"
    assert len(calls) == 2


def test_an_up_to_date_build_is_kept_in_the_cache_too(builder: ModuleType, tmp_path: Path) -> None:
    """A clone whose model predates the cache fills it, so the next fresh clone copies."""
    calls: list[Path] = []
    out = tmp_path / "clone" / "tiny-chat"
    fake_build(calls)(out, "e" * 64)
    entry = builder.cached_build_dir(out, "e" * 64)
    assert not entry.exists()
    assert builder.ensure_model(out, "e" * 64, build_fn=fake_build(calls)) == "current"
    assert builder.stamp_matches(entry, "e" * 64)


def test_the_build_writes_its_content_digest_beside_the_model(builder: ModuleType, tmp_path: Path) -> None:
    """The recipes are pinned to the digest the build recorded: a folder changed after its build
    keeps the recorded pin, so the identity check sees the change."""
    from pytest_vllmqual.gates.identity import content_digest

    calls: list[Path] = []
    out = tmp_path / "clone" / "tiny-chat"
    builder.ensure_model(out, "f" * 64, build_fn=fake_build(calls))
    pin = (tmp_path / "clone" / "tiny-chat.content-digest").read_text().strip()
    assert pin == content_digest(out) == json.loads((out / "BUILD_STAMP.json").read_text())["content_digest"]
    copy = tmp_path / "clone-2" / "tiny-chat"
    assert builder.ensure_model(copy, "f" * 64, build_fn=fake_build(calls)) == "cached"
    assert (tmp_path / "clone-2" / "tiny-chat.content-digest").read_text().strip() == pin
    (out / "model.safetensors").write_bytes(b"changed after the build")
    assert builder.ensure_model(out, "f" * 64, build_fn=fake_build(calls)) == "current"
    assert (tmp_path / "clone" / "tiny-chat.content-digest").read_text().strip() == pin != content_digest(out)
