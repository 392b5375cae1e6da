"""The one schema check behind recipe, fleet and campaign files: its wording and its defaults."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from pytest_vllmqual.errors import CampaignError, FleetError, RecipeError
from pytest_vllmqual.layout import load_schema
from pytest_vllmqual.recipe.schema_check import checked, first_problem, with_defaults

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "jobs"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$", "description": "lower-case letters"},
        "mode": {"enum": ["any", "each_node"], "default": "any"},
        "size": {"type": "integer", "description": "how many"},
        "retry": {"type": "object", "default": {"attempts": 0},
                  "properties": {"attempts": {"type": "integer"}, "on": {"type": "array", "default": ["lost"]}}},
        "jobs": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "set": {"type": "array", "default": []}}}},
    },
}


@pytest.mark.parametrize(("instance", "message", "key"), [
    ({"name": "a", "jobs": [], "sise": 1}, "f: unknown key 'sise'. Fix: rename it to 'size'.", "sise"),
    ({"name": "a", "jobs": [], "zzz": 1}, "f: unknown key 'zzz'. Fix: remove it; allowed keys here: jobs, mode,", "zzz"),
    ({"jobs": []}, "f: missing required key 'name' (lower-case letters). Fix: add it.", "name"),
    ({"name": "a", "jobs": [], "size": "two"},
     "f: key 'size' must be of type integer, got str 'two'. Fix: write an integer value for 'size'.", "size"),
    ({"name": "a", "jobs": [], "mode": "all"},
     "f: key 'mode' is 'all', which is not one of any, each_node. Fix: use one of those values.", "mode"),
    ({"name": "A1", "jobs": []}, "f: key 'name' is 'A1', which does not have the form '^[a-z]+$'. Fix: write it in that "
     "form (lower-case letters).", "name"),
    ({"name": "a", "jobs": [{"name": 3}]}, "f: key 'jobs.0.name' must be of type string", "jobs.0.name"),
])
def test_first_problem_names_the_key_and_the_fix(instance: dict[str, Any], message: str, key: str) -> None:
    problem = first_problem(instance, SCHEMA, where="f")
    assert problem is not None
    assert problem[0].startswith(message) and problem[1] == key
    assert "\n" not in problem[0]


def test_first_problem_counts_the_rest_and_passes_a_valid_mapping() -> None:
    problem = first_problem({"name": 1, "size": "x"}, SCHEMA, where="f")
    assert problem is not None and problem[0].endswith("(2 more problem(s) after this one is fixed.)")
    assert first_problem({"name": "a", "jobs": []}, SCHEMA, where="f") is None


def test_defaults_fill_nested_mappings_and_list_items_without_sharing_the_schema() -> None:
    filled = with_defaults(SCHEMA, {"name": "a", "jobs": [{"name": "x"}, {"name": "y", "set": ["k=v"]}]})
    assert filled["mode"] == "any"
    assert filled["retry"] == {"attempts": 0, "on": ["lost"]}
    assert [job["set"] for job in filled["jobs"]] == [[], ["k=v"]]
    filled["retry"]["on"].append("failed")
    filled["jobs"][0]["set"].append("a=b")
    assert SCHEMA["properties"]["retry"]["properties"]["on"]["default"] == ["lost"]
    assert SCHEMA["properties"]["jobs"]["items"]["properties"]["set"]["default"] == []
    assert with_defaults(SCHEMA, "not a mapping") == "not a mapping"


@pytest.mark.parametrize(("schema_name", "error"), [
    ("recipe.schema.yaml", RecipeError), ("fleet.schema.yaml", FleetError), ("campaign.schema.yaml", CampaignError),
])
def test_checked_raises_the_callers_error_for_every_file_kind(schema_name: str, error: type[Exception]) -> None:
    def fail(message: str, key: str) -> Exception:
        return error(f"{message} [{key}]")

    with pytest.raises(error, match=r"^where: missing required key '(\w+)'.* more problem.*\[\1\]$"):
        checked({"nonsense_key": 1}, schema_name, where="where", fail=fail)


def test_checked_fills_the_shipped_schema_defaults() -> None:
    campaign = checked({"arms": [{"name": "a"}, "b?fallback"]}, "campaign.schema.yaml", where="w",
                       fail=lambda message, key: CampaignError(message))
    assert campaign["description"] == ""
    assert campaign["arms"][0] == {"name": "a", "recipe": None, "requires": ["gates"], "fallback_for": None,
                                   "stop_on_failure": True, "stop_on_success": False}
    assert campaign["arms"][1] == "b?fallback"
    jsonschema.Draft202012Validator.check_schema(load_schema("campaign.schema.yaml"))
