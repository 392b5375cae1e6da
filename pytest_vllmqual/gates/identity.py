"""Identity check: is the server that answered the one the recipe pins?

Every field the recipe pins is compared with what the server says, and each comparison
records its field, the expected value, the observed value and where the observation came
from:

- the checkpoint: the model argument in the server's log, and ``/v1/models`` ``root``;
- the revision: the ``revision`` argument, or the ``snapshots/<commit>`` part of the model path;
- the content digest of a local model folder (``model_files``' ``content``): weights, tokenizer,
  chat template and configuration, without a writer's version stamp, against the recipe's
  ``identity.content_digest`` (or the digest file its build wrote);
- the image digest: the container's image and RepoDigests, as the docker launcher reports them
  (not applicable to the subprocess launcher, which runs no container);
- the runtime version: ``/version`` (the log's version line when it does not answer);
- the TP size: the number of ranks in the log;
- ``max_model_len`` and the served name: ``/v1/models``.

``verified`` means every pinned field was checked and matched; ``partially-verified`` that
none differed but some could not be checked (listed in ``not_checked``); ``provenance_mismatch``
that one differed (gates may still pass, but the evidence is not about the recipe). A local
model path is the same checkpoint when it names the same files (``gates.checkpoint``: resolved
against the server's working directory, or a copy with the same content); a path this run
cannot resolve is not checked, and marked not observable from here, which fails no gate. A local
model directory also gets the SHA-256 of its ``config.json``, its weights index and its whole
content, so two runs can tell whether they served the same files.

The model is *pinned* when the recipe names it by content: a hub checkpoint by its revision, a
local folder by its content digest; a container image by its digest (``IdentityResult.unpinned``
says what is not, and the decision caps an unpinned run at healthy). Local paths never appear in
the result: a directory is shown as the recipe's own (relative) ``model_path``, or
``<model-dir>``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vllmqual.hashing import sha256_file, sha256_hex
from pytest_vllmqual.launch.registry import launcher_class
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import LauncherKind
from pytest_vllmqual.vllm.engine_args import MODEL_DIR_PLACEHOLDER, NON_DEFAULT_ARGS_RE, parse_python_literal

from .checkpoint import (
    SAMPLED_ABOVE_BYTES,
    FileHash,
    LocationComparison,
    ProgressWriter,
    compare_model_locations,
    hash_model_directory,
    is_local_location,
)

__all__ = [
    "CONTENT_KEY",
    "MODEL_DIR",
    "MODEL_PIN_FIELDS",
    "OTHER_DIR",
    "UNRESOLVED_DIR",
    "WEIGHTS_INDEX_NAMES",
    "IdentityCheck",
    "IdentityResult",
    "check_identity",
    "content_digest",
    "image_digest_matches",
    "logged_model_args",
    "model_files_sha256",
]

MODEL_DIR = MODEL_DIR_PLACEHOLDER  # the engine facts name a local model dir the same way
OTHER_DIR = "<another local directory>"
UNRESOLVED_DIR = "<a local directory not resolved from here>"
_SNAPSHOT_RE = re.compile(r"/snapshots/(?P<rev>[0-9a-f]{40})(?:/|$)")
WEIGHTS_INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
CONTENT_KEY = "content"
"""The ``model_files`` entry that digests every file of a local model directory."""
MODEL_PIN_FIELDS = ("revision", "content_digest")
"""The checks that pin the model itself: a hub revision, or a local folder's content digest."""


@dataclass
class IdentityCheck:
    """One compared field: what the recipe pins, what the server says, and where that was read."""

    field: str
    expected: Any
    observed: Any
    ok: bool | None
    note: str = ""
    source: str = ""
    pinned: bool = True
    observable: bool = True
    """False: the field cannot be checked from where this run is (a relative model path of a
    server whose working directory is unknown); it caps the verdict but fails no gate."""

    @property
    def status(self) -> str:
        if not self.pinned:
            return "not pinned"
        if self.ok is None:
            return "not checked"
        return "matched" if self.ok else "mismatch"

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "expected": self.expected, "observed": self.observed, "ok": self.ok,
                "status": self.status, "source": self.source, "pinned": self.pinned, "note": self.note,
                "observable": self.observable}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IdentityCheck:
        """A check as ``to_dict`` wrote it (the ``server_facts`` fixture hands gates dicts)."""
        ok = data.get("ok")
        return cls(field=str(data.get("field")), expected=data.get("expected"), observed=data.get("observed"),
                   ok=ok if isinstance(ok, bool) else None, note=str(data.get("note") or ""),
                   source=str(data.get("source") or ""), pinned=bool(data.get("pinned", True)),
                   observable=bool(data.get("observable", True)))


@dataclass
class IdentityResult:
    """All compared fields; ``status`` is verified, partially-verified, provenance_mismatch or unverified."""

    checks: list[IdentityCheck] = field(default_factory=list)
    model_files: dict[str, str] = field(default_factory=dict)
    file_hashes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per model file: size, content digest, raw SHA-256 (the hub's name for its bytes), when its
    bytes were read and whether this run took that from the hash cache (``FileHash.to_dict``)."""

    @property
    def not_checked(self) -> list[str]:
        return [c.field for c in self.checks if c.pinned and c.ok is None]

    @property
    def status(self) -> str:
        if any(c.ok is False for c in self.checks):
            return "provenance_mismatch"
        pinned = [c for c in self.checks if c.pinned]
        if pinned and all(c.ok for c in pinned):
            return "verified"
        if any(c.ok for c in pinned):
            return "partially-verified"
        return "unverified"

    @property
    def mismatches(self) -> list[IdentityCheck]:
        return [c for c in self.checks if c.ok is False]

    @property
    def unchecked(self) -> list[IdentityCheck]:
        """Pinned fields nothing observed (``ok`` is None)."""
        return [c for c in self.checks if c.pinned and c.ok is None]

    @property
    def unpinned(self) -> list[str]:
        """What the recipe leaves unpinned, in words (empty when the model, and a container's image,
        are pinned): read from the checks, so a report read back from disk gives the same answer."""
        out: list[str] = []
        if not any(c.pinned for c in self.checks if c.field in MODEL_PIN_FIELDS):
            out.append("the model is pinned neither by a hub revision nor by a content digest")
        image = next((c for c in self.checks if c.field == "image_digest"), None)
        if image is not None and not image.pinned and image.source != "n/a":
            out.append("the container image is not pinned by digest")
        return out

    def describe(self) -> str:
        """"checkpoint matched; revision not pinned; ..." — one line per run."""
        return "; ".join(f"{c.field} {c.status}" for c in self.checks)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IdentityResult:
        """The result as ``to_dict`` wrote it; ``status`` is computed again from the checks."""
        return cls(checks=[IdentityCheck.from_dict(c) for c in data.get("checks") or [] if isinstance(c, Mapping)],
                   model_files=dict(data.get("model_files") or {}),
                   file_hashes={str(k): dict(v) for k, v in (data.get("file_hashes") or {}).items()
                                if isinstance(v, Mapping)})

    def to_dict(self, recipe: Recipe) -> dict[str, Any]:
        return {
            "status": self.status,
            "expected": {
                "checkpoint": recipe.identity.checkpoint,
                "revision": recipe.identity.revision,
                "image": recipe.identity.image,
                "content_digest": next((c.expected for c in self.checks if c.field == "content_digest"), None),
                "runtime_version": recipe.identity.runtime_version,
                "served_model_name": recipe.identity.served_model_name,
                "max_model_len": recipe.serve.max_model_len,
                "tensor_parallel_size": recipe.serve.tensor_parallel_size,
            },
            "observed": {c.field: c.observed for c in self.checks},
            "checks": [c.to_dict() for c in self.checks],
            "not_checked": self.not_checked,
            "model_files": dict(self.model_files),
            "file_hashes": {name: dict(entry) for name, entry in self.file_hashes.items()},
        }


# -- observations ---------------------------------------------------------------------------


def logged_model_args(log_text: str) -> dict[str, Any]:
    """The server's own ``non-default args`` of its last start, unredacted (kept in memory only)."""
    from pytest_vllmqual.vllm.server_log import strip_ansi

    found: dict[str, Any] = {}
    for line in strip_ansi(log_text).splitlines():
        m = NON_DEFAULT_ARGS_RE.search(line)
        if m:
            parsed = parse_python_literal(m.group("args"))
            if isinstance(parsed, dict):
                found = parsed
    return found


def _is_local(value: str) -> bool:
    return is_local_location(value)


def _show_location(value: str, recipe: Recipe, matched: bool | None, local: bool | None = None) -> str:
    """A model location fit for the public report: a hub id as is, a local directory never by path
    (the recipe's own relative ``model_path`` when it is the same checkpoint)."""
    if not (_is_local(value) if local is None else local):
        return value
    if matched and recipe.identity.model_path and not Path(recipe.identity.model_path).is_absolute():
        return recipe.identity.model_path
    if matched is None:
        return UNRESOLVED_DIR
    return MODEL_DIR if matched else OTHER_DIR


def _revision_of(location: str | None) -> str | None:
    m = _SNAPSHOT_RE.search(location or "")
    return m.group("rev") if m else None


def image_digest_matches(expected_image: str | None, reported: str | list[str] | None) -> bool | None:
    """The comparison hook for container launchers: does the launcher's report of the running
    container's image (its digest, or its RepoDigests list) carry the recipe's pinned digest?
    None when either side is unknown."""
    expected = (expected_image or "").partition("@")[2]
    if not expected or not reported:
        return None
    values = [reported] if isinstance(reported, str) else list(reported)
    return any(str(v).endswith(expected) for v in values)


def model_files_sha256(directory: Path, *, progress: ProgressWriter | None = None) -> dict[str, str]:
    """SHA-256 of a local model's ``config.json`` and weights index (``*.index.json``); for a
    single-file safetensors model, of its header (the tensor index: names, dtypes, shapes,
    offsets). ``content`` is the SHA-256 of every model file's name, size and digest
    (``gates.checkpoint``: every byte, without a writer's version stamp), so a model retrained
    into the same shapes is told apart too, and a conversion by another transformers version
    into the same tensors is not. What a content pin compares."""
    return _model_files(directory, progress)[0]


def _model_files(directory: Path, progress: ProgressWriter | None) -> tuple[dict[str, str], dict[str, FileHash]]:
    """:func:`model_files_sha256`, and each file's digests behind its ``content``."""
    out = _description_sha256(directory)
    try:
        files = hash_model_directory(directory, progress=progress)
    except OSError:
        return out, {}  # an unreadable file: the description above still says what it can
    if files:
        listing = "".join(f"{name}\t{found.content}\n" for name, found in sorted(files.items()))
        out[CONTENT_KEY] = sha256_hex(listing)
    return out, files


def content_digest(directory: Path) -> str | None:
    """A local model folder's content digest as a recipe pins it (``sha256:<64 hex>``), the
    ``content`` of :func:`model_files_sha256`; None for a folder with no model file."""
    content = model_files_sha256(directory).get(CONTENT_KEY)
    return f"sha256:{content}" if content else None


def _description_sha256(directory: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    config = directory / "config.json"
    if config.is_file():
        out["config.json"] = sha256_file(config)
    for name in WEIGHTS_INDEX_NAMES:
        index = directory / name
        if index.is_file():
            out[name] = sha256_file(index)
            return out
    single = directory / "model.safetensors"
    if single.is_file():
        with open(single, "rb") as handle:
            raw = handle.read(8)
            if len(raw) == 8:
                (length,) = struct.unpack("<Q", raw)
                if length < 100 * 1024 * 1024:
                    header = handle.read(length)
                    out["model.safetensors#header"] = sha256_hex(raw + header)
    return out


# -- the check ------------------------------------------------------------------------------


def check_identity(
    recipe: Recipe,
    *,
    version: str | None,
    models: list[dict[str, Any]] | None,
    tp_size_seen: int | None,
    image_digest: str | list[str] | None = None,
    launcher_kind: str = LauncherKind.SUBPROCESS,
    log_text: str = "",
    log_version: str | None = None,
    expected_model_arg: str | None = None,
    server_cwd: Path | None = None,
    server_cwd_unknown: str = "",
    progress: ProgressWriter | None = None,
) -> IdentityResult:
    """Compare what the server reports with what the recipe pins, field by field. A relative
    model path the server reports is resolved against ``server_cwd`` (the server's working
    directory, when the run knows it; ``server_cwd_unknown`` says why not). ``progress`` is told
    how far the first read of a large model folder has got."""
    result = IdentityResult()
    served = recipe.identity.served_model_name
    entry = next((m for m in models or [] if m.get("id") == served), None)
    args = logged_model_args(log_text) if log_text else {}
    # the checkpoint: what the launcher asked vLLM to load, against what the log and /v1/models say it loaded
    expected_location = expected_model_arg or recipe.model_location()
    observations = [(str(args["model"]), "log non-default args 'model'")] if isinstance(args.get("model"), str) else []
    if entry and isinstance(entry.get("root"), str):
        observations.append((str(entry["root"]), "/v1/models root"))
    in_container = launcher_class(launcher_kind).runs_container
    # the files: a container reads the recipe's folder mounted from this machine
    model_dir = recipe.model_location() if in_container else expected_location
    if _is_local(model_dir) and Path(model_dir).is_dir():
        result.model_files, hashes = _model_files(Path(model_dir), progress)
        result.file_hashes = {name: found.to_dict() for name, found in hashes.items()}
    result.checks.extend([
        _checkpoint_check(recipe, expected_location, observations,
                          _location_comparer(in_container, server_cwd, server_cwd_unknown)),
        _revision_check(recipe, args, observations),
        *_content_check(recipe, _is_local(model_dir), result.model_files, result.file_hashes),
        _image_digest_check(recipe, launcher_kind, in_container, image_digest),
        _runtime_version_check(recipe, version, log_version),
        _tensor_parallel_check(recipe, tp_size_seen),
        _max_model_len_check(recipe, entry),
        _served_model_check(served, entry, models),
    ])
    return result


def _location_comparer(in_container: bool, server_cwd: Path | None,
                       cwd_unknown: str) -> Callable[[str, str], LocationComparison]:
    """How an observed model location is compared: inside a container by the argument the
    launcher gave (its paths are not this machine's), else as files (``gates.checkpoint``)."""
    if in_container:
        return lambda observed, expected: LocationComparison(
            observed == expected, "" if observed == expected
            else "another model argument than the launcher gave the container", local=_is_local(observed))
    return lambda observed, expected: compare_model_locations(
        observed, expected, server_cwd=server_cwd, cwd_unknown_reason=cwd_unknown)


def _checkpoint_check(recipe: Recipe, expected_location: str, observations: list[tuple[str, str]],
                      compare: Callable[[str, str], LocationComparison]) -> IdentityCheck:
    """Every observed location must name the checkpoint the launcher asked for (or the recipe
    pins): the first that differs decides, else the first that could not be checked."""
    if not observations:
        return IdentityCheck("checkpoint", recipe.identity.checkpoint, None, None,
                             "neither the log's model argument nor /v1/models root was available",
                             source="log, /v1/models")
    compared = [(value, where, compare(value, expected_location)) for value, where in observations]
    deciding = (next((c for c in compared if c[2].ok is False), None)
                or next((c for c in compared if c[2].ok is None), None) or compared[0])
    value, where, outcome = deciding
    notes = list(dict.fromkeys(f"{w}: {c.note}" for _, w, c in compared if c.note)) if outcome.ok \
        else [f"{where}: {outcome.note}"]
    return IdentityCheck(
        "checkpoint", recipe.identity.checkpoint
        + (f" ({_show_location(expected_location, recipe, True)})" if _is_local(expected_location) else ""),
        _show_location(value, recipe, outcome.ok, outcome.local), outcome.ok, "; ".join(notes),
        source=" and ".join(where for _, where in observations), observable=outcome.observable)


def _revision_check(recipe: Recipe, args: dict[str, Any], observations: list[tuple[str, str]]) -> IdentityCheck:
    """The revision argument, else a snapshot path among the observed locations."""
    pinned_rev = recipe.identity.revision
    observed_rev: str | None = None
    rev_source = ""
    if isinstance(args.get("revision"), str) and args["revision"]:
        observed_rev, rev_source = str(args["revision"]), "log non-default args 'revision'"
    else:
        for value, where in observations:
            if _revision_of(value):
                observed_rev, rev_source = _revision_of(value), f"snapshot path in the {where}"
                break
    if not pinned_rev:
        return IdentityCheck("revision", None, observed_rev, None, "the recipe pins no revision",
                             source=rev_source or "n/a", pinned=False)
    return IdentityCheck(
        "revision", pinned_rev, observed_rev, None if observed_rev is None else observed_rev == pinned_rev,
        "" if observed_rev else "neither a revision argument nor a snapshot path was seen",
        source=rev_source or "log, /v1/models")


def _content_check(recipe: Recipe, local: bool, model_files: Mapping[str, str],
                   file_hashes: Mapping[str, Mapping[str, Any]] | None = None) -> list[IdentityCheck]:
    """A local folder's content digest against the recipe's pin (none for a hub model the recipe
    does not pin by content). The pin file is read now, after the build wrote it. A mismatch in a
    folder with a file the previous content rules sampled says so: such a pin differs even for
    the very files it was measured on."""
    pin = recipe.content_pin()
    if pin is None and not local:
        return []
    observed = f"sha256:{model_files[CONTENT_KEY]}" if model_files.get(CONTENT_KEY) else None
    source = "the model folder's files (weights, tokenizer, template, configuration; no version stamps)"
    if pin is None:
        return [IdentityCheck("content_digest", None, observed, None, "the recipe pins no content digest",
                              source=source, pinned=False)]
    if pin.digest is None:
        return [IdentityCheck("content_digest", None, observed, None, f"the pin cannot be read: {pin.problem}",
                              source=source)]
    note = "" if observed else ("the model folder cannot be read from here" if local
                                else "the model is not a local folder")
    ok = None if observed is None else observed == pin.digest
    if ok is False and any(int(entry.get("size") or 0) > SAMPLED_ABOVE_BYTES for entry in (file_hashes or {}).values()):
        note = (f"pinned by {pin.source}; a pin written under content rules 2, which read a file over 512 MiB by its "
                f"first and last MiB, differs for this folder even when its files are those it was measured on: "
                f"if so, measure the pin again from a copy you trust")
    return [IdentityCheck("content_digest", pin.digest, observed, ok, note or f"pinned by {pin.source}", source=source)]


def _image_digest_check(recipe: Recipe, launcher_kind: str, in_container: bool,
                        image_digest: str | list[str] | None) -> IdentityCheck:
    """Only a container launcher runs an image: its digest against the recipe's pin."""
    if not in_container:
        return IdentityCheck(
            "image_digest", None, None, None, f"not applicable: the {launcher_kind} launcher runs no container",
            source="n/a", pinned=False)
    expected_digest = (recipe.identity.image or "").partition("@")[2] or None
    matched = image_digest_matches(recipe.identity.image, image_digest)
    shown = image_digest if isinstance(image_digest, str) or image_digest is None else list(image_digest)
    return IdentityCheck(
        "image_digest", expected_digest, shown, matched,
        "" if matched is not None else ("the recipe pins no image digest" if expected_digest is None
                                        else "the launcher reported no image digest"),
        source="container image RepoDigests (docker launcher)", pinned=expected_digest is not None)


def _runtime_version_check(recipe: Recipe, version: str | None, log_version: str | None) -> IdentityCheck:
    """/version, else the log's version line."""
    observed_version, version_source = (version, "/version") if version is not None else (log_version, "log version line")
    return IdentityCheck(
        "runtime_version", recipe.identity.runtime_version, observed_version,
        None if observed_version is None else observed_version == recipe.identity.runtime_version,
        "" if observed_version is not None else "/version did not answer and the log has no version line",
        source=version_source)


def _tensor_parallel_check(recipe: Recipe, tp_size_seen: int | None) -> IdentityCheck:
    """TP size from the rank count in the log."""
    expected_tp = recipe.serve.tensor_parallel_size
    if tp_size_seen is None:
        return IdentityCheck("tensor_parallel_size", expected_tp, None, None,
                             "no per-rank log lines available (external endpoint or empty log)",
                             source="rank count in the log")
    # A TP=1 server logs its single worker under EngineCore, which counts as one rank.
    return IdentityCheck("tensor_parallel_size", expected_tp, tp_size_seen,
                         tp_size_seen == expected_tp, source="rank count in the log")


def _max_model_len_check(recipe: Recipe, entry: dict[str, Any] | None) -> IdentityCheck:
    observed_len = entry.get("max_model_len") if entry else None
    return IdentityCheck(
        "max_model_len", recipe.serve.max_model_len, observed_len,
        None if observed_len is None else observed_len == recipe.serve.max_model_len,
        "" if observed_len is not None else "/v1/models gave no max_model_len for the served name",
        source="/v1/models max_model_len")


def _served_model_check(served: str, entry: dict[str, Any] | None,
                        models: list[dict[str, Any]] | None) -> IdentityCheck:
    listed = [m.get("id") for m in models or []]
    return IdentityCheck("served_model", served, served if entry else listed,
                         None if models is None else entry is not None,
                         "" if models is not None else "/v1/models did not answer",
                         source="/v1/models id")
