"""The real docker tests skip, with the reason, where no Docker engine can run; the terminal
summary says which way it went, so a CI log never hides that they did not run."""

from __future__ import annotations

import pytest
from docker_harness import image_reference, unavailable_reason

_REASON = pytest.StashKey[str | None]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_docker: starts real containers on a real Docker engine (skipped, with the reason, "
        "where none can run)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [item for item in items if item.get_closest_marker("needs_docker")]
    if not marked:
        return
    reason = unavailable_reason()
    config.stash[_REASON] = reason
    if reason is not None:
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if _REASON not in config.stash:
        return
    reason = config.stash[_REASON]
    if reason is None:
        terminalreporter.write_line(f"docker tests: ran on a real Docker engine with {image_reference()}")
    else:
        terminalreporter.write_line(f"docker tests: SKIPPED, {reason}", yellow=True, bold=True)
