"""A module split by concern keeps its old public names for a release: each name that moved is
still importable from the module it was first defined in, as the very object of its new home
(the way ``records`` re-exports the words that moved to ``words``)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from support import ROOT

MOVED: dict[tuple[str, str], tuple[str, ...]] = {
    ("pytest_vllmqual.privacy.sanitize", "pytest_vllmqual.privacy.secret_policy"): (
        "REDACTED_PLACEHOLDER", "SECRET_ENV_NAME", "SECRET_KEY_NAME", "SECRET_WORDS", "redact_args"),
    ("pytest_vllmqual.vllm.log_facts", "pytest_vllmqual.vllm.engine_args"): (
        "MODEL_DIR_PLACEHOLDER", "NON_DEFAULT_ARGS_RE", "parse_python_literal"),
    ("pytest_vllmqual.client.stream_transport", "pytest_vllmqual.client.http1"): ("BodySink",),
    ("pytest_vllmqual.report.public", "pytest_vllmqual.report.on_disk"): (
        "SCHEMA_ID", "SCHEMA_VERSION", "load_report", "migration_hint", "validate_report", "validation_errors",
        "verify_report", "write_report_atomic"),
    ("pytest_vllmqual.report.decision", "pytest_vllmqual.report.gate_coverage"): (
        "CoverageRow", "coverage", "preflight_of"),
    ("pytest_vllmqual.report.html_page", "pytest_vllmqual.report.result_tables"): (
        "measurement_rows", "per_rank", "result_rows", "teardown_text"),
    ("pytest_vllmqual.ab.equivalence", "pytest_vllmqual.equivalence.comparison"): (
        "LOWER_BOUND_NOTE", "ArmWords", "equivalence_section", "flip_items", "load_sidecars", "markdown_lines",
        "summary_line"),
}
"""(the old module, the new one): the public names that moved from the first to the second."""


@pytest.mark.parametrize(("old", "new"), list(MOVED), ids=lambda name: name.rsplit(".", 1)[-1])
def test_a_moved_name_is_the_new_module_s_object_under_its_old_name(old: str, new: str) -> None:
    before, after = importlib.import_module(old), importlib.import_module(new)
    names = MOVED[(old, new)]
    assert [name for name in names if name not in after.__all__] == []
    assert [name for name in names if name not in before.__all__] == []
    assert [name for name in names if getattr(before, name) is not getattr(after, name)] == []


def _imports_from(path: Path, package: str) -> list[tuple[str, str]]:
    """(module, name) of each ``from module import name`` in a file, relative imports resolved."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.extend((module, alias.name) for alias in node.names)
    return found


def test_the_package_itself_imports_a_moved_name_from_its_new_home() -> None:
    """The old name is for code outside the package; inside, every import names the new module."""
    stale = []
    for path in (ROOT / "pytest_vllmqual").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for source, name in _imports_from(path, package.removesuffix(".__init__")):
            for (old, _new), names in MOVED.items():
                if source == old and name in names and module != old:
                    stale.append(f"{module} imports {name} from {old}")
    assert stale == []
