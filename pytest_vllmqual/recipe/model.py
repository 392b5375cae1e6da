"""The typed recipe: what is served, how it is launched, the serve knobs and the gate settings.

A ``Recipe`` is what the loader (``recipe.loader``) makes of a validated YAML file; it also
knows the serve flags and argv the recipe stands for, and where its relative paths point.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vllmqual.hashing import canonical_json

__all__ = ["ContentPin", "DockerOptions", "Identity", "LauncherConfig", "Recipe", "RequestConfig", "ServeConfig",
           "StartupConfig", "project_root_of"]

_CONTENT_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Identity:
    """What must be served: the checkpoint, its revision, the image and runtime version."""

    checkpoint: str
    served_model_name: str
    runtime_version: str
    revision: str | None = None
    model_path: str | None = None
    image: str | None = None
    content_digest: str | None = None
    content_digest_file: str | None = None


@dataclass(frozen=True)
class ContentPin:
    """The content digest a local model is pinned to (``sha256:<64 hex>``), and where it came from;
    ``digest`` is None, with ``problem`` saying why, when the pin file cannot be read."""

    digest: str | None
    source: str
    problem: str = ""


@dataclass(frozen=True)
class DockerOptions:
    """Container settings for the docker launcher."""

    gpus: int | list[str] | None = None
    ipc_host: bool = True
    shm_size: str | None = None
    model_cache: str | None = None
    stop_timeout_s: int = 120
    container_name: str | None = None
    image_digest_file: str | None = None


@dataclass(frozen=True)
class LauncherConfig:
    """How the server is brought up (or, for ``external``, found)."""

    kind: str
    """A ``LauncherKind`` for a built-in launcher, else the word a registered launcher took (``launch.registry``)."""
    command: tuple[str, ...] = ()
    endpoint: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    env: dict[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    require_exclusive_gpus: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    """A registered launcher's own settings (``launcher.options``); the built-ins read none."""
    docker: DockerOptions = field(default_factory=DockerOptions)


@dataclass(frozen=True)
class ServeConfig:
    """The knobs being qualified; each maps to one vLLM serve flag."""

    tensor_parallel_size: int
    max_model_len: int
    decode_context_parallel_size: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None
    speculative_config: dict[str, Any] | None = None
    kv_offloading_size_gib: float | None = None
    kv_offloading_backend: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    reasoning_parser: str | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StartupConfig:
    """Deadlines for cold start and readiness."""

    deadline_s: float = 900.0
    poll_interval_s: float = 0.2
    ready_completion_timeout_s: float = 60.0
    #: The longest cold start the recipe accepts (the cold_start gate's ceiling); None: none set.
    cold_start_max_s: float | None = None


@dataclass(frozen=True)
class RequestConfig:
    """Per-request deadline and the explicit retry policy."""

    timeout_s: float = 120.0
    retries: int = 0


@dataclass(frozen=True)
class Recipe:
    """A validated recipe. ``raw`` is the file's content, kept for the report."""

    name: str
    path: Path
    sha256: str
    raw: dict[str, Any]
    identity: Identity
    launcher: LauncherConfig
    serve: ServeConfig
    startup: StartupConfig
    requests: RequestConfig
    pinned: bool = True
    description: str = ""
    prepare: tuple[str, ...] = ()
    gates: dict[str, Any] = field(default_factory=dict)
    compare: dict[str, Any] = field(default_factory=dict)
    discovered: bool = False
    overrides: tuple[str, ...] = ()
    file_sha256: str | None = None

    def gate(self, name: str) -> dict[str, Any]:
        """The settings block for one gate (empty when the recipe does not set it)."""
        block = self.gates.get(name) or {}
        return dict(block)

    @property
    def project_root(self) -> Path:
        """Relative paths in a recipe are relative to the project holding ``fixtures/recipes``."""
        return project_root_of(self.path)

    def model_location(self) -> str:
        """What vLLM loads: a local directory (resolved) or the checkpoint id."""
        if self.identity.model_path:
            from pytest_vllmqual.layout import resolve_project_path

            path = Path(self.identity.model_path)
            return str(path if path.is_absolute() else resolve_project_path(self.project_root, path))
        return self.identity.checkpoint

    def content_pin(self) -> ContentPin | None:
        """The model's content pin, read now (a build's digest file exists only after ``prepare``);
        None when the recipe pins no content."""
        if self.identity.content_digest:
            return ContentPin(self.identity.content_digest, "identity.content_digest")
        name = self.identity.content_digest_file
        if not name:
            return None
        from pytest_vllmqual.layout import resolve_project_path

        file = Path(name) if Path(name).is_absolute() else resolve_project_path(self.project_root, Path(name))
        source, shown = "identity.content_digest_file", file.name  # a local path never reaches the report
        try:
            digest = file.read_text(encoding="utf-8").strip()
        except OSError:
            return ContentPin(None, source, f"{shown} does not exist: the model's build writes it (run the "
                                            "recipe's prepare step, or build the model)")
        if not _CONTENT_DIGEST.match(digest):
            return ContentPin(None, source, f"{shown} holds {digest[:80]!r}, not sha256:<64 hex>: rebuild the model")
        return ContentPin(digest, source)

    def serve_flags(self, *, host: str, port: int) -> list[str]:
        """vLLM serve flags for this recipe, excluding the model argument."""
        s = self.serve
        flags: list[str] = [
            "--served-model-name", self.identity.served_model_name,
            "--host", host,
            "--port", str(port),
            "--tensor-parallel-size", str(s.tensor_parallel_size),
            "--max-model-len", str(s.max_model_len),
        ]
        if self.identity.revision:
            flags += ["--revision", self.identity.revision]
        if s.decode_context_parallel_size != 1:
            flags += ["--decode-context-parallel-size", str(s.decode_context_parallel_size)]
        optional: list[tuple[str, object]] = [
            ("--max-num-seqs", s.max_num_seqs),
            ("--max-num-batched-tokens", s.max_num_batched_tokens),
            ("--gpu-memory-utilization", s.gpu_memory_utilization),
            ("--kv-cache-dtype", s.kv_cache_dtype),
            ("--tool-call-parser", s.tool_call_parser),
            ("--reasoning-parser", s.reasoning_parser),
        ]
        for flag, value in optional:
            if value is not None:
                flags += [flag, str(value)]
        if s.enable_auto_tool_choice:
            flags.append("--enable-auto-tool-choice")
        if s.speculative_config is not None:
            flags += ["--speculative-config", canonical_json(s.speculative_config, compact=False)]
        if s.kv_offloading_size_gib:
            flags += ["--kv-offloading-size", _num(s.kv_offloading_size_gib)]
            flags += ["--kv-offloading-backend", s.kv_offloading_backend or "native"]
        flags += list(s.extra_args)
        return flags

    def subprocess_argv(self, *, host: str, port: int) -> list[str]:
        """The full argv for the subprocess launcher."""
        command = [part.replace("{python}", sys.executable) for part in self.launcher.command]
        return [*command, "--model", self.model_location(), *self.serve_flags(host=host, port=port)]

    def gpu_indexes(self) -> list[int] | None:
        """NVML indexes the server will use: the docker GPU list, else the first TP-size GPUs."""
        gpus = self.launcher.docker.gpus
        if isinstance(gpus, list):
            return [int(g) for g in gpus if str(g).isdigit()] or None
        count = gpus if isinstance(gpus, int) else self.serve.tensor_parallel_size
        return list(range(count))

    def server_env(self) -> dict[str, str]:
        """Environment additions for the server: launcher env, then serve env."""
        return {**self.launcher.env, **self.serve.env}


def project_root_of(recipe_path: Path) -> Path:
    """The project a recipe file belongs to: the folder holding ``fixtures/recipes``, else the file's folder."""
    parent = recipe_path.parent
    if parent.name == "recipes" and parent.parent.name == "fixtures":
        return parent.parent.parent
    return parent


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
