"""What the project's own tests share across their folders: harnesses, samples and the paths.

Imported as ``support`` (``from support.fault_harness import Session``): pytest's default
import mode puts ``tests/`` first on ``sys.path`` when it loads ``tests/conftest.py``, so no
test inserts a path of its own. A child Python that imports ``support`` (a fault session's
gates, the fleet's stand-in driver) gets the same folders from :func:`python_path`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["ROOT", "TESTS", "UNIT_DATA", "cpu_flags", "load_script", "python_path"]

TESTS = Path(__file__).resolve().parents[1]
"""The ``tests/`` folder."""
ROOT = TESTS.parent
"""The checkout."""
UNIT_DATA = TESTS / "unit" / "data"
"""Recorded inputs of the unit tests: engine logs, Docker API answers, reference reports."""


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags this machine's CPU reports (``/proc/cpuinfo``; none where it cannot be
    read): a few real-server tests hold only on CPUs with, or without, some of them."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


def python_path(inherited: str | None = None) -> str:
    """``PYTHONPATH`` for a child Python that imports ``support`` and this checkout's package,
    ahead of what it would inherit."""
    return os.pathsep.join(filter(None, [str(TESTS), str(ROOT), inherited]))


def load_script(path: Path, name: str, *, beside: tuple[str, ...] = ()) -> ModuleType:
    """A script of the checkout (not a package module) imported under ``name`` for its tests.

    It is registered in ``sys.modules`` first: a dataclass looks its module up there while the
    module runs. Each call runs the script afresh, so a test that sets the environment first sees
    the script read it. ``beside`` names the modules of the script's folder it imports (run as a
    script, its folder comes first on ``sys.path``; loaded here, it does not): each is loaded
    first under its own name, so no path is added."""
    for sibling in beside:
        load_script(path.with_name(f"{sibling}.py"), sibling)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
