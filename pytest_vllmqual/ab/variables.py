"""The A/B comparison's controlled variables: what differs between the two arms' recipes.

Controlled variables
--------------------
The two recipes' contents are flattened to dotted paths and diffed. ``name``, ``description``,
``launcher.port``, ``identity.served_model_name`` and ``launcher.docker.container_name`` are
*identity-only* (they keep the evidence of two arms apart); ``pinned``, ``startup.*``,
``requests.*``, ``gates.*`` and ``compare.*`` are *harness* settings (they change how the
arm is measured, not what is served: listed, and a caveat, but not confounding); everything
else is *functional*. More than one functional variable → ``confounded: true``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_vllmqual.hashing import canonical_json

__all__ = ["GROUPED_VARIABLES", "HARNESS_SECTIONS", "IDENTITY_ONLY_PATHS", "classify_change", "controlled_variables",
           "fmt_setting", "public_value"]

IDENTITY_ONLY_PATHS = ("name", "description", "launcher.port", "identity.served_model_name",
                       "launcher.docker.container_name")
"""Recipe keys that only keep two arms' evidence apart; changing them is not an experimental variable."""
HARNESS_SECTIONS = ("pinned", "startup", "requests", "gates", "compare")
"""Top-level recipe sections that change how an arm is measured, not what is served."""
GROUPED_VARIABLES = ("serve.speculative_config",)
"""Recipe objects whose sub-keys together are one variable."""


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping):
        if not node and prefix:
            return {prefix: None}
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: node}


def public_value(value: Any) -> Any:
    """A scalar as is; anything deeper as compact JSON text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return canonical_json(value, compact=False, default=str)


def classify_change(path: str) -> str:
    """"identity-only", "harness" or "functional" for a dotted recipe path."""
    if path in IDENTITY_ONLY_PATHS:
        return "identity-only"
    if path.split(".", 1)[0] in HARNESS_SECTIONS:
        return "harness"
    return "functional"


def _variable(path: str) -> str:
    for group in GROUPED_VARIABLES:
        if path == group or path.startswith(group + "."):
            return group
    return path


def fmt_setting(value: Any, path: str = "") -> str:
    """Recipe values as the reference campaign writes them: 8192 → "8,192" (ports stay "18081")."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if path.endswith("port") else f"{value:,}"
    if value is None:
        return "unset"
    return str(public_value(value))


def controlled_variables(control: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, Any]:
    """Diff the two recipes' contents: what changed, classified; confounded when >1 functional variable."""
    a = _flatten((control.get("recipe") or {}).get("content") or {})
    b = _flatten((candidate.get("recipe") or {}).get("content") or {})
    changed = []
    for path in sorted({*a, *b}):
        if a.get(path) != b.get(path):
            changed.append({"path": path, "control": public_value(a.get(path)),
                            "candidate": public_value(b.get(path)), "kind": classify_change(path)})
    functional = sorted({_variable(c["path"]) for c in changed if c["kind"] == "functional"})
    identity_only = [c["path"] for c in changed if c["kind"] == "identity-only"]
    harness = [c["path"] for c in changed if c["kind"] == "harness"]
    confounded = len(functional) > 1
    if not functional:
        summary = "No functional variable changed: the arms are functionally identical (a repeat, not an A/B)."
    elif not confounded:
        only = next(c for c in changed if _variable(c["path"]) == functional[0])
        detail = (f" ({fmt_setting(only['control'], only['path'])} → {fmt_setting(only['candidate'], only['path'])})"
                  if only["path"] == functional[0] else "")
        summary = f"Only {functional[0]} changed functionally{detail}."
    else:
        summary = (f"{len(functional)} functional variables changed ({', '.join(functional)}): the comparison is "
                   "confounded and no change is attributed to a single variable.")
    if identity_only:
        summary += f" {', '.join(identity_only)} changed solely to preserve evidence identity."
    if harness:
        summary += f" Harness settings changed: {', '.join(harness)}."
    return {"changed": changed, "functional": functional, "identity_only": identity_only, "harness": harness,
            "confounded": confounded, "summary": summary}
