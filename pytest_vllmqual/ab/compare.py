"""A/B comparison of two arm reports: the comparison record, its markdown, its schema and its files.

:func:`compare_reports` reads two public reports (control, candidate) and an optional replay
of the control, and returns the comparison record (``schemas/comparison.schema.json``,
``$id`` …/comparison/4); :func:`compare_files` does the same for report files, each
referenced by its SHA-256. :func:`render_markdown` prints the record the way the reference campaign's A/B write-up lays it out.
The record is assembled from the concerns' modules: the rows (:mod:`.rows`), the
controlled variables (:mod:`.variables`), the retained findings
(:mod:`.findings`) and the A/B decision (:mod:`.decision`). Everything is built
from an allowlist of report fields, and every string is scrubbed once more.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_vllmqual.atomic_io import write_json_atomic
from pytest_vllmqual.equivalence.comparison import equivalence_section, load_sidecars, markdown_lines
from pytest_vllmqual.errors import ComparisonError, ReportError
from pytest_vllmqual.hashing import canonical_sha256, sha256_file
from pytest_vllmqual.layout import COMPARISON_SCHEMA
from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.report.decision import BOUNDARY
from pytest_vllmqual.report.on_disk import SCHEMA_ID as REPORT_SCHEMA_ID
from pytest_vllmqual.report.on_disk import load_report, migration_hint, validate_report
from pytest_vllmqual.report.public import TOOL_NAME
from pytest_vllmqual.report.read_model import RunView
from pytest_vllmqual.schema_errors import errors_against, raise_if_invalid
from pytest_vllmqual.version import __version__

from .decision import ABEvidence, Targets, arm_verdict, decide_comparison, read_arms
from .findings import kv_consistency, replay_check, retained_finding, timing_noise
from .rows import Tolerances, compare_rows
from .variables import controlled_variables, fmt_setting

__all__ = ["SCHEMA_ID", "SCHEMA_VERSION", "compare_files", "compare_reports", "comparison_errors",
           "load_arm_report", "render_markdown", "report_digest", "validate_comparison", "write_comparison_atomic"]

SCHEMA_ID = "https://pytest-vllmqual/schemas/comparison/4"
SCHEMA_VERSION = 4
_ROLES = ("control", "candidate", "replay")


def report_digest(report: Mapping[str, Any]) -> str:
    """SHA-256 of a report's canonical JSON (sorted keys, compact), for reports held in memory."""
    return canonical_sha256(report, ascii_only=False, default=str)


def _arm_ref(report: Mapping[str, Any], view: RunView, role: str, digest: str | None) -> dict[str, Any]:
    run = report.get("run") or {}
    recipe = report.get("recipe") or {}
    return {
        "role": role,
        "arm": str(run.get("arm") or ""),
        "run_id": str(run.get("id") or ""),
        "recipe": str(recipe.get("name") or ""),
        "recipe_sha256": str(recipe.get("sha256") or ""),
        "report_sha256": digest or report_digest(report),
        "hashed": "file" if digest else "canonical-json",
        "started_utc": run.get("started_utc"),
        "mode": run.get("mode"),
        "status": run.get("status"),
        "verdict": arm_verdict(view).value,
    }


def _arm_labels(control: Mapping[str, Any], candidate: Mapping[str, Any],
                variables: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """Column headers ("8,192 control", "4,096 candidate") and, for the title, the changed variable.

    With exactly one functional scalar change the headers name its two values (the reference campaign's
    style); otherwise they name the arms.
    """
    functional = variables["functional"]
    if len(functional) == 1:
        change = next((c for c in variables["changed"] if c["path"] == functional[0]), None)
        if change is not None and all(isinstance(change[k], int | float | str) and not isinstance(change[k], bool)
                                      for k in ("control", "candidate")):
            a, b = fmt_setting(change["control"], change["path"]), fmt_setting(change["candidate"], change["path"])
            return [f"{a} control", f"{b} candidate"], f"{functional[0].rsplit('.', 1)[-1]} {a} → {b}"
    names = [str((r.get("run") or {}).get("arm") or (r.get("recipe") or {}).get("name")) for r in (control, candidate)]
    if names[0] == names[1]:
        names = [str((r.get("run") or {}).get("id")) for r in (control, candidate)]
    return [f"{names[0]} control", f"{names[1]} candidate"], None


def _check_report(report: Any, role: str) -> None:
    if not isinstance(report, Mapping):
        raise ComparisonError(f"the {role} is not a report object (got {type(report).__name__})")
    if report.get("schema") == SCHEMA_ID:
        raise ComparisonError(f"the {role} is a comparison record, not an arm report")
    if report.get("schema") != REPORT_SCHEMA_ID:
        raise ComparisonError(f"the {role} is not a vllmqual arm report: schema {report.get('schema')!r}, expected "
                              f"{REPORT_SCHEMA_ID}")


def compare_reports(control: Mapping[str, Any], candidate: Mapping[str, Any], *,
                    replay: Mapping[str, Any] | None = None, targets: Targets | None = None,
                    report_hashes: Mapping[str, str] | None = None,
                    sanitizer: Sanitizer | None = None,
                    folders: Mapping[str, Path | None] | None = None) -> dict[str, Any]:
    """The comparison record of two arm reports (and a replay of the control), schema-valid.

    ``targets`` defaults to :meth:`Targets.from_reports`; ``report_hashes`` maps ``control`` /
    ``candidate`` / ``replay`` to the SHA-256 of each report file (the CLI passes them; without
    them each report is hashed as canonical JSON). ``sanitizer`` scrubs every string once more.
    ``folders`` maps a role to the folder its report lies in, where its probe sidecar is.
    """
    for role, report in (("control", control), ("candidate", candidate), ("replay", replay)):
        if report is not None:
            _check_report(report, role)
    hashes = dict(report_hashes or {})
    if replay is not None and (hashes.get("replay") or report_digest(replay)) == (
            hashes.get("control") or report_digest(control)):
        raise ComparisonError("the replay is the control's own report; a replay must be a fresh run of the control")
    tolerances = Tolerances.from_report(control)
    views = read_arms(control=control, candidate=candidate, replay=replay)
    targets = targets or Targets.from_reports(views.values())
    rows, single = compare_rows(control, candidate, noise_floor_pct=tolerances.timing_noise_floor_pct)
    variables = controlled_variables(control, candidate)
    findings = [kv_consistency(control, candidate, tolerances.kv_tokens_per_gib_tolerance_pct, variables)]
    replay_section: dict[str, Any] | None = None
    if replay is not None:
        replay_section, replay_finding = replay_check(control, replay, candidate, tolerances)
        findings.append(replay_finding)
    else:
        findings.append(retained_finding("replay", "absent", "no replay of the control ran: the baseline may be a stale log."))
    findings.append(timing_noise(rows, tolerances.timing_noise_floor_pct))
    found = load_sidecars({"control": control, "candidate": candidate, "replay": replay}, dict(folders or {}))
    equivalence = equivalence_section(control, candidate, replay, found)
    decision = decide_comparison(ABEvidence(views["control"], views["candidate"], views.get("replay"), rows,
                                            variables, findings, replay_section, targets, equivalence))
    labels, changed_text = _arm_labels(control, candidate, variables)
    notes = [f"{r['measurement']}: {r['label']} ({r['change']} against the "
             f"{tolerances.timing_noise_floor_pct:g}% noise floor)" for r in rows if r["label"]]
    notes += [f"measured in one arm only: {s['measurement']} (control {s['control'] or 'not measured'}, "
              f"candidate {s['candidate'] or 'not measured'})" for s in single]
    names = [(r.get("recipe") or {}).get("name") for r in (control, candidate)]
    title = f"A/B: {names[0]} vs {names[1]}" + (f" ({changed_text})" if changed_text else "")
    sanitizer = sanitizer or Sanitizer()
    sanitizer.keep(*(name for name in names if isinstance(name, str)))  # the arms' recipe names
    body = sanitizer.scrub_obj({
        "title": title,
        "arms": labels,
        "control": _arm_ref(control, views["control"], "control", hashes.get("control")),
        "candidate": _arm_ref(candidate, views["candidate"], "candidate", hashes.get("candidate")),
        "replay": _arm_ref(replay, views["replay"], "replay", hashes.get("replay")) if replay is not None else None,
        "tolerances": {"timing_noise_floor_pct": tolerances.timing_noise_floor_pct,
                       "replay_tolerance_pct": tolerances.replay_tolerance_pct,
                       "kv_tokens_per_gib_tolerance_pct": tolerances.kv_tokens_per_gib_tolerance_pct,
                       "source": tolerances.source},
        "targets": {"prompt_tokens": targets.prompt_tokens, "context_tokens": targets.context_tokens,
                    "source": targets.source},
        "rows": rows,
        "not_compared": single,
        "controlled_variables": variables,
        "findings": findings,
        "replay_check": replay_section,
        "decision": decision,
        "equivalence": equivalence,
        "notes": notes,
    })
    comparison: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": TOOL_NAME, "version": __version__},
        **body,
        "verdict": body["decision"]["verdict"],
        "redactions": sanitizer.redaction_summary(),
    }
    validate_comparison(comparison)
    return comparison


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(comparison: Mapping[str, Any]) -> str:
    """The comparison as markdown: the reference campaign's table, then variables, findings and the decision."""
    arms = [str(a) for a in comparison.get("arms") or ["control", "candidate"]]
    lines = [f"## {_md(comparison.get('title') or 'A/B comparison')}", "",
             f"| Measurement | {' | '.join(_md(a) for a in arms)} | Change |",
             "|---|" + "---|" * len(arms) + "---|"]
    for row in comparison.get("rows") or []:
        lines.append(f"| {_md(row['measurement'])} | {' | '.join(_md(v) for v in row['values'])} | "
                     f"{_md(row['change'])} |")
    lines.append("")
    for note in comparison.get("notes") or []:
        lines.append(f"- {note}")
    variables = comparison.get("controlled_variables") or {}
    lines += ["", "### Controlled variables", "", str(variables.get("summary") or "")]
    for change in variables.get("changed") or []:
        lines.append(f"- {change['kind']}: `{change['path']}` {fmt_setting(change['control'], change['path'])} → "
                     f"{fmt_setting(change['candidate'], change['path'])}")
    lines.append(f"- confounded: {'yes' if variables.get('confounded') else 'no'}")
    lines += ["", "### Retained findings", ""]
    for finding in comparison.get("findings") or []:
        lines.append(f"- **{finding['id']}** ({finding['status']}): {finding['summary']}")
    equivalence = comparison.get("equivalence")
    if isinstance(equivalence, Mapping):
        lines += ["", "### Output equivalence", "", *markdown_lines(equivalence)]
    decision = comparison.get("decision") or {}
    lines += ["", f"### Decision: {decision.get('verdict')} ({decision.get('summary')})", ""]
    lines += [f"- {r}" for r in decision.get("reasons") or []]
    for title, key in (("What this proves", "proves"), ("What it does not prove", "does_not_prove"),
                       ("Caveats", "caveats")):
        items = decision.get(key) or []
        lines += ["", f"**{title}**", ""] + ([f"- {i}" for i in items] or ["- nothing"])
    lines += ["", f"_{decision.get('boundary') or BOUNDARY}_"]
    refs = [comparison.get(r) for r in _ROLES if comparison.get(r)]
    lines += ["", "Reports: " + "; ".join(f"{ref['role']} {ref['recipe']} sha256 {ref['report_sha256']}"
                                          for ref in refs if isinstance(ref, Mapping))]
    return "\n".join(lines) + "\n"


def comparison_errors(comparison: Any) -> list[str]:
    """Every schema violation ("key 'a.b' ...", ``schema_errors``' wording); empty when valid."""
    return errors_against(comparison, COMPARISON_SCHEMA)


def validate_comparison(comparison: Any, *, where: str = "comparison") -> None:
    """Raise ComparisonError naming the first violation when the record does not match its schema."""
    raise_if_invalid(comparison, COMPARISON_SCHEMA, error=ComparisonError, where=where,
                     what=f"comparison schema {SCHEMA_ID}")


def load_arm_report(path: Path, role: str = "report") -> dict[str, Any]:
    """Read one arm report for comparison; one-line errors for missing, not a report, or schema mismatch."""
    path = Path(path)
    if not path.is_file():
        raise ComparisonError(f"the {role} {path} does not exist. Fix: pass the report.json an arm run wrote.")
    report = load_report(path, validate=False)
    schema = report.get("schema")
    if schema == SCHEMA_ID:
        raise ComparisonError(f"the {role} {path} is a comparison record, not an arm report")
    if schema != REPORT_SCHEMA_ID:
        found = f"schema {schema!r}" if schema is not None else "no 'schema' key"
        raise ComparisonError(f"the {role} {path} is not a vllmqual arm report ({found}; "
                              f"expected {REPORT_SCHEMA_ID}){migration_hint(report)}")
    try:
        validate_report(report, where=f"the {role} {path}")
    except ReportError as exc:
        raise ComparisonError(str(exc)) from None
    return report


def compare_files(control: Path, candidate: Path, *, replay: Path | None = None,
                  targets: Targets | None = None) -> dict[str, Any]:
    """:func:`compare_reports` on report files; each report is referenced by its file's SHA-256."""
    paths = {"control": Path(control), "candidate": Path(candidate), **({"replay": Path(replay)} if replay else {})}
    reports = {role: load_arm_report(path, role) for role, path in paths.items()}
    hashes = {role: sha256_file(path) for role, path in paths.items()}
    if hashes["control"] == hashes["candidate"]:
        raise ComparisonError(f"the control and the candidate are the same report ({paths['control']}, "
                              f"{paths['candidate']}). Fix: pass two different arms.")
    return compare_reports(reports["control"], reports["candidate"], replay=reports.get("replay"),
                           targets=targets, report_hashes=hashes,
                           folders={role: path.parent for role, path in paths.items()})


def write_comparison_atomic(comparison: Mapping[str, Any], path: Path) -> Path:
    """Validate, then write atomically (temp file, fsync, rename)."""
    validate_comparison(comparison, where=f"comparison {path}")
    return write_json_atomic(comparison, Path(path), what="comparison")
