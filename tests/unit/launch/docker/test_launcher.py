"""The docker launcher's GPU-only parts against a fake Docker engine that speaks the Engine HTTP API.

The machines the project runs on have a real Docker engine (tests/docker start real
containers of the tiny-docker image) but no GPU and no NVIDIA container toolkit, so GPU
device requests cannot reach a real engine here. These tests point a real
``docker.DockerClient`` at a small threaded HTTP server that answers the endpoints the SDK
calls with the responses in ``data/docker/engine.json`` (shaped after the Engine API v1.43
reference), records every request, and keeps just enough container state for the launcher's
sweep → create → start → stop → delete → verify cycle. The tests assert the exact create
request body (device requests, IPC, binds) and the order of the calls; the rest of the
launcher's behaviour is tested against the real engine in tests/docker.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import docker
import pytest
from support import UNIT_DATA

from pytest_vllmqual.errors import LaunchError, RecipeError
from pytest_vllmqual.launch.base import FAILED_START_GRACE_S
from pytest_vllmqual.launch.cleanup.owner import owner_labels
from pytest_vllmqual.launch.docker import launcher as docker_launch
from pytest_vllmqual.launch.docker.launcher import DockerLauncher
from pytest_vllmqual.launch.docker.spec import pull_progress_line
from pytest_vllmqual.recipe.loader import load_recipe
from pytest_vllmqual.recipe.model import Recipe

DATA = UNIT_DATA / "docker"
ENGINE = json.loads((DATA / "engine.json").read_text())
API_KEY = "vq-unit-test-key-not-a-secret"
RUN_ID = "run-20260810-a1b2c3"
DIGEST_REF = "vllm/vllm-openai@sha256:" + "1" * 64
IMAGE_ID = "sha256:" + "2" * 64


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


@dataclass
class FakeContainer:
    id: str
    name: str | None
    labels: dict[str, str]
    state: dict[str, Any]
    create_body: dict[str, Any] = field(default_factory=dict)


class FakeDockerEngine:
    """Stateful replay of the Engine API endpoints the SDK uses for one container's life."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.containers: dict[str, FakeContainer] = {}
        self.undeletable: set[str] = set()
        self.start_error: str | None = None
        self.exit_code_on_stop = 0
        self.lock = threading.Lock()
        self._counter = 0
        self.containers_ever: set[str] = set()
        self.aliases: dict[str, str] = {}

    def add_container(self, labels: dict[str, str], name: str | None = None, running: bool = True) -> str:
        self._counter += 1
        cid = hashlib.sha256(f"{name}-{self._counter}".encode()).hexdigest()
        state = dict(ENGINE["container_state_running" if running else "container_state_created"])
        self.containers[cid] = FakeContainer(cid, name, dict(labels), state)
        return cid

    def find(self, ref: str) -> FakeContainer | None:
        for container in self.containers.values():
            if ref in (container.id, container.name) or (len(ref) >= 12 and container.id.startswith(ref)):
                return container
        return None

    def calls(self) -> list[str]:
        """The conversation as "METHOD /path" lines, container ids shortened to {id} markers."""
        lines = []
        for r in self.requests:
            path = r.path
            for cid in self.containers_ever:
                path = path.replace(cid, "{" + self.aliases.get(cid, cid[:12]) + "}")
            lines.append(f"{r.method} {path}")
        return lines


def _matches(labels: dict[str, str], wanted: list[str]) -> bool:
    for item in wanted:
        key, sep, value = item.partition("=")
        if key not in labels or (sep and labels[key] != value):
            return False
    return True


def make_handler(engine: FakeDockerEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Silence the default stderr access log."""

        def _reply(self, status: int, payload: Any = None, raw: bytes | None = None,
                   content_type: str = "application/json") -> None:
            body = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Api-Version", "1.43")
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            parts = urlsplit(self.path)
            path = re.sub(r"^/v[0-9.]+", "", unquote(parts.path))
            query = parse_qs(parts.query)
            length = int(self.headers.get("Content-Length") or 0)
            raw_body = self.rfile.read(length) if length else b""
            body = json.loads(raw_body) if raw_body else None
            with engine.lock:
                engine.requests.append(Recorded(self.command, path, query, body))
                self._route(path, query, body)

        def _route(self, path: str, query: dict[str, list[str]], body: Any) -> None:
            method = self.command
            if method in ("GET", "HEAD") and path == "/_ping":
                return self._reply(200, raw=b"OK", content_type="text/plain")
            if method == "GET" and path == "/version":
                return self._reply(200, ENGINE["version"])
            if method == "GET" and (m := re.fullmatch(r"/images/(.+)/json", path)):
                if m.group(1) in (DIGEST_REF, IMAGE_ID, *ENGINE["image"]["RepoTags"]):
                    return self._reply(200, ENGINE["image"])
                return self._reply(404, {"message": f"No such image: {m.group(1)}"})
            if method == "GET" and path == "/containers/json":
                wanted = json.loads(query.get("filters", ["{}"])[0]).get("label", [])
                listed = [
                    {"Id": c.id, "Names": [f"/{c.name or c.id[:12]}"], "Image": DIGEST_REF,
                     "Labels": c.labels, "State": c.state["Status"], "Status": c.state["Status"]}
                    for c in engine.containers.values() if _matches(c.labels, wanted)
                ]
                return self._reply(200, listed)
            if method == "POST" and path == "/containers/create":
                name = query.get("name", [None])[0]
                if name and engine.find(name):
                    return self._reply(409, {"message": f'Conflict. The container name "/{name}" is already in use'})
                cid = engine.add_container(body.get("Labels") or {}, name=name, running=False)
                engine.containers[cid].create_body = body
                engine.containers_ever.add(cid)
                engine.aliases[cid] = "new"
                return self._reply(201, {"Id": cid, "Warnings": []})
            m = re.fullmatch(r"/containers/([^/]+)(/[a-z]+)?", path)
            container = engine.find(m.group(1)) if m else None
            if m is None or container is None:
                return self._reply(404, {"message": f"No such container: {m.group(1) if m else path}"})
            action = m.group(2)
            if method == "GET" and action == "/json":
                return self._reply(200, {
                    "Id": container.id, "Name": f"/{container.name or container.id[:12]}",
                    "Image": IMAGE_ID, "State": container.state,
                    "Config": {"Tty": False, "Labels": container.labels, "Image": DIGEST_REF},
                })
            if method == "POST" and action == "/start":
                if engine.start_error:
                    return self._reply(500, {"message": engine.start_error})
                container.state = dict(ENGINE["container_state_running"])
                return self._reply(204)
            if method == "GET" and action == "/logs":
                frames = b"".join(
                    struct.pack(">BxxxL", 2 if "WARN" in line else 1, len(line.encode())) + line.encode()
                    for line in ENGINE["log_lines"]
                )
                return self._reply(200, raw=frames, content_type="application/vnd.docker.multiplexed-stream")
            if method == "POST" and action == "/stop":
                container.state = {**container.state, "Status": "exited", "Running": False, "Pid": 0,
                                   "ExitCode": engine.exit_code_on_stop}
                return self._reply(204)
            if method == "DELETE" and action is None:
                if container.id in engine.undeletable:
                    return self._reply(500, {"message": f"removal of container {container.id} is already in progress"})
                del engine.containers[container.id]
                return self._reply(204)
            return self._reply(404, {"message": f"fake engine has no route for {method} {path}"})

        do_GET = do_POST = do_DELETE = do_HEAD = _handle

    return Handler


@pytest.fixture
def engine() -> Iterator[tuple[FakeDockerEngine, str]]:
    fake = FakeDockerEngine()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake, f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def recipe() -> Recipe:
    return load_recipe(DATA / "docker-tp2.yaml")


@pytest.fixture(autouse=True)
def _no_host_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in docker_launch.PASSTHROUGH_ENV:
        monkeypatch.delenv(name, raising=False)


def launcher_for(recipe: Recipe, base_url: str, tmp_path: Path, *, version: str = "1.43") -> DockerLauncher:
    client = docker.DockerClient(base_url=base_url, version=version, timeout=10)
    return DockerLauncher(recipe, run_id=RUN_ID, artifacts_dir=tmp_path / "artifacts", api_key=API_KEY,
                          client=client, shm_root=tmp_path / "shm")


def wait_for(predicate: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def test_full_lifecycle_sends_exact_create_request_in_order(
    engine: tuple[FakeDockerEngine, str], recipe: Recipe, tmp_path: Path
) -> None:
    # Fake engine: GPU device requests need the NVIDIA runtime, which no engine here has.
    fake, url = engine
    launcher = launcher_for(recipe, url, tmp_path, version="auto")
    progress: list[str] = []

    handle = launcher.start(progress.append)

    assert handle.base_url == "http://127.0.0.1:18083"
    assert handle.launcher_kind == "docker"
    assert handle.served_model_name == "example-served"
    assert handle.image_id == IMAGE_ID
    assert handle.image_digest == DIGEST_REF
    assert handle.api_key == API_KEY
    assert handle.container_id is not None and fake.aliases[handle.container_id] == "new"
    assert launcher.reaped_leftovers == 0
    started = next(line for line in progress if "started for recipe docker-tp2" in line)
    assert "container vllmqual-docker-tp2" in started and str(tmp_path / "artifacts" / "server.log") in started
    assert wait_for(lambda: "Starting vLLM API server" in launcher.log_text())
    assert (tmp_path / "artifacts" / "server.log").read_text().count("\n") == 3
    assert launcher.alive() is True
    assert launcher.exit_code() is None

    result = launcher.stop()

    assert result.stopped is True
    assert result.containers_left == 0
    assert result.survivors == [] and result.shm_leftovers == []
    assert result.clean
    assert launcher.alive() is False
    assert launcher.exit_code() == 0

    create = next(r for r in fake.requests if r.path == "/containers/create")
    assert create.query == {"name": ["vllmqual-docker-tp2"]}
    expected = json.loads((DATA / "expected_create.json").read_text())
    owner = owner_labels()
    assert create.body == {**expected, "Labels": {**expected["Labels"], **owner}}
    # The properties the golden body encodes, spelled out:
    assert create.body["Image"] == DIGEST_REF
    assert create.body["Cmd"][0] == "example-org/example-model"
    assert not any(API_KEY in arg for arg in create.body["Cmd"])
    assert f"VLLM_API_KEY={API_KEY}" in create.body["Env"]
    host = create.body["HostConfig"]
    assert host["DeviceRequests"] == [
        {"Driver": "", "Count": 2, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    ]
    assert host["IpcMode"] == "host"
    assert host["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18083"}]}
    assert host["Binds"] == ["/srv/hf-cache:/root/.cache/huggingface:rw"]
    assert create.body["Labels"]["vllmqual.owner.pid"] == str(os.getpid())
    assert create.body["StopTimeout"] == 180

    stop = next(r for r in fake.requests if r.path.endswith("/stop"))
    assert stop.query == {"t": ["180"]}
    removals = [r for r in fake.requests if r.method == "DELETE"]
    assert all(r.query.get("force") == ["True"] for r in removals)

    # --ipc=host: the shm ledger lists the container's processes (GET .../top) in the background,
    # from the start, just before the stop, through it and once after it.
    calls = fake.calls()
    tops = [n for n, call in enumerate(calls) if call == "GET /containers/{new}/top"]
    assert tops and tops[0] < calls.index("POST /containers/{new}/stop")
    assert [call for call in calls if not call.endswith("/top")] == [
        "GET /version",
        "GET /_ping",
        "GET /containers/json",            # sweep: every vllmqual container, kept unless its owner is gone
        "GET /images/" + DIGEST_REF + "/json",
        "POST /containers/create",
        "GET /containers/{new}/json",
        "POST /containers/{new}/start",
        "GET /containers/{new}/logs",
        "GET /containers/{new}/json",      # the SDK checks Tty to know whether to demultiplex
        "GET /containers/{new}/json",      # alive()
        "GET /containers/{new}/json",      # exit_code()
        "POST /containers/{new}/stop",
        "GET /containers/{new}/json",      # exit code after stop
        "DELETE /containers/{new}",
        "GET /containers/json",            # verify: nothing labelled with the run id
    ]
    sweep_filter = json.loads(fake.requests[2].query["filters"][0])
    verify = fake.requests[max(n for n, call in enumerate(calls) if call == "GET /containers/json")]
    verify_filter = json.loads(verify.query["filters"][0])
    assert sweep_filter == {"label": ["vllmqual.run"]}
    assert verify_filter == {"label": [f"vllmqual.run={RUN_ID}"]}
    assert fake.requests[2].query["all"] == ["1"] and verify.query["all"] == ["1"]
    logs = next(r for r in fake.requests if r.path.endswith("/logs"))
    assert logs.query["follow"] == ["1"]

    before = len(fake.requests)
    again = launcher.stop()  # safe to call twice: only the verification is repeated
    assert again.containers_left == 0 and again.clean
    assert fake.calls()[before:] == ["GET /containers/json"]


def test_tag_only_image_is_refused_before_any_request(
    engine: tuple[FakeDockerEngine, str], recipe: Recipe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fake engine: there is no real engine here; the point is that not even the fake is contacted.
    fake, url = engine
    tagged = replace(recipe, identity=replace(recipe.identity, image="vllm/vllm-openai:v0.11.2"))
    with pytest.raises(LaunchError) as info:
        launcher_for(tagged, url, tmp_path).start(lambda _line: None)
    assert info.value.status == "image_not_pinned"
    assert "vllm/vllm-openai:v0.11.2" in str(info.value)
    assert fake.requests == []

    def no_engine() -> docker.DockerClient:
        raise AssertionError("a client was created before the image was checked")

    monkeypatch.setattr(docker, "from_env", no_engine)
    default_client = DockerLauncher(tagged, run_id=RUN_ID, artifacts_dir=tmp_path, api_key=API_KEY)
    with pytest.raises(LaunchError) as again:
        default_client.start(lambda _line: None)
    assert again.value.status == "image_not_pinned"


def test_teardown_reports_containers_left_when_engine_keeps_one(
    engine: tuple[FakeDockerEngine, str], recipe: Recipe, tmp_path: Path
) -> None:
    # Fake engine: a removal that the engine refuses cannot be provoked on demand without one.
    fake, url = engine
    launcher = launcher_for(recipe, url, tmp_path)
    launcher.start(lambda _line: None)
    stuck = fake.add_container({"vllmqual.run": RUN_ID, "vllmqual.recipe": "docker-tp2"}, name="stuck-sidecar")
    fake.undeletable.add(stuck)
    result = launcher.stop()
    assert result.containers_left == 1
    assert result.clean is False
    assert result.to_dict()["containers_left"] == 1
    assert any("could not be removed" in note for note in result.notes)
    deletes = [r.path for r in fake.requests if r.method == "DELETE"]
    assert deletes[-1] == f"/containers/{stuck}"  # the straggler removal was attempted
    assert launcher.stop().containers_left == 1  # still reported on the second call


def test_a_container_that_never_became_ready_gets_the_short_grace(
    engine: tuple[FakeDockerEngine, str], recipe: Recipe, tmp_path: Path
) -> None:
    # Fake engine: the stop request's timeout is what is checked; no container is needed for it.
    fake, url = engine
    launcher = launcher_for(recipe, url, tmp_path)
    launcher.start(lambda _line: None)
    assert launcher.stop(never_ready=True).clean
    stop = next(r for r in fake.requests if r.path.endswith("/stop"))
    assert stop.query == {"t": [str(FAILED_START_GRACE_S)]}  # not the recipe's 180 s drain


def test_gpu_list_shm_size_and_free_port(engine: tuple[FakeDockerEngine, str], recipe: Recipe, tmp_path: Path) -> None:
    # Fake engine: device requests and shm size are only checked in the request; no engine or GPU here.
    fake, url = engine
    docker_options = replace(recipe.launcher.docker, gpus=["2", "3"], ipc_host=False, shm_size="16g",
                             model_cache=None, container_name=None)
    variant = replace(recipe, launcher=replace(recipe.launcher, port=0, docker=docker_options))
    launcher = launcher_for(variant, url, tmp_path)
    handle = launcher.start(lambda _line: None)
    create = next(r for r in fake.requests if r.path == "/containers/create")
    host = create.body["HostConfig"]
    assert host["DeviceRequests"] == [
        {"Driver": "", "Count": 0, "DeviceIDs": ["2", "3"], "Capabilities": [["gpu"]], "Options": {}}
    ]
    assert "IpcMode" not in host
    assert host["ShmSize"] == 16 * 1024**3
    assert "Binds" not in host
    assert create.query == {"name": [f"vllmqual-{RUN_ID}"]}  # no fixed name: one per run
    published = int(host["PortBindings"]["8000/tcp"][0]["HostPort"])
    assert published > 0 and handle.base_url == f"http://127.0.0.1:{published}"
    launcher.stop()


def test_stop_timeout_must_exceed_vllm_shutdown_budget(
    engine: tuple[FakeDockerEngine, str], recipe: Recipe, tmp_path: Path
) -> None:
    # Fake engine: the refusal happens before any request; the fake proves none was sent.
    fake, url = engine
    short = replace(recipe, launcher=replace(recipe.launcher, docker=replace(recipe.launcher.docker, stop_timeout_s=30)))
    with pytest.raises(RecipeError) as info:
        launcher_for(short, url, tmp_path).start(lambda _line: None)
    assert info.value.key == "launcher.docker.stop_timeout_s"
    assert "shutdown budget of 30 s" in str(info.value)  # 0 s --shutdown-timeout + 30 s worker timeout
    assert fake.requests == []


def test_api_key_on_the_command_line_is_refused(
    engine: tuple[FakeDockerEngine, str], recipe: Recipe, tmp_path: Path
) -> None:
    # Fake engine: the refusal happens before any request; the fake proves none was sent.
    fake, url = engine
    leaky = replace(recipe, serve=replace(recipe.serve, extra_args=("--api-key", "sk-visible")))
    with pytest.raises(RecipeError) as info:
        launcher_for(leaky, url, tmp_path).start(lambda _line: None)
    assert info.value.key == "serve.extra_args"
    assert "sk-visible" not in str(info.value)
    assert fake.requests == []


def test_unreachable_engine_is_docker_unavailable(recipe: Recipe, tmp_path: Path) -> None:
    # No engine at all: a closed port stands in for a stopped Docker daemon.
    from pytest_vllmqual.launch.base import free_port

    launcher = launcher_for(recipe, f"tcp://127.0.0.1:{free_port()}", tmp_path)
    with pytest.raises(LaunchError) as info:
        launcher.start(lambda _line: None)
    assert info.value.status == "docker_unavailable"
    assert "no Docker engine answers" in str(info.value) and "scripts/docker_setup.sh" in info.value.hint
    assert launcher.container_id is None
    result = launcher.stop()
    assert result.stopped is False
    assert result.containers_left == 0  # nothing was created, and nothing could be listed


def test_pull_events_become_one_line_per_layer() -> None:
    downloading = {"status": "Downloading", "id": "1a2b3c4d5e6f",
                   "progressDetail": {"current": 512 * 2**20, "total": 2048 * 2**20}}
    assert pull_progress_line(downloading) == "pull layer 1a2b3c4d5e6f: Downloading 512.0/2,048.0 MiB (25%)"
    assert pull_progress_line({"status": "Pull complete", "id": "1a2b3c4d5e6f", "progressDetail": {}}) \
        == "pull layer 1a2b3c4d5e6f: Pull complete"
    assert pull_progress_line({"status": "Pulling from vllmqual/vllm-cpu", "id": "sha256:ab"}) is None
    assert pull_progress_line({"status": "Digest: sha256:" + "3" * 64}) is None
