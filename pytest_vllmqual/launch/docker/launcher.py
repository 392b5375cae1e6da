"""The docker launcher: one vLLM container per run, driven through the ``docker`` SDK, from
its create to its verified removal. Which image it runs, and pulling it, is ``launch.docker.image``.

What it guarantees, and why:

- the image runs by digest (``repo@sha256:…``): a tag can move, so a pinned recipe with a
  tag is refused before anything is sent to the engine (``image_not_pinned``, ``image``);
- the server listens on 0.0.0.0:8000 inside the container but is published only on the
  recipe's host (loopback by default) at the recipe's port;
- the API key reaches vLLM as ``VLLM_API_KEY`` in the environment, never on the command
  line, where ``docker inspect`` and ``ps`` would show it;
- every container carries the labels ``vllmqual.run`` and ``vllmqual.recipe`` and its owner
  (host, pid and start time of the pytest process, ``launch.cleanup.owner``). The process's watchdog
  removes the run's containers when pytest dies without teardown (SIGKILL included). Before a
  start, leftovers are swept, but only those whose owner is provably gone: a concurrent run of
  the same recipe keeps its container. After teardown the launcher verifies that nothing
  labelled with the run id remains, and reclaims the run's /dev/shm files (``--ipc=host``)
  with the same two-scan guard as the subprocess launcher;
- the container's stop timeout is longer than vLLM's own shutdown budget, so ``docker stop``
  does not SIGKILL an engine that is still draining (Docker's default is 10 s);
- the image id and repo digest are recorded for the identity check.

The launcher assumes the engine runs on this machine (the published port, /dev/shm with
``--ipc=host`` and the GPUs are this machine's).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import psutil
import requests
from docker.models.containers import Container

from pytest_vllmqual.errors import LaunchError, RecipeError
from pytest_vllmqual.launch import gpu
from pytest_vllmqual.launch.cleanup.owner import owner_gone, owner_labels
from pytest_vllmqual.launch.cleanup.shm import SHM_ROOT, reclaim_run_shm, reclaim_unheld
from pytest_vllmqual.launch.cleanup.shm_ledger import ShmLedger
from pytest_vllmqual.launch.cleanup.watchdog import WATCHDOG
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import StartupStatus

from ..base import FAILED_START_GRACE_S, ProgressFn, ServerHandle, TeardownResult, free_port
from .image import image_reference, local_image, pinned_by_digest
from .kind import DockerKind
from .reaper import container_pids, kill_frozen, labelled_containers
from .spec import (
    CONTAINER_HOST,
    CONTAINER_PORT,
    DOCKER_FIX,
    HF_CACHE_IN_CONTAINER,
    MODEL_DIR_IN_CONTAINER,
    PASSTHROUGH_ENV,
    RECIPE_LABEL,
    RUN_LABEL,
    gpu_indexes,
    url_host,
    vllm_shutdown_budget_s,
)

__all__ = ["DOCKER_LEDGER_INTERVAL_S", "DockerLauncher"]

_GPU_RELEASE_WAIT_S = 10.0
DOCKER_LEDGER_INTERVAL_S = 2.0
"""How often the shm ledger lists the container's processes (``docker top`` runs ``ps`` on the host)."""


class DockerLauncher(DockerKind):
    """Start, watch and remove one labelled vLLM container for a recipe (the class-level answers
    about the ``docker`` kind are ``DockerKind``'s)."""

    def __init__(
        self,
        recipe: Recipe,
        *,
        run_id: str,
        artifacts_dir: Path,
        api_key: str,
        client: docker.DockerClient | None = None,
        shm_root: Path = SHM_ROOT,
    ) -> None:
        self.recipe = recipe
        self.run_id = run_id
        self.artifacts_dir = artifacts_dir
        self.api_key = api_key
        self.shm_root = shm_root
        self._client = client
        self.container: Container | None = None
        self.container_id: str | None = None
        self.host_port: int | None = None
        self.reaped_leftovers = 0
        self.log_path: Path = artifacts_dir / "server.log"
        self._log_thread: threading.Thread | None = None
        self._log_stream: Any = None
        self._log_error: str | None = None
        self._removed = False
        self._last_exit_code: int | None = None
        self._started_wall: float | None = None
        self._gpu_baseline: set[int] | None = None
        self._owner: dict[str, str] | None = None
        self._reaper = False  # the run is registered with the watchdog
        self._shm_ledger: ShmLedger | None = None

    # -- the container spec, from the recipe (no engine needed) ----------------------------

    def container_command(self) -> list[str]:
        """Model argument plus serve flags; the image's ENTRYPOINT is ["vllm", "serve"]."""
        model = MODEL_DIR_IN_CONTAINER if self.recipe.identity.model_path else self.recipe.identity.checkpoint
        command = [model, *self.recipe.serve_flags(host=CONTAINER_HOST, port=CONTAINER_PORT)]
        if any(arg == "--api-key" or arg.startswith("--api-key=") for arg in command):
            raise RecipeError(
                f"recipe {self.recipe.path}: serve.extra_args contains --api-key; the key would be "
                "visible in `docker inspect` and `ps`. Fix: remove it; the launcher passes the run's "
                "key as VLLM_API_KEY in the container environment.",
                path=str(self.recipe.path), key="serve.extra_args",
            )
        return command

    def container_environment(self) -> dict[str, str]:
        """Launcher env, serve env, gated-model tokens from the host, and the API key last."""
        env = dict(self.recipe.server_env())
        for name in PASSTHROUGH_ENV:
            if name in os.environ and name not in env:
                env[name] = os.environ[name]
        env["VLLM_API_KEY"] = self.api_key
        return env

    def labels(self) -> dict[str, str]:
        """Run, recipe and owner: what the sweep, the reaper and teardown find containers by."""
        if self._owner is None:
            self._owner = owner_labels()
        return {RUN_LABEL: self.run_id, RECIPE_LABEL: self.recipe.name, **self._owner}

    def container_name(self) -> str:
        """The recipe's fixed name, else one derived from the run id (unique, and it says whose)."""
        return self.recipe.launcher.docker.container_name or f"vllmqual-{self.run_id}"

    def _check_stop_timeout(self) -> int:
        stop_timeout = self.recipe.launcher.docker.stop_timeout_s
        budget = vllm_shutdown_budget_s(self.recipe)
        if stop_timeout <= budget:
            raise RecipeError(
                f"recipe {self.recipe.path}: launcher.docker.stop_timeout_s is {stop_timeout} s, not longer "
                f"than vLLM's shutdown budget of {budget} s (--shutdown-timeout plus "
                "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS); docker would SIGKILL a draining engine. "
                f"Fix: set it above {budget}.",
                path=str(self.recipe.path), key="launcher.docker.stop_timeout_s",
            )
        return stop_timeout

    def _binds(self) -> dict[str, dict[str, str]]:
        options = self.recipe.launcher.docker
        binds: dict[str, dict[str, str]] = {}
        if options.model_cache:
            cache = Path(options.model_cache).expanduser()
            cache = cache if cache.is_absolute() else self.recipe.project_root / cache
            binds[str(cache)] = {"bind": HF_CACHE_IN_CONTAINER, "mode": "rw"}
        if self.recipe.identity.model_path:
            binds[self.recipe.model_location()] = {"bind": MODEL_DIR_IN_CONTAINER, "mode": "ro"}
        return binds

    def _device_requests(self, progress: ProgressFn) -> list[docker.types.DeviceRequest]:
        gpus = self.recipe.launcher.docker.gpus
        tp = self.recipe.serve.tensor_parallel_size
        if gpus == 0:
            return []  # a CPU image (tiny-docker): no GPU is requested
        if isinstance(gpus, list):
            if len(gpus) < tp:
                progress(f"warning: launcher.docker.gpus lists {len(gpus)} GPU(s) but tensor_parallel_size is {tp}")
            return [docker.types.DeviceRequest(device_ids=list(gpus), capabilities=[["gpu"]])]
        count = tp if gpus is None else gpus
        if count < tp:
            progress(f"warning: launcher.docker.gpus is {count} but tensor_parallel_size is {tp}")
        return [docker.types.DeviceRequest(count=count, capabilities=[["gpu"]])]

    # -- engine side ------------------------------------------------------------------------

    @property
    def client(self) -> docker.DockerClient:
        """The SDK client; created from DOCKER_HOST/the local socket on first use."""
        if self._client is None:
            try:
                self._client = docker.from_env()
            except docker.errors.DockerException as exc:
                raise self._engine_unavailable(exc) from None
        return self._client

    def _engine_unavailable(self, exc: Exception) -> LaunchError:
        host = os.environ.get("DOCKER_HOST")  # the environment's value, withheld: name the variable
        where = f"the address DOCKER_HOST names ({host})" if host else "unix:///var/run/docker.sock"
        if self._client is not None:
            where = str(getattr(self._client.api, "base_url", where))
        reason = str(exc).split(": ", 1)[-1] if "Error while fetching server API version" in str(exc) else str(exc)
        return LaunchError(
            f"recipe {self.recipe.name} runs vLLM in a container (launcher.kind: docker), but no Docker "
            f"engine answers at {where} ({type(exc).__name__}: {reason[:200]}); nothing was started.",
            status=StartupStatus.DOCKER_UNAVAILABLE,
            hint=f"start the Docker engine: {DOCKER_FIX}.",
        )

    def _ping(self) -> None:
        """One cheap request, so a stopped daemon is one clear paragraph, not a stack of SDK errors."""
        try:
            self.client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise self._engine_unavailable(exc) from None

    def reap_leftovers(self, progress: ProgressFn) -> int:
        """Remove vllmqual containers whose owner is provably gone; leave every other one alone.

        A container of a concurrent run (its pytest still runs), of another host sharing the
        daemon, or without owner labels is kept: removing it could kill someone's live server.
        """
        leftovers = labelled_containers(self.client, RUN_LABEL)
        reaped: list[str] = []
        held: set[str] = set()
        kept = 0
        for container in leftovers:
            labels = dict(container.labels or {})
            if labels.get(RUN_LABEL) == self.run_id:
                continue
            why = owner_gone(labels)
            if why is None:
                kept += 1
                continue
            held |= kill_frozen(self.client, container, root=self.shm_root)
            try:
                container.remove(force=True, v=True)
                reaped.append(f"{container.name} ({why})")
            except docker.errors.NotFound:
                continue
        if held:  # the swept containers' shared memory, as their teardown would have reclaimed it
            reclaim_unheld(None, held, root=self.shm_root)
        if reaped:
            progress(f"removed {len(reaped)} leftover container(s) whose owner is gone: {'; '.join(reaped)}")
        if kept:
            progress(f"left {kept} labelled container(s) alone: their owner runs, or is not provably gone")
        return len(reaped)

    def _start_log_stream(self, container: Container) -> None:
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        self._log_stream = container.logs(stream=True, follow=True, stdout=True, stderr=True)

        def pump() -> None:
            try:
                with open(self.log_path, "ab") as sink:
                    for chunk in self._log_stream:
                        sink.write(chunk)
                        sink.flush()
            except Exception as exc:  # a broken stream must not kill the run
                self._log_error = f"log stream ended: {type(exc).__name__}"

        self._log_thread = threading.Thread(target=pump, name=f"vllmqual-docker-logs-{self.run_id}", daemon=True)
        self._log_thread.start()

    def start(self, progress: ProgressFn) -> ServerHandle:
        reference = image_reference(self.recipe)
        command = self.container_command()
        stop_timeout = self._check_stop_timeout()
        options = self.recipe.launcher.docker
        host = self.recipe.launcher.host
        port = self.recipe.launcher.port or free_port(host if host not in ("", "0.0.0.0", "::") else "127.0.0.1")
        device_requests = self._device_requests(progress)
        image_id, image_digest = self._prepare_engine(reference, progress)
        self._gpu_baseline = gpu.compute_process_pids(gpu_indexes(options.gpus)) if options.gpus != 0 else None
        name, container_id = self._create_container(
            reference if (self.recipe.pinned or pinned_by_digest(reference)) else image_id,
            command, host, port, device_requests, stop_timeout)
        container = self._start_container(container_id, host, port)
        self._start_log_stream(container)
        if options.ipc_host:  # the run's shm is in this host's /dev/shm: note every name it holds
            self._shm_ledger = ShmLedger(lambda: container_pids(self.client, container),
                                         root=self.shm_root, interval_s=DOCKER_LEDGER_INTERVAL_S).start()
        progress(f"container {name} ({container_id[:12]}) started for recipe {self.recipe.name} from "
                 f"{reference}, published on {host}:{port}; its log streams to {self.log_path} "
                 f"(also `docker logs {name}`)")
        return ServerHandle(
            base_url=f"http://{url_host(host)}:{port}",
            served_model_name=self.recipe.identity.served_model_name,
            launcher_kind=self.kind,
            api_key=self.api_key,
            log_path=self.log_path,
            container_id=container_id,
            image_id=image_id,
            image_digest=image_digest,
        )

    def _prepare_engine(self, reference: str, progress: ProgressFn) -> tuple[str, str | None]:
        """Before the create: the engine answers, the leftovers of dead runs are gone, and the
        image is there; (image id, image digest). An engine error here is a ``docker_error``."""
        self._ping()
        try:
            self.reaped_leftovers = self.reap_leftovers(progress)
            return local_image(self.client, reference, self.recipe.name, progress)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise LaunchError(
                f"recipe {self.recipe.name}: the Docker engine failed before the container was created: "
                f"{type(exc).__name__}: {exc}",
                status=StartupStatus.DOCKER_ERROR,
                hint="check that the engine runs and answers (`docker info`), or DOCKER_HOST.",
            ) from None

    def _create_container(self, image: str, command: list[str], host: str, port: int,
                          device_requests: list[Any], stop_timeout: int | None) -> tuple[str, str]:
        """Create the labelled container (its reaper started first); its name and id. A name
        another container holds is explained (409)."""
        options = self.recipe.launcher.docker
        api = self.client.api
        host_config = api.create_host_config(
            port_bindings={f"{CONTAINER_PORT}/tcp": (host, port)},
            binds=self._binds() or None,
            device_requests=device_requests or None,
            ipc_mode="host" if options.ipc_host else None,
            shm_size=None if options.ipc_host else options.shm_size,
        )
        self._started_wall = time.time()
        labels = self.labels()
        self._start_reaper()  # before the create: a pytest killed from here on leaves nothing behind
        name = self.container_name()
        try:
            created = api.create_container(
                image=image,
                command=command,
                name=name,
                environment=self.container_environment(),
                labels=labels,
                ports=[(CONTAINER_PORT, "tcp")],
                host_config=host_config,
                stop_timeout=stop_timeout,
                detach=True,
            )
        except docker.errors.APIError as exc:
            raise LaunchError(
                f"recipe {self.recipe.name}: the container could not be created: {exc.explanation or exc}",
                status=StartupStatus.DOCKER_ERROR,
                hint=f"another container holds the name {name}: a concurrent run of this recipe, or one whose "
                "owner is not provably gone (the sweep leaves those alone). Wait for it, remove it with "
                f"`docker rm -f {name}` if it is abandoned, or drop launcher.docker.container_name so every "
                "run gets its own name." if exc.status_code == 409 else "",
            ) from None
        self.container_id = str(created["Id"])
        self.host_port = port
        return name, self.container_id

    def _start_container(self, container_id: str, host: str, port: int) -> Container:
        """Start the created container; a failed start removes it (a taken port is ``port_in_use``)."""
        try:
            self.container = self.client.containers.get(container_id)
            self.container.start()
            return self.container
        except docker.errors.APIError as exc:
            explanation = str(exc.explanation or exc)
            self._remove_quietly()
            taken = "port is already allocated" in explanation or "address already in use" in explanation
            raise LaunchError(
                f"recipe {self.recipe.name}: the container could not be started: {explanation}",
                status=StartupStatus.PORT_IN_USE if taken else StartupStatus.DOCKER_ERROR,
                hint=f"{host}:{port} is taken; free it or change launcher.port." if taken
                else "GPU requests need the NVIDIA container toolkit (`docker info` lists the nvidia runtime).",
            ) from None

    def _start_reaper(self) -> None:
        """Register the run's containers with this process's watchdog (``launch.cleanup.watchdog``)."""
        base_url = str(getattr(self._client.api, "base_url", "")) if self._client is not None else ""
        # a tcp engine given to this launcher: the watchdog uses it too
        docker_host = "tcp://" + base_url.removeprefix("http://") if base_url.startswith("http://") else None
        WATCHDOG.watch_containers(self.run_id, self._started_wall or time.time(),
                                  ipc_host=self.recipe.launcher.docker.ipc_host, docker_host=docker_host)
        self._reaper = True

    def _state(self) -> dict[str, Any] | None:
        if self.container is None or self._removed:
            return None
        try:
            self.container.reload()
        except docker.errors.NotFound:
            return None
        state: dict[str, Any] = self.container.attrs.get("State") or {}
        return state

    def fingerprint(self, handle: ServerHandle) -> dict[str, Any]:
        """Read inside the container (its environment, its packages), for its first process: the server."""
        from pytest_vllmqual.launch.fingerprint import from_output, not_measured, program_argv

        if self.container is None or self._removed:
            return not_measured("the server's container is gone")
        try:
            code, output = self.container.exec_run(program_argv("python3", 1), stdout=True, stderr=False)
        except docker.errors.DockerException as exc:
            return not_measured(f"the fingerprint program did not run in the container ({type(exc).__name__})")
        if code != 0:
            return not_measured(f"the fingerprint program exited with status {code} in the container")
        return from_output(output.decode("utf-8", errors="replace"), source="inside the container")

    def alive(self) -> bool | None:
        state = self._state()
        return bool(state and (state.get("Running") or state.get("Restarting")))

    def exit_code(self) -> int | None:
        state = self._state()
        if state is None:
            return self._last_exit_code
        if state.get("Running") or state.get("Restarting") or state.get("Status") == "created":
            return None
        code = state.get("ExitCode")
        return int(code) if code is not None else None

    def _remove_quietly(self) -> None:
        if self.container_id is None:
            return
        try:
            self.client.api.remove_container(self.container_id, force=True, v=True)
        except docker.errors.APIError:
            pass

    def stop(self, *, never_ready: bool = False) -> TeardownResult:
        """Stop within the stop timeout (a never-ready one: ``FAILED_START_GRACE_S``), remove, verify."""
        started = time.monotonic()
        notes: list[str] = []
        stopped = False
        if self.container is not None and not self._removed:
            if self._shm_ledger is not None:  # sampled through the stop's grace period too
                self._shm_ledger.observe()
            try:
                grace = FAILED_START_GRACE_S if never_ready else self.recipe.launcher.docker.stop_timeout_s
                self.container.stop(timeout=grace)
                state = self._state() or {}
                code = state.get("ExitCode")
                self._last_exit_code = int(code) if code is not None else None
                stopped = True
            except docker.errors.NotFound:
                stopped = True
            except docker.errors.APIError as exc:
                notes.append(f"docker stop failed ({exc.status_code}); forcing removal")
            try:
                self.container.remove(force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                notes.append(f"docker rm failed ({exc.status_code})")
            self._removed = True
            stopped = True
        elif self._removed:
            stopped = True
            notes.append("already torn down; re-verified")
        if self._log_thread is not None:
            if self._log_stream is not None:
                try:
                    self._log_stream.close()
                except Exception:  # the stream may already be gone
                    pass
            self._log_thread.join(timeout=5.0)
        if self._log_error:
            notes.append(self._log_error)
        containers_left = self._labelled_run_containers(notes)
        survivors = self._gpu_survivors(notes)
        shm_left: list[str] = []
        reclaim: dict[str, Any] | None = None
        if self.recipe.launcher.docker.ipc_host and containers_left == 0:
            # --ipc=host: the run's shared memory is in this host's /dev/shm; reclaim it as the
            # subprocess launcher does, once no container of the run can still hold it.
            held = self._shm_ledger.stop() if self._shm_ledger is not None else set()
            shm_left, reclaim = reclaim_run_shm(self.run_id, held, self._started_wall, root=self.shm_root)
        if self._reaper:
            WATCHDOG.done("containers", self.run_id)
            self._reaper = False
        return TeardownResult(
            launcher_kind=self.kind,
            stopped=stopped,
            seconds=time.monotonic() - started,
            survivors=survivors,
            shm_leftovers=shm_left,
            containers_left=containers_left,
            shm_reclaim=reclaim,
            notes=notes,
        )

    def _labelled_run_containers(self, notes: list[str]) -> int:
        """Count what still carries the run label, after one forced removal attempt of stragglers.

        -1 when the engine could not be asked: unverified counts as not clean.
        """
        label = {"label": f"{RUN_LABEL}={self.run_id}"}
        if self._client is None and self.container_id is None:
            return 0  # no engine was ever contacted, so nothing can carry the run label
        try:
            left = self.client.containers.list(all=True, filters=label, sparse=True)
            for straggler in left:
                try:
                    straggler.remove(force=True, v=True)
                    notes.append("force-removed a straggling container labelled for the run")
                except docker.errors.NotFound:
                    continue
                except docker.errors.APIError as exc:
                    notes.append(f"a container labelled for the run could not be removed ({exc.status_code})")
            if left:
                left = self.client.containers.list(all=True, filters=label, sparse=True)
            return len(left)
        except (docker.errors.DockerException, requests.exceptions.RequestException, LaunchError) as exc:
            notes.append(f"could not verify container removal: {type(exc).__name__}")
            return -1 if self.container_id else 0

    def _gpu_survivors(self, notes: list[str]) -> list[str]:
        """Compute processes on the GPUs that were not there before start (workers that outlived rm -f)."""
        if self._gpu_baseline is None:
            if self.container_id is not None:
                notes.append("GPU release not verified: NVML not available here")
            return []
        extra = gpu.wait_for_gpu_release(
            self._gpu_baseline, gpu_indexes(self.recipe.launcher.docker.gpus), timeout_s=_GPU_RELEASE_WAIT_S
        )
        return [f"{pid} gpu {_process_name(pid)}" for pid in sorted(extra or ())]


def _process_name(pid: int) -> str:
    """A GPU survivor's process name, or ``gpu-process`` when it is gone or not ours to read."""
    try:
        return psutil.Process(pid).name() or "gpu-process"
    except psutil.Error:
        return "gpu-process"
