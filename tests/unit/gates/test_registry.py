"""The gate registry: every built-in gate declared once, the suites tagged with its names, and
what a gate proves worded by the mode it ran in."""

from __future__ import annotations

import ast

from support import ROOT

from pytest_vllmqual.gates.registry import (
    BY_NAME,
    COMPARISON_GATES,
    EXECUTION_ORDER,
    FAMILIES,
    PREFLIGHT_GATES,
    REGISTRY,
    family_of,
    proves,
    title_of,
)

SUITES = ROOT / "suites"


def suite_gate_markers() -> dict[str, str]:
    """test function name -> its @pytest.mark.gate("...") name, read from the suites' source."""
    found: dict[str, str] = {}
    for path in SUITES.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                for deco in node.decorator_list:
                    if (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                            and deco.func.attr == "gate" and deco.args and isinstance(deco.args[0], ast.Constant)):
                        found[node.name] = str(deco.args[0].value)
    return found


def test_every_gate_is_declared_once_with_a_known_family_and_a_title() -> None:
    names = [spec.name for spec in REGISTRY]
    assert len(names) == len(set(names))
    assert all(spec.family in FAMILIES and spec.title for spec in REGISTRY)
    assert PREFLIGHT_GATES == ("smoke", "json", "tools", "streaming_tool", "tool_continuation", "responses")


def test_every_suite_gate_carries_a_registered_gate_marker_and_every_registered_gate_has_a_test() -> None:
    markers = suite_gate_markers()
    expected = set(BY_NAME) | set(COMPARISON_GATES)
    assert set(markers.values()) == expected, "each registered (or comparison) gate has exactly one suite test"
    assert len(markers) == len(expected)
    assert not set(COMPARISON_GATES) & set(BY_NAME), "a comparison gate never caps a single run's verdict"


def test_execution_order_is_smoke_identity_functional_reasoning_quality_engine_capacity_load() -> None:
    assert EXECUTION_ORDER[:2] == ("smoke", "identity")
    families = [BY_NAME[name].family for name in EXECUTION_ORDER[2:]]
    order = ["functional", "reasoning", "quality", "engine", "lifecycle", "capacity", "load"]
    assert families == sorted(families, key=order.index)


def test_the_run_order_is_the_registry_order() -> None:
    """One order: the gates sorted by their run rank (stably, from any collection order) are
    the registry's; a gate the registry does not know runs with the functional family."""
    from pytest_vllmqual.session.gate_order import run_rank

    assert sorted(reversed(EXECUTION_ORDER), key=run_rank) != list(EXECUTION_ORDER)  # within a family, collection order stays
    assert [BY_NAME[name].family for name in sorted(reversed(EXECUTION_ORDER), key=run_rank)][2:] == \
        [BY_NAME[name].family for name in EXECUTION_ORDER][2:]
    assert run_rank("smoke") < run_rank("identity") < run_rank("json") < run_rank("quality_tools")
    assert run_rank("quality_tools") < run_rank("kv_pool") < run_rank("ladder")
    assert run_rank("a_users_own_gate") == run_rank(None) == run_rank("json")


def test_a_users_gate_takes_its_family_from_its_markers_and_its_title_from_its_docstring() -> None:
    assert family_of("my_gate", ["functional"]) == "functional"
    assert family_of("my_gate", ["capacity"]) == "capacity"
    assert family_of("my_gate", []) is None
    assert title_of("my_gate", "My docstring") == "My docstring"
    assert title_of("tool_continuation", "anything") == "Tool-result continuation"


def test_long_context_proves_recall_only_in_needle_mode() -> None:
    smoke = {"gate": "quality_long_context", "outcome": "passed",
             "measurements": {"passed": 3, "repeat": 3, "target_tokens": 30000, "check": "smoke_after_filler"}}
    needle = {**smoke, "measurements": {**smoke["measurements"], "check": "needle"}}
    assert proves(smoke) == ("the smoke prompt was still answered after 30,000 filler tokens, 3/3 (a long-context "
                             "smoke: no fact was recalled)")
    assert proves(needle) == "a fact at the start of a 30,000-token prompt was recalled at its end, 3/3"
    assert proves({**needle, "outcome": "failed"}) is None
    assert proves({"gate": "unregistered", "outcome": "passed"}) is None


def test_tools_proves_its_count() -> None:
    gate = {"gate": "tools", "outcome": "passed", "measurements": {"passed": 20, "total": 20}}
    assert proves(gate) == ("20/20 typed tool calls came back through the server's tool parser, each naming the "
                            "expected tool, its arguments valid against the tool's JSON schema")
