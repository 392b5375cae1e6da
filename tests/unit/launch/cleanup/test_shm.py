"""The guarded two-scan /dev/shm reclaim.

A temporary directory stands in for /dev/shm (the files are real; only the directory
differs), and mappings are real: a child process or this process maps or opens the file, and
the reclaim finds it through the real /proc.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_vllmqual.launch.cleanup import shm

RUN_ID = "run-3f9a1c"


def plant(root: Path, name: str, size: int = 4096) -> Path:
    path = root / name
    path.write_bytes(b"\1" * size)
    return path


@pytest.fixture
def mapping_child(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A child process that maps an offload-named file and then closes its descriptor.

    Only /proc/PID/maps shows the mapping afterwards, which is what vLLM's TP workers look like.
    """
    path = plant(tmp_path, "vllm_offload_4b1d9e2a-0c6f-4f7b-9d55-8a2e6f0e1c33.mmap")
    code = (
        "import mmap, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "m = mmap.mmap(fd, 4096, flags=mmap.MAP_SHARED)\n"
        "os.close(fd)\n"
        "print('mapped', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == b"mapped"
    try:
        yield path, child
    finally:
        child.kill()
        child.wait(timeout=10)


def test_planted_unmapped_fixture_is_reclaimed(tmp_path: Path) -> None:
    fixture = shm.plant_fixture(RUN_ID, root=tmp_path)
    result = shm.reclaim_shm(RUN_ID, root=tmp_path, settle_s=0.05)
    assert not fixture.exists()
    assert result["reclaimed"] == [{"name": fixture.name, "bytes": 4096}]
    assert result["summary"] == "reclaimed exactly one unmapped 4,096-byte fixture; clean postcondition"
    assert result["postcondition_clean"] is True
    assert (result["scanned"], result["candidates"], result["skipped_mapped"], result["skipped_changed"]) == (1, 1, 0, 0)


def test_unmapped_vllm_offload_leftover_is_reclaimed(tmp_path: Path) -> None:
    leftover = plant(tmp_path, "vllm_offload_0b7c1f0e-5d43-4c9a-8f0e-2b9d7a6c5e41.mmap", size=8192)
    result = shm.reclaim_shm(None, root=tmp_path, settle_s=0.05)
    assert not leftover.exists()
    assert result["summary"] == "reclaimed exactly one unmapped 8,192-byte file; clean postcondition"


def test_file_mapped_by_another_process_is_left_alone(
    tmp_path: Path, mapping_child: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    path, child = mapping_child
    assert child.poll() is None
    result = shm.reclaim_shm(RUN_ID, root=tmp_path, settle_s=0.05)
    assert path.exists()
    assert result["reclaimed"] == []
    assert result["skipped_mapped"] == 1
    assert result["postcondition_clean"] is False
    assert result["remaining"] == [path.name]
    assert result["summary"] == (
        "found zero reclaimable files; left exactly one mapped or open; "
        "postcondition not clean: exactly one reclaimable-named file(s) remain"
    )


def test_file_mapped_in_this_process_is_left_alone_until_unmapped(tmp_path: Path) -> None:
    path = plant(tmp_path, shm.fixture_name(RUN_ID))
    with open(path, "r+b") as handle:
        region = mmap.mmap(handle.fileno(), 4096, flags=mmap.MAP_SHARED)
    try:
        assert shm.reclaim_shm(RUN_ID, root=tmp_path, settle_s=0.0)["skipped_mapped"] == 1
        assert path.exists()
    finally:
        region.close()
    result = shm.reclaim_shm(RUN_ID, root=tmp_path, settle_s=0.0)
    assert result["reclaimed"] == [{"name": path.name, "bytes": 4096}]
    assert not path.exists()


def test_file_held_open_without_mapping_is_left_alone(tmp_path: Path) -> None:
    """vLLM's creator holds the fd between O_CREAT and mmap; /proc/PID/fd shows that window."""
    path = plant(tmp_path, "vllm_offload_creator-window.mmap")
    fd = os.open(path, os.O_RDWR)
    try:
        result = shm.reclaim_shm(None, root=tmp_path, settle_s=0.0)
    finally:
        os.close(fd)
    assert path.exists()
    assert result["skipped_mapped"] == 1


def test_files_of_other_names_are_never_touched(tmp_path: Path) -> None:
    foreign = [
        plant(tmp_path, "torch_1234_567890_0"),       # torch/gloo
        plant(tmp_path, "psm_66648aa2"),              # Python shared_memory (vLLM message queues)
        plant(tmp_path, "sem.mp-louy4aye"),           # multiprocessing semaphore
        plant(tmp_path, "vllm_offload_x.mmap.bak"),   # near miss of the offload naming
        plant(tmp_path, "nccl-abc123"),
    ]
    ours = shm.plant_fixture(RUN_ID, root=tmp_path)
    result = shm.reclaim_shm(RUN_ID, root=tmp_path, settle_s=0.0)
    assert all(path.exists() for path in foreign)
    assert [item["name"] for item in result["reclaimed"]] == [ours.name]
    assert result["skipped_foreign"] == len(foreign)
    assert result["scanned"] == len(foreign) + 1
    assert result["postcondition_clean"] is True


def test_file_that_changes_between_scans_is_left_alone(tmp_path: Path) -> None:
    path = plant(tmp_path, "vllm_offload_growing.mmap")

    def writer_during_settle(_seconds: float) -> None:
        # What a creator's ftruncate does between the two scans.
        os.truncate(path, 8192)

    result = shm.reclaim_shm(None, root=tmp_path, settle_s=0.0, sleep=writer_during_settle)
    assert path.exists()
    assert result["skipped_changed"] == 1
    assert result["reclaimed"] == []
    assert result["postcondition_clean"] is False


def test_file_replaced_between_scans_is_left_alone(tmp_path: Path) -> None:
    """Same name and size, new inode: a new engine's file, not the one first seen."""
    path = plant(tmp_path, "vllm_offload_reused.mmap")

    def replace(_seconds: float) -> None:
        path.unlink()
        plant(tmp_path, path.name)

    result = shm.reclaim_shm(None, root=tmp_path, settle_s=0.0, sleep=replace)
    assert path.exists()
    assert result["skipped_changed"] == 1


def test_settle_interval_is_waited(tmp_path: Path) -> None:
    shm.plant_fixture(RUN_ID, root=tmp_path)
    started = time.monotonic()
    shm.reclaim_shm(RUN_ID, root=tmp_path, settle_s=0.3)
    assert time.monotonic() - started >= 0.3


def test_empty_and_missing_roots_are_clean(tmp_path: Path) -> None:
    assert shm.reclaim_shm(RUN_ID, root=tmp_path, settle_s=0.0)["summary"] == (
        "found zero reclaimable files; clean postcondition"
    )
    missing = shm.reclaim_shm(RUN_ID, root=tmp_path / "absent", settle_s=0.0)
    assert (missing["scanned"], missing["postcondition_clean"]) == (0, True)


def test_prove_reclaim_path_reports_like_the_reference_campaign(tmp_path: Path) -> None:
    result = shm.prove_reclaim_path(RUN_ID, root=tmp_path, settle_s=0.0)
    assert result["fixture_reclaimed"] is True
    assert result["summary"] == "reclaimed exactly one unmapped 4,096-byte fixture; clean postcondition"


def test_shm_files_of_run(tmp_path: Path) -> None:
    old = plant(tmp_path, "vllm_offload_from-an-earlier-run.mmap")
    os.utime(old, (1, 1))  # mtime only; ctime is the creation moment, so compare against it below
    started_at = os.stat(old).st_ctime + 0.5
    time.sleep(0.6)
    new_offload = plant(tmp_path, "vllm_offload_this-run.mmap")
    named = plant(tmp_path, f"vllmqual-{RUN_ID}-marker")
    plant(tmp_path, "torch_999")
    assert sorted(shm.shm_files_of_run(RUN_ID, root=tmp_path, started_at=started_at)) == sorted(
        [new_offload.name, named.name]
    )
    assert shm.shm_files_of_run(RUN_ID, root=tmp_path) == [named.name]


def test_scan_shm_lists_only_reclaimable_names(tmp_path: Path) -> None:
    plant(tmp_path, "torch_1")
    plant(tmp_path, "vllm_offload_a.mmap")
    (tmp_path / "vllm_offload_dir.mmap").mkdir()  # not a regular file
    assert [f.name for f in shm.scan_shm(root=tmp_path)] == ["vllm_offload_a.mmap"]


def test_file_is_unverifiable_when_a_process_of_its_owner_cannot_be_read(tmp_path: Path) -> None:
    """A process whose maps cannot be read might map the file: leave the file alone.

    A built /proc stands in here because this test runs as root, for whom real /proc is readable.
    """
    shm_root = tmp_path / "shm"
    shm_root.mkdir()
    path = shm.plant_fixture(RUN_ID, root=shm_root)
    fake_proc = tmp_path / "proc"
    hidden = fake_proc / "999999"
    (hidden / "maps").mkdir(parents=True)  # reading it fails like EACCES would
    (hidden / "fd").mkdir()
    (hidden / "status").write_text(f"Name:\tother\nPPid:\t1\nUid:\t{os.getuid()}\t{os.getuid()}\t0\t0\n")
    result = shm.reclaim_shm(RUN_ID, root=shm_root, settle_s=0.0, proc=fake_proc)
    assert path.exists()
    assert result["skipped_unverifiable"] == 1
    assert result["unreadable_processes"] == 1
    assert "whose holders could not be checked" in result["summary"]


def plant_probe(root: Path, name: str, magic: bytes = b"magic_message") -> Path:
    """vLLM's same-node probe as rank 0 writes it: 128 bytes, the magic message first."""
    path = root / name
    path.write_bytes(magic + b"\0" * (128 - len(magic)))
    return path


def test_an_orphaned_same_node_probe_of_the_run_is_reclaimed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed while its TP workers start leaves the probe held by nobody, a name no sample
    of its holders saw: it is the run's when it was created after the launch."""
    monkeypatch.setattr(shm, "PROBE_SETTLE_S", 0.05)
    before = time.time() - 1
    probe = plant_probe(tmp_path, "psm_a821abac")
    other = plant(tmp_path, "psm_5e1f00aa", size=128)  # same size, not a probe: someone else's
    lookalike = plant_probe(tmp_path, "psm_77b0c3d2", magic=b"not_the_magic")
    left, record = shm.reclaim_run_shm(RUN_ID, [], before, root=tmp_path, settle_s=0.05)
    assert left == [] and record is not None
    assert [item["name"] for item in record["reclaimed"]] == [probe.name]
    assert not probe.exists() and other.exists() and lookalike.exists()


def test_a_probe_older_than_the_run_or_held_is_left_alone(tmp_path: Path) -> None:
    """A probe created before the launch is not the run's; one a process holds open is live."""
    old = plant_probe(tmp_path, "psm_0ld0ld00")
    time.sleep(0.05)
    started = time.time()
    # The kernel stamps a file's ctime from its coarse clock, which can lag time.time() by a tick
    # (a few ms): a file made right after ``started`` could read as older than it.
    time.sleep(0.05)
    live = plant_probe(tmp_path, "psm_11ve11ve")
    with open(live, "rb"):
        assert shm.same_node_probes(started, root=tmp_path) == [live.name]
        _left, record = shm.reclaim_run_shm(RUN_ID, [], started, root=tmp_path, settle_s=0.05)
    assert old.exists() and live.exists()
    assert record is not None and record["reclaimed"] == []


def test_the_probe_settle_is_longer_than_a_live_probe_is_unheld() -> None:
    """A live server's probe is unheld for milliseconds; the guard waits seconds."""
    assert shm.PROBE_SETTLE_S >= 1.0 and shm.SAME_NODE_PROBE == (128, b"magic_message")


MAPS = """\
7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0
7f1c2b000000-7f1c2b100000 r-xp 00000000 fd:01 4242                       /usr/lib/libtorch_cpu.so
7f1c2c000000-7f1c2c001000 rw-s 00000000 00:12c 4242                      /dev/shm/psm_ab12cd
7f1c2d000000-7f1c2d001000 rw-s 00000000 00:12c 77                        /dev/shm/sem.tmpXYZ (deleted)
7f1c2e000000-7f1c2e001000 rw-s 00000000 00:12c 78                        /dev/shm/a name with spaces
7f1c2f000000-7f1c2f001000 r--p 00000000 fd:01 99                         /data/dev/shm/psm_not_ours
7f1c30000000-7f1c30001000 rw-s 00000000 00:12c 79                        /dev/shm/sub/dir"""


def test_maps_lines_are_matched_by_device_and_inode_and_by_path() -> None:
    """Only the tmpfs lines count: the same inode on another device (a library) is not a match,
    a minor number above 255 is printed in more than two hex digits, and the last line may lack
    its newline."""
    tmpfs = os.makedev(0, 0x12C)
    wanted = {(tmpfs, 4242), (tmpfs, 77), (tmpfs, 79), (os.makedev(0, 5), 78)}
    assert set(shm._mapped_keys(MAPS, wanted)) == {(tmpfs, 4242), (tmpfs, 77), (tmpfs, 79)}
    assert set(shm._mapped_keys(MAPS, set())) == set()
    assert set(shm._mapped_names(MAPS, "/dev/shm/")) == {"psm_ab12cd", "sem.tmpXYZ", "a name with spaces"}
