"""Identity check: is the server that answered the one the recipe pins?

The recipe states the runtime version, served model, max_model_len, TP size and (docker)
image digest. What the server reports — ``/version``, ``/v1/models``, the per-rank log
lines, the container's image — is compared field by field. Any mismatch marks the run
``provenance_mismatch``: gates may still pass, but the evidence is not about the recipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .recipe import Recipe


@dataclass
class IdentityCheck:
    """One compared field."""

    field: str
    expected: Any
    observed: Any
    ok: bool | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "expected": self.expected, "observed": self.observed,
                "ok": self.ok, "note": self.note}


@dataclass
class IdentityResult:
    """All compared fields; ``status`` is verified, provenance_mismatch or unverified."""

    checks: list[IdentityCheck] = field(default_factory=list)

    @property
    def status(self) -> str:
        if any(c.ok is False for c in self.checks):
            return "provenance_mismatch"
        if self.checks and all(c.ok for c in self.checks if c.field in ("runtime_version", "served_model")):
            return "verified"
        return "unverified"

    @property
    def mismatches(self) -> list[IdentityCheck]:
        return [c for c in self.checks if c.ok is False]

    def to_dict(self, recipe: Recipe) -> dict[str, Any]:
        return {
            "status": self.status,
            "expected": {
                "checkpoint": recipe.identity.checkpoint,
                "revision": recipe.identity.revision,
                "image": recipe.identity.image,
                "runtime_version": recipe.identity.runtime_version,
                "served_model_name": recipe.identity.served_model_name,
                "max_model_len": recipe.serve.max_model_len,
                "tensor_parallel_size": recipe.serve.tensor_parallel_size,
            },
            "observed": {c.field: c.observed for c in self.checks},
            "checks": [c.to_dict() for c in self.checks],
        }


def check_identity(
    recipe: Recipe,
    *,
    version: str | None,
    models: list[dict[str, Any]] | None,
    tp_size_seen: int | None,
    image_digest: str | None = None,
    launcher_kind: str = "subprocess",
) -> IdentityResult:
    """Compare what the server reports with what the recipe pins."""
    result = IdentityResult()
    result.checks.append(IdentityCheck("runtime_version", recipe.identity.runtime_version, version,
                                       None if version is None else version == recipe.identity.runtime_version,
                                       "" if version is not None else "/version did not answer"))
    served = recipe.identity.served_model_name
    entry = next((m for m in models or [] if m.get("id") == served), None)
    listed = [m.get("id") for m in models or []]
    result.checks.append(IdentityCheck("served_model", served, served if entry else listed,
                                       None if models is None else entry is not None))
    observed_len = entry.get("max_model_len") if entry else None
    result.checks.append(IdentityCheck("max_model_len", recipe.serve.max_model_len, observed_len,
                                       None if observed_len is None else observed_len == recipe.serve.max_model_len))
    expected_tp = recipe.serve.tensor_parallel_size
    tp_ok: bool | None
    if tp_size_seen is None:
        tp_ok, note = None, "no per-rank log lines available (external endpoint or empty log)"
    else:
        # A TP=1 server logs its single worker under EngineCore, which counts as one rank.
        tp_ok, note = tp_size_seen == expected_tp, ""
    result.checks.append(IdentityCheck("tensor_parallel_size", expected_tp, tp_size_seen, tp_ok, note))
    if launcher_kind == "docker":
        expected_digest = (recipe.identity.image or "").partition("@")[2] or None
        result.checks.append(IdentityCheck(
            "image_digest", expected_digest, image_digest,
            None if image_digest is None or expected_digest is None else image_digest.endswith(expected_digest)))
    return result
