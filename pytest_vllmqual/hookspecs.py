"""Hook specifications, in their own module (the pytest-xdist / pytest-benchmark convention).

A conftest.py can implement them to add launchers (``pytest_vllmqual_launchers``), or to add or
redact report fields:

    def pytest_vllmqual_update_report(config, report):
        report["extensions"]["ticket"] = "QUAL-123"      # add
        report["recipe"]["content"]["launcher"]["env"] = {}  # redact

The report is sanitized again and validated against the schema after these hooks run, so
a hook cannot leak a secret or write a report that does not validate. Free-form additions
belong under ``report["extensions"]``.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec(firstresult=True)
def pytest_vllmqual_generate_report(config: pytest.Config, record: Any) -> dict[str, Any] | None:
    """Build the public report dict for one arm's RunRecord; return None to use the default."""


def pytest_vllmqual_update_report(config: pytest.Config, report: dict[str, Any]) -> None:
    """Change the report dict in place (add under ``extensions``, or redact) before it is written."""


def pytest_vllmqual_launchers(config: pytest.Config) -> list[type[Any]]:
    """Launcher classes this conftest or plugin adds, each under its ``kind`` (a subclass of
    ``pytest_vllmqual.launch.base.Launcher``); a recipe's ``launcher.kind`` may then name it.
    Called once at configure time, before the recipe is loaded. An installed package can use the
    ``pytest_vllmqual.launchers`` entry-point group instead, which the CLI sees too."""
    return []  # a specification: pluggy calls the implementations, never this body


__all__ = ["pytest_vllmqual_generate_report", "pytest_vllmqual_launchers", "pytest_vllmqual_update_report"]
