"""Load and validate recipes, and turn one into a serve command.

A recipe is a YAML file: the pinned identity of what is served, how to launch it, the serve
configuration and the thresholds its gates check. Validation is done by a JSON Schema
(``schemas/recipe.schema.yaml``) so that every error can name the file, the key path and
the expected type; this module only adds the cross-field rules a schema cannot say well
(pinning, launcher-specific requirements).
"""

from __future__ import annotations

import difflib
import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.layout import RECIPE_SCHEMA, load_schema
from pytest_vllmqual.recipe.gate_settings import check_gate_settings
from pytest_vllmqual.recipe.load_gate_settings import check_load_section

__all__ = ["DEFAULT_RECIPE", "RECIPE_SUFFIXES", "ContentPin", "DockerOptions", "Identity", "LauncherConfig", "Recipe", "RequestConfig",
           "ServeConfig", "StartupConfig", "available_recipes", "effective_yaml", "load_recipe", "parse_override",
           "recipes_dir", "resolve_recipe", "resolve_recipe_path", "validate_raw", "with_overrides"]

DEFAULT_RECIPE = "tiny-cpu"
RECIPE_SUFFIXES = (".yaml", ".yml")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
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
    command: tuple[str, ...] = ()
    endpoint: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    env: dict[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    require_exclusive_gpus: bool = False
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
        return _project_root(self.path)

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
            import json

            flags += ["--speculative-config", json.dumps(s.speculative_config, sort_keys=True)]
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


def _project_root(recipe_path: Path) -> Path:
    parent = recipe_path.parent
    if parent.name == "recipes" and parent.parent.name == "fixtures":
        return parent.parent.parent
    return parent


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def recipes_dir(root: Path) -> Path:
    """Where named recipes live under a project root."""
    return root / "fixtures" / "recipes"


def available_recipes(directory: Path) -> list[str]:
    """Names of the recipes in a directory, sorted."""
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.iterdir() if p.suffix in RECIPE_SUFFIXES)


def resolve_recipe_path(name_or_path: str, directory: Path) -> Path:
    """Turn ``--recipe`` into a file: an existing path, or a name looked up in ``directory``."""
    candidate = Path(name_or_path)
    looks_like_path = candidate.suffix in RECIPE_SUFFIXES or "/" in name_or_path or "\\" in name_or_path
    if looks_like_path:
        if candidate.is_file():
            return candidate.resolve()
        raise RecipeError(
            f"recipe file {name_or_path!r} does not exist. Fix: pass an existing YAML file, "
            f"or a recipe name from {directory} ({', '.join(available_recipes(directory)) or 'none found'}).",
            path=name_or_path,
        )
    from pytest_vllmqual.layout import shipped_recipes_dir

    shipped = shipped_recipes_dir()
    for folder in (directory, shipped):
        for suffix in RECIPE_SUFFIXES:
            path = folder / f"{name_or_path}{suffix}"
            if path.is_file():
                return path.resolve()
    names = available_recipes(directory)
    close = difflib.get_close_matches(name_or_path, names, n=1)
    suggestion = f" Did you mean {close[0]!r}?" if close else ""
    shipped_text = ""
    if shipped.resolve() != directory.resolve():
        shipped_names = available_recipes(shipped)
        close = close or difflib.get_close_matches(name_or_path, shipped_names, n=1)
        suggestion = f" Did you mean {close[0]!r}?" if close else ""
        shipped_text = f"; shipped recipes: {', '.join(shipped_names) or '(none)'}"
    raise RecipeError(
        f"unknown recipe {name_or_path!r}.{suggestion} Recipes in {directory}: "
        f"{', '.join(names) if names else '(none)'}{shipped_text}. Fix: pass one of these names to --recipe, "
        "or a path to a recipe YAML file.",
        path=str(directory),
    )


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def _schema_error_message(path: Path, error: jsonschema.ValidationError) -> tuple[str, str]:
    """A one-paragraph message naming file, key path, what was expected and the fix."""
    key = _key_path(error)
    where = f"recipe {path}"
    if error.validator == "additionalProperties":
        allowed = sorted((error.schema.get("properties") or {}).keys())
        extras = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        unknown = extras[0] if extras else "?"
        full_key = unknown if key == "(top level)" else f"{key}.{unknown}"
        close = difflib.get_close_matches(unknown, allowed, n=1)
        fix = f"rename it to {close[0]!r}" if close else f"remove it; allowed keys here: {', '.join(allowed)}"
        return f"{where}: unknown key {full_key!r}. Fix: {fix}.", full_key
    if error.validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", error.message)
        name = missing[0] if missing else "?"
        full_key = name if key == "(top level)" else f"{key}.{name}"
        description = ""
        sub = (error.schema.get("properties") or {}).get(name, {})
        if isinstance(sub, dict) and sub.get("description"):
            description = f" ({sub['description']})"
        return f"{where}: missing required key {full_key!r}{description}. Fix: add it.", full_key
    if error.validator == "type":
        expected = error.validator_value
        expected_text = " or ".join(expected) if isinstance(expected, list) else str(expected)
        got = type(error.instance).__name__
        return (
            f"{where}: key {key!r} must be of type {expected_text}, got {got} {error.instance!r}. "
            f"Fix: write a {expected_text} value for {key!r}.",
            key,
        )
    if error.validator == "enum":
        return (
            f"{where}: key {key!r} is {error.instance!r}, which is not one of "
            f"{', '.join(map(str, error.validator_value))}. Fix: use one of those values.",
            key,
        )
    return f"{where}: key {key!r}: {error.message}. Fix: correct the value of {key!r}.", key


def _with_defaults(schema: dict[str, Any], data: Any) -> Any:
    """Fill schema ``default`` values into a validated mapping (recursively)."""
    if not isinstance(data, dict) or schema.get("type") != "object":
        return data
    out = dict(data)
    for key, sub in (schema.get("properties") or {}).items():
        if key not in out and isinstance(sub, dict) and "default" in sub:
            out[key] = sub["default"]
        if key in out and isinstance(sub, dict):
            out[key] = _with_defaults(sub, out[key])
    return out


def _check_pinning(path: Path, raw: dict[str, Any]) -> None:
    """A pinned recipe names its model by content: a hub checkpoint by its full commit, a local
    folder by its content digest (or the file its build writes it to); a docker image by digest."""
    identity = raw["identity"]
    if identity.get("content_digest") and identity.get("content_digest_file"):
        raise RecipeError(f"recipe {path}: keys 'identity.content_digest' and 'identity.content_digest_file' are "
                          "both set. Fix: keep one (the digest itself, or the file a local build writes it to).",
                          path=str(path), key="identity.content_digest")
    if not raw.get("pinned", True):
        return
    revision = identity.get("revision")
    by_content = bool(identity.get("content_digest") or identity.get("content_digest_file"))
    if revision is not None or not by_content:
        need = ("but a pinned recipe needs the checkpoint's full 40-hex commit" if revision is not None else
                "and the model has no content pin either: a pinned recipe needs the checkpoint's full 40-hex commit "
                "(a hub model) or identity.content_digest / content_digest_file (a local model folder)")
        if not isinstance(revision, str) or not _HEX40.match(revision):
            raise RecipeError(f"recipe {path}: key 'identity.revision' is {revision!r}, {need}. Fix: write the "
                              "40-character revision or the content digest, or set 'pinned: false' for an unpinned "
                              "experiment.", path=str(path), key="identity.revision")
    built_image = bool((raw["launcher"].get("docker") or {}).get("image_digest_file"))
    image = identity.get("image")
    if raw["launcher"]["kind"] == "docker" and not built_image and not (isinstance(image, str) and _DIGEST.match(image)):
        raise RecipeError(
            f"recipe {path}: key 'identity.image' is {image!r}, but a pinned docker recipe must name the image by "
            "digest (repo@sha256:<64 hex>); a tag can move. Fix: replace the tag with the digest, e.g. "
            "`docker buildx imagetools inspect IMAGE` shows it.", path=str(path), key="identity.image")


def _check_launcher(path: Path, raw: dict[str, Any]) -> None:
    """Each launcher kind's required key, with what it needs it for and an example."""
    launcher = raw["launcher"]
    required = {
        "subprocess": ("launcher.command", launcher.get("command"), "the subprocess launcher needs the argv that "
                       "starts the server. Fix: add e.g. command: ['{python}', '-m', "
                       "'vllm.entrypoints.openai.api_server']."),
        "docker": ("identity.image", raw["identity"].get("image"), "the docker launcher needs an image. Fix: add "
                   "identity.image: repo@sha256:<digest>."),
        "external": ("launcher.endpoint", launcher.get("endpoint"), "the external launcher needs the base URL of "
                     "the running server. Fix: add endpoint: http://127.0.0.1:8000, or pass --vllmqual-endpoint URL."),
    }
    key, value, need = required.get(launcher["kind"], ("", True, ""))
    if not value:
        raise RecipeError(f"recipe {path}: key '{key}' is missing, and {need}", path=str(path), key=key)


def load_recipe(path: Path) -> Recipe:
    """Read, validate and type a recipe file. Raises RecipeError with file, key and fix."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RecipeError(f"recipe {path} cannot be read: {exc.strerror}. Fix: check the path.",
                          path=str(path)) from None
    try:
        raw = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecipeError(
            f"recipe {path} is not valid YAML{where}: {problem}. Fix: correct the YAML syntax there "
            "(indentation, a missing colon, or an unclosed quote or bracket).",
            path=str(path),
        ) from None
    if not isinstance(raw, dict):
        raise RecipeError(
            f"recipe {path} must be a YAML mapping with keys name, identity, launcher, serve; "
            f"got {type(raw).__name__}. Fix: start from fixtures/recipes/tiny-cpu.yaml.",
            path=str(path),
        )
    raw = validate_raw(path, raw)
    if raw["name"] != path.stem:
        raise RecipeError(
            f"recipe {path}: key 'name' is {raw['name']!r} but the file is named {path.name!r}. "
            f"Fix: set name: {path.stem}, or rename the file.",
            path=str(path), key="name",
        )
    raw = _with_built_image_digest(path, raw)
    _check_launcher(path, raw)
    _check_pinning(path, raw)
    check_load_section(path, raw)
    check_gate_settings(path, raw)
    return _typed(path, data, raw)


def _with_built_image_digest(path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    """``launcher.docker.image_digest_file``: pin identity.image to the digest a local build wrote.

    An image built on this machine (tiny-docker's) has a digest no committed file can know.
    The build writes it to a git-ignored file; this makes ``identity.image`` REPO@DIGEST, so
    the launcher runs, and the identity check compares, exactly that build. Without the file
    the image stays unpinned and the launcher says how to build it.
    """
    docker = raw["launcher"].get("docker") or {}
    digest_file = docker.get("image_digest_file")
    image = raw["identity"].get("image")
    if not digest_file:
        return raw
    if not isinstance(image, str) or "@" in image or not image:
        raise RecipeError(
            f"recipe {path}: key 'identity.image' is {image!r}, but with launcher.docker.image_digest_file "
            "it must be the repository alone (e.g. localhost:5000/vllmqual/vllm-cpu); the digest comes "
            "from the file. Fix: remove the tag or digest from identity.image.",
            path=str(path), key="identity.image",
        )
    file = Path(digest_file) if Path(digest_file).is_absolute() else _project_root(path) / digest_file
    try:
        digest = file.read_text().strip()
    except OSError:
        return raw  # not built here yet: DockerLauncher.image_reference names the fix
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise RecipeError(
            f"recipe {path}: key 'launcher.docker.image_digest_file' names {file}, which holds {digest[:80]!r}, "
            "not sha256:<64 hex>. Fix: rebuild the image (`make docker-image`), which rewrites the file.",
            path=str(path), key="launcher.docker.image_digest_file",
        )
    identity = {**raw["identity"], "image": f"{image}@{digest}"}
    return {**raw, "identity": identity}


def validate_raw(path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    """Schema-validate a recipe mapping and fill in defaults (RecipeError naming file, key and fix)."""
    schema = load_schema(RECIPE_SCHEMA)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(raw), key=lambda e: (len(list(e.absolute_path)), e.message))
    if errors:
        best = jsonschema.exceptions.best_match(errors) or errors[0]
        message, key = _schema_error_message(path, best)
        if len(errors) > 1:
            message += f" ({len(errors) - 1} more problem(s) in this file after this one is fixed.)"
        raise RecipeError(message, path=str(path), key=key)
    validated: dict[str, Any] = _with_defaults(schema, raw)
    return validated


def parse_override(text: str) -> tuple[list[str], Any]:
    """``KEY=VALUE`` with a dotted key and a YAML value (``serve.max_num_seqs=4``)."""
    key, sep, value = text.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not sep or not parts:
        raise RecipeError(f"--vllmqual-set {text!r} is not KEY=VALUE. Fix: e.g. --vllmqual-set serve.max_num_seqs=4 "
                          "or --vllmqual-set launcher.docker.model_cache=/data/hf.", key=key)
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return parts, parsed


def with_overrides(recipe: Recipe, overrides: list[str] | tuple[str, ...]) -> Recipe:
    """The recipe with ``--vllmqual-set`` overrides applied, validated again; its sha256 is the
    SHA-256 of the effective recipe (canonical YAML), ``file_sha256`` that of the file."""
    if not overrides:
        return recipe
    import copy

    raw = copy.deepcopy(recipe.raw)
    for text in overrides:
        parts, value = parse_override(text)
        node = raw
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise RecipeError(f"--vllmqual-set {text!r}: {'.'.join(parts[:i + 1])!r} in recipe {recipe.path} is "
                                  f"not a mapping. Fix: set a key that exists in the recipe schema.",
                                  path=str(recipe.path), key=".".join(parts))
            node = child
        node[parts[-1]] = value
    try:
        raw = validate_raw(recipe.path, raw)
        _check_launcher(recipe.path, raw)
        _check_pinning(recipe.path, raw)
        check_load_section(recipe.path, raw)
        check_gate_settings(recipe.path, raw)
    except RecipeError as exc:
        raise RecipeError(f"{exc} (after --vllmqual-set {', '.join(overrides)})", path=str(recipe.path)) from None
    data = effective_yaml(raw).encode()
    typed = _typed(recipe.path, data, raw)
    from dataclasses import replace

    return replace(typed, overrides=tuple(overrides), file_sha256=recipe.sha256)


def effective_yaml(raw: dict[str, Any]) -> str:
    """The canonical YAML of a recipe mapping (what the effective SHA-256 is taken over)."""
    return yaml.safe_dump(raw, sort_keys=True, default_flow_style=False)


def _typed(path: Path, data: bytes, raw: dict[str, Any]) -> Recipe:
    launcher_raw = dict(raw["launcher"])
    docker = DockerOptions(**(launcher_raw.pop("docker", None) or {}))
    launcher = LauncherConfig(
        kind=launcher_raw["kind"],
        command=tuple(launcher_raw.get("command") or ()),
        endpoint=launcher_raw.get("endpoint"),
        host=launcher_raw.get("host", "127.0.0.1"),
        port=launcher_raw.get("port", 0),
        env=dict(launcher_raw.get("env") or {}),
        api_key_env=launcher_raw.get("api_key_env"),
        require_exclusive_gpus=bool(launcher_raw.get("require_exclusive_gpus", False)),
        docker=docker,
    )
    serve_raw = dict(raw["serve"])
    serve_raw["extra_args"] = tuple(serve_raw.get("extra_args") or ())
    serve_raw["env"] = dict(serve_raw.get("env") or {})
    return Recipe(
        name=raw["name"],
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        raw=raw,
        identity=Identity(**raw["identity"]),
        launcher=launcher,
        serve=ServeConfig(**serve_raw),
        startup=StartupConfig(**(raw.get("startup") or {})),
        requests=RequestConfig(**(raw.get("requests") or {})),
        pinned=raw.get("pinned", True),
        description=raw.get("description", ""),
        prepare=tuple(raw.get("prepare") or ()),
        gates=dict(raw.get("gates") or {}),
        compare=dict(raw.get("compare") or {}),
        discovered=bool(raw.get("discovered", False)),
    )


def resolve_recipe(name_or_path: str, directory: Path) -> Recipe:
    """``--recipe`` value to a validated Recipe."""
    return load_recipe(resolve_recipe_path(name_or_path, directory))
