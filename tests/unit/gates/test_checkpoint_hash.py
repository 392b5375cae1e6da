"""The hash cache and the progress of a content pin's first read: a file measured once is not read
again while it is the very same file (device, inode, size, modification and change times); any
change to it reads it again; a large first read tells the user how far it has got and how long
is left; the identity record says which files came from the cache and when they were read."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.report_samples import blank_sanitizer, reference_control_run

from pytest_vllmqual.gates import checkpoint_hash
from pytest_vllmqual.gates.checkpoint import hash_model_directory, model_directory_fingerprint
from pytest_vllmqual.gates.checkpoint_hash import CACHE_FOLDER, FileHash, HashProgress, hash_files
from pytest_vllmqual.gates.identity import check_identity
from pytest_vllmqual.report.public import build_public_report, validation_errors

from .test_checkpoint import checkpoint_of, recipe_with_model

MIB = 2**20


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VLLMQUAL_CACHE_DIR", str(tmp_path / "user-cache"))
    return tmp_path / "user-cache" / CACHE_FOLDER


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files whose bytes were read (every call of the reader)."""
    seen: list[str] = []
    real = checkpoint_hash.file_hash

    def counting(path: Path, **kwargs: Any) -> FileHash:
        seen.append(path.name)
        return real(path, **kwargs)

    monkeypatch.setattr(checkpoint_hash, "file_hash", counting)
    return seen


def model(folder: Path, shard_mib: int = 8) -> Path:
    """Two sparse shards (cached: over CACHE_MIN_BYTES) and a small config (read each time)."""
    folder.mkdir(parents=True, exist_ok=True)
    for index in (1, 2):
        with open(folder / f"model-0000{index}.bin", "wb") as handle:
            handle.truncate(shard_mib * MIB)
            handle.seek(3 * MIB)
            handle.write(bytes([index]))
    (folder / "config.json").write_text('{"hidden_size": 8}')
    return folder


def test_a_second_call_reads_no_shard_and_says_when_they_were_read(tmp_path: Path, cache: Path,
                                                                    reads: list[str]) -> None:
    folder = model(tmp_path / "m")
    first = hash_model_directory(folder)
    assert sorted(reads) == ["config.json", "model-00001.bin", "model-00002.bin"]
    assert not any(found.from_cache for found in first.values())
    reads.clear()
    second = hash_model_directory(folder)
    assert reads == ["config.json"], "only the file under CACHE_MIN_BYTES is read again"
    assert {n: f.from_cache for n, f in second.items()} == {"config.json": False, "model-00001.bin": True,
                                                            "model-00002.bin": True}
    for name in ("model-00001.bin", "model-00002.bin"):
        assert (second[name].content, second[name].sha256, second[name].hashed_at) == (
            first[name].content, first[name].sha256, first[name].hashed_at), "the entry's own time, not now"
    assert len(list(cache.rglob("*.json"))) == 2


@pytest.mark.parametrize("change", ["mtime", "size", "ctime", "replaced"])
def test_changing_the_file_reads_it_again(tmp_path: Path, cache: Path, reads: list[str], change: str) -> None:
    folder = model(tmp_path / "m")
    shard = folder / "model-00001.bin"
    before = model_directory_fingerprint(folder)
    reads.clear()
    if change == "mtime":
        stat = os.stat(shard)
        os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    elif change == "size":
        with open(shard, "r+b") as handle:
            handle.truncate(9 * MIB)
    elif change == "ctime":
        time.sleep(0.01)
        os.chmod(shard, 0o600)  # metadata only: the change time moves
    else:
        copy = folder / "copy.tmp"
        copy.write_bytes(shard.read_bytes())
        copy.replace(shard)  # the same bytes in another inode
    after = model_directory_fingerprint(folder)
    assert "model-00001.bin" in reads and "model-00002.bin" not in reads
    assert (after["model-00001.bin"] == before["model-00001.bin"]) is (change != "size")


def test_a_damaged_or_foreign_cache_entry_is_read_past(tmp_path: Path, cache: Path, reads: list[str]) -> None:
    folder = model(tmp_path / "m")
    first = hash_model_directory(folder)
    entries = sorted(cache.rglob("*.json"))
    entries[0].write_text("{not json")
    entry = json.loads(entries[1].read_text())
    entry["identity"]["inode"] += 1
    entries[1].write_text(json.dumps(entry))
    reads.clear()
    again = hash_model_directory(folder)
    assert sorted(reads) == ["config.json", "model-00001.bin", "model-00002.bin"]
    assert {n: f.content for n, f in again.items()} == {n: f.content for n, f in first.items()}


def test_a_cache_that_cannot_be_written_costs_only_the_next_read(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("VLLMQUAL_CACHE_DIR", str(tmp_path / "not-a-folder"))
    folder = model(tmp_path / "m")
    assert model_directory_fingerprint(folder) == model_directory_fingerprint(folder)
    assert not any(found.from_cache for found in hash_model_directory(folder).values())


def test_two_processes_at_once_agree_and_leave_whole_entries(tmp_path: Path, cache: Path) -> None:
    folder = model(tmp_path / "m", shard_mib=64)
    script = ("import json, sys; from pathlib import Path; "
              "from pytest_vllmqual.gates.checkpoint import model_directory_fingerprint; "
              "print(json.dumps(model_directory_fingerprint(Path(sys.argv[1]))))")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(folder)], stdout=subprocess.PIPE,
                              env={**os.environ, "VLLMQUAL_CACHE_DIR": str(cache.parent)}) for _ in range(2)]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert json.loads(outputs[0]) == json.loads(outputs[1]) == model_directory_fingerprint(folder)
    assert sorted(p.suffix for p in cache.rglob("*") if p.is_file()) == [".json", ".json"], "no partial file left"
    assert all(json.loads(p.read_text())["content"] for p in cache.rglob("*.json"))


def test_a_large_first_read_prints_progress_with_an_estimate(tmp_path: Path, cache: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint_hash, "PROGRESS_MIN_BYTES", 8 * MIB)
    real = checkpoint_hash.file_hash

    def halting(path: Path, **kwargs: Any) -> FileHash:
        found = real(path)  # the bytes counted in two halves, a pause between them
        kwargs["counter"](found.size // 2)
        time.sleep(0.3)
        kwargs["counter"](found.size - found.size // 2)
        return found

    monkeypatch.setattr(checkpoint_hash, "file_hash", halting)
    folder = model(tmp_path / "m")
    lines: list[str] = []
    paths = {p.name: p for p in sorted(folder.iterdir())}
    hash_files(paths, progress=lines.append, every_s=0.05, workers=2)
    assert lines[0].startswith("checkpoint: reading every byte of 3 model file(s), 0.02 GiB, for the content pin "
                               "(0 from the hash cache)")
    ticks = [line for line in lines[1:-1] if re.fullmatch(
        r"checkpoint: hashed [\d,.]+/16\.0 MiB \(\d+%\), [\d,]+ MiB/s, (~[\d,]+ s left|time left not known yet)",
        line)]
    assert ticks and len(ticks) == len(lines) - 2, lines
    assert any("(50%)" in line and "s left" in line for line in ticks), lines
    assert re.fullmatch(r"checkpoint: hashed 16\.0 MiB in [\d.]+ s \([\d,]+ MiB/s\)", lines[-1]), lines[-1]
    lines.clear()
    hash_files(paths, progress=lines.append, every_s=0.05)
    assert lines == [], "a repeat reads only the small config: nothing to report"


def test_the_estimate_is_the_time_left_at_the_rate_so_far() -> None:
    now = [100.0]
    meter = HashProgress(4 * 1024 * MIB, 4, 0, None, clock=lambda: now[0])
    meter.add(1024 * MIB)
    now[0] = 110.0
    assert meter.line() == "checkpoint: hashed 1,024.0/4,096.0 MiB (25%), 102 MiB/s, ~30 s left"


def test_a_small_model_prints_no_progress(tmp_path: Path, cache: Path) -> None:
    lines: list[str] = []
    hash_model_directory(model(tmp_path / "m"), progress=lines.append)
    assert lines == []


def test_the_identity_record_names_the_files_from_the_cache_and_validates(tmp_path: Path, cache: Path) -> None:
    folder = model(tmp_path / "m")
    recipe = recipe_with_model(folder)
    first = checkpoint_of(recipe, str(folder)).file_hashes
    second = check_identity(recipe, version="0.32.0", launcher_kind="external", tp_size_seen=None,
                            models=[{"id": "tiny-chat", "root": str(folder)}]).file_hashes
    assert {n: e["from_cache"] for n, e in first.items()} == dict.fromkeys(first, False)
    assert {n: e["from_cache"] for n, e in second.items()} == {"config.json": False, "model-00001.bin": True,
                                                               "model-00002.bin": True}
    assert second["model-00001.bin"]["hashed_at"] == first["model-00001.bin"]["hashed_at"]
    run = reference_control_run(tmp_path / "private")
    run.identity["file_hashes"] = second
    report = build_public_report(run, sanitizer=blank_sanitizer())
    assert report["identity"]["file_hashes"] == second
    assert [e for e in validation_errors(report) if "identity" in e] == []
    report["identity"]["file_hashes"]["model-00001.bin"]["sha256"] = "not a digest"
    assert [e for e in validation_errors(report) if "identity" in e] == [
        "key 'identity.file_hashes.model-00001.bin.sha256' is 'not a digest', which does not have the form '^[0-9a-f]{64}$'"]


def test_a_mismatch_in_a_folder_the_previous_rules_sampled_says_so(tmp_path: Path, cache: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A pin written under content rules 2 differs for a folder with a file over 512 MiB (here a
    threshold of 4 MiB stands for it): the note says why, and to measure it again from a copy
    one trusts; a folder of small files gets the plain note."""
    from pytest_vllmqual.gates import identity

    folder = model(tmp_path / "m")
    recipe = dataclasses.replace(recipe_with_model(folder), identity=dataclasses.replace(
        recipe_with_model(folder).identity, content_digest="sha256:" + "0" * 64))
    plain = next(c for c in checkpoint_of(recipe, str(folder)).checks if c.field == "content_digest")
    assert (plain.ok, plain.note) == (False, "pinned by identity.content_digest")
    monkeypatch.setattr(identity, "SAMPLED_ABOVE_BYTES", 4 * MIB)
    sampled = next(c for c in checkpoint_of(recipe, str(folder)).checks if c.field == "content_digest")
    assert sampled.ok is False
    assert "content rules 2, which read a file over 512 MiB by its first and last MiB" in sampled.note
    assert sampled.note.endswith("measure the pin again from a copy you trust")
