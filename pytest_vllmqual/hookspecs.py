"""Hook specifications, in their own module (the pytest-xdist / pytest-benchmark convention).

A conftest.py can implement them to add or redact report fields:

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

__all__ = ["pytest_vllmqual_generate_report", "pytest_vllmqual_update_report"]
