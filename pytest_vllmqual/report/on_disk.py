"""The public report as a file: its schema check, its atomic write, reading it back, and
re-checking the private artifacts it names.

:func:`write_report_atomic` validates against ``schemas/report.schema.json`` first, then writes
through :mod:`~pytest_vllmqual.atomic_io`: a partial report never exists, and a failure names
the path. A report of an older schema version is refused with how to carry it forward
(:func:`migration_hint`). Building the report is ``report.public``'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_vllmqual.atomic_io import write_json_atomic
from pytest_vllmqual.errors import ReportError
from pytest_vllmqual.layout import REPORT_SCHEMA
from pytest_vllmqual.schema_errors import errors_against, raise_if_invalid

from .artifacts import verify_artifacts

__all__ = ["SCHEMA_ID", "SCHEMA_VERSION", "load_report", "migration_hint", "validate_report", "validation_errors",
           "verify_report", "write_report_atomic"]

SCHEMA_ID = "https://pytest-vllmqual/schemas/report/4"
SCHEMA_VERSION = 4

def validation_errors(report: Any) -> list[str]:
    """Every schema violation ("key 'a.b' ...", ``schema_errors``' wording), shallowest first; empty when valid."""
    return errors_against(report, REPORT_SCHEMA)


def migration_hint(report: Any) -> str:
    """How to read a report of an older schema version (report/1 to report/3): carry it forward."""
    schema = report.get("schema") if isinstance(report, Mapping) else None
    if isinstance(schema, str) and re.fullmatch(r"https://pytest-vllmqual/schemas/report/[123]", schema):
        return (" It was written by an older version of pytest-vllmqual. Fix: carry it forward with "
                "scripts/gpu/migrate_report_v1.py from the source tree (it adds nothing the run did not measure).")
    return ""


def validate_report(report: Any, *, where: str = "report") -> None:
    """Raise ReportError naming the first violation (and how many more) when invalid."""
    try:
        raise_if_invalid(report, REPORT_SCHEMA, error=ReportError, where=where, what=f"report schema {SCHEMA_ID}")
    except ReportError as exc:
        hint = migration_hint(report)
        if not hint:
            raise
        raise ReportError(f"{exc}.{hint}") from None


def write_report_atomic(report: Mapping[str, Any], path: Path) -> Path:
    """Validate ``report`` against the schema, then write it atomically to ``path``.

    Nothing is written when validation fails; on an unwritable directory or a full disk
    ReportError names the path and no partial file is left.
    """
    validate_report(report, where=f"report {path}")
    return write_json_atomic(report, Path(path))


def load_report(path: Path, *, validate: bool = True) -> dict[str, Any]:
    """Read a report back; ReportError when missing, not JSON, or (by default) not valid."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot read report {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ReportError(f"report {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ReportError(f"report {path} is not a JSON object")
    if validate:
        validate_report(data, where=f"report {path}")
    return data


def verify_report(report_path: Path, private_dir: Path) -> list[str]:
    """Re-check every artifact hash of a report file against the private folder.

    Returns the problems (see :func:`~pytest_vllmqual.report.artifacts.verify_artifacts`; empty when
    everything matches). Raises ReportError when the report itself cannot be read or is invalid.
    """
    return verify_artifacts(load_report(Path(report_path)), Path(private_dir))
