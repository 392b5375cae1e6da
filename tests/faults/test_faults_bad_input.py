"""Reliability cases 17-22 (``test_17`` … ``test_22``): bad input, provenance, unwritable reports, xdist measurements.

Bad recipes must stop the session before anything starts: the tests check the operator's
message, the exit code, that no report or run directory was written, and that no process
carrying the recipe's tag exists. Case 20 reads the real kill session (the recipe pins
runtime 0.31.0 while 0.32.0 runs); case 22 reads the real ``pytest -n 2`` session.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.fault_harness import (
    FAULT_SERVER,
    PYTHON,
    RECIPES,
    Session,
    derive_recipe,
    fault_server_recipe,
    survivors,
)

from pytest_vllmqual.gates.identity import check_identity
from pytest_vllmqual.launch.base import free_port
from pytest_vllmqual.recipe.loader import load_recipe


def assert_refused_before_start(session: Session, *needles: str) -> None:
    """Usage error, no traceback, every needle in the message, nothing started or written."""
    assert session.returncode == pytest.ExitCode.USAGE_ERROR, session.tail()
    assert "Traceback" not in session.stdout, session.tail()
    for needle in needles:
        assert needle in session.stdout, f"{needle!r} not in the error:\n{session.tail()}"
    assert session.report_paths() == [], "a report was written"
    assert not (session.reports_dir / "private").exists(), "a run directory was created"
    assert session.recipe is None or survivors(session) == []


def test_17_unknown_recipe_name(tmp_path: Path) -> None:
    """An unknown recipe name: the error lists the recipes that exist (and suggests the closest)."""
    recipes = tmp_path / "recipes"
    derive_recipe(recipes, "tiny-cpu-alpha")
    derive_recipe(recipes, "tiny-cpu-beta")
    session = Session(tmp_path, None, ["startup_probe"],
                      args=["--vllmqual-recipes-dir", str(recipes), "--recipe=tiny-cpu-alpah"]).run(timeout_s=120)
    assert_refused_before_start(session, "unknown recipe 'tiny-cpu-alpah'", "Did you mean 'tiny-cpu-alpha'?",
                                "tiny-cpu-alpha, tiny-cpu-beta", "(recipe chosen by --recipe)")


def _break(path: Path, how: str) -> tuple[str, ...]:
    """Damage a valid recipe file; return what the error must say."""
    data = yaml.safe_load(path.read_text())
    if how == "malformed":
        path.write_text(path.read_text().replace("serve:\n", "serve: {tensor_parallel_size: 2\n", 1))
        return (str(path), "is not valid YAML at line", "column")
    if how == "unknown_key":
        data["serve"]["max_num_seq"] = data["serve"].pop("max_num_seqs")
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return (str(path), "unknown key 'serve.max_num_seq'", "rename it to 'max_num_seqs'")
    if how == "wrong_type":
        data["startup"]["deadline_s"] = "soon"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return (str(path), "key 'startup.deadline_s' must be of type number", "'soon'")
    del data["identity"]["served_model_name"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return (str(path), "missing required key 'identity.served_model_name'", "Fix: add it")


@pytest.mark.parametrize("how", ["malformed", "unknown_key", "wrong_type", "missing_key"])
def test_18_bad_recipe_file(how: str, tmp_path: Path) -> None:
    """Malformed YAML, an unknown key, a wrong type, a missing required key: the error names the
    file, the key path and what is expected, and no server is started."""
    recipe = derive_recipe(tmp_path, f"tiny-cpu-{how.replace('_', '-')}")
    needles = _break(recipe.path, how)
    session = Session(tmp_path, recipe, ["startup_probe"]).run(timeout_s=120)
    assert_refused_before_start(session, *needles)


def test_19_pinned_recipe_without_digest_or_revision(tmp_path: Path) -> None:
    """A pinned recipe with an image tag instead of a digest, or a checkpoint revision that is
    not 40 hex: rejected with a clear message before anything starts."""
    docker = yaml.safe_load((RECIPES / "393k-fp8kv.yaml").read_text())
    assert docker["pinned"] is True and docker["launcher"]["kind"] == "docker"
    docker["name"] = "pinned-by-tag"
    docker["identity"]["image"] = "vllm/vllm-openai:v0.11.2"
    tagged = tmp_path / "tag" / "pinned-by-tag.yaml"
    tagged.parent.mkdir()
    tagged.write_text(yaml.safe_dump(docker, sort_keys=False))
    session = Session(tmp_path / "tag", None, ["startup_probe"], args=["--recipe", str(tagged)]).run(timeout_s=120)
    assert_refused_before_start(session, str(tagged), "'identity.image'", "must name the image by digest",
                                "repo@sha256:")

    recipe = derive_recipe(tmp_path / "rev", "pinned-by-branch",
                           {"pinned": True, "identity": {"revision": "main"}})
    session = Session(tmp_path / "rev", recipe, ["startup_probe"]).run(timeout_s=120)
    assert_refused_before_start(session, str(recipe.path), "'identity.revision' is 'main'", "full 40-hex commit")


@pytest.mark.real_vllm
def test_20_running_identity_differs(kill_session: Session, tmp_path: Path) -> None:
    """The running identity differs from the recipe: the run is marked provenance_mismatch.

    (a) real: the kill session's recipe pins runtime 0.31.0; the real server says 0.32.0.
    (b) max_model_len and /version of an external server differ. A managed real server is
    always started with the recipe's max_model_len, so a differing one is a server someone
    else started: the fault server plays it (behind --vllmqual-endpoint, direct-only).
    (c) the image digest: no Docker engine runs here, so the check is fed a container's digest.
    """
    identity = kill_session.report["identity"]
    assert identity["status"] == "provenance_mismatch"
    checks = {c["field"]: c for c in identity["checks"]}
    assert (checks["runtime_version"]["expected"], checks["runtime_version"]["observed"]) == ("0.31.0", "0.32.0")
    assert checks["runtime_version"]["ok"] is False
    assert all(checks[f]["ok"] for f in ("served_model", "max_model_len", "tensor_parallel_size"))
    assert any("provenance mismatch" in r for r in kill_session.report["decision"]["reasons"])

    port = free_port()
    env = {**os.environ, "FAULT_VERSION": "0.33.1", "FAULT_REPORTED_MAX_MODEL_LEN": "4096"}
    external = subprocess.Popen([PYTHON, str(FAULT_SERVER), "--port", str(port), "--served-model-name", "tiny-chat"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert external.stdout is not None and "serving" in external.stdout.readline()
        recipe = fault_server_recipe(tmp_path, "tiny-cpu-external")
        session = Session(tmp_path, recipe, [RECIPES.parent.parent / "suites" / "test_engine.py"],
                          args=["-k", "identity", "--vllmqual-endpoint", f"http://127.0.0.1:{port}"]).run(timeout_s=120)
        report = session.report
        assert report["run"]["mode"] == "direct-only"
        assert report["identity"]["status"] == "provenance_mismatch"
        checks = {c["field"]: c for c in report["identity"]["checks"]}
        assert (checks["max_model_len"]["observed"], checks["max_model_len"]["ok"]) == (4096, False)
        assert (checks["runtime_version"]["observed"], checks["runtime_version"]["ok"]) == ("0.33.1", False)
        gate = session.gate("identity")
        assert gate["outcome"] == "failed" and "provenance_mismatch: " in gate["reason"]
        assert "max_model_len: recipe says 32768, server reports 4096" in gate["reason"], gate["reason"]
        assert external.poll() is None, "direct-only mode must not stop someone else's server"
    finally:
        external.kill()
        external.wait()

    pinned = load_recipe(RECIPES / "393k-fp8kv.yaml")
    result = check_identity(pinned, version=pinned.identity.runtime_version,
                            models=[{"id": pinned.identity.served_model_name,
                                     "max_model_len": pinned.serve.max_model_len}],
                            tp_size_seen=pinned.serve.tensor_parallel_size,
                            image_digest="sha256:" + "0" * 64, launcher_kind="docker")
    assert result.status == "provenance_mismatch"
    assert [c.field for c in result.mismatches] == ["image_digest"]


@contextlib.contextmanager
def small_disk(path: Path, size: str = "1m") -> Iterator[bool]:
    """A real, tiny tmpfs at ``path`` (root only); yields whether it could be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


NO_SPACE_CONFTEST = '''
"""Without a mountable tmpfs: fsync of anything under the reports dir fails like a full disk."""
import errno, os
_real_fsync = os.fsync
def _fsync(fd):
    if os.readlink(f"/proc/self/fd/{fd}").startswith(os.environ["FAULT_FULL_DIR"]):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _real_fsync(fd)
os.fsync = _fsync
'''


def test_21_reports_dir_unwritable_or_disk_full(tmp_path: Path) -> None:
    """(a) The reports directory cannot be written: refused before any server starts, naming
    where. (b) The disk is full when the report is written: nothing partial is left (temp file,
    then rename), the error names the file and the fix, and the server was still torn down."""
    blocker = tmp_path / "a" / "not-a-directory"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the reports directory should be")
    recipe = fault_server_recipe(tmp_path / "a", "tiny-cpu-unwritable",
                                 env={"FAULT_REQUESTS_FILE": str(tmp_path / "a" / "requests.jsonl")})
    session = Session(tmp_path / "a", recipe, ["disk_full"],
                      args=["--vllmqual-reports-dir", str(blocker / "reports")]).run(timeout_s=120)
    assert session.returncode == pytest.ExitCode.USAGE_ERROR, session.tail()
    assert str(blocker / "reports") in session.stdout and "Traceback" not in session.stdout, session.tail()
    assert not (tmp_path / "a" / "requests.jsonl").exists(), "a server was started and asked"
    assert survivors(session) == []

    directory = tmp_path / "b"
    reports = directory / "full"
    with small_disk(reports) as mounted:
        recipe = fault_server_recipe(directory, "tiny-cpu-full")
        env = {"FAULT_FILL_DIR": str(reports)} if mounted else {"FAULT_FULL_DIR": str(reports)}
        if not mounted:
            (directory / "conftest.py").write_text(NO_SPACE_CONFTEST)
        session = Session(directory, recipe, ["disk_full"], env=env,
                          args=["--vllmqual-reports-dir", str(reports)]).run(timeout_s=120)
        left = sorted(p.name for p in reports.iterdir())
    assert session.returncode == pytest.ExitCode.TESTS_FAILED, session.tail()
    assert "REPORT NOT WRITTEN: cannot write the report " + str(reports) in session.stdout, session.tail()
    assert "No space left on device" in session.stdout and f"free space on the device holding {reports}" in (
        session.stdout), session.tail()
    assert not [n for n in left if n.endswith(".json") or n.endswith(".tmp")], f"partial report left: {left}"
    junit = session.junit.read_text()
    assert 'name="test_smoke"' in junit and "failure" not in junit.split('name="test_smoke"')[1][:300]
    assert survivors(session) == [], "the server survived a failed report write"


def _windows(session: Session) -> list[dict[str, Any]]:
    rows = []
    for gate in session.report["gates"]:
        m = gate["measurements"]
        if "window_start" in m:
            rows.append({"nodeid": gate["nodeid"], "capacity": "capacity" in gate["markers"],
                         "worker": m["worker"], "start": m["window_start"], "end": m["window_end"]})
    return rows


@pytest.mark.real_vllm
def test_22_xdist_capacity_runs_alone(xdist_session: Session) -> None:
    """Under ``pytest -n 2 -m``-style mixing, measurement (capacity) gates never overlap any other
    traffic to the same server: the exclusive traffic lock, proven from the gates' own windows."""
    rows = _windows(xdist_session)
    measurements = [r for r in rows if r["capacity"]]
    others = [r for r in rows if not r["capacity"]]
    assert len(measurements) == 2 and len(others) == 6, rows
    for m in measurements:
        for o in [r for r in rows if r is not m]:
            assert m["end"] <= o["start"] or o["end"] <= m["start"], f"overlap:\n{json.dumps([m, o], indent=1)}"
    assert {r["worker"] for r in rows} == {"gw0", "gw1"}
    parallel = [(a, b) for a in others for b in others
                if a["worker"] < b["worker"] and a["start"] < b["end"] and b["start"] < a["end"]]
    assert parallel, "functional gates never ran in parallel, so the test proves nothing about exclusivity"
