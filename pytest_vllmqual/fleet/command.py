"""``vllmqual fleet run FLEET [--address ADDR]``: connect, run, write the record, exit with its verdict.

Outputs go to ``OUT/<fleet>-<run id>/``: ``fleet.json`` (the record), ``fleet.html``,
``fleet.xml`` (junit), ``suspects.json`` (the nodes a scheduler could drain),
``jobs/<attempt>.json|.html`` (each node's sanitized report and page, re-validated here) and
``sidecars/<SHA-256>.probe.json.gz`` (each node's probe answers). The record is written even when
the run is interrupted. ``vllmqual fleet promote RECORD DIR`` copies a record with its reports and
sidecars to be the next ``--reference``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from pytest_vllmqual.atomic_io import write_bytes_atomic, write_json_atomic, write_text_atomic
from pytest_vllmqual.fleet.attempts import JobAttempt
from pytest_vllmqual.fleet.cluster import RayCluster
from pytest_vllmqual.fleet.pages import render_fleet_html, render_fleet_junit
from pytest_vllmqual.fleet.record import FleetVerdict, build_record
from pytest_vllmqual.fleet.reference import Reference, load_reference
from pytest_vllmqual.fleet.runner import FleetRun, ProgressFn
from pytest_vllmqual.fleet.spec import FleetSpec, load_fleet
from pytest_vllmqual.hashing import sha256_file

__all__ = ["EXIT_INTERRUPTED", "exit_code", "keep_sidecars", "progress_line", "promote", "run_fleet", "write_outputs"]

EXIT_INTERRUPTED = 130


def progress_line(text: str) -> None:
    """A ``[fleet]`` progress line on stderr."""
    print(f"[fleet] {text}", file=sys.stderr, flush=True)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _fleet_section(spec: FleetSpec, run: FleetRun) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description,
            "file_sha256": sha256_file(spec.path), "max_parallel": spec.max_parallel,
            "run_id": run.run_id,
            "jobs": [{"name": j.name, "recipe": j.recipe.rsplit("/", 1)[-1], "placement": j.placement.describe(),
                      "selection": j.pytest_selection(), "deadline_s": j.deadline_s,
                      "retry": {"attempts": j.retry.attempts, "on": [w.value for w in j.retry.on]},
                      "answers": {"compare": j.answers.compare, "floor": j.answers.floor.value}}
                     for j in spec.jobs]}


def keep_sidecars(attempts: Sequence[JobAttempt], folder: Path) -> dict[str, dict[str, Any] | str]:
    """Write each probe sidecar a node sent back as ``sidecars/<SHA-256>.probe.json.gz`` (once per
    content) and read it back, checked against the SHA-256 its report names: attempt id -> the
    sidecar, or why there is none."""
    from pytest_vllmqual.equivalence import sidecar as sidecars
    from pytest_vllmqual.hashing import sha256_hex

    bodies: dict[str, dict[str, Any] | str] = {}
    for attempt in attempts:
        probe = (attempt.report or {}).get("equivalence_probe") or {}
        if attempt.sidecar is None or not probe.get("sha256"):
            continue
        if sha256_hex(attempt.sidecar) != probe["sha256"]:
            bodies[attempt.attempt_id] = "the sidecar that came back does not match the SHA-256 its report names"
            continue
        name = f"{probe['sha256']}.probe.json.gz"
        if not (folder / "sidecars" / name).is_file():
            write_bytes_atomic(attempt.sidecar, folder / "sidecars" / name, what="node probe sidecar")
        body, why = sidecars.load({"file": name, "sha256": probe["sha256"]}, folder / "sidecars")
        bodies[attempt.attempt_id] = body if body is not None else str(why)
    return bodies


def write_outputs(run: FleetRun, out_dir: Path, *, mode: str, reference: Reference | None = None) -> dict[str, Any]:
    """Assemble, validate and write the record, its page, its junit, each node's report and probe
    sidecar, and the suspect list (``suspects.json``: the nodes a scheduler could drain)."""
    alive = {n.node_id for n in run.cluster.nodes()}
    known = {**{n.node_id: n for n in run.nodes}, **{n.node_id: n for n in run.cluster.nodes()}}
    labels = {node_id: (node.label, node.tag) for node_id, node in known.items()}
    for attempt in run.attempts:
        if attempt.node_id and attempt.node_id not in labels:
            from pytest_vllmqual.fleet.cluster import node_hash

            labels[attempt.node_id] = (run.cluster.label_of(attempt.node_id), node_hash(attempt.node_id))
    nodes = [{"node": n.label, "node_id_sha256": n.tag, "cpus": n.resources.get("CPU", 0),
              "gpus": n.resources.get("GPU", 0), "alive_at_end": n.node_id in alive} for n in known.values()]
    folder = out_dir / f"{run.spec.name}-{run.run_id}"
    bodies = keep_sidecars(run.attempts, folder)
    record = build_record(fleet=_fleet_section(run.spec, run), attempts=run.attempts, labels=labels, nodes=nodes,
                          interrupted=run.interrupted, started=run.started_epoch, finished=run.finished_epoch,
                          mode="local" if run.cluster.started_locally else "address", sidecars=bodies,
                          reference=reference)
    for attempt in run.attempts:
        if attempt.report is not None:
            write_json_atomic(attempt.report, folder / "jobs" / f"{attempt.attempt_id}.json", what="node report")
            html = attempt.result.get("html_text")
            if html:
                write_text_atomic(str(html), folder / "jobs" / f"{attempt.attempt_id}.html", what="node report page")
    write_json_atomic(record, folder / "fleet.json", what="fleet record")
    write_json_atomic({"fleet": run.spec.name, "run_id": run.run_id, "verdict": record["decision"]["verdict"],
                       "suspects": record["suspects"]}, folder / "suspects.json", what="fleet suspect list")
    write_text_atomic(render_fleet_html(record), folder / "fleet.html", what="fleet page")
    write_text_atomic(render_fleet_junit(record), folder / "fleet.xml", what="fleet junit")
    record["_folder"] = str(folder)
    return record


def run_fleet(path: Path, *, address: str | None, out_dir: Path, progress: ProgressFn = progress_line,
              project_dir: Path | None = None, reference: Path | None = None,
              only_nodes: Sequence[str] = ()) -> int:
    """The whole command; returns the exit code (0 consistent or not compared, both of which need every
    job passed; 1 otherwise; 130 interrupted). ``reference``: a stored fleet record or run report the
    nodes' answers are held against; ``only_nodes``: run only on the nodes with these keys (re-test)."""
    spec = load_fleet(path)
    stored = load_reference(reference) if reference is not None else None
    with RayCluster.connect(address) as cluster:
        run = FleetRun(spec=spec, cluster=cluster, progress=progress, project_dir=project_dir or Path.cwd(),
                       only_nodes=tuple(only_nodes))
        nodes = cluster.nodes()
        progress(f"fleet {spec.name}: {len(spec.jobs)} job(s) on {len(nodes)} node(s) "
                 f"({'a local cluster' if cluster.started_locally else 'cluster at the given address'})")
        with _sigterm_as_interrupt():
            run.run()
        record = write_outputs(run, out_dir, mode="local" if cluster.started_locally else "address",
                               reference=stored)
    folder = Path(record.pop("_folder"))
    decision = record["decision"]
    for comparison in record["comparisons"]:
        progress(f"cross-node, job {comparison['job']}: {comparison['summary']}")
    for answer in record["answers"]:
        progress(f"answers, job {answer['job']}: {answer['summary']}")
        if answer.get("reference"):
            progress(f"answers, job {answer['job']}: {answer['reference']['summary']}")
    if record["suspects"]:
        progress("suspect nodes: " + ", ".join(f"{s['node']} ({s['node_key']})" for s in record["suspects"])
                 + f"; list: {folder / 'suspects.json'}")
    for job in decision["not_compared"]:
        progress(f"cross-node, job {job['job']}: not compared, {job['reason']}")
    progress(f"verdict {decision['verdict']} ({record['status']}); record: {folder / 'fleet.json'}; "
             f"page: {folder / 'fleet.html'}; junit: {folder / 'fleet.xml'}")
    return exit_code(decision, interrupted=run.interrupted)


def exit_code(decision: Mapping[str, Any], *, interrupted: bool) -> int:
    """0 when every job passed and nothing disagreed (``consistent``, or ``not compared`` where no job
    ran on two nodes), 130 when interrupted, else 1."""
    if interrupted:
        return EXIT_INTERRUPTED
    return 0 if decision["verdict"] in (FleetVerdict.CONSISTENT, FleetVerdict.NOT_COMPARED) else 1


def promote(record_path: Path, destination: Path) -> Path:
    """Copy a fleet record with its node reports and sidecars into ``destination`` (replacing what
    was there), to be the next run's ``--reference``; returns the new reference's ``fleet.json``."""
    import shutil

    from pytest_vllmqual.errors import FleetError

    record_path = Path(record_path)
    if record_path.is_dir():
        record_path = record_path / "fleet.json"
    load_reference(record_path)  # checks the record and every sidecar it names
    if destination.exists() and not (destination / "fleet.json").is_file():
        raise FleetError(f"{destination} exists and is not a promoted fleet reference. Fix: name a new folder.")
    staging = Path(str(destination) + ".promoting")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy2(record_path, staging / "fleet.json")
    for sub in ("jobs", "sidecars"):
        if (record_path.parent / sub).is_dir():
            shutil.copytree(record_path.parent / sub, staging / sub)
    shutil.rmtree(destination, ignore_errors=True)
    staging.rename(destination)
    return destination / "fleet.json"
