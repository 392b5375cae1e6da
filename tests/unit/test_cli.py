"""The ``vllmqual`` console script: report, verify, recipes, and one-line errors with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.equivalence_samples import attach_probe, probe_body
from support.report_samples import blank_sanitizer, reference_control_run

from pytest_vllmqual.cli import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, main
from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.public import build_public_report, write_report_atomic

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, Path]:
    """(report path, private dir) of a run shaped like the reference campaign's control."""
    private = tmp_path / "private"
    report = with_decision(build_public_report(reference_control_run(private), sanitizer=blank_sanitizer()))
    return write_report_atomic(report, tmp_path / "reports" / "run.json"), private


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("vllmqual: error: ")
    return lines[0]


def test_report_writes_html_next_to_the_report(written: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = written
    assert main(["report", str(path)]) == EXIT_OK
    page = path.with_suffix(".html").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'id="gate-results"' in page
    assert capsys.readouterr().out.strip() == f"wrote {path.with_suffix('.html')}"


def test_report_output_option(written: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "pages" / "page.html"
    assert main(["report", str(written[0]), "-o", str(out)]) == EXIT_OK
    assert 'id="ladder-plot"' in out.read_text()


def test_report_errors_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "absent.json")]) == EXIT_USAGE
    assert "cannot read report" in one_line_error(capsys.readouterr().err)
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert main(["report", str(bad)]) == EXIT_USAGE
    assert "is not valid JSON" in one_line_error(capsys.readouterr().err)
    bad.write_text(json.dumps({"schema": "https://pytest-vllmqual/schemas/report/1"}))
    assert main(["report", str(bad)]) == EXIT_USAGE
    assert "does not match the report schema" in one_line_error(capsys.readouterr().err)
    assert not bad.with_suffix(".html").exists()


def test_verify_ok_and_tampered(written: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path, private = written
    assert main(["verify", str(path), str(private)]) == EXIT_OK
    out = capsys.readouterr().out
    count = len(json.loads(path.read_text())["artifacts"])
    assert out.strip() == f"ok: {count} artifact(s) match their SHA-256 in {path}"
    (private / "server.log").write_text("edited after the run")
    assert main(["verify", str(path), str(private)]) == EXIT_PROBLEMS
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"1 problem(s) in {path} against {private}:"
    assert lines[1].startswith("  changed: server.log")


def test_verify_on_a_broken_report_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "r.json"
    bad.write_text("[]")
    assert main(["verify", str(bad), str(tmp_path)]) == EXIT_USAGE
    assert "is not a JSON object" in one_line_error(capsys.readouterr().err)


def test_recipes_lists_the_shipped_recipes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes", "--dir", str(ROOT / "fixtures" / "recipes")]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["recipe", "launcher", "max_model_len"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows["tiny-cpu"] == ["subprocess", "32,768"]
    assert rows["393k-fp8kv"] == ["docker", "393,216"]


def test_recipes_marks_an_invalid_recipe_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "broken.yaml").write_text("name: broken\nidentity: [\n")
    assert main(["recipes", "--dir", str(tmp_path)]) == EXIT_PROBLEMS
    row = capsys.readouterr().out.splitlines()[1]
    assert row.split()[:2] == ["broken", "INVALID"] and "not valid YAML" in row


def test_recipes_missing_dir_and_unknown_command_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes", "--dir", str(tmp_path / "none")]) == EXIT_USAGE
    assert "does not exist" in one_line_error(capsys.readouterr().err)
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == EXIT_USAGE
    assert "invalid choice: 'frobnicate'" in one_line_error(capsys.readouterr().err)


def test_console_entry_runs_as_a_module_without_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest_vllmqual.cli", "report", str(tmp_path / "x.json")],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == EXIT_USAGE
    assert one_line_error(done.stderr).endswith("No such file or directory")


@pytest.mark.parametrize(("candidate_body", "verdict", "code"), [
    ({}, "equivalent", EXIT_OK),
    ({"shift": 0.2, "swap_top": True}, "not equivalent", EXIT_PROBLEMS),
])
def test_compare_reads_the_equivalence_probes_beside_the_two_reports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], candidate_body: dict[str, object], verdict: str,
        code: int) -> None:
    """Two public reports and their sidecars are all ``vllmqual compare`` needs for the equivalence section."""
    data = ROOT / "tests" / "unit" / "data" / "reference_reports"
    paths = []
    for role, name, body in (("control", "control-8192", probe_body()),
                             ("candidate", "candidate-4096", probe_body(**candidate_body))):  # type: ignore[arg-type]
        report = attach_probe(json.loads((data / f"{name}.json").read_text()), tmp_path / role, name, body)
        paths.append(tmp_path / role / f"{name}.json")
        paths[-1].write_text(json.dumps(report))
    out, page = tmp_path / "comparison.json", tmp_path / "comparison.html"
    assert main(["compare", *map(str, paths), "-o", str(out), "--html", str(page)]) == code
    section = json.loads(out.read_text())["equivalence"]
    assert section["verdict"] == verdict and section["top_k"] == 2 and len(section["figures"]) == 6
    assert section["arms"]["candidate"]["probe_sha256"] == "p" * 64
    assert f"equivalence: {verdict}: " in capsys.readouterr().out
    assert 'id="equivalence-kl-histogram"' in page.read_text()


def test_compare_says_an_equivalence_not_measured_last_and_strict_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two reports without probe sidecars: the equivalence is not measurable. The last lines say so
    and what the exit is; 0 by default (the comparison's verdict is healthy), 1 with ``--strict``."""
    data = ROOT / "tests" / "unit" / "data" / "reference_reports"
    args = ["compare", str(data / "control-8192.json"), str(data / "candidate-4096.json"), "-o", str(tmp_path / "c.json")]
    assert main(args) == EXIT_OK
    lines = capsys.readouterr().err.strip().splitlines()
    # The check not measured is the rule that may block (compare.promotion, tokens by default), after
    # the promotion lines that name it and each of the three layers.
    assert len(lines) >= 2 and lines[-2].startswith(
        "equivalence (A/B comparison): not measured: compare.promotion tokens: the control ran no equivalence "
        "probe"), lines
    promotion = next(i for i, line in enumerate(lines) if line.startswith("promotion (compare.promotion tokens"))
    assert [line.split(":")[0].strip() for line in lines[promotion + 1:promotion + 4]] == [
        "layer tokens", "layer tasks", "layer depth"]
    assert lines[-1] == "1 check not measured: not a pass and not a failure (exit 0; --strict makes it exit 1)"
    assert main([*args, "--strict"]) == EXIT_PROBLEMS
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1:] == ["1 check not measured: not a pass; --strict makes that exit 1 (exit 1)"], lines
