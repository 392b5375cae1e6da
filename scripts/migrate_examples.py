"""Carry every committed record under a folder (default ``reports/examples``) forward to today's schemas.

Safe to run again at any time (after a schema bump, or after the rules that decide a report
change): it rewrites only what today's code says differently, and adds nothing a run did not
measure.

- arm reports (``report/1`` to ``report/4``): ``scripts/gpu/migrate_report_v1.py``'s ``migrate``
  (the stored decision stays as written; a recomputation that differs sits beside it);
- fleet records (``fleet-record/1``, ``/2``): the verdict decided again from the stored rows and
  comparisons, with the jobs that were not compared and why (``fleet-record/1`` called a fleet in
  which nothing was compared ``consistent``); each row's report hash follows its migrated job
  report; the fleet page and junit rendered again;
- comparisons: computed again by today's code from the migrated arm reports in the same folder
  (found by run id; with the code of report/4 this changed only each arm's SHA-256), so a section
  a later version adds to comparisons appears in the committed ones; where an arm's probe sidecar
  was left out of the folder, the comparison stays as measured: its arms' SHA-256 follow, and what
  today's code derives from the stored figures is added (each context length's top-1 status, the
  promotion rule and the three layers);
- campaign records: which arm qualifies, and the exit code that gives, decided again by today's
  rule from the arm reports beside them (found by run id);
- each report's and comparison's HTML page beside it rendered again.

    .venv/bin/python scripts/migrate_examples.py [FOLDER]
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from pytest_vllmqual.ab.compare import compare_reports, report_digest
from pytest_vllmqual.campaign.decision import requalify
from pytest_vllmqual.equivalence.comparison import carry_forward
from pytest_vllmqual.fleet.pages import render_fleet_html, render_fleet_junit
from pytest_vllmqual.fleet.record import (
    RECORD_SCHEMA_ID,
    RECORD_SCHEMA_VERSION,
    decide_fleet,
    job_report_sha256,
    not_compared,
    validate_record,
)
from pytest_vllmqual.hashing import canonical_json, sha256_file
from pytest_vllmqual.report.html_page import render_html

ROOT = Path(__file__).resolve().parents[1]


def _report_migrator() -> Any:
    path = ROOT / "scripts" / "gpu" / "migrate_report_v1.py"
    spec = importlib.util.spec_from_file_location("migrate_report_v1", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _dump(data: Any, path: Path) -> bool:
    """Write ``data`` as the file was written (indented, keys in their order, non-ASCII escaped or
    not as before); False when the file already says it."""
    before = path.read_text(encoding="utf-8") if path.is_file() else ""
    old = json.loads(before) if before else None
    ascii_only = old is not None and before == json.dumps(old, indent=2, ensure_ascii=True) + "\n"
    ordered = old is not None and before == canonical_json(old, compact=False, indent=2, ascii_only=ascii_only) + "\n"
    text = (canonical_json(data, compact=False, indent=2, ascii_only=ascii_only) if ordered
            else json.dumps(data, indent=2, ensure_ascii=ascii_only)) + "\n"
    if before == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True


def _kind(data: dict[str, Any]) -> str:
    schema = str(data.get("schema") or "")
    return schema.rsplit("/", 2)[-2] if schema else ""


def migrate_fleet_record(record: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The fleet record at today's schema, decided again from its own rows and comparisons."""
    out = json.loads(json.dumps(record))
    for row in out["rows"]:
        report = row.get("report")
        if report and (folder / report["file"]).is_file():
            report["sha256"] = job_report_sha256(_load(folder / report["file"]))
    skipped = not_compared(out["rows"], (out.get("fleet") or {}).get("jobs") or ())
    verdict, proves, not_proven = decide_fleet(out["rows"], out["comparisons"], skipped, bool(out["interrupted"]))
    out["decision"] = {"verdict": verdict.value, "proves": proves, "does_not_prove": not_proven,
                       "not_compared": skipped}
    out["schema"], out["schema_version"] = RECORD_SCHEMA_ID, RECORD_SCHEMA_VERSION
    validate_record(out)
    return out


def refresh_comparison(comparison: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The comparison computed again by today's code from the arm reports beside it (found by run
    id, hashed as the comparison hashed them: the file, or canonical JSON, and each arm's probe sidecar
    beside it); as it was when an arm or a probe sidecar is missing (committed GPU evidence leaves its
    sidecars out: tens of MB each)."""
    arms = {_load(p)["run"]["id"]: p for p in folder.glob("*.json") if _kind(_load(p)) == "report"}
    roles = [r for r in ("control", "candidate", "replay") if comparison.get(r)]
    if any(comparison[r]["run_id"] not in arms for r in roles):
        return comparison
    paths = {r: arms[comparison[r]["run_id"]] for r in roles}
    reports = {r: _load(paths[r]) for r in roles}
    if any(not _sidecar_beside(reports[r], folder) for r in roles):
        return _rehashed(comparison, reports, paths)  # a sidecar was left out (size): the sections stay as measured
    hashes = {r: sha256_file(paths[r]) for r in roles
              if comparison[r].get("hashed") == "file"}
    return compare_reports(reports["control"], reports["candidate"], replay=reports.get("replay"),
                           report_hashes=hashes, folders=dict.fromkeys(roles, folder))


def _rehashed(comparison: dict[str, Any], reports: dict[str, dict[str, Any]],
              paths: dict[str, Path]) -> dict[str, Any]:
    """The comparison as it was, its arm references hashed again the way it hashed them: a migrated
    arm report (a decision recomputed beside the stored one) keeps its comparison pointing at it."""
    out = json.loads(json.dumps(comparison))
    for role, report in reports.items():
        ref = out[role]
        ref["report_sha256"] = sha256_file(paths[role]) if ref.get("hashed") == "file" else report_digest(report)
    if isinstance(out.get("equivalence"), dict):  # what today's code derives from the stored figures
        out["equivalence"] = carry_forward(out["equivalence"], reports["control"])
    return out


def _sidecar_beside(report: dict[str, Any], folder: Path) -> bool:
    """True when the report ran no equivalence probe or its sidecar file lies in ``folder``."""
    reference = report.get("equivalence_probe")
    return not isinstance(reference, dict) or (folder / str(reference.get("file"))).is_file()


def _requalify_campaign(record: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The campaign record decided again by today's rule from its arms' reports in ``folder``
    (found by run id: the examples may rename a report after its recipe)."""
    by_run = {_load(p)["run"]["id"]: _load(p) for p in folder.glob("*.json") if _kind(_load(p)) == "report"}
    reports = {str(a["name"]): by_run[a["run_id"]] for a in record.get("arms") or [] if a.get("run_id") in by_run}
    return requalify(record, reports)


def migrate_folder(root: Path) -> list[Path]:
    """Every record under ``root`` carried forward; returns the files that changed."""
    migrate = _report_migrator().migrate
    changed: list[Path] = []
    paths = sorted(root.rglob("*.json"))
    for path in paths:  # arm reports first: comparisons, fleets and campaigns hash or read them
        data = _load(path)
        if _kind(data) == "report":
            report = migrate(data)
            if _dump(report, path):
                changed.append(path)
            page = path.with_suffix(".html")
            if page.is_file():
                page.write_text(render_html(report), encoding="utf-8")
    for path in paths:
        data = _load(path)
        if _kind(data) == "comparison":
            comparison = refresh_comparison(data, path.parent)
            if _dump(comparison, path):
                changed.append(path)
            page = path.with_suffix(".html")
            candidate = next((p for p in path.parent.glob("*.json")
                              if _kind(_load(p)) == "report"
                              and _load(p)["run"]["id"] == comparison["candidate"]["run_id"]), None)
            if page.is_file() and candidate is not None:
                page.write_text(render_html(_load(candidate), comparison=comparison), encoding="utf-8")
        elif _kind(data) == "fleet-record":
            record = migrate_fleet_record(data, path.parent)
            if _dump(record, path):
                changed.append(path)
            (path.parent / "fleet.html").write_text(render_fleet_html(record), encoding="utf-8")
            (path.parent / "fleet.xml").write_text(render_fleet_junit(record), encoding="utf-8")
        elif path.name.startswith("campaign-") and "spec" in data:
            if _dump(_requalify_campaign(data, path.parent), path):
                changed.append(path)
    return changed


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else ROOT / "reports" / "examples"
    for path in migrate_folder(root):
        print(f"carried forward: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
