"""The CI schedule (tests/support/xdist_groups.py): its file timings name files that exist (a test file moved
or renamed without its key would fall back to a guessed weight and start late, silently), and a group
that waits for a step run beside the tests is handed out after the groups that do not."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import ROOT, xdist_groups
from support.xdist_groups import FILE_SECONDS, SERIAL_FOLDERS, FixtureGroupScheduling, waiting_tests


def test_every_timed_file_exists() -> None:
    missing = [path for path in FILE_SECONDS if not (ROOT / path).is_file()]
    assert missing == [], f"FILE_SECONDS names files that do not exist: {missing}"


def test_every_timed_file_is_a_test_file_with_a_measured_duration() -> None:
    assert all(path.startswith("tests/") and path.rsplit("/", 1)[-1].startswith("test_") for path in FILE_SECONDS)
    assert all(seconds > 0 for seconds in FILE_SECONDS.values())


def test_every_serial_folder_exists() -> None:
    assert [folder for folder in SERIAL_FOLDERS if not (ROOT / folder).is_dir()] == []


class _Worker:
    """Stands in for xdist's WorkerController: records the test indexes it is sent."""

    def __init__(self) -> None:
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(indexes)


def _scheduler(tmp_path: Path) -> tuple[FixtureGroupScheduling, _Worker, list[str]]:
    tests = ["tests/docker/test_a.py::test_a", "tests/faults/test_b.py::test_b", "tests/load/test_c.py::test_c"]
    groups = {tests[0]: [tests[0].split("::")[0], 400], tests[1]: [tests[1].split("::")[0], 100],
              tests[2]: [tests[2].split("::")[0], 50]}
    (tmp_path / "groups.json").write_text(json.dumps({"groups": groups, "waits": {tests[0]: "docker-image"}}))
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"])  # what `-n 2` gives xdist
    scheduler = FixtureGroupScheduling(config, None, tmp_path / "groups.json")
    for nodeid in tests:  # the queue schedule() builds: heaviest first
        scheduler.workqueue[scheduler._split_scope(nodeid)] = {nodeid: False}
    worker = _Worker()
    scheduler.registered_collections[worker] = tests
    return scheduler, worker, tests


def test_a_group_waiting_for_a_running_step_is_handed_out_after_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    running = {"docker-image": True}
    monkeypatch.setattr(xdist_groups, "beside_step_running", lambda step: running[step])
    scheduler, worker, tests = _scheduler(tmp_path)
    scheduler._assign_work_unit(worker)
    assert worker.sent == [[tests.index("tests/faults/test_b.py::test_b")]], "the docker group went first while its image was built"
    running["docker-image"] = False
    scheduler._assign_work_unit(worker)
    assert worker.sent[-1] == [tests.index("tests/docker/test_a.py::test_a")], "the heaviest group once its step ended"


def test_a_waiting_group_is_handed_out_when_nothing_else_is_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xdist_groups, "beside_step_running", lambda step: True)
    scheduler, worker, tests = _scheduler(tmp_path)
    for _ in tests:
        scheduler._assign_work_unit(worker)
    assert worker.sent == [[1], [2], [0]] and not scheduler.workqueue


def test_the_docker_tests_wait_for_the_image_step() -> None:
    item = SimpleNamespace(nodeid="tests/docker/test_a.py::test_a",
                           get_closest_marker=lambda name: object() if name == "needs_docker" else None)
    plain = SimpleNamespace(nodeid="tests/unit/test_b.py::test_b", get_closest_marker=lambda name: None)
    assert waiting_tests([item, plain]) == {"tests/docker/test_a.py::test_a": "docker-image"}  # type: ignore[list-item]


def test_a_worker_gets_its_next_group_when_one_test_of_its_own_is_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tests left: nothing more for this worker yet (the other one may free up first); one left
    (it waits to know its next test): the next group; nothing queued: the shutdown."""
    monkeypatch.setattr(xdist_groups, "beside_step_running", lambda step: False)
    scheduler, worker, tests = _scheduler(tmp_path)
    worker.shutting_down = False  # type: ignore[attr-defined]
    worker.shutdown = lambda: setattr(worker, "shutting_down", True)  # type: ignore[attr-defined]
    scheduler.assigned_work[worker] = {"held": {"tests/x.py::test_1": False, "tests/x.py::test_2": False}}
    scheduler._reschedule(worker)
    assert worker.sent == [], "a group was committed to a worker with two tests of its own left"
    scheduler.assigned_work[worker]["held"]["tests/x.py::test_1"] = True
    scheduler._reschedule(worker)
    assert worker.sent == [[tests.index("tests/docker/test_a.py::test_a")]]
    scheduler.workqueue.clear()
    scheduler._reschedule(worker)
    assert worker.shutting_down is True  # type: ignore[attr-defined]
