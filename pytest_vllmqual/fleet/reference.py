"""A fleet held against a stored record: which node answers differently from how it did before?

``vllmqual fleet run FLEET --reference RECORD`` (a nightly screen of a serving pool) compares every
node's answers with a stored fleet record's answers of the same node (matched by its stable key,
``node_key``: an operator's ``vllmqual-node`` label or a salted hash of the machine id, both the
same after a restart), or with one stored run report for every node. A node whose answers changed
since is named, with the cause its fingerprint gives (a driver or image upgrade explains it).

A node the reference named a suspect is also compared with the reference's other nodes: still
different is ``persistent``, answering as they do now is ``transient`` (re-test a suspect with
``--reference RECORD --nodes KEY``). ``vllmqual fleet promote`` makes a record the next reference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllmqual.equivalence import sidecar as sidecars
from pytest_vllmqual.errors import FleetError
from pytest_vllmqual.fleet.answers import NodeAnswers

__all__ = ["Reference", "load_reference"]


@dataclass(frozen=True)
class Reference:
    """The stored answers: per job, the nodes that answered (a run report: one entry for every job)."""

    path: Path
    kind: str
    nodes: tuple[tuple[str | None, NodeAnswers], ...]
    """(job or None for every job, the node's answers)"""
    suspects: frozenset[str] = frozenset()

    def for_job(self, job: str) -> list[NodeAnswers]:
        return [n for j, n in self.nodes if j in (None, job)]

    def describe(self) -> dict[str, Any]:
        return {"file": self.path.name, "kind": self.kind, "nodes": sorted({str(n.key or n.node) for _, n in self.nodes}),
                "suspects": sorted(self.suspects)}


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FleetError(f"cannot read the reference {path}: {type(exc).__name__}. Fix: pass a fleet.json or a "
                         "run report written by vllmqual.") from None
    if not isinstance(data, dict):
        raise FleetError(f"the reference {path} is not a JSON object. Fix: pass a fleet.json or a run report.")
    return data


def _from_record(path: Path, record: Mapping[str, Any]) -> Reference:
    from pytest_vllmqual.fleet.record import validate_record
    from pytest_vllmqual.launch.fingerprint import fingerprint_key

    validate_record(record)
    folder = path.parent
    entries: list[tuple[str | None, NodeAnswers]] = []
    for row in record.get("rows") or []:
        answers, report_ref = row.get("answers"), row.get("report")
        if not answers or not report_ref or row.get("floor") or row.get("retried_as"):
            continue
        report = _read(folder / str(report_ref["file"]))
        name = Path(str(answers["sidecar"])).name
        body, why = sidecars.load({"file": name, "sha256": answers["sha256"]}, folder / "sidecars")
        entries.append((str(row["job"]), NodeAnswers(
            node=f"{row['node']} (reference)", report=report, sidecar=body if body is not None else str(why),
            key=row.get("node_key"), fingerprint=row.get("fingerprint") or fingerprint_key(
                report.get("fingerprint"), report.get("hardware")),
            node_overrides=tuple(row.get("node_overrides") or ()), recipe_sha256=row.get("recipe_sha256"))))
    if not entries:
        raise FleetError(f"the reference {path} holds no node's answers. Fix: pass a fleet record whose jobs ran "
                         "the probe (fleet records keep each node's sidecar under sidecars/).")
    suspects = frozenset(str(s.get("node_key")) for s in record.get("suspects") or [] if s.get("node_key"))
    return Reference(path, "fleet record", tuple(entries), suspects)


def _from_report(path: Path, report: Mapping[str, Any]) -> Reference:
    from pytest_vllmqual.ab.drift import load_reference as load_run_reference
    from pytest_vllmqual.errors import ComparisonError
    from pytest_vllmqual.launch.fingerprint import fingerprint_key

    try:
        run = load_run_reference(path)
    except ComparisonError as exc:
        raise FleetError(str(exc)) from None
    node = NodeAnswers(node="the reference run", report=run.report, sidecar=run.sidecar, key=None,
                       fingerprint=fingerprint_key(report.get("fingerprint"), report.get("hardware")),
                       recipe_sha256=(report.get("recipe") or {}).get("sha256"))
    return Reference(path, "run report", ((None, node),))


def load_reference(path: Path) -> Reference:
    """A fleet record (its folder's jobs/ and sidecars/) or one run report (its sidecar beside it)."""
    path = Path(path)
    data = _read(path)
    if "rows" in data and "fleet" in data:
        return _from_record(path, data)
    return _from_report(path, data)


def matches(reference: Reference, job: str, node: NodeAnswers) -> tuple[NodeAnswers | None, NodeAnswers | None]:
    """(the same node then, a peer then): the reference's answers of this node (by its key; for a
    run report, the run), and for a node the reference named a suspect one of its other nodes."""
    stored = reference.for_job(job)
    if reference.kind == "run report":
        return (stored[0] if stored else None), None
    same = next((n for n in stored if n.key and n.key == node.key), None)
    peer = None
    if node.key and node.key in reference.suspects:
        peer = next((n for n in stored if n.key != node.key and n.key not in reference.suspects), None)
    return same, peer


def unmatched(reference: Reference, job: str, nodes: Sequence[NodeAnswers]) -> list[str]:
    """Nodes of the reference that did not answer today (gone, drained, or not selected)."""
    keys = {n.key for n in nodes}
    return sorted(str(n.key) for n in reference.for_job(job) if reference.kind == "fleet record" and n.key not in keys)


def reference_section(reference: Reference, job: str, nodes: Sequence[NodeAnswers],
                      floor: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Today's nodes of one job against the reference: which changed since, and for a node the
    reference named a suspect, whether it still differs from the reference's other nodes."""
    from pytest_vllmqual.fleet.answers import compare_pair, floor_bounds

    pairs: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    for node in nodes:
        same, peer = matches(reference, job, node)
        bounds = floor_bounds(floor, (node.node,))
        for role, then in (("since", same), ("peer", peer)):
            if then is None:
                continue
            pair = {"role": role, "node": node.node, "node_key": node.key, **compare_pair(then, node, bounds)}
            pairs.append(pair)
            if role == "since" and pair["differs"]:
                changed.append({"node": node.node, "node_key": node.key, "job": job, "cause": pair["cause"],
                                "reason": f"changed since the reference: {pair['summary']}"})
            if role == "peer":
                pair["retest"] = "persistent" if pair["differs"] else "transient" if pair["compared"] else None
    retests = [f"{p['node']}: {p['retest']} ({p['summary']})" for p in pairs if p.get("retest")]
    names = [c["node"] for c in changed]
    summary = (f"changed since the reference {reference.path.name}: {', '.join(names)}" if names else
               f"every node answers as it did in the reference {reference.path.name}"
               if any(p["compared"] for p in pairs) else
               f"no node could be compared with the reference {reference.path.name}")
    return {**reference.describe(), "pairs": pairs, "changed": changed, "missing": unmatched(reference, job, nodes),
            "retests": retests, "summary": summary + ("; re-tested suspects: " + "; ".join(retests) if retests else "")}
