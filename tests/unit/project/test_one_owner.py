"""One owner for each thing the package used to write in several places.

Each check reads the source (the package, and the scripts that write its files) and names the
one module allowed to spell the thing; a second spelling fails here with where it is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from support import ROOT

PACKAGE = ROOT / "pytest_vllmqual"
SOURCES = (PACKAGE, ROOT / "scripts")


def parsed(roots: tuple[Path, ...] = SOURCES) -> Iterator[tuple[str, ast.Module]]:
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def calls(tree: ast.AST, *names: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in names:
            yield node


def test_canonical_json_is_spelled_in_hashing_only() -> None:
    """Sorted keys or chosen separators (the JSON that is hashed, sent or shown stably) are written
    by ``hashing.canonical_json``; everyone else calls it, so two hashes of the same value agree."""
    spelled = sorted(f"{where}:{call.lineno}" for where, tree in parsed() for call in calls(tree, "dumps", "dump")
                     if {kw.arg for kw in call.keywords} & {"sort_keys", "separators"})
    assert [s.rsplit(":", 1)[0] for s in spelled] == ["pytest_vllmqual/hashing.py"], spelled
