"""tests/support/: what the test folders share, one of each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, TESTS, python_path
from support.recipes import tiny
from support.report_samples import blank_sanitizer

from pytest_vllmqual.privacy.sanitize import Sanitizer


def test_a_child_python_given_python_path_imports_support_and_this_checkout(tmp_path: os.PathLike[str]) -> None:
    """What a fault session's gates and the fleet's stand-in driver rely on, from any directory."""
    code = "import support.gatekit, pytest_vllmqual, sys; print(support.__file__); print(pytest_vllmqual.__file__)"
    env = {**os.environ, "PYTHONPATH": python_path(None)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(TESTS / "support" / "__init__.py"), str(ROOT / "pytest_vllmqual" / "__init__.py")]


def test_python_path_keeps_what_the_child_would_inherit_after_the_checkout() -> None:
    assert python_path("/elsewhere").split(os.pathsep) == [str(TESTS), str(ROOT), "/elsewhere"]


def test_tiny_is_a_fresh_tiny_cpu_recipe_each_time() -> None:
    first, second = tiny(), tiny()
    assert first.name == "tiny-cpu" and first is not second and first == second


def test_the_blank_sanitizer_learned_nothing_from_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A report built from the samples reads the same on every machine: the environment this
    process runs in is not learned, as it is by a default sanitizer."""
    monkeypatch.setenv("VLLMQUAL_SUPPORT_TOKEN", "support-canary-value")
    assert "support-canary-value" not in Sanitizer().scrub("x support-canary-value y")
    assert blank_sanitizer().scrub("x support-canary-value y") == "x support-canary-value y"


def test_a_script_loads_under_its_own_name_and_its_dataclasses_work(tmp_path: Path) -> None:
    """A script's dataclass looks its module up in ``sys.modules`` while the script runs."""

    from support import load_script

    script = tmp_path / "a_script.py"
    script.write_text("from dataclasses import dataclass\n\n@dataclass\nclass Point:\n    x: int\n\nORIGIN = Point(0)\n")
    module = load_script(script, "a_script_under_test")
    assert module.ORIGIN.x == 0 and sys.modules["a_script_under_test"] is module
