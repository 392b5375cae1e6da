"""One SHA-256 for the package: a file read in chunks hashes as its bytes do, text as its UTF-8."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pytest_vllmqual.hashing import canonical_json, canonical_sha256, sha256_file, sha256_hex


def test_a_file_over_one_chunk_hashes_as_its_bytes(tmp_path: Path) -> None:
    data = bytes(range(256)) * (5 * 4096 + 3)  # over 5 MiB, not a whole number of chunks
    path = tmp_path / "server.log"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    assert sha256_file(str(path)) == sha256_file(path)


def test_an_empty_file_has_the_empty_digest(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    assert sha256_file(tmp_path / "empty") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_text_hashes_as_its_utf8_bytes() -> None:
    assert sha256_hex("näive") == sha256_hex("näive".encode()) == hashlib.sha256(b"n\xc3\xa4ive").hexdigest()
    assert sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_canonical_json_sorts_keys_at_every_depth_whatever_the_order_built() -> None:
    first = {"b": [1, {"y": 2, "x": 1}], "a": "é"}
    second = {"a": "é", "b": [1, {"x": 1, "y": 2}]}
    assert canonical_json(first) == canonical_json(second) == '{"a":"\\u00e9","b":[1,{"x":1,"y":2}]}'
    assert canonical_sha256(first) == canonical_sha256(second) == sha256_hex(canonical_json(second))


def test_canonical_json_keeps_each_form_a_stored_hash_was_taken_in() -> None:
    """Hashes already in reports and caches were taken over these exact bytes."""
    value = {"b": 1, "a": "é"}
    assert canonical_json(value, ascii_only=False) == '{"a":"é","b":1}'
    assert canonical_json(value, compact=False) == '{"a": "\\u00e9", "b": 1}'
    assert canonical_json(value, compact=False, indent=2) == '{\n  "a": "\\u00e9",\n  "b": 1\n}'
    assert canonical_json({"p": Path("x")}, default=str) == '{"p":"x"}'
    assert canonical_sha256(value, compact=False) == sha256_hex('{"a": "\\u00e9", "b": 1}')
