"""`vllmqual fleet`: without Ray it says how to install it; a bad fleet file is named first."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support import ROOT

from pytest_vllmqual.cli import main


def test_without_ray_fleet_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    code = main(["fleet", "run", str(ROOT / "fixtures" / "fleets" / "tiny-cpu.yaml")])
    err = capsys.readouterr().err
    assert code == 2
    assert "Ray, which is not installed" in err and "pip install 'pytest-vllmqual[fleet]'" in err
    assert "Traceback" not in err


def test_bad_fleet_file_is_named_before_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    bad = tmp_path / "f.yaml"
    bad.write_text("name: f\njobs: [{name: a, recipe: r, max_paralel: 2}]\n")
    assert main(["fleet", "run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "unknown key 'jobs.0.max_paralel'" in err


def test_fleet_needs_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet"]) == 2
    assert "needs an action: run" in capsys.readouterr().err


def test_single_host_path_never_imports_ray() -> None:
    import subprocess

    code = ("import sys, pytest_vllmqual.plugin, pytest_vllmqual.cli, pytest_vllmqual.session.controller; "
            "assert 'ray' not in sys.modules, 'ray was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
