"""A test outside tests/fleet/ that starts a Ray cluster (``xdist_groups.FLEET_ELSEWHERE``) runs in the
fleet folder's group, one after another with the fleet tests, and weighs as one of them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from support import ROOT
from support.xdist_groups import FLEET_ELSEWHERE, HEAVY_WEIGHT, group_tests


def _item(nodeid: str) -> Any:
    return SimpleNamespace(nodeid=nodeid, _fixtureinfo=None, iter_markers=lambda name: [],
                           get_closest_marker=lambda name: None)


def test_a_ray_test_elsewhere_joins_the_fleet_folders_group() -> None:
    (elsewhere,) = FLEET_ELSEWHERE
    assert ROOT.joinpath(elsewhere).is_file()
    items = [_item("tests/fleet/test_fleet_ray.py::test_a"), _item(f"{elsewhere}::test_b"),
             _item("tests/benchmarks/test_guard_rules.py::test_c")]
    groups = group_tests(items)
    assert groups[f"{elsewhere}::test_b"] == ("tests/fleet/test_fleet_ray.py", HEAVY_WEIGHT)
    assert groups["tests/benchmarks/test_guard_rules.py::test_c"] == ("tests/benchmarks/test_guard_rules.py", 1)
