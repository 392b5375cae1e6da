"""The launcher contract shared by the local-process, docker and external launchers.

A launcher owns one server's lifecycle: it starts it, says whether it is still alive, hands
out its log (one file, ``log_path``, read the one way), and tears it down verifying that
nothing of the run survived. Readiness is not the launcher's business: ``launch.readiness``
polls any launcher the same way.

A launcher class also answers, for its ``kind``, what the rest of the package would otherwise
decide by the kind's name: what a recipe must say for it (``recipe_problem``, ``unpinned_reason``),
the command it runs (``command_line``), the model argument it gives vLLM (``model_argument``),
whether the server runs in a container (``runs_container``) or is one this run does not start
(``starts_server``), and where the server's relative paths resolve (``server_directory``).
``launch.registry`` maps each kind to its class.
"""

from __future__ import annotations

import abc
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.launch.registry import RecipeProblem
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.vllm.server_log import read_log

__all__ = [
    "Launcher",
    "ProgressFn",
    "RecipeProblem",
    "ServerHandle",
    "TeardownResult",
    "ephemeral_low",
    "free_port",
    "new_api_key",
    "port_is_taken",
]

ProgressFn = Callable[[str], None]
"""Receives one human-readable progress line (elapsed time, startup phase, rung)."""


@dataclass
class ServerHandle:
    """How clients reach a started server, and what is known about what runs there."""

    base_url: str
    served_model_name: str
    launcher_kind: str
    api_key: str | None = None
    direct_only: bool = False
    log_path: Path | None = None
    pid: int | None = None
    container_id: str | None = None
    image_id: str | None = None
    image_digest: str | None = None
    cold_start_s: float | None = None

    def auth_headers(self) -> dict[str, str]:
        """Headers every request to this server carries."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass
class TeardownResult:
    """What teardown found: the reference campaign's zero-reclaimable-files postcondition, as data."""

    launcher_kind: str
    stopped: bool
    seconds: float = 0.0
    survivors: list[str] = field(default_factory=list)
    shm_leftovers: list[str] = field(default_factory=list)
    containers_left: int | None = None
    shm_reclaim: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when no process, shm file or labelled container of the run remains."""
        return not self.survivors and not self.shm_leftovers and not self.containers_left

    def to_dict(self) -> dict[str, Any]:
        return {
            "launcher": self.launcher_kind,
            "stopped": self.stopped,
            "seconds": round(self.seconds, 3),
            "surviving_processes": len(self.survivors),
            "surviving_process_names": sorted({s.split(" ", 2)[-1] for s in self.survivors}),
            "shm_leftover_files": len(self.shm_leftovers),
            "containers_left": self.containers_left,
            "shm_reclaim": self.shm_reclaim,
            "clean": self.clean,
            "notes": list(self.notes),
        }


class Launcher(abc.ABC):
    """One server's lifecycle. Implementations must make ``stop`` safe to call twice.

    A launcher is built by ``create`` with the recipe, the run id, the run's private folder, the
    run's API key and the endpoint the user named (``--vllmqual-endpoint``, or None)."""

    kind: ClassVar[str]
    """Which ``launcher.kind`` of a recipe this class brings up (a ``LauncherKind`` for the built-ins)."""
    runs_container: ClassVar[bool] = False
    """True where the server runs in a container: its paths are not this machine's, and the
    image it runs is pinned by digest (the identity check compares it)."""
    starts_server: ClassVar[bool] = True
    """False for a launcher that only points at a server someone else runs (direct-only): nothing
    is prepared, started or torn down, and the server's flags are not the recipe's."""
    log_path: Path | None = None
    """The file the server's output goes to; None where the launcher keeps no log (external)."""

    @classmethod
    def create(cls, recipe: Recipe, *, run_id: str, artifacts_dir: Path, api_key: str | None,
               endpoint: str | None) -> Launcher:
        """The launcher for one run of ``recipe``; the default suits a launcher that starts a
        process or container (``endpoint`` is for one that does not)."""
        factory: Callable[..., Launcher] = cls
        return factory(recipe, run_id=run_id, artifacts_dir=artifacts_dir, api_key=api_key)

    required: ClassVar[RecipeProblem | None] = None
    """The recipe key (``section.key``) this launcher cannot run without, and what it needs it for."""

    @classmethod
    def recipe_problem(cls, raw: Mapping[str, Any]) -> RecipeProblem | None:
        """What a schema-valid recipe mapping lacks for this launcher (checked at load time); None when
        nothing. The default: the ``required`` key, when it is missing or empty."""
        if cls.required is None:
            return None
        section, _, key = cls.required.key.partition(".")
        return None if (raw.get(section) or {}).get(key) else cls.required

    @classmethod
    def unpinned_reason(cls, raw: Mapping[str, Any]) -> RecipeProblem | None:
        """Why a recipe pinned by its model still runs something that can move (a container
        image by tag); None when the launcher adds nothing to pin."""
        return None

    @classmethod
    def command_line(cls, recipe: Recipe) -> list[str]:
        """The argv a run starts for ``recipe``, as an operator would type it (``vllmqual recipe show``).
        The API key is never shown: each run generates one and passes it as VLLM_API_KEY."""
        raise RecipeError(f"recipe {recipe.path}: the {cls.kind} launcher does not write out its command line.",
                          path=str(recipe.path))

    @classmethod
    def command_line_note(cls) -> str | None:
        """One line that says how to read ``command_line`` (shown above it), or None."""
        return None

    @classmethod
    def model_argument(cls, recipe: Recipe) -> str | None:
        """The model argument the launcher gives vLLM; None where this run does not start the server."""
        return recipe.model_location() if cls.starts_server else None

    def server_directory(self, handle: ServerHandle) -> tuple[Path | None, str]:
        """The server's working directory, against which a relative model path it reports is
        resolved, or None and why it is not known. The default: the recipe's project, where a
        process this run started was started (launchers that keep ``recipe`` on themselves)."""
        recipe = getattr(self, "recipe", None)
        if isinstance(recipe, Recipe):
            return recipe.project_root, ""
        return None, f"the {self.kind} launcher does not say where its server runs"

    def fingerprint(self, handle: ServerHandle) -> dict[str, Any]:
        """The server's numerics fingerprint, read from its own environment (``launch.fingerprint``);
        the default: not measured, for a launcher that cannot reach where the server runs."""
        from pytest_vllmqual.launch.fingerprint import not_measured

        return not_measured(f"the {self.kind} launcher cannot read the server's environment")

    @abc.abstractmethod
    def start(self, progress: ProgressFn) -> ServerHandle:
        """Start the server (not waiting for readiness) and return how to reach it."""

    @abc.abstractmethod
    def alive(self) -> bool | None:
        """Whether the server process/container still runs; None when unknowable (external)."""

    @abc.abstractmethod
    def exit_code(self) -> int | None:
        """The exit status once the server has ended, else None."""

    def log_text(self) -> str:
        """The server log so far (raw; sanitize before showing it publicly); '' without one."""
        return read_log(self.log_path)

    @abc.abstractmethod
    def stop(self, *, never_ready: bool = False) -> TeardownResult:
        """Kill everything the run started and verify that nothing survived.

        ``never_ready``: the server failed its start, so it has no request to drain; it gets
        ``FAILED_START_GRACE_S`` to exit before it is killed, not the launcher's full grace."""


FAILED_START_GRACE_S = 3
"""Seconds a server that never became ready gets to exit on SIGTERM before SIGKILL. vLLM's API
server can linger after its engine failed to start (seen: still running 30 s after the
KV-insufficient error, in and out of containers), and there is nothing to drain."""


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
FREE_PORT_SPAN = 10_000
"""How many ports below the kernel's ephemeral range :func:`free_port` picks from."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now on ``host``, below the kernel's ephemeral range.

    A server binds its port only after importing vLLM, tens of seconds after the port was picked.
    A port the kernel handed out from its ephemeral range can meanwhile become the source port of
    any outgoing connection on the machine (a replay arm's server once found its port taken
    that way), so the pick comes from the ``FREE_PORT_SPAN`` ports below that range, at random;
    the kernel's own pick is the fallback."""
    low = ephemeral_low()
    picker = secrets.SystemRandom()
    for _ in range(64):
        port = picker.randrange(max(1024, low - FREE_PORT_SPAN), low)
        if _bindable(host, port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return max(1024 + FREE_PORT_SPAN, int(EPHEMERAL_RANGE_FILE.read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_is_taken(host: str, port: int) -> bool:
    """True when something already listens on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def new_api_key() -> str:
    """A per-run API key; it never leaves the process environment of the run."""
    return "vq-" + secrets.token_urlsafe(24)
