"""The engine's non-default args as vLLM logs them at start: the line, its Python-literal text, and
what of them a public report may show.

vLLM prints the args it was started with that differ from its defaults as one Python literal
(``non-default args: {...}``), config objects as their reprs. :func:`parse_python_literal` reads
that text back; :func:`public_args` leaves out what the launcher chose for the run (the listen
address) and puts a placeholder for a local directory. The engine facts (``vllm.log_facts``)
and the identity check (``gates.identity``) both read the args through here.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MODEL_DIR_PLACEHOLDER", "NON_DEFAULT_ARGS_RE", "json_safe", "parse_python_literal", "public_args"]

NON_DEFAULT_ARGS_RE = re.compile(r"non-default args: (?P<args>\{.*\})\s*$")
"""The line that carries the args (every vLLM version this package reads)."""

# Chosen by the launcher for this run, not part of the recipe; the listen address is private.
_LAUNCHER_ONLY_ARGS = ("host", "port")
#: Args that name a local directory: its absolute path says where the operator keeps files, not
#: what was served (the identity block names the checkpoint), so the report shows a placeholder.
_LOCAL_DIR_ARGS = ("model", "tokenizer", "download_dir")
MODEL_DIR_PLACEHOLDER = "<model-dir>"


def parse_python_literal(text: str) -> Any:
    """``ast.literal_eval`` that tolerates ``<enum …>`` reprs (quoted) and ``Class(k=v, …)``
    reprs (read as ``{"type": "Class", "k": v, …}``), as vLLM ≥ 0.2x logs config objects
    such as ``StructuredOutputsConfig(backend='xgrammar', …)`` among the non-default args."""
    quoted = re.sub(r"<[^<>]*>", lambda m: repr(m.group(0)), text)
    for candidate in (text, quoted):
        try:
            return ast.literal_eval(candidate)
        except (ValueError, SyntaxError):
            pass
    try:
        tree = ast.parse(quoted, mode="eval")
    except SyntaxError:
        return None
    try:
        return _literal_with_calls(tree.body, quoted)
    except ValueError:
        return None


def _literal_with_calls(node: ast.expr, source: str) -> Any:
    """A literal expression in which keyword-only calls stand for config objects."""
    if isinstance(node, ast.Dict):
        return {_literal_with_calls(k, source): _literal_with_calls(v, source)
                for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal_with_calls(item, source) for item in node.elts]
    if isinstance(node, ast.Call) and not node.args:
        name = ast.get_source_segment(source, node.func) or "?"
        return {"type": name, **{kw.arg: _literal_with_calls(kw.value, source) for kw in node.keywords
                                 if kw.arg is not None}}
    try:
        return ast.literal_eval(node)
    except ValueError:
        segment = ast.get_source_segment(source, node)
        if segment is None:
            raise
        return segment


def json_safe(value: Any) -> Any:
    """The args as JSON holds them: a non-finite float and any other object as their text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    return repr(value)


def public_args(parsed: dict[str, Any]) -> dict[str, Any]:
    """The args without the launcher's own (host, port), local directories as a placeholder."""
    for key in _LAUNCHER_ONLY_ARGS:
        parsed.pop(key, None)
    for key in _LOCAL_DIR_ARGS:
        if isinstance(parsed.get(key), str) and parsed[key].startswith(("/", "~", ".")):
            parsed[key] = MODEL_DIR_PLACEHOLDER
    return parsed
