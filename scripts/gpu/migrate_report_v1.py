"""Carry a report/1, report/2 or report/3 record forward to the current report schema (report/4).

It adds nothing the run did not measure. The real GPU runs (2× H200, vLLM 0.24.0) were made
with the tree of commit 11c44f8, which wrote report/1; the schema then moved to report/2 and to report/3. GPU time is scarce, so those runs
are carried forward instead of repeated. From report/1 to report/2:

- gates get their family, title and "proves" from the registry (pytest_vllmqual/gates/registry.py), by name;
- identity checks keep what report/1 compared and gain their status, source and pinned flag; the
  fields report/1 did not compare (checkpoint; image digest and revision where pinned) are
  ``not checked`` with a note, so identity can only be ``partially-verified``;
- ladder rungs get the structured post-probe smoke and health results from their recorded words;
- the decision is computed again by the current rules (pytest_vllmqual.report.decision.with_decision);
- no run deselected gates (the GPU sessions ran every gate), which is what ``deselected_gates``
  says.

From report/2 to report/3 only the verdict's word changed: the top single-run verdict
``candidate`` is now ``promotable`` (``candidate`` only names the B arm of an A/B). A report/2
record keeps its decision as it was judged and gets the new word; a report/1 record is decided
again by the current rules, which use it already.

From report/3 to report/4 two meanings changed:

- ``slos_set_by``: report/3 wrote ``operator`` both when a recipe said so and when it said nothing
  (the default), so a report/3 ``operator`` cannot be told from an unstated one. It is carried
  forward as ``not stated`` (load section, load gate, recipe content); ``project`` and
  ``placeholder`` stay as they were.
- the stored decision stays as the run wrote it. When today's rules decide the record
  differently, the recomputation is kept beside it as ``decision_recomputed`` (the rules' tool
  version and schema, and the date it last changed); when they agree, there is no such block.

A report/4 record is refreshed the same way (its recomputation follows today's rules), so
running this again after the rules change is safe. A record of any other version is refused.

    python scripts/gpu/migrate_report_v1.py IN.json OUT.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from pytest_vllmqual import __version__
from pytest_vllmqual.gates.registry import family_of, title_of
from pytest_vllmqual.gates.registry import proves as gate_proves
from pytest_vllmqual.hashing import canonical_json
from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.on_disk import SCHEMA_ID, SCHEMA_VERSION, validate_report
from pytest_vllmqual.report.query import preflight_summary

MIGRATED = "report/1 did not compare this field (carried forward by scripts/gpu/migrate_report_v1.py)"
#: Where the report/1 code read each identity field (pytest_vllmqual/gates/identity.py at 11c44f8).
V1_SOURCES = {"runtime_version": "/version", "served_model": "/v1/models id",
              "max_model_len": "/v1/models max_model_len", "tensor_parallel_size": "rank count in the log"}


def _check(field: str, expected: Any, observed: Any, ok: bool | None, *, source: str, pinned: bool,
           note: str = "") -> dict[str, Any]:
    status = "not pinned" if not pinned else "not checked" if ok is None else "matched" if ok else "mismatch"
    return {"field": field, "expected": expected, "observed": observed, "ok": ok, "status": status,
            "source": source, "pinned": pinned, "note": note}


def migrate_identity(identity: dict[str, Any], launcher: str) -> dict[str, Any]:
    expected = identity.get("expected") or {}
    checks = [_check(c["field"], c.get("expected"), c.get("observed"), c.get("ok"),
                     source=V1_SOURCES.get(c["field"], "n/a"), pinned=True, note=c.get("note", ""))
              for c in identity.get("checks", [])]
    checks.insert(0, _check("checkpoint", expected.get("checkpoint"), None, None, source="n/a", pinned=True,
                            note=MIGRATED))
    revision = expected.get("revision")
    checks.insert(1, _check("revision", revision, None, None, source="n/a", pinned=revision is not None,
                            note=MIGRATED if revision else "the recipe pins no revision"))
    image = expected.get("image")
    checks.insert(2, _check("image_digest", (image or "").partition("@")[2] or None, None, None, source="n/a",
                            pinned=launcher == "docker" and bool(image),
                            note=MIGRATED if launcher == "docker" else
                            f"not applicable: the {launcher} launcher runs no container"))
    not_checked = [c["field"] for c in checks if c["status"] == "not checked"]
    if any(c["status"] == "mismatch" for c in checks):
        status = "provenance_mismatch"
    elif not any(c["status"] == "matched" for c in checks):
        status = "unverified"
    else:
        status = "partially-verified" if not_checked else "verified"
    return {**identity, "status": status, "not_checked": not_checked, "checks": checks}


def migrate(report: dict[str, Any]) -> dict[str, Any]:
    """The record at the current schema version; SystemExit for a version this script does not know."""
    version = report.get("schema_version")
    out = json.loads(json.dumps(report))
    if version == 1:
        out = with_decision(_v1_to_v2(out))
    elif version == 2:
        out["decision"] = _v2_to_v3_decision(out["decision"])
    elif version not in (3, 4):
        raise SystemExit(f"not a report/1 to report/4 record (schema_version {version!r})")
    if version != 4:
        _v3_to_v4_slos(out)
    out["schema"], out["schema_version"] = SCHEMA_ID, SCHEMA_VERSION
    _recompute(out)
    validate_report(out)
    return out


def _v3_to_v4_slos(out: dict[str, Any]) -> None:
    """report/3's ``operator`` may have been a default nobody stated: report/4 says ``not stated``."""
    def carry(section: Any) -> None:
        if isinstance(section, dict) and section.get("slos_set_by") == "operator":
            section["slos_set_by"] = "not stated"

    carry(out.get("load"))
    carry(((out.get("recipe") or {}).get("content") or {}).get("gates", {}).get("load"))
    for gate in out.get("gates") or []:
        if gate.get("gate") == "load":
            carry(gate.get("measurements"))


def _recompute(out: dict[str, Any]) -> None:
    """Keep the stored decision; put today's recomputation beside it when it differs (dated when it
    last changed, so running this again with the same rules changes nothing)."""
    previous = out.pop("decision_recomputed", None)
    decision = with_decision({k: v for k, v in out.items()})["decision"]
    if decision == out["decision"]:
        return
    if isinstance(previous, dict) and previous.get("decision") == decision:
        out["decision_recomputed"] = previous
        return
    out["decision_recomputed"] = {"rules": f"pytest-vllmqual {__version__}, report/{SCHEMA_VERSION}",
                                  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                                  "decision": decision}


def _v2_to_v3_decision(decision: dict[str, Any]) -> dict[str, Any]:
    """report/2's top verdict ``candidate`` in report/3's word, ``promotable``; nothing else moves."""
    if decision.get("verdict") != "candidate":
        return decision
    reasons = [r.replace("a single run is at most a candidate", "a single run is at most promotable")
               for r in decision.get("reasons") or []]
    return {**decision, "verdict": "promotable", "summary": "promotable; no-promotion", "reasons": reasons}


def _v1_to_v2(out: dict[str, Any]) -> dict[str, Any]:
    out["run"]["deselected_gates"] = []
    out["identity"] = migrate_identity(out["identity"], str(out["lifecycle"].get("launcher")))
    for gate in out["gates"]:
        gate["family"] = family_of(gate["gate"], gate.get("markers", [])) or "other"
        gate["title"] = title_of(gate["gate"], gate.get("title", ""))
        gate["proves"] = gate_proves(gate)
    for rung in out["ladder"] + [r for r in [out["ladder_summary"].get("largest")] if r]:
        rung.setdefault("post_probe_smoke_ok", None if rung.get("post_probe_smoke") is None
                        else rung["post_probe_smoke"] == "passed")
        rung.setdefault("health_after_ok", None if rung.get("health_after") is None
                        else rung["health_after"] == "healthy")
    out["preflight"] = preflight_summary(out)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    migrated = migrate(json.loads(args.source.read_text()))
    args.target.write_text(canonical_json(migrated, compact=False, indent=2) + "\n")
    print(f"wrote {args.target}: verdict {migrated['decision']['verdict']}, identity {migrated['identity']['status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
