"""The layer map of ARCHITECTURE.md holds: no import climbs back up, modules stay small.

The table is read from ARCHITECTURE.md itself, so the document and this test cannot drift.
Imports inside functions count as much as module-level ones: a lazy import that climbs up is
still a back-edge.
"""

from __future__ import annotations

import ast
import re
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
from support import ROOT

PACKAGE = ROOT / "pytest_vllmqual"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
MAX_LINES = 600
MAX_FUNCTION_LINES = 80
TOP = "__init__"
"""The package itself: ``from pytest_vllmqual import X`` reads ``X`` from the front door (the top layer)."""


def layer_patterns() -> list[tuple[int, str]]:
    """(layer, module pattern) rows from the table between the layers markers."""
    text = ARCHITECTURE.read_text()
    table = text.split("<!-- layers:begin -->", 1)[1].split("<!-- layers:end -->", 1)[0]
    rows: list[tuple[int, str]] = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].isdigit():
            continue
        rows.extend((int(cells[0]), name) for name in re.findall(r"`([^`]+)`", cells[2]))
    return rows


def package_modules() -> dict[str, Path]:
    """Dotted module name (without the package prefix) → file, for every module of the package."""
    modules: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).with_suffix("")
        if relative.parts[0] in ("suites", "data"):
            continue
        parts = list(relative.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def layer_of(module: str, patterns: list[tuple[int, str]]) -> int | None:
    """The layer of the most specific row naming ``module``: its exact name, else the longest pattern."""
    exact = [layer for layer, pattern in patterns if module == pattern]
    if exact:
        return exact[0]
    matches = sorted(((len(pattern), layer) for layer, pattern in patterns if fnmatch(module, pattern)), reverse=True)
    return matches[0][1] if matches else None


def imported_modules(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) for every import of another package module, relative or absolute.

    A name imported from the package itself (``from pytest_vllmqual import X``, ``from .. import X``
    that reaches the top, ``import pytest_vllmqual``) is an import of the front door, ``__init__``,
    unless ``X`` is a module of its own.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    package_parts = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - (node.level - 1)] if node.level > 1 else package_parts
                prefix = ".".join([*base, node.module] if node.module else base)
            elif node.module and (node.module == "pytest_vllmqual" or node.module.startswith("pytest_vllmqual.")):
                prefix = node.module.removeprefix("pytest_vllmqual").lstrip(".")
            else:
                continue
            for alias in node.names:  # `from . import hooks` imports a module, `from .x import y` a name
                candidate = f"{prefix}.{alias.name}" if prefix else alias.name
                targets.append(candidate if candidate in known else prefix or TOP)
        elif isinstance(node, ast.Import):
            targets = [a.name.removeprefix("pytest_vllmqual").lstrip(".") or TOP for a in node.names
                       if a.name == "pytest_vllmqual" or a.name.startswith("pytest_vllmqual.")]
        found.extend((node.lineno, t) for t in targets if t and t in known)
    return found


def pytest_glue() -> tuple[str, ...]:
    """The modules the table says import pytest: the backquoted names in its "only ... import
    pytest" sentence."""
    text = ARCHITECTURE.read_text()
    table = text.split("<!-- layers:begin -->", 1)[1].split("<!-- layers:end -->", 1)[0]
    sentence = re.search(r"only (.*?) import pytest", table)
    assert sentence is not None, "the layer table no longer says which modules import pytest"
    return tuple(re.findall(r"`([^`]+)`", sentence.group(1)))


MODULES = package_modules()
PATTERNS = layer_patterns()
PYTEST_GLUE = pytest_glue()


def test_the_table_is_read() -> None:
    assert len(PATTERNS) > 15
    assert {layer for layer, _ in PATTERNS} == set(range(13))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_has_a_layer(module: str) -> None:
    assert layer_of(module, PATTERNS) is not None, f"{module} is not in the ARCHITECTURE.md layer table"


def test_no_import_climbs_back_up() -> None:
    known = set(MODULES)
    climbs: list[str] = []
    for module, path in MODULES.items():
        own = layer_of(module, PATTERNS)
        if own is None:
            continue
        for line, target in imported_modules(module, path, known):
            other = layer_of(target, PATTERNS)
            if other is not None and other > own:
                climbs.append(f"{path.relative_to(ROOT)}:{line}: {module} (layer {own}) imports "
                              f"{target} (layer {other})")
    assert not climbs, "imports that climb back up:\n" + "\n".join(climbs)


def test_only_the_glue_imports_pytest() -> None:
    assert set(PYTEST_GLUE) == {"plugin", "fixtures", "hookspecs"}
    offenders = []
    for module, path in MODULES.items():
        if module in PYTEST_GLUE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == "pytest" or n.startswith(("pytest.", "_pytest")) for n in names):
                offenders.append(module)
    assert not offenders, f"pytest-free core modules import pytest: {offenders}"


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    over = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function or method in ``path`` over ``limit`` lines."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{scope}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = (child.end_lineno or child.lineno) - child.lineno + 1
                    if lines > limit:
                        found.append((name, lines))
                visit(child, name + ".")
            else:
                visit(child, scope)

    visit(ast.parse(path.read_text()), "")
    return found


def test_no_function_is_over_the_length_limit() -> None:
    over = {f"{m}.{name}": n for m, p in MODULES.items() for name, n in long_functions(p)}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"


def test_the_length_checker_sees_a_long_method(tmp_path: Path) -> None:
    """The checker itself: a method is measured from its ``def`` to its last line."""
    source = tmp_path / "long.py"
    body = "".join(f"        x{i} = {i}\n" for i in range(80))
    source.write_text(f"class A:\n    def short(self):\n        pass\n\n    async def long(self):\n{body}")
    assert long_functions(source) == [("A.long", 81)]


def test_no_module_is_named_after_the_standard_library() -> None:
    shadowing = [m for m in MODULES if m.rsplit(".", 1)[-1] in sys.stdlib_module_names]
    assert not shadowing, f"modules named like standard-library modules: {shadowing}"


def test_every_module_declares_its_public_names() -> None:
    missing = [m for m, p in MODULES.items()
               if not p.name.startswith("_") and "__all__" not in p.read_text()]
    assert not missing, f"modules without __all__ (or a private _name): {missing}"


def test_the_checker_sees_a_lazy_climbing_import(tmp_path: Path) -> None:
    """The checker itself: a function-local relative import is found and resolved."""
    source = tmp_path / "evidence.py"
    source.write_text("def f():\n    from .decision import decide_run\n    from . import hooks\n")
    found = imported_modules("evidence", source, {"decision", "hooks", "evidence"})
    assert found == [(2, "decision"), (3, "hooks")]


def test_the_checker_sees_a_name_read_from_the_front_door(tmp_path: Path) -> None:
    """The checker itself: a name imported from the package itself is an import of its ``__init__``
    (a lower layer reading ``__version__`` that way climbs to the top), a module imported from it is
    that module."""
    source = tmp_path / "public.py"
    source.write_text("from pytest_vllmqual import __version__\nfrom pytest_vllmqual import records\n"
                      "from .. import GateRecorder\nimport pytest_vllmqual\nimport pytest_vllmqual.errors\n")
    known = {TOP, "records", "errors", "report", "report.public"}
    found = imported_modules("report.public", source, known)
    assert found == [(1, TOP), (2, "records"), (3, TOP), (4, TOP), (5, "errors")]
    assert layer_of(TOP, PATTERNS) == max(layer for layer, _ in PATTERNS)


def test_pyproject_lists_every_subpackage() -> None:
    """A subpackage missing from ``[tool.setuptools] packages`` would be left out of the wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(("pytest_vllmqual", *p.parent.relative_to(PACKAGE).parts)).rstrip(".")
               for p in PACKAGE.rglob("__init__.py")}
    missing = sorted(on_disk - listed)
    assert not missing, f"packages not listed in pyproject.toml: {missing}"


def test_the_most_specific_row_decides_a_module_s_layer() -> None:
    """The comparison sits above the report although the rest of its package sits below the gates."""
    rows = [(6, "equivalence"), (6, "equivalence.*"), (9, "equivalence.comparison")]
    assert (layer_of("equivalence.comparison", rows), layer_of("equivalence.tasks", rows),
            layer_of("equivalence", rows)) == (9, 6, 6)
    assert layer_of("equivalence.comparison", PATTERNS) > layer_of("report.query", PATTERNS)  # type: ignore[operator]
    assert layer_of("equivalence.sidecar", PATTERNS) < layer_of("gates.items", PATTERNS)  # type: ignore[operator]
