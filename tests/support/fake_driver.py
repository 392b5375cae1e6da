"""A fleet driver whose jobs are fake (``fleet_jobs.FAKE_JOB``), for the Ctrl-C and killed-driver tests.

    PYTHONPATH=tests python -m support.fake_driver ADDRESS FLEET.yaml OUT_DIR TAG SLEEP_S

It is ``vllmqual fleet run --address ADDRESS`` with each job's pytest run replaced by a process
that sleeps SLEEP_S seconds and carries TAG on its command line, so a test can find it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pytest_vllmqual.fleet.cluster import RayCluster
from pytest_vllmqual.fleet.command import EXIT_INTERRUPTED, progress_line, write_outputs
from pytest_vllmqual.fleet.runner import FleetRun
from pytest_vllmqual.fleet.spec import load_fleet
from support.fleet_jobs import ROOT, fake_argv


def main() -> int:
    address, fleet, out, tag, sleep_s = sys.argv[1:6]
    with RayCluster.connect(address) as cluster:
        run = FleetRun(spec=load_fleet(Path(fleet)), cluster=cluster, progress=progress_line, project_dir=ROOT,
                       argv_for=lambda a: fake_argv(f"{tag}-{a.attempt_id}", float(sleep_s)))
        run.run()
        record = write_outputs(run, Path(out), mode="address")
    print(f"RECORD {record['_folder']}", flush=True)
    return EXIT_INTERRUPTED if run.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
