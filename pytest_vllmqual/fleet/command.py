"""``vllmqual fleet run FLEET [--address ADDR]``: connect, run, write the record, exit with its verdict.

Outputs go to ``OUT/<fleet>-<run id>/``: ``fleet.json`` (the record), ``fleet.html``,
``fleet.xml`` (junit) and ``jobs/<attempt>.json|.html`` (each node's sanitized report and page,
re-validated here). The record is written even when the run is interrupted.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from pytest_vllmqual.atomic_io import write_json_atomic, write_text_atomic
from pytest_vllmqual.fleet.cluster import RayCluster
from pytest_vllmqual.fleet.pages import render_fleet_html, render_fleet_junit
from pytest_vllmqual.fleet.record import FleetVerdict, build_record
from pytest_vllmqual.fleet.runner import FleetRun, ProgressFn
from pytest_vllmqual.fleet.spec import FleetSpec, load_fleet
from pytest_vllmqual.hashing import sha256_file

__all__ = ["EXIT_INTERRUPTED", "exit_code", "progress_line", "run_fleet", "write_outputs"]

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
                      "retry": {"attempts": j.retry.attempts, "on": [w.value for w in j.retry.on]}}
                     for j in spec.jobs]}


def write_outputs(run: FleetRun, out_dir: Path, *, mode: str) -> dict[str, Any]:
    """Assemble, validate and write the record, its page, its junit and each node's report."""
    alive = {n.node_id for n in run.cluster.nodes()}
    known = {**{n.node_id: n for n in run.nodes}, **{n.node_id: n for n in run.cluster.nodes()}}
    labels = {node_id: (node.label, node.tag) for node_id, node in known.items()}
    for attempt in run.attempts:
        if attempt.node_id and attempt.node_id not in labels:
            from pytest_vllmqual.fleet.cluster import node_hash

            labels[attempt.node_id] = (run.cluster.label_of(attempt.node_id), node_hash(attempt.node_id))
    nodes = [{"node": n.label, "node_id_sha256": n.tag, "cpus": n.resources.get("CPU", 0),
              "gpus": n.resources.get("GPU", 0), "alive_at_end": n.node_id in alive} for n in known.values()]
    record = build_record(fleet=_fleet_section(run.spec, run), attempts=run.attempts, labels=labels, nodes=nodes,
                          interrupted=run.interrupted, started=run.started_epoch, finished=run.finished_epoch,
                          mode="local" if run.cluster.started_locally else "address")
    folder = out_dir / f"{run.spec.name}-{run.run_id}"
    for attempt in run.attempts:
        if attempt.report is not None:
            write_json_atomic(attempt.report, folder / "jobs" / f"{attempt.attempt_id}.json", what="node report")
            html = attempt.result.get("html_text")
            if html:
                write_text_atomic(str(html), folder / "jobs" / f"{attempt.attempt_id}.html", what="node report page")
    write_json_atomic(record, folder / "fleet.json", what="fleet record")
    write_text_atomic(render_fleet_html(record), folder / "fleet.html", what="fleet page")
    write_text_atomic(render_fleet_junit(record), folder / "fleet.xml", what="fleet junit")
    record["_folder"] = str(folder)
    return record


def run_fleet(path: Path, *, address: str | None, out_dir: Path, progress: ProgressFn = progress_line,
              project_dir: Path | None = None) -> int:
    """The whole command; returns the exit code (0 consistent or not compared, both of which need every
    job passed; 1 otherwise; 130 interrupted)."""
    spec = load_fleet(path)
    with RayCluster.connect(address) as cluster:
        run = FleetRun(spec=spec, cluster=cluster, progress=progress, project_dir=project_dir or Path.cwd())
        nodes = cluster.nodes()
        progress(f"fleet {spec.name}: {len(spec.jobs)} job(s) on {len(nodes)} node(s) "
                 f"({'a local cluster' if cluster.started_locally else 'cluster at the given address'})")
        with _sigterm_as_interrupt():
            run.run()
        record = write_outputs(run, out_dir, mode="local" if cluster.started_locally else "address")
    folder = Path(record.pop("_folder"))
    decision = record["decision"]
    for comparison in record["comparisons"]:
        progress(f"cross-node, job {comparison['job']}: {comparison['summary']}")
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
