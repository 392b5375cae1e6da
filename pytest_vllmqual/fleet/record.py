"""The fleet record: a row per job attempt and node, the cross-node comparisons, the verdict.

It validates against its own versioned schema (``schemas/fleet-record.schema.json``) before it
is written, and is scrubbed again like every public file. Nodes appear only as ``node-N`` and a
hash of Ray's node id. A row carries what the node's sanitized report says (verdict, gates
passed/failed/not applicable/excused by a declaration, cold start, KV pool, largest prompt and its TTFT); a report that
did not validate is not in the record, only the reason. Private artifacts are named by node,
run id and the SHA-256 of their manifest: they stay on the node. A job whose reports came from
fewer than two nodes is not compared, and the decision says so and why; a fleet in which no job
was compared is ``not compared``, never ``consistent``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_vllmqual.clock import utc_now
from pytest_vllmqual.fleet.answers import NodeAnswers, compare_answers
from pytest_vllmqual.fleet.attempts import JobAttempt, JobOutcome
from pytest_vllmqual.fleet.crossnode import compare_nodes
from pytest_vllmqual.fleet.reference import Reference, reference_section
from pytest_vllmqual.hashing import canonical_sha256
from pytest_vllmqual.launch.fingerprint import fingerprint_key
from pytest_vllmqual.layout import raise_if_invalid
from pytest_vllmqual.records import AnswerCause, FloorNodes, Word
from pytest_vllmqual.version import __version__

__all__ = ["RECORD_SCHEMA", "RECORD_SCHEMA_ID", "RECORD_SCHEMA_VERSION", "FleetVerdict", "answer_comparisons",
           "build_record", "decide_fleet",
           "job_report_sha256", "not_compared", "row_of", "validate_record"]

RECORD_SCHEMA = "fleet-record.schema.json"
RECORD_SCHEMA_VERSION = 2
RECORD_SCHEMA_ID = f"https://pytest-vllmqual/schemas/fleet-record/{RECORD_SCHEMA_VERSION}"
_PROBLEMS = {JobOutcome.LOST, JobOutcome.DEADLINE, JobOutcome.CANCELLED, JobOutcome.NOT_STARTED, JobOutcome.ERROR,
             JobOutcome.INVALID_REPORT}


class FleetVerdict(Word):
    """What the fleet as a whole shows, lowest first."""

    INCOMPLETE = "incomplete"
    FAILED = "failed"
    INCONSISTENT = "inconsistent"
    #: Every job passed, but no job's reports came from two or more nodes: nothing was compared.
    NOT_COMPARED = "not compared"
    CONSISTENT = "consistent"


def _utc(epoch: float | None) -> str | None:
    return utc_now(epoch) if epoch else None


def _excused(gate: Mapping[str, Any]) -> bool:
    """A gate record a declaration excused: declared not applicable, measured failing, recorded skipped."""
    measured = gate.get("measurements") or {}
    return bool(measured.get("declared_not_applicable")) and measured.get("measured_outcome") == "failed"


def _gate_counts(report: Mapping[str, Any]) -> dict[str, int]:
    """Gate records by outcome; one a declaration excused counts as ``excused_by_declaration``,
    neither passed nor merely not applicable."""
    counts = {"passed": 0, "failed": 0, "not_applicable": 0, "excused_by_declaration": 0}
    for gate in report.get("gates") or []:
        outcome = gate.get("outcome")
        key = "passed" if outcome == "passed" else "failed" if outcome in ("failed", "error") \
            else "excused_by_declaration" if _excused(gate) else "not_applicable"
        counts[key] += 1
    return counts


def _report_facts(report: Mapping[str, Any]) -> dict[str, Any]:
    engine = report.get("engine") or {}
    largest = (report.get("ladder_summary") or {}).get("largest") or {}
    return {
        "verdict": (report.get("decision") or {}).get("verdict"),
        "run_status": (report.get("run") or {}).get("status"),
        "gates": _gate_counts(report),
        "gate_outcomes": {str(g.get("gate")): str(g.get("outcome")) for g in report.get("gates") or []},
        "cold_start_s": (report.get("lifecycle") or {}).get("cold_start_s"),
        "kv_cache_tokens": engine.get("kv_cache_tokens"),
        "max_concurrency": engine.get("max_concurrency"),
        "min_rank_kv_gib": engine.get("min_rank_kv_gib"),
        "kv_tokens_per_gib": engine.get("kv_tokens_per_gib"),
        "tp_size_seen": engine.get("tp_size_seen"),
        "vllm_version": engine.get("vllm_version"),
        "largest_prompt_tokens": largest.get("prompt_tokens"),
        "largest_ttft_s": largest.get("ttft_s"),
    }


def job_report_sha256(report: Mapping[str, Any]) -> str:
    """The digest a fleet row gives its job's report: SHA-256 of the report's sorted JSON with
    JSON's usual spacing (the form fleet records have always named a report by)."""
    return canonical_sha256(report, compact=False)


def row_of(attempt: JobAttempt, node_label: str | None, node_id_sha256: str | None) -> dict[str, Any]:
    """One record row: the attempt, its node's anonymous label, and its report's figures."""
    report = attempt.report or {}
    result = attempt.result
    queue_s = (attempt.started_epoch - attempt.submitted_epoch) if attempt.started_epoch and \
        attempt.submitted_epoch else None
    run_id = (report.get("run") or {}).get("id") or result.get("run_id")
    private = result.get("private") or {}
    row: dict[str, Any] = {
        "job": attempt.job.name, "attempt": attempt.number, "attempt_id": attempt.attempt_id,
        "node": node_label, "node_id_sha256": node_id_sha256, "recipe": attempt.recipe_arg.rsplit("/", 1)[-1],
        "recipe_sha256": attempt.recipe_sha256, "overrides": list(attempt.overrides),
        "node_overrides": [o for o in attempt.overrides if o not in attempt.job.overrides],
        "selection": attempt.job.pytest_selection(), "outcome": (attempt.outcome or JobOutcome.CANCELLED).value,
        "reason": attempt.reason, "resources": {"cpus": attempt.cpus, "gpus": attempt.gpus},
        "submitted_utc": _utc(attempt.submitted_epoch), "started_utc": _utc(attempt.started_epoch),
        "queue_s": round(queue_s, 3) if queue_s is not None else None,
        "elapsed_s": result.get("elapsed_s"), "exit_code": result.get("exit_code"), "run_id": run_id,
        "retried_as": attempt.retried_as, "report": None, "floor": attempt.floor,
        "node_key": result.get("node_key"), "fingerprint": None, "answers": None,
        "private": {"node": node_label, "run_id": run_id, "files": private.get("files", 0),
                    "manifest_sha256": private.get("manifest_sha256")} if node_label else None,
    }
    row.update({k: None for k in ("verdict", "run_status", "cold_start_s", "kv_cache_tokens", "max_concurrency",
                                   "min_rank_kv_gib", "kv_tokens_per_gib", "tp_size_seen", "vllm_version",
                                   "largest_prompt_tokens", "largest_ttft_s")})
    row["gates"], row["gate_outcomes"] = {"passed": 0, "failed": 0, "not_applicable": 0, "excused_by_declaration": 0}, {}
    if attempt.report is not None:
        row.update(_report_facts(attempt.report))
        row["report"] = {"file": f"jobs/{attempt.attempt_id}.json",
                         "html": f"jobs/{attempt.attempt_id}.html" if result.get("html_text") else None,
                         "sha256": job_report_sha256(attempt.report)}
        row["fingerprint"] = fingerprint_key(attempt.report.get("fingerprint"), attempt.report.get("hardware")) or None
        probe = attempt.report.get("equivalence_probe") or {}
        if probe.get("sha256") and attempt.sidecar is not None:
            row["answers"] = {"sidecar": f"sidecars/{probe['sha256']}.probe.json.gz", "sha256": probe["sha256"],
                              "probe_sha256": probe.get("probe_sha256"),
                              "items_bank_sha256": probe.get("items_bank_sha256")}
    return row


def _latest_by_node(rows: Sequence[Mapping[str, Any]], job: str) -> dict[str, Mapping[str, Any]]:
    """The last row with a report on each node, for one job."""
    latest: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        if row["job"] == job and row["report"] is not None and row["node"] and not row.get("floor"):
            latest[str(row["node"])] = row
    return latest


def not_compared(rows: Sequence[Mapping[str, Any]], jobs: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, str]]:
    """Every job whose reports came from fewer than two nodes, with why (``jobs``: the record's
    ``fleet.jobs``, for each job's placement)."""
    placement = {str(j.get("name")): str(j.get("placement") or "") for j in jobs}
    out: list[dict[str, str]] = []
    for job in dict.fromkeys(str(r["job"]) for r in rows):
        latest = _latest_by_node(rows, job)
        if len(latest) >= 2:
            continue
        where = f" (placement {placement[job]})" if placement.get(job) else ""
        reason = (f"one node ran the job ({next(iter(latest))}){where}: there is no other node's report to "
                  "compare it with" if latest else "no attempt of the job wrote a report")
        out.append({"job": job, "reason": reason})
    return out


def _comparisons(rows: Sequence[dict[str, Any]], attempts: Sequence[JobAttempt]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for job in dict.fromkeys(a.job.name for a in attempts):
        latest = _latest_by_node(rows, job)
        if len(latest) < 2:
            continue
        report = next(a.report for a in attempts if a.job.name == job and a.report)
        compare = ((report or {}).get("recipe") or {}).get("content", {}).get("compare") or {}
        out.append({"job": job, **compare_nodes(sorted(latest.values(), key=lambda r: r["node"]), compare)})
    return out


def _node_answers(row: Mapping[str, Any], attempt: JobAttempt | None,
                  bodies: Mapping[str, dict[str, Any] | str]) -> NodeAnswers:
    report = (attempt.report if attempt is not None else None) or {}
    why = "the node ran no probe (its report has no equivalence_probe)" if not report.get("equivalence_probe") \
        else "the node sent back no probe sidecar"
    return NodeAnswers(node=str(row["node"]), report=report, sidecar=bodies.get(str(row["attempt_id"]), why),
                       key=row.get("node_key"), fingerprint=row.get("fingerprint") or {},
                       node_overrides=tuple(row.get("node_overrides") or ()), recipe_sha256=row.get("recipe_sha256"))


def answer_comparisons(rows: Sequence[Mapping[str, Any]], attempts: Sequence[JobAttempt],
                       bodies: Mapping[str, dict[str, Any] | str], reference: Reference | None = None
                       ) -> list[dict[str, Any]]:
    """Each job's answers compared node by node (``bodies``: attempt id -> its sidecar, or why none),
    for every job that ran on two or more nodes (one is enough with a reference) and did not opt out;
    with ``reference``, each node against its stored answers too (``reference``)."""
    by_id = {a.attempt_id: a for a in attempts}
    out: list[dict[str, Any]] = []
    for job in dict.fromkeys(a.job.name for a in attempts):
        spec = next(a.job for a in attempts if a.job.name == job)
        latest = _latest_by_node(rows, job)
        floors = {str(r["node"]): _node_answers(r, by_id.get(str(r["attempt_id"])), bodies) for r in rows
                  if r["job"] == job and r.get("floor") and r["report"] is not None and r["node"]}
        if not spec.answers.compare or not latest or (len(latest) < 2 and reference is None and not floors):
            continue
        nodes = [_node_answers(row, by_id.get(str(row["attempt_id"])), bodies) for _, row in sorted(latest.items())]
        result = compare_answers(job, nodes, floors, floor_asked=spec.answers.floor is not FloorNodes.NONE)
        if reference is not None:
            result["reference"] = reference_section(reference, job, nodes, result["floor"]["figures"])
            changed = [c for c in result["reference"]["changed"] if c["cause"] == AnswerCause.UNEXPLAINED]
            known = {s["node"] for s in result["suspects"]}
            result["suspects"] += [c for c in changed if c["node"] not in known]
            result["agree"] = (result["agree"] or not result["compared"]) and not changed
        out.append(result)
    return out


def decide_fleet(rows: Sequence[Mapping[str, Any]], comparisons: Sequence[Mapping[str, Any]],
                 skipped: Sequence[Mapping[str, str]], interrupted: bool,
                 answers: Sequence[Mapping[str, Any]] = ()) -> tuple[FleetVerdict, list[str], list[str]]:
    """The verdict with what it proves and does not, from the rows, the comparisons, the jobs
    not compared (``skipped``, from :func:`not_compared`) and the nodes' answers compared
    (``answers``, from :func:`answer_comparisons`): an unexplained difference in answers makes the
    fleet ``inconsistent``, as a disagreeing engine fact does."""
    proves: list[str] = []
    not_proven: list[str] = []
    problems = [r for r in rows if JobOutcome(r["outcome"]) in _PROBLEMS and not r["retried_as"]]
    failed = [r for r in rows if r["outcome"] == JobOutcome.FAILED.value and not r["retried_as"]]
    for row in problems:
        not_proven.append(f"job {row['job']} on {row['node'] or 'no node'}: {row['outcome']} ({row['reason']})")
    for row in failed:
        not_proven.append(f"job {row['job']} on {row['node']}: failed ({row['reason']})")
    passed = [r for r in rows if r["outcome"] == JobOutcome.PASSED.value]
    for row in passed:
        proves.append(f"job {row['job']} (recipe {row['recipe']}, {' '.join(row['selection']) or 'every gate'}) "
                      f"passed on {row['node']}{' (its floor run)' if row.get('floor') else ''} with verdict "
                      f"{row['verdict']}"
                      + (f"; {row['reason']}" if row.get("reason") else ""))
    for comparison in comparisons:
        (proves if comparison["agree"] else not_proven).append(f"job {comparison['job']}: {comparison['summary']}")
    for job in skipped:
        not_proven.append(f"that job {job['job']} gives the same result on another node: not compared, {job['reason']}")
    for answer in answers:
        if answer["compared"]:
            (proves if answer["agree"] else not_proven).append(f"job {answer['job']}: {answer['summary']}")
        else:
            not_proven.append(f"that job {answer['job']}'s nodes answer alike: {answer['summary']}")
        if answer.get("reference"):
            changed = [c for c in answer["reference"]["changed"] if c["cause"] == AnswerCause.UNEXPLAINED]
            (not_proven if changed else proves).append(f"job {answer['job']}: {answer['reference']['summary']}")
    not_proven.append("any node that was not in the cluster, or did not match a job's placement, when the fleet ran")
    if any(r["selection"] for r in rows):
        not_proven.append("the gates a job's -m/-k selection left out (each row's own report lists them)")
    not_proven.append("timing differences between nodes: single runs are observations, not a ranking")
    if interrupted or problems:
        return FleetVerdict.INCOMPLETE, proves, not_proven
    if failed:
        return FleetVerdict.FAILED, proves, not_proven
    if any(not c["agree"] for c in comparisons) or any(not a["agree"] and (a["compared"] or a.get("reference"))
                                                        for a in answers):
        return FleetVerdict.INCONSISTENT, proves, not_proven
    if not comparisons:
        return FleetVerdict.NOT_COMPARED, proves, not_proven
    return FleetVerdict.CONSISTENT, proves, not_proven


def build_record(*, fleet: Mapping[str, Any], attempts: Sequence[JobAttempt], labels: Mapping[str, tuple[str, str]],
                 nodes: Sequence[Mapping[str, Any]], interrupted: bool, started: float, finished: float,
                 mode: str, sidecars: Mapping[str, dict[str, Any] | str] | None = None,
                 reference: Reference | None = None) -> dict[str, Any]:
    """The fleet record (``labels``: Ray node id -> (node-N, hash); ``sidecars``: attempt id -> the
    probe sidecar it sent back, or why none); validated and scrubbed."""
    from pytest_vllmqual.privacy.sanitize import Sanitizer

    rows = []
    for attempt in attempts:
        label, tag = labels.get(attempt.node_id or "", (None, None))
        rows.append(row_of(attempt, label, tag))
    comparisons = _comparisons(rows, attempts)
    skipped = not_compared(rows, fleet.get("jobs") or ())
    answers = answer_comparisons(rows, attempts, sidecars or {}, reference)
    verdict, proves, not_proven = decide_fleet(rows, comparisons, skipped, interrupted, answers)
    record: dict[str, Any] = {
        "schema": RECORD_SCHEMA_ID, "schema_version": RECORD_SCHEMA_VERSION, "tool": {"name": "pytest-vllmqual", "version": __version__},
        "fleet": dict(fleet), "cluster": {"mode": mode, "nodes": list(nodes)},
        "status": "incomplete" if interrupted or verdict is FleetVerdict.INCOMPLETE else "complete",
        "interrupted": interrupted, "started_utc": _utc(started), "finished_utc": _utc(finished),
        "rows": rows, "comparisons": comparisons, "answers": answers,
        "suspects": [suspect for answer in answers for suspect in answer["suspects"]],
        "decision": {"verdict": verdict.value, "proves": proves, "does_not_prove": not_proven,
                     "not_compared": skipped},
    }
    scrubbed: dict[str, Any] = Sanitizer().scrub_obj(record)
    validate_record(scrubbed)
    return scrubbed


def validate_record(record: Any) -> None:
    """FleetError naming the first violation of the fleet record schema."""
    from pytest_vllmqual.errors import FleetError

    raise_if_invalid(record, RECORD_SCHEMA, error=FleetError, where="fleet record", what=f"fleet record schema {RECORD_SCHEMA_VERSION}")
