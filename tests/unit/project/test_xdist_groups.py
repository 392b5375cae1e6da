"""The CI schedule's file timings (tests/support/xdist_groups.py) name files that exist: a test file moved
or renamed without its key would fall back to a guessed weight and start late, silently."""

from __future__ import annotations

from support import ROOT
from support.xdist_groups import FILE_SECONDS, SERIAL_FOLDERS


def test_every_timed_file_exists() -> None:
    missing = [path for path in FILE_SECONDS if not (ROOT / path).is_file()]
    assert missing == [], f"FILE_SECONDS names files that do not exist: {missing}"


def test_every_timed_file_is_a_test_file_with_a_measured_duration() -> None:
    assert all(path.startswith("tests/") and path.rsplit("/", 1)[-1].startswith("test_") for path in FILE_SECONDS)
    assert all(seconds > 0 for seconds in FILE_SECONDS.values())


def test_every_serial_folder_exists() -> None:
    assert [folder for folder in SERIAL_FOLDERS if not (ROOT / folder).is_dir()] == []
