"""The run's private artifacts: raw evidence that never leaves the operator's disk.

Raw artifacts (request and response bodies, server logs) stay in the run's private folder,
written there by their owners (a gate's attempts by ``gates.recorder.GateRecorder``, the
server log by its launcher); :class:`ArtifactStore` lists and hashes them once they are
closed. The public report lists them only as ``{name, size, sha256}``; :func:`verify_artifacts` re-checks a
report's list against the folder (missing, changed, unlisted files, and every attempt's
request/response hash).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_vllmqual.hashing import sha256_file

__all__ = ["BOOKKEEPING_SUFFIXES", "ArtifactStore", "verify_artifacts"]

BOOKKEEPING_SUFFIXES = (".lock", ".tmp")
"""Files in the private folder that are tool bookkeeping, not evidence (and hidden files)."""

def _is_bookkeeping(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/")) or relative.endswith(BOOKKEEPING_SUFFIXES)


class ArtifactStore:
    """The run's private folder: raw evidence that never leaves the operator's disk.

    Any file its writers left in the folder is an artifact. :meth:`entries` hashes every file
    at call time, so call it after the writers have closed their files (after teardown).
    """

    def __init__(self, private_dir: Path) -> None:
        self.private_dir = Path(private_dir)

    def entries(self) -> list[dict[str, Any]]:
        """Every artifact in the private folder, sorted by name; names are relative, '/'-separated."""
        if not self.private_dir.is_dir():
            return []
        found: list[dict[str, Any]] = []
        for path in sorted(self.private_dir.rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            relative = path.relative_to(self.private_dir).as_posix()
            if _is_bookkeeping(relative):
                continue
            found.append({"name": relative, "size": path.stat().st_size, "sha256": sha256_file(path)})
        return found


def verify_artifacts(report: Mapping[str, Any], private_dir: Path) -> list[str]:
    """Re-check every artifact hash of a (loaded) report against the private folder.

    Returns the problems (empty = every listed file exists with its size and SHA-256, no file
    is unlisted, and every attempt's request/response hash matches its artifact).
    """
    private_dir = Path(private_dir)
    if not private_dir.is_dir():
        return [f"private folder {private_dir} does not exist"]
    problems: list[str] = []
    root = private_dir.resolve()
    listed: dict[str, Mapping[str, Any]] = {}
    for artifact in report.get("artifacts") or []:
        name = str(artifact["name"])
        listed[name] = artifact
        target = (private_dir / name).resolve()
        if root not in target.parents:
            problems.append(f"unsafe: {name} (points outside the private folder)")
            continue
        if not target.is_file():
            problems.append(f"missing: {name}")
            continue
        size = target.stat().st_size
        digest = sha256_file(target)
        if digest != artifact["sha256"] or size != artifact["size"]:
            problems.append(f"changed: {name} (sha256 {artifact['sha256'][:12]}…, {artifact['size']} bytes in the "
                            f"report; {digest[:12]}…, {size} bytes on disk)")
    for entry in ArtifactStore(private_dir).entries():
        if entry["name"] not in listed:
            problems.append(f"extra: {entry['name']} (in the private folder, not in the report)")
    for gate in report.get("gates") or []:
        for attempt in gate.get("attempts") or []:
            for side in ("request", "response"):
                name, digest = attempt.get(f"{side}_artifact"), attempt.get(f"{side}_sha256")
                if name and digest and name in listed and listed[name]["sha256"] != digest:
                    problems.append(f"changed: {name} (attempt {attempt.get('label')!r} of gate "
                                    f"{gate.get('gate')} recorded a different {side} sha256)")
    return problems
