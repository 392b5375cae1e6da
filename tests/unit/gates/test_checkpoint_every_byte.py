"""A content pin covers every byte of a model folder: two large shards that differ anywhere are
different content. Sparse files, so a 600 MiB shard costs no disk."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import pytest

from pytest_vllmqual.gates.checkpoint import (
    compare_model_locations,
    hash_model_directory,
    model_directory_fingerprint,
)
from pytest_vllmqual.gates.identity import content_digest

MIB = 2**20


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLMQUAL_CACHE_DIR", str(tmp_path / "user-cache"))


def sparse_shard(path: Path, size: int = 600 * MIB, mark_at: int | None = None, mark: bytes = b"\x01") -> Path:
    """A sparse file of ``size`` zero bytes, with ``mark`` written at ``mark_at``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)
        if mark_at is not None:
            handle.seek(mark_at)
            handle.write(mark)
    return path


def sparse_safetensors(path: Path, size: int = 600 * MIB, mark_at: int | None = None) -> Path:
    """A safetensors shard: a real header (one tensor over the rest of the file) and sparse data."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}).encode()
    header += b" " * (-len(header) % 8)
    sparse_shard(path, size, mark_at)
    with open(path, "r+b") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
    return path


def test_two_600_mib_shards_that_differ_at_300_mib_have_different_digests(tmp_path: Path) -> None:
    sparse_shard(tmp_path / "a" / "model-00001-of-00002.bin", mark_at=300 * MIB, mark=b"\x01")
    sparse_shard(tmp_path / "b" / "model-00001-of-00002.bin", mark_at=300 * MIB, mark=b"\x02")
    a, b = model_directory_fingerprint(tmp_path / "a"), model_directory_fingerprint(tmp_path / "b")
    assert a["model-00001-of-00002.bin"] != b["model-00001-of-00002.bin"]


def test_a_corrupted_safetensors_shard_is_a_mismatch_not_a_copy(tmp_path: Path) -> None:
    sparse_safetensors(tmp_path / "good" / "model.safetensors")
    sparse_safetensors(tmp_path / "bad" / "model.safetensors", mark_at=300 * MIB)
    outcome = compare_model_locations(str(tmp_path / "bad"), str(tmp_path / "good"))
    assert (outcome.ok, outcome.note) == (False, "different files: model.safetensors differs")


def test_a_folder_pinned_under_the_previous_rules_still_verifies(tmp_path: Path) -> None:
    """Files up to 512 MiB keep the digests the previous content rules gave them: this folder's pin
    was recorded by them (CONTENT_SCHEME 2), so a shipped pin of a small model stays valid."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 8,
                                                    "transformers_version": "5.19.0"}, indent=2))
    (folder / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0, "b": 1}}}')
    (folder / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "w": {"dtype": "U8", "shape": [2048], "data_offsets": [0, 2048]}}).encode()
    header += b" " * (-len(header) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(range(256)) * 8)
    assert content_digest(folder) == "sha256:8a49b49e504ca9e4484e8dce644024261d113eaa7d52b8a1d2c66392ccca5336"
    plain = model_directory_fingerprint(folder)["chat_template.jinja"]
    raw = (folder / "chat_template.jinja").read_bytes()
    assert plain == f"{len(raw)}:{hashlib.sha256(raw).hexdigest()}", "a plain file: its size and its bytes' SHA-256"


def test_each_file_s_raw_sha256_is_the_hub_s_name_for_its_bytes(tmp_path: Path) -> None:
    """A hub cache keeps a file as blobs/<sha256 of its bytes> and links its snapshot to it: the
    recorded raw SHA-256 is that name, also where the content digest leaves the metadata out."""
    blobs = tmp_path / "hub" / "blobs"
    shard = sparse_safetensors(tmp_path / "staging.safetensors", size=20 * MIB, mark_at=9 * MIB)
    with open(shard, "r+b") as handle:  # data in several read blocks, so both hashers see every one
        for at in (5 * MIB, 13 * MIB, 20 * MIB - 1):
            handle.seek(at)
            handle.write(b"\x07")
    config = tmp_path / "config.json"
    config.write_text('{"hidden_size": 8, "transformers_version": "5.19.0"}')
    snapshot = tmp_path / "hub" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    blobs.mkdir(parents=True)
    for source in (shard, config):
        name = hashlib.sha256(source.read_bytes()).hexdigest()
        source.rename(blobs / name)
        os.symlink(blobs / name, snapshot / ("model.safetensors" if source == shard else "config.json"))
    found = hash_model_directory(snapshot)
    assert {n: (blobs / h.sha256).is_file() for n, h in found.items()} == {"config.json": True,
                                                                          "model.safetensors": True}
    assert os.path.realpath(snapshot / "model.safetensors") == str(blobs / found["model.safetensors"].sha256)
    assert found["config.json"].content != f"{found['config.json'].size}:{found['config.json'].sha256}", (
        "the content digest leaves the writer's version out; the raw digest does not")
