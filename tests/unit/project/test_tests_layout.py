"""The project's own tests are laid out so that a newcomer finds them: what several test folders
share lives in tests/support/ (imported as ``support``, never through a path a test inserts), and
the unit tests' folders are the package's (``tests/unit/report/`` holds the tests of
``pytest_vllmqual/report/``)."""

from __future__ import annotations

import ast
from pathlib import Path

from support import ROOT, TESTS

PACKAGE = ROOT / "pytest_vllmqual"
UNIT = TESTS / "unit"
REPOSITORY_FOLDERS = {"project": None, "scripts": ROOT / "scripts", "fixtures": ROOT / "fixtures"}
"""Unit test folders that are not a subpackage: the project as a whole, and two folders of the
repository that hold code of their own."""


def _test_sources() -> list[Path]:
    return [p for p in TESTS.rglob("*.py")
            if "support" not in p.relative_to(TESTS).parts[:1] and "data" not in p.relative_to(TESTS).parts]


def _local_modules() -> dict[str, Path]:
    """Top-level names the test folders define, with the folder that owns each: a module of a folder
    outside a package (pytest puts such a folder on ``sys.path``), or a package's root folder."""
    found: dict[str, Path] = {}
    for path in _test_sources():
        folder = path.parent
        if (folder / "__init__.py").is_file():
            while (folder.parent / "__init__.py").is_file():
                folder = folder.parent
            found[folder.name] = folder
        else:
            found[path.stem] = folder
    return found


def _imported_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_a_module_shared_by_test_folders_is_imported_from_support() -> None:
    owners = _local_modules()
    crossing = []
    for path in _test_sources():
        for name in sorted(_imported_names(path)):
            owner = owners.get(name)
            if name == "conftest" or (owner is not None and not path.is_relative_to(owner)):
                crossing.append(f"{path.relative_to(ROOT)} imports {name}")
    assert crossing == [], "move what these import into tests/support/ (a conftest is never imported):\n" + "\n".join(
        crossing)


def _sys_path_additions(path: Path) -> list[str]:
    """The source of each path a module adds to ``sys.path`` (``sys.path.insert`` or ``append``)."""
    text = path.read_text()
    added = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("insert", "append") and ast.unparse(node.func.value) == "sys.path"):
            added.append(ast.get_source_segment(text, node.args[-1]) or "")
    return added


def test_no_test_puts_a_test_folder_on_sys_path() -> None:
    """A test imports a script with ``support.load_script`` and a benchmark as ``benchmarks.NAME``."""
    inserting = [f"{p.relative_to(ROOT)}: {added}" for p in [*_test_sources(), *(TESTS / "support").rglob("*.py")]
                 for added in _sys_path_additions(p)]
    assert inserting == []


FIXTURE_MODEL = ROOT / "fixtures" / "model"
"""Left out for now: the fixture-model scripts' own bytes are part of the model's cache key, so an
edit there retrains the model (about 15 minutes on two cores) on every machine; their path inserts
go with the next change that retrains it anyway."""


def test_no_code_of_the_checkout_adds_to_sys_path() -> None:
    """No path inserts anywhere: the benchmarks are a package run as modules (``python -m
    benchmarks.run_all``), a script imports the installed package and the modules of its own
    folder (first on ``sys.path`` when it runs), and a test loads a script through ``support``
    (the fixture-model scripts apart, above)."""
    folders = [ROOT / name for name in ("pytest_vllmqual", "benchmarks", "scripts", "fixtures", "suites", "tests")]
    sources = [p for folder in folders for p in folder.rglob("*.py")
               if "build" not in p.relative_to(folder).parts and p.parent != FIXTURE_MODEL]
    inserting = [f"{p.relative_to(ROOT)}: {added}" for p in sources for added in _sys_path_additions(p)]
    assert len(sources) > 100 and inserting == []


def test_the_benchmarks_are_a_package_that_imports_itself_by_name() -> None:
    """A benchmark imports another as ``benchmarks.NAME``: a bare ``import fidelity_common`` only
    worked with the folder put on ``sys.path``."""
    folder = ROOT / "benchmarks"
    own = {p.stem for p in folder.glob("*.py")}
    bare = [f"{p.name} imports {name}" for p in folder.glob("*.py") for name in _imported_names(p) if name in own]
    assert (folder / "__init__.py").is_file() and bare == []


def test_each_unit_test_folder_is_a_subpackage_or_a_named_project_folder() -> None:
    strays = []
    for folder in sorted(p for p in UNIT.rglob("*") if p.is_dir()):
        relative = folder.relative_to(UNIT)
        if relative.parts[0] in ("data", "__pycache__") or "__pycache__" in relative.parts:
            continue
        if relative.parts[0] in REPOSITORY_FOLDERS:
            continue
        if not (PACKAGE / relative / "__init__.py").is_file():
            strays.append(str(relative))
        if not (folder / "__init__.py").is_file():
            strays.append(f"{relative} (no __init__.py: test files of the same name would collide)")
    assert strays == []


def test_the_repository_folders_the_unit_tests_mirror_exist() -> None:
    assert [name for name, folder in REPOSITORY_FOLDERS.items() if folder is not None and not folder.is_dir()] == []
