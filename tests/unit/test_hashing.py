"""One SHA-256 for the package: a file read in chunks hashes as its bytes do, text as its UTF-8."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pytest_vllmqual.hashing import sha256_file, sha256_hex


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
