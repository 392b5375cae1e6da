"""Checks on fixtures/tools/typed_tools.yaml, the 20 typed tools the tool gates send.

The gates trust these fixtures: a schema that rejects its own expected call, a duplicate name or a
missing JSON type would make the gate measure the fixture instead of the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

TOOLS_PATH = Path(__file__).resolve().parents[2] / "fixtures" / "tools" / "typed_tools.yaml"
ENTRY_KEYS = {"name", "description", "parameters", "prompt", "expected"}


def load_tools() -> list[dict[str, Any]]:
    """Read the tool list the way the gates do (yaml.safe_load)."""
    document = yaml.safe_load(TOOLS_PATH.read_text(encoding="utf-8"))
    tools = document["tools"]
    assert isinstance(tools, list)
    return tools


def walk_schemas(schema: dict[str, Any], required: bool = True) -> Iterator[tuple[dict[str, Any], bool]]:
    """Yield every sub-schema with whether its parent object requires it."""
    yield schema, required
    if schema.get("type") == "object":
        required_names = set(schema.get("required", []))
        for name, sub in schema.get("properties", {}).items():
            yield from walk_schemas(sub, name in required_names)
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        yield from walk_schemas(schema["items"], True)


def coverage_of(schema: dict[str, Any]) -> set[str]:
    """Name the JSON-schema features one tool's parameters exercise."""
    features: set[str] = set()
    for sub, required in walk_schemas(schema):
        kind = sub.get("type")
        if not required:
            features.add("optional field")
        if kind == "integer" and "minimum" in sub and "maximum" in sub:
            features.add("bounded integer")
        if kind == "number":
            features.add("number")
        if kind == "boolean":
            features.add("boolean")
        if "enum" in sub:
            features.add("enum")
        if kind == "array" and isinstance(sub.get("items"), dict) and sub["items"].get("type") == "object":
            features.add("array of objects")
        if kind == "object" and sub is not schema:
            features.add("nested object")
    return features


TOOLS = load_tools()
REQUIRED_COVERAGE = {
    "bounded integer",
    "number",
    "boolean",
    "enum",
    "nested object",
    "array of objects",
    "optional field",
}


def test_there_are_twenty_tools_with_unique_names() -> None:
    names = [tool["name"] for tool in TOOLS]
    assert len(names) == 20
    assert len(set(names)) == len(names), f"duplicate tool names: {sorted(names)}"


@pytest.mark.parametrize("tool", TOOLS, ids=[tool["name"] for tool in TOOLS])
def test_entry_has_exactly_the_documented_keys(tool: dict[str, Any]) -> None:
    assert set(tool) == ENTRY_KEYS
    assert isinstance(tool["prompt"], str) and tool["prompt"].strip()
    assert isinstance(tool["description"], str) and tool["description"].strip()


@pytest.mark.parametrize("tool", TOOLS, ids=[tool["name"] for tool in TOOLS])
def test_parameters_are_a_valid_object_schema(tool: dict[str, Any]) -> None:
    schema = tool["parameters"]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"


@pytest.mark.parametrize("tool", TOOLS, ids=[tool["name"] for tool in TOOLS])
def test_every_object_forbids_additional_properties(tool: dict[str, Any]) -> None:
    for sub, _ in walk_schemas(tool["parameters"]):
        if sub.get("type") == "object":
            assert sub.get("additionalProperties") is False, f"{tool['name']}: {sub}"
            assert set(sub.get("required", [])) <= set(sub.get("properties", {}))


@pytest.mark.parametrize("tool", TOOLS, ids=[tool["name"] for tool in TOOLS])
def test_expected_arguments_validate_against_the_schema(tool: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(tool["parameters"]).validate(tool["expected"])


@pytest.mark.parametrize("tool", TOOLS, ids=[tool["name"] for tool in TOOLS])
def test_an_extra_argument_is_rejected(tool: dict[str, Any]) -> None:
    """additionalProperties: false must make a stray key a schema failure, not a pass."""
    polluted = {**tool["expected"], "unexpected_key": 1}
    assert not jsonschema.Draft202012Validator(tool["parameters"]).is_valid(polluted)


def test_fixtures_cover_every_required_json_type() -> None:
    covered: set[str] = set()
    for tool in TOOLS:
        covered |= coverage_of(tool["parameters"])
    missing = REQUIRED_COVERAGE - covered
    assert not missing, f"typed tools do not cover: {sorted(missing)}"


def test_some_expected_call_omits_an_optional_field() -> None:
    """The gate must see a call where leaving an optional field out is the correct answer."""
    omitted = [
        tool["name"]
        for tool in TOOLS
        if set(tool["parameters"]["properties"]) - set(tool["expected"])
    ]
    assert omitted


def test_coverage_detector_notices_a_missing_feature() -> None:
    """Guards the coverage test itself: a flat string-only schema covers nothing."""
    flat = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    assert coverage_of(flat) == set()
