"""The probe's sidecar file: one arm's numbers beside its public report, referenced by SHA-256.

The probe gate writes the answers (token IDs and log probabilities, no text) into the arm's
private folder (:data:`PRIVATE_NAME`). When the report is written, :func:`publish` copies them
beside the report as ``<report stem>.probe.json.gz`` (gzip: a sidecar holds megabytes of
numbers, and a name that does not end in ``.json`` keeps it out of globs for reports) with what a
later comparison needs to know of the arm (the checkpoint pin, prefix caching, the logprobs mode:
the caller reads them from the report, this module never does), and returns the reference
the report carries (``equivalence_probe``): the file's name and SHA-256, the probe hash, K. A
comparison, ``vllmqual compare`` and the reference mode then work from public files alone
(:func:`load`, which checks the SHA-256).

Other gates whose answers only a comparison judges (the item bank, the tool-call replay) leave their part as a
block of its own (:func:`write_block`, ``equivalence/blocks/<key>.json`` in the private folder):
the probe rewrites its own file whole, so the parts cannot share one file. :func:`publish` merges
each block into the sidecar under its key, and a run whose probe did not run still gets a sidecar
when some block was written (:func:`has_answers`).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_vllmqual.atomic_io import write_bytes_atomic
from pytest_vllmqual.hashing import canonical_json, sha256_file, sha256_hex

__all__ = ["ARM_KEYS", "BLOCKS_DIR", "DEFAULT_LOGPROBS_MODE", "FORMAT", "PRIVATE_NAME", "has_answers", "load", "publish",
           "sidecar_name", "write_block"]

FORMAT = "vllmqual-equivalence-probe/1"
PRIVATE_NAME = "equivalence/probe.json"
"""Where the probe gate leaves its answers, relative to the arm's private folder."""
BLOCKS_DIR = "equivalence/blocks"
"""Where other gates leave their sidecar blocks, one ``<key>.json`` each, relative to the private folder."""
DEFAULT_LOGPROBS_MODE = "raw_logprobs"
"""vLLM's default ``--logprobs-mode``: raw log probabilities."""
ARM_KEYS = ("checkpoint_pin", "prefix_caching", "logprobs_mode", "runtime_version")
"""What a later comparison needs to know of the arm besides its answers (read from the arm's report
by the comparison, :func:`pytest_vllmqual.equivalence.comparison.sidecar_arm`)."""


def write_block(private_dir: Path, key: str, block: Mapping[str, Any]) -> Path:
    """Leave one gate's part of the sidecar (top-level ``key``) in the arm's private folder."""
    if not key.isidentifier() or key in {"format", "arm"}:
        raise ValueError(f"{key!r} cannot be a sidecar block's key")
    path = Path(private_dir) / BLOCKS_DIR / f"{key}.json"
    write_bytes_atomic(canonical_json(block).encode("utf-8"), path, what=f"{key} answers")
    return path


def _blocks(private_dir: Path) -> dict[str, Any]:
    folder = Path(private_dir) / BLOCKS_DIR
    return {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))} if folder.is_dir() else {}


def has_answers(private_dir: Path) -> bool:
    """Whether the arm left anything for a sidecar: the probe's answers or any block."""
    folder = Path(private_dir) / BLOCKS_DIR
    return (Path(private_dir) / PRIVATE_NAME).is_file() or (folder.is_dir() and any(folder.glob("*.json")))


def sidecar_name(report_path: Path) -> str:
    return f"{Path(report_path).stem}.probe.json.gz"


def _items_reference(items: Mapping[str, Any] | None) -> dict[str, Any]:
    bank = (items or {}).get("bank") or {}
    return {"items_bank_sha256": bank.get("sha256"), "items": bank.get("count")} if items else {}


def publish(private_file: Path, arm: Mapping[str, Any], report_path: Path, *,
            scrub: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """Write the public sidecar beside ``report_path`` and return the report's reference to it: the
    probe's answers (``private_file``, when the probe ran), every block of the same private folder,
    and ``arm``: the :data:`ARM_KEYS` the caller read from the arm's report (a key it does not give
    is unknown; the logprobs mode then vLLM's default).

    The blocks carry answer text (the item bank's answers, the replay's calls), so ``scrub`` (the
    report's scrubber) reads them first; the probe's answers are token IDs and numbers only."""
    private_dir = Path(private_file).parents[len(Path(PRIVATE_NAME).parts) - 1]
    body = json.loads(Path(private_file).read_text()) if Path(private_file).is_file() else {}
    blocks = _blocks(private_dir)
    body.update(scrub(blocks) if scrub is not None else blocks)
    unknown = sorted(set(arm) - set(ARM_KEYS))
    if unknown:  # a whole report, as publish was once given: say so rather than record nothing of it
        raise ValueError(f"publish takes what the sidecar records of the arm ({', '.join(ARM_KEYS)}), "
                         f"not {', '.join(unknown[:4])}: pass comparison.sidecar_arm(report)")
    arm = {key: arm.get(key) for key in ARM_KEYS}
    arm["logprobs_mode"] = arm["logprobs_mode"] or DEFAULT_LOGPROBS_MODE
    sidecar = {"format": FORMAT, **body, "arm": arm}
    path = Path(report_path).parent / sidecar_name(report_path)
    text = canonical_json(sidecar) + "\n"
    write_bytes_atomic(gzip.compress(text.encode("utf-8"), mtime=0), path, what="probe sidecar")
    digest = sha256_file(path)
    return {"file": path.name, "sha256": digest, "probe_sha256": body.get("probe_sha256"),
            "tokenizer_sha256": body.get("tokenizer_sha256"), "top_k": body.get("top_k"), **arm,
            **_items_reference(body.get("items"))}


def load(reference: Mapping[str, Any], folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the sidecar, None) from the report's reference, or (None, why not): missing, changed, not a sidecar."""
    name = str(reference.get("file") or "")
    path = Path(folder) / name
    if not name or Path(name).name != name or not path.is_file():
        return None, f"its probe sidecar {name or '(unnamed)'} is not beside the report"
    data = path.read_bytes()
    if sha256_hex(data) != reference.get("sha256"):
        return None, f"its probe sidecar {name} does not match the SHA-256 the report recorded"
    try:
        sidecar = json.loads(gzip.decompress(data) if name.endswith(".gz") else data)
    except (ValueError, OSError, EOFError):
        return None, f"its probe sidecar {name} is not JSON"
    if not isinstance(sidecar, dict) or sidecar.get("format") != FORMAT:
        return None, f"its probe sidecar {name} is not a {FORMAT} file"
    return sidecar, None
