"""Where an answer deviates from the openai SDK's own models: named findings, never server text.

The SDK as shipped parses answers leniently: a missing field or a value of another type is
kept as it came and only breaks the application that reads that very field. Validating the
same raw answer strictly against the SDK's pydantic model (what ``_strict_response_validation``
does) shows every such deviation. Each one becomes an :class:`SdkFinding`: the schema path
(``usage.input_tokens_details.cache_write_tokens``), what the SDK's model needs there, what
*kind* of value the server sent (``missing``, ``string``, ``object``...) and the SDK version.
The server's own text never appears in a finding: a path and a kind are schema words.

pydantic reports a value under a union once per variant it tried (an output item against
every item type the SDK knows); the variant whose ``type`` literal matches is the one the
answer meant, so only its errors are kept, and a value no variant accepts is one finding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_vllmqual.schema_errors import json_kind

__all__ = ["MAX_FINDINGS", "SdkFinding", "findings_from_validation_error", "json_kind", "render_path",
           "strict_findings"]

MAX_FINDINGS = 20
"""At most this many findings per call; an answer that breaks more is already plainly broken."""

_FIELD = re.compile(r"[a-z_][a-z0-9_]*")
_PRIMITIVE_TAGS = frozenset({"str", "int", "float", "bool", "none", "dict", "list", "set", "tuple", "bytes"})

_NEEDS = {
    "missing": "a value",
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number",
    "string_type": "a string", "bool_type": "a boolean", "bool_parsing": "a boolean",
    "model_type": "an object", "model_attributes_type": "an object", "dict_type": "an object",
    "list_type": "an array", "none_required": "null",
    "literal_error": "one of the SDK's values", "enum": "one of the SDK's values",
    "union_tag_invalid": "one of the SDK's variants", "no_variant": "one of the SDK's variants",
}


@dataclass(frozen=True)
class SdkFinding:
    """One deviation of an answer from the SDK's model: where, what the SDK needs, what came."""

    call: str
    """Which SDK call's answer: ``chat``, ``streamed tool call``, ``responses``."""
    model: str
    """The SDK's model class the answer was validated against (``Response``)."""
    path: str
    """The schema path, e.g. ``usage.input_tokens_details.cache_write_tokens``."""
    needs: str
    """What the SDK's model needs there, in words ("an integer", "a value")."""
    sent: str
    """The kind of value the server sent: ``missing``, ``null``, ``string``, ``object``..."""
    sdk_version: str
    occurrences: int = 1
    """How many answers of the call had it (a stream's chunks are validated one by one)."""

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.call, self.model, self.path, self.needs, self.sent)

    def text(self) -> str:
        """One line: ``responses: usage.input_tokens_details.cache_write_tokens is missing (...)``."""
        sent = "is missing" if self.sent == "missing" else f"is {_article(self.sent)}, not {self.needs}"
        times = f", in {self.occurrences} chunks" if self.occurrences > 1 else ""
        return f"{self.call}: {self.path} {sent} (openai {self.sdk_version}'s {self.model}{times})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _article(kind: str) -> str:
    return kind if kind == "null" else ("an " if kind[:1] in "aeiou" else "a ") + kind


def render_path(loc: Iterable[Any]) -> str:
    """``("output", 0, "content")`` → ``output[0].content``; the root is ``(answer)``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(answer)"


def _is_tag(part: Any) -> bool:
    """A union variant's name in a pydantic location (a class name, ``str``, ``list[...]``)."""
    return isinstance(part, str) and (part in _PRIMITIVE_TAGS or not _FIELD.fullmatch(part))


def _sent_at(data: Any, loc: Sequence[Any]) -> str:
    value = data
    for part in loc:
        if isinstance(part, int) and isinstance(value, list) and -len(value) <= part < len(value):
            value = value[part]
        elif isinstance(part, str) and isinstance(value, Mapping) and part in value:
            value = value[part]
        else:
            return "missing"
    return json_kind(value)


def _variant_rejected(errors: Sequence[Mapping[str, Any]], at: int) -> bool:
    """The variant's own ``type`` literal did not match: the answer meant another variant."""
    return any(tuple(e["loc"][at + 1:]) == ("type",) and e["type"] == "literal_error" for e in errors)


def _reduce(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """pydantic's errors with union variants resolved: (loc without variant names, type)."""
    plain: list[dict[str, Any]] = []
    unions: dict[tuple[Any, ...], dict[str, list[Mapping[str, Any]]]] = {}
    for error in errors:
        loc = tuple(error["loc"])
        at = next((i for i, part in enumerate(loc) if _is_tag(part)), None)
        if at is None:
            plain.append({"loc": loc, "type": error["type"]})
        else:
            unions.setdefault(loc[:at], {}).setdefault(str(loc[at]), []).append(error)
    for prefix, variants in unions.items():
        at = len(prefix)
        meant = {tag: errs for tag, errs in variants.items() if not _variant_rejected(errs, at)}
        if not meant:
            plain.append({"loc": prefix, "type": "no_variant"})
            continue
        closest = min(meant.values(), key=len)
        inner = [{**e, "loc": (*prefix, *tuple(e["loc"])[at + 1:])} for e in closest]
        plain.extend(_reduce(inner))
    return plain


def findings_from_validation_error(error: Any, data: Any, *, call: str, model: str,
                                   sdk_version: str) -> list[SdkFinding]:
    """The named findings of a pydantic ``ValidationError`` raised validating ``data``.

    ``data`` is the raw answer (parsed JSON): the kind of value sent is read from it at each
    path, so no text from the error (which can quote the server's values) is used.
    """
    found: dict[tuple[str, ...], SdkFinding] = {}
    for item in _reduce(error.errors(include_url=False, include_context=False, include_input=False)):
        loc = item["loc"]
        sent = "missing" if item["type"] == "missing" else _sent_at(data, loc)
        finding = SdkFinding(call=call, model=model, path=render_path(loc),
                             needs=_NEEDS.get(item["type"], f"a value that passes {item['type']}"),
                             sent=sent, sdk_version=sdk_version)
        found.setdefault(finding.key, finding)
    return list(found.values())[:MAX_FINDINGS]


def strict_findings(model_cls: Any, data: Any, *, call: str, sdk_version: str) -> list[SdkFinding]:
    """Validate one raw answer strictly against an SDK model; its findings (empty: it conforms)."""
    import pydantic

    try:
        model_cls.model_validate(data)
    except pydantic.ValidationError as exc:
        return findings_from_validation_error(exc, data, call=call, model=model_cls.__name__,
                                              sdk_version=sdk_version)
    return []
