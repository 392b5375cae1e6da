"""The nodes' answers in the fleet record: sidecars kept by SHA-256, the verdict, the suspect list,
the page's matrix, a junit case per node, and the reference mode (a stored record, promoted).

Reports are the sanitized tiny-cpu report of a real fleet run (tests/fleet/data) with a synthetic
probe sidecar each (``support.equivalence_samples``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from support import ROOT
from support.equivalence_samples import attach_probe, probe_body

from pytest_vllmqual.errors import FleetError
from pytest_vllmqual.fleet.attempts import JobAttempt, evaluate_result
from pytest_vllmqual.fleet.command import keep_sidecars, promote
from pytest_vllmqual.fleet.pages import render_fleet_html, render_fleet_junit
from pytest_vllmqual.fleet.record import build_record, job_report_sha256
from pytest_vllmqual.fleet.reference import load_reference
from pytest_vllmqual.fleet.spec import JobSpec, Placement, PlacementMode

SAMPLE = ROOT / "tests" / "fleet" / "data" / "tiny-cpu-report.json"
JOB = JobSpec(name="every", recipe="tiny-cpu", placement=Placement(PlacementMode.EACH_NODE), markers="engine")
LABELS = {f"id{i}": (f"node-{i}", f"{i:012x}") for i in range(1, 5)}
FINGERPRINT = {"source": "server process", "cpu_sha256": "c" * 16, "build": "cpu", "vllm_version": "0.32.0",
               "torch_version": "2.13.0+cpu", "env": {"OMP_NUM_THREADS": None}}


def _attempt(tmp: Path, node: str, *, shift: float = 0.0, floor: bool = False, omp: str | None = None) -> JobAttempt:
    report = json.loads(SAMPLE.read_text())
    report["fingerprint"] = {**FINGERPRINT, "env": {"OMP_NUM_THREADS": omp}}
    name = f"{node}{'-floor' if floor else ''}-{shift}"
    attach_probe(report, tmp / "nodes", name, probe_body(shift=shift))
    attempt = JobAttempt(attempt_id=f"every-{name}", job=JOB, number=1, recipe_arg="tiny-cpu", overrides=(), cpus=1.0,
                         gpus=0, node_id=node, recipe_sha256="a" * 64, submitted_epoch=time.time() - 60,
                         started_epoch=time.time() - 59, floor=floor)
    sidecar = (tmp / "nodes" / report["equivalence_probe"]["file"]).read_bytes()
    evaluate_result(attempt, {"exit_code": 0, "timed_out": False, "elapsed_s": 58.0, "run_id": "r",
                              "report_text": json.dumps(report), "sidecar_bytes": sidecar,
                              "node_key": f"machine-{node}", "private": {"files": 1, "manifest_sha256": "b" * 64}},
                    time.time())
    return attempt


def _written(attempts: list[JobAttempt], folder: Path, reference: Any = None) -> dict[str, Any]:
    """What ``write_outputs`` writes, without a cluster: sidecars, reports, the record."""
    bodies = keep_sidecars(attempts, folder)
    record = build_record(fleet={"name": "f", "description": "", "file_sha256": "c" * 64, "max_parallel": 1,
                                 "run_id": folder.name}, attempts=attempts, labels=LABELS,
                          nodes=[{"node": n, "node_id_sha256": t, "cpus": 2, "gpus": 0} for n, t in LABELS.values()],
                          interrupted=False, started=time.time() - 70, finished=time.time(), mode="address",
                          sidecars=bodies, reference=reference)
    for attempt in attempts:
        (folder / "jobs").mkdir(parents=True, exist_ok=True)
        (folder / "jobs" / f"{attempt.attempt_id}.json").write_text(json.dumps(attempt.report))
    (folder / "fleet.json").write_text(json.dumps(record))
    return record


def test_a_node_that_answers_differently_is_named_and_fails_the_fleet(tmp_path: Path) -> None:
    attempts = [_attempt(tmp_path, "id1"), _attempt(tmp_path, "id2"), _attempt(tmp_path, "id3", shift=0.05),
                _attempt(tmp_path, "id1", floor=True)]
    record = _written(attempts, tmp_path / "run")
    kept = sorted(p.name for p in (tmp_path / "run" / "sidecars").iterdir())
    assert len(kept) == 2 and all(n.endswith(".probe.json.gz") and len(n.split(".")[0]) == 64 for n in kept)
    row = record["rows"][0]
    assert row["answers"]["sidecar"] == f"sidecars/{attempts[0].report['equivalence_probe']['sha256']}.probe.json.gz"
    assert row["node_key"] == "machine-id1" and row["fingerprint"]["fields"]["build"] == "cpu"
    assert record["rows"][3]["floor"] is True and row["report"]["sha256"] == job_report_sha256(attempts[0].report)
    (answers,) = record["answers"]
    assert answers["floor"]["status"] == "measured" and answers["floor"]["nodes"] == ["node-1"]
    assert answers["odd_one_out"] == ["node-3"] and record["suspects"][0]["node"] == "node-3"
    assert record["suspects"][0]["node_key"] == "machine-id3" and record["suspects"][0]["cause"] == "unexplained"
    assert record["decision"]["verdict"] == "inconsistent"
    assert any("node-3 is the odd one out on answers" in t for t in record["decision"]["does_not_prove"])
    page = render_fleet_html(record)
    assert 'id="answers"' in page and "floor measured" in page and "<b>differs</b> (unexplained)" in page
    suite = next(s for s in ET.fromstring(render_fleet_junit(record)).findall("testsuite")
                 if s.get("name") == "answers-every")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert sorted(cases) == ["node-1", "node-2", "node-3"] and suite.get("failures") == "1"
    assert cases["node-3"].find("failure") is not None and cases["node-1"].find("failure") is None


def test_identical_nodes_are_consistent_on_answers_with_the_figures(tmp_path: Path) -> None:
    record = _written([_attempt(tmp_path, "id1"), _attempt(tmp_path, "id2"), _attempt(tmp_path, "id3")],
                      tmp_path / "run")
    (answers,) = record["answers"]
    assert answers["agree"] and record["decision"]["verdict"] == "consistent" and record["suspects"] == []
    assert any("3 nodes answer alike" in t for t in record["decision"]["proves"])
    assert all(p["figures"]["top1_agreement"]["point"] == 100.0 for p in answers["pairs"])


def test_an_explained_difference_is_reported_and_does_not_fail(tmp_path: Path) -> None:
    record = _written([_attempt(tmp_path, "id1"), _attempt(tmp_path, "id2"),
                       _attempt(tmp_path, "id3", shift=0.05, omp="2")], tmp_path / "run")
    (answers,) = record["answers"]
    assert answers["odd_one_out"] == ["node-3"] and record["suspects"] == []
    assert record["decision"]["verdict"] == "consistent"
    assert any("explained by the fingerprint: env.OMP_NUM_THREADS None vs 2" in t
               for t in record["decision"]["proves"])


def test_a_sidecar_that_does_not_match_its_report_is_not_kept(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path, "id1")
    attempt.sidecar = b"changed on the way"
    bodies = keep_sidecars([attempt], tmp_path / "run")
    assert "does not match the SHA-256" in str(bodies[attempt.attempt_id])
    assert not (tmp_path / "run" / "sidecars").exists()


def test_the_reference_names_the_node_that_changed_since(tmp_path: Path) -> None:
    before = _written([_attempt(tmp_path, "id1"), _attempt(tmp_path, "id2"), _attempt(tmp_path, "id3")],
                      tmp_path / "monday")
    assert before["decision"]["verdict"] == "consistent"
    stored = promote(tmp_path / "monday", tmp_path / "reference")
    assert stored == tmp_path / "reference" / "fleet.json" and (tmp_path / "reference" / "sidecars").is_dir()
    reference = load_reference(stored)
    assert reference.kind == "fleet record" and len(reference.nodes) == 3
    today = _written([_attempt(tmp_path, "id1"), _attempt(tmp_path, "id2", shift=0.05), _attempt(tmp_path, "id3")],
                     tmp_path / "tuesday", reference)
    (answers,) = today["answers"]
    assert [c["node_key"] for c in answers["reference"]["changed"]] == ["machine-id2"]
    assert "changed since the reference fleet.json: node-2" in answers["reference"]["summary"]
    assert today["decision"]["verdict"] == "inconsistent" and today["suspects"][0]["node"] == "node-2"


def test_a_retested_suspect_is_persistent_or_transient(tmp_path: Path) -> None:
    flagged = _written([_attempt(tmp_path, "id1"), _attempt(tmp_path, "id2"), _attempt(tmp_path, "id3", shift=0.05)],
                       tmp_path / "night")
    assert flagged["suspects"][0]["node_key"] == "machine-id3"
    reference = load_reference(tmp_path / "night" / "fleet.json")
    again = _written([_attempt(tmp_path, "id3", shift=0.05)], tmp_path / "retest", reference)
    (answers,) = again["answers"]
    assert answers["reference"]["retests"][0].startswith("node-3: persistent")
    recovered = _written([_attempt(tmp_path, "id3")], tmp_path / "retest2", reference)
    assert recovered["answers"][0]["reference"]["retests"][0].startswith("node-3: transient")


def test_promote_refuses_a_folder_that_is_not_a_reference(tmp_path: Path) -> None:
    _written([_attempt(tmp_path, "id1"), _attempt(tmp_path, "id2")], tmp_path / "run")
    (tmp_path / "precious").mkdir()
    with pytest.raises(FleetError, match="not a promoted fleet reference"):
        promote(tmp_path / "run" / "fleet.json", tmp_path / "precious")
