"""Find, read and validate recipe files into typed recipes (``recipe.model``).

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
from pathlib import Path
from typing import Any

import yaml

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.launch.registry import kind_word, launcher_class
from pytest_vllmqual.layout import RECIPE_SCHEMA
from pytest_vllmqual.recipe.gate_settings import check_gate_settings, with_one_min_kv_tokens
from pytest_vllmqual.recipe.load_gate_settings import check_load_section
from pytest_vllmqual.recipe.model import (
    DockerOptions,
    Identity,
    LauncherConfig,
    Recipe,
    RequestConfig,
    ServeConfig,
    StartupConfig,
    project_root_of,
)
from pytest_vllmqual.recipe.schema_check import checked

__all__ = ["DEFAULT_RECIPE", "RECIPE_SUFFIXES", "available_recipes", "check_rules", "load_recipe", "recipes_dir",
           "resolve_recipe", "resolve_recipe_path", "typed_recipe", "validate_raw"]

DEFAULT_RECIPE = "tiny-cpu"
RECIPE_SUFFIXES = (".yaml", ".yml")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


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
    unpinned = launcher_class(raw["launcher"]["kind"]).unpinned_reason(raw)
    if unpinned is not None:
        raise RecipeError(f"recipe {path}: {unpinned.message}", path=str(path), key=unpinned.key)


def _check_launcher(path: Path, raw: dict[str, Any]) -> None:
    """The kind is a registered launcher's, and the recipe says what that launcher needs (its
    required key, with what it needs it for and an example)."""
    try:
        cls = launcher_class(raw["launcher"]["kind"])
    except RecipeError as exc:
        raise RecipeError(f"recipe {path}: {exc}", path=str(path), key="launcher.kind") from None
    problem = cls.recipe_problem(raw)
    if problem is not None:
        raise RecipeError(f"recipe {path}: key '{problem.key}' is missing, and {problem.message}", path=str(path),
                          key=problem.key)


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
    check_rules(path, raw)
    return typed_recipe(path, data, raw)


def check_rules(path: Path, raw: dict[str, Any]) -> None:
    """The cross-field rules of a schema-valid recipe mapping (RecipeError naming file, key and fix)."""
    _check_launcher(path, raw)
    _check_pinning(path, raw)
    check_load_section(path, raw)
    check_gate_settings(path, raw)


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
    file = Path(digest_file) if Path(digest_file).is_absolute() else project_root_of(path) / digest_file
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
    """Schema-validate a recipe mapping, fill in defaults and settle the KV pool minimum in its one place
    (RecipeError naming file, key and fix)."""
    def fail(message: str, key: str) -> RecipeError:
        return RecipeError(message, path=str(path), key=key)

    return with_one_min_kv_tokens(path, checked(raw, RECIPE_SCHEMA, where=f"recipe {path}", fail=fail))


def typed_recipe(path: Path, data: bytes, raw: dict[str, Any]) -> Recipe:
    """The typed recipe of a checked mapping; ``data`` is what its SHA-256 is taken over."""
    launcher_raw = dict(raw["launcher"])
    docker = DockerOptions(**(launcher_raw.pop("docker", None) or {}))
    launcher = LauncherConfig(
        kind=kind_word(launcher_raw["kind"]),
        command=tuple(launcher_raw.get("command") or ()),
        endpoint=launcher_raw.get("endpoint"),
        host=launcher_raw.get("host", "127.0.0.1"),
        port=launcher_raw.get("port", 0),
        env=dict(launcher_raw.get("env") or {}),
        api_key_env=launcher_raw.get("api_key_env"),
        require_exclusive_gpus=bool(launcher_raw.get("require_exclusive_gpus", False)),
        options=dict(launcher_raw.get("options") or {}),
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
