"""The probe's sidecar file: one arm's numbers beside its public report, referenced by SHA-256.

The probe gate writes the answers (token IDs and log probabilities, no text) into the arm's
private folder (:data:`PRIVATE_NAME`). When the report is written, :func:`publish` copies them
beside the report as ``<report stem>.probe.json.gz`` (gzip: a sidecar holds megabytes of
numbers, and a name that does not end in ``.json`` keeps it out of globs for reports) with what a later comparison needs from the
report itself (the checkpoint pin, prefix caching, the logprobs mode), and returns the reference
the report carries (``equivalence_probe``): the file's name and SHA-256, the probe hash, K. A
comparison, ``vllmqual compare`` and the reference mode then work from public files alone
(:func:`load`, which checks the SHA-256).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_vllmqual.atomic_io import write_bytes_atomic
from pytest_vllmqual.hashing import canonical_json, sha256_file, sha256_hex

__all__ = ["FORMAT", "PRIVATE_NAME", "checkpoint_pin", "load", "logprobs_mode", "prefix_caching", "publish",
           "sidecar_name"]

FORMAT = "vllmqual-equivalence-probe/1"
PRIVATE_NAME = "equivalence/probe.json"
"""Where the probe gate leaves its answers, relative to the arm's private folder."""
DEFAULT_LOGPROBS_MODE = "raw_logprobs"


def sidecar_name(report_path: Path) -> str:
    return f"{Path(report_path).stem}.probe.json.gz"


def checkpoint_pin(report: Mapping[str, Any]) -> dict[str, str] | None:
    """What "the same checkpoint" means for this report: the local model folder's content digest,
    else the hub revision the identity check matched; None when neither is known."""
    identity = report.get("identity") or {}
    pin = identity.get("pin")
    if isinstance(pin, Mapping) and pin.get("value"):
        return {"kind": str(pin.get("kind") or "pin"), "value": str(pin["value"])}
    content = (identity.get("model_files") or {}).get("content")
    if isinstance(content, str) and content:
        return {"kind": "content digest", "value": content}
    for check in identity.get("checks") or []:
        if isinstance(check, Mapping) and check.get("field") == "revision" and check.get("ok") is True:
            return {"kind": "hub revision", "value": str(check.get("observed"))}
    return None


def prefix_caching(report: Mapping[str, Any]) -> bool | None:
    """Whether the arm's engine cached prefixes (its ``cache_config``), None when not reported."""
    value = (((report.get("engine") or {}).get("cache_config")) or {}).get("enable_prefix_caching")
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(str(value).lower()) if value is not None else None


def logprobs_mode(report: Mapping[str, Any]) -> str:
    """The server's ``--logprobs-mode`` (vLLM's default: raw log probabilities)."""
    args = (report.get("engine") or {}).get("non_default_args") or {}
    value = args.get("logprobs_mode") if isinstance(args, Mapping) else None
    return str(value) if value else DEFAULT_LOGPROBS_MODE


def publish(private_file: Path, report: Mapping[str, Any], report_path: Path) -> dict[str, Any]:
    """Write the public sidecar beside ``report_path`` and return the report's reference to it."""
    body = json.loads(Path(private_file).read_text())
    arm = {"checkpoint_pin": checkpoint_pin(report), "prefix_caching": prefix_caching(report),
           "logprobs_mode": logprobs_mode(report),
           "runtime_version": ((report.get("identity") or {}).get("observed") or {}).get("runtime_version")}
    sidecar = {"format": FORMAT, **body, "arm": arm}
    path = Path(report_path).parent / sidecar_name(report_path)
    text = canonical_json(sidecar) + "\n"
    write_bytes_atomic(gzip.compress(text.encode("utf-8"), mtime=0), path, what="probe sidecar")
    digest = sha256_file(path)
    return {"file": path.name, "sha256": digest, "probe_sha256": body.get("probe_sha256"),
            "tokenizer_sha256": body.get("tokenizer_sha256"), "top_k": body.get("top_k"), **arm}


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
