"""The first round's lanes (tests/support/lanes.py): a test that boots a real server or a container, or
shares a wide fixture with one, is in the servers' lane; the rest in the light lane."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

from support import ROOT
from support.lanes import WAITING_MARK, Lane, lane_of_each


def _item(nodeid: str, marks: tuple[str, ...] = (), fixtures: tuple[str, ...] = ()) -> Any:
    definitions = {name: [SimpleNamespace(scope="module", baseid="tests/x")] for name in fixtures}
    return SimpleNamespace(nodeid=nodeid, _fixtureinfo=SimpleNamespace(name2fixturedefs=definitions),
                           get_closest_marker=lambda name: object() if name in marks else None)


def test_a_test_sharing_a_wide_fixture_with_a_server_test_stays_with_it() -> None:
    items = [_item("tests/packaging/test_w.py::test_real", ("real_vllm",), ("installed",)),
             _item("tests/packaging/test_w.py::test_reads_the_wheel", (), ("installed",)),
             _item("tests/load/test_l.py::test_fault_server", (), ("fault_load_session",)),
             _item("tests/docker/test_d.py::test_no_engine"),
             _item("tests/faults/test_f.py::test_container", ("needs_docker",))]
    assert lane_of_each(items) == {
        "tests/packaging/test_w.py::test_real": Lane.SERVERS,
        "tests/packaging/test_w.py::test_reads_the_wheel": Lane.SERVERS,  # else the wheel is built twice
        "tests/load/test_l.py::test_fault_server": Lane.LIGHT,
        "tests/docker/test_d.py::test_no_engine": Lane.SERVERS,  # a serial folder
        "tests/faults/test_f.py::test_container": Lane.SERVERS,
    }


def test_a_real_server_test_that_mostly_waits_is_in_the_light_lane() -> None:
    items = [_item("tests/faults/test_s.py::test_hang", ("real_vllm", WAITING_MARK)),
             _item("tests/faults/test_s.py::test_boot", ("real_vllm",))]
    assert lane_of_each(items) == {"tests/faults/test_s.py::test_hang": Lane.LIGHT,
                                   "tests/faults/test_s.py::test_boot": Lane.SERVERS}


def _light_lane(marks: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:vllmqual", "-p", "no:cacheprovider", "--collect-only", "-q",
         "--lane", "light", "-m", marks, "tests/faults", "tests/load", "tests/integration",
         "tests/packaging", "tests/docker"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_no_real_server_test_of_the_tree_is_in_the_light_lane_unless_it_mostly_waits() -> None:
    collected = _light_lane(f"(real_vllm or needs_docker) and not {WAITING_MARK}")
    assert collected.returncode == 5, collected.stdout[-3000:] + collected.stderr[-2000:]  # nothing collected
    waiting = _light_lane(WAITING_MARK)
    assert waiting.returncode == 0, waiting.stdout[-3000:] + waiting.stderr[-2000:]
    assert [line for line in waiting.stdout.splitlines() if "::" in line] == [
        "tests/faults/test_faults_startup.py::test_05_server_hangs_during_startup"]
