"""One owner for each thing the package used to write in several places.

Each check reads the source (the package, and the scripts that write its files) and names the
one module allowed to spell the thing; a second spelling fails here with where it is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from support import ROOT

PACKAGE = ROOT / "pytest_vllmqual"
SOURCES = (PACKAGE, ROOT / "scripts")


def parsed(roots: tuple[Path, ...] = SOURCES) -> Iterator[tuple[str, ast.Module]]:
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def calls(tree: ast.AST, *names: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in names:
            yield node


def code_strings(tree: ast.AST) -> set[str]:
    """String constants of the code, docstrings excluded."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    docstrings |= {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
                   and isinstance(node.value, ast.Constant)}  # an attribute's docstring
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


def test_canonical_json_is_spelled_in_hashing_only() -> None:
    """Sorted keys or chosen separators (the JSON that is hashed, sent or shown stably) are written
    by ``hashing.canonical_json``; everyone else calls it, so two hashes of the same value agree."""
    spelled = sorted(f"{where}:{call.lineno}" for where, tree in parsed() for call in calls(tree, "dumps", "dump")
                     if {kw.arg for kw in call.keywords} & {"sort_keys", "separators"})
    assert [s.rsplit(":", 1)[0] for s in spelled] == ["pytest_vllmqual/hashing.py"], spelled


def test_the_slo_table_is_written_once() -> None:
    """Each SLO's key, the figure it bounds, its unit and its words are in ``recipe.load_gate_settings.SLOS``;
    the settings, the judge of a request, the server comparison, the report section, the gate's claim
    and the page read that table rather than naming the SLO keys again."""
    owners = sorted(where for where, tree in parsed() if code_strings(tree) & {"ttft_ms", "tpot_ms"})
    assert owners == ["pytest_vllmqual/recipe/load_gate_settings.py"]


def test_every_slo_in_the_table_is_a_recipe_key_and_a_request_figure() -> None:
    from pytest_vllmqual.gates.load_stats import SERVER_HISTOGRAMS, RequestFigures
    from pytest_vllmqual.recipe.load_gate_settings import SLOS, LoadSettings

    request = RequestFigures.from_times(ok=True, ttft_s=0.25, e2e_s=1.0, completion_tokens=3, output_times=[0.25, 0.5, 0.75])
    for slo in SLOS:
        assert slo.key in LoadSettings.__dataclass_fields__ and slo.figure in SERVER_HISTOGRAMS
        assert request.figure(slo.figure) is not None
    assert [slo.worded(500) for slo in SLOS] == ["TTFT <= 500 ms", "TPOT <= 500 ms", "E2E <= 500 s"]


def test_junit_xml_is_built_in_report_junit_only() -> None:
    """The comparison's, the drift's and the fleet's junit files come from ``report.junit.junit_document``:
    one place counts a suite's failures and skips from its cases."""
    builders = sorted(where for where, tree in parsed() if code_strings(tree) & {"testsuite", "testcase", "testsuites"})
    assert builders == ["pytest_vllmqual/report/junit.py"]


def test_a_junit_suite_counts_what_its_cases_carry() -> None:
    import xml.etree.ElementTree as ET

    from pytest_vllmqual.report.junit import JunitCase, JunitSuite, junit_document

    cases = [JunitCase("c", "ok"), JunitCase("c", "bad", "failure", "why"), JunitCase("c", "later", "skipped", "not run"),
             JunitCase("c", "broke", "error", "gone", time="1.5", properties=(("recipe", "tiny"),))]
    root = ET.fromstring(junit_document("title", [JunitSuite("s", cases)], declaration=True))
    suite = root.find("testsuite")
    assert root.get("name") == "title" and suite is not None
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == \
        {"tests": "4", "failures": "1", "errors": "1", "skipped": "1"}
    broke = suite.findall("testcase")[3]
    assert broke.get("time") == "1.5" and broke.find("error").get("message") == "gone"  # type: ignore[union-attr]
    assert [(p.get("name"), p.get("value")) for p in broke.iter("property")] == [("recipe", "tiny")]


def test_a_schema_key_path_is_spelled_one_way() -> None:
    """A file's key, a report's field, a model's JSON and a tool call's arguments name the place of a
    violation the same way (``layout.key_path``: ``jobs.0.name``, ``(top level)``), and only
    ``layout.key_path`` spells a jsonschema error's path."""
    import jsonschema

    from pytest_vllmqual.gates.schema_checks import schema_problems, schema_violations
    from pytest_vllmqual.layout import key_path
    from pytest_vllmqual.recipe.schema_check import key_path as file_key_path

    schema = {"type": "object", "properties": {"jobs": {"type": "array", "items": {
        "type": "object", "properties": {"name": {"type": "string"}}}}}}
    bad = {"jobs": [{"name": 3}]}
    error = next(jsonschema.Draft202012Validator(schema).iter_errors(bad))
    assert key_path(error.absolute_path) == file_key_path(error) == "jobs.0.name"
    assert [v.path for v in schema_violations(bad, schema)] == ["jobs.0.name"]
    assert schema_problems(bad, schema, "content") == ["content violates the schema: key 'jobs.0.name' must be of type string, got int 3"]
    assert key_path([]) == "(top level)" and [v.path for v in schema_violations(3, schema)] == ["(top level)"]
    joiners = sorted(where for where, tree in parsed() for call in calls(tree, "join")
                     if any(isinstance(n, ast.Attribute) and n.attr in ("absolute_path", "relative_path", "json_path")
                            for n in ast.walk(call)))
    assert joiners == [], "a jsonschema error's path is spelled by layout.key_path only"
    assert not [where for where, tree in parsed() if "(root)" in code_strings(tree)]


def test_the_shipped_suites_end_a_gate_one_way() -> None:
    """No suite spells "skip if a reason, else assert passed" again: each gate test ends with
    ``end_gate(verdict)`` from the front door."""
    spelled = []
    for path in sorted((ROOT / "suites").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.skip" \
                    and "skip_reason" in ast.unparse(node):
                spelled.append(f"{path.name}:{node.lineno}")
    assert spelled == []
    assert sum(path.read_text(encoding="utf-8").count("end_gate(verdict)")
               for path in (ROOT / "suites").glob("test_*.py")) >= 15


def test_end_gate_skips_with_the_reason_else_asserts_the_pass() -> None:
    import pytest

    from pytest_vllmqual import GateVerdict, end_gate

    end_gate(GateVerdict())
    with pytest.raises(pytest.skip.Exception, match="not measured: no server"):
        end_gate(GateVerdict(skip_reason="not measured: no server"))
    with pytest.raises(AssertionError, match="tool call names 'x'"):
        end_gate(GateVerdict(failure="tool call names 'x'"))


def test_a_schema_violation_is_worded_by_schema_errors_only() -> None:
    """A recipe, a fleet or campaign file, a report, a comparison, a fleet record, a model's JSON and a
    tool call's arguments: every schema violation the package reports is found and worded by
    ``schema_errors`` (one ``iter_errors``, one ``best_match``, one reading of an error's path, rule
    and value); what differs by reader (the words before it, the fix, how a value is shown) is a
    parameter of it, so the same violation reads the same to each of them."""
    from pytest_vllmqual.gates.schema_checks import schema_problems, schema_violations
    from pytest_vllmqual.layout import schema_errors
    from pytest_vllmqual.recipe.schema_check import first_problem

    readers = sorted({where for where, tree in parsed() for node in ast.walk(tree)
                      if (isinstance(node, ast.Attribute) and node.attr in (
                          "iter_errors", "best_match", "absolute_path", "relative_path", "validator_value"))})
    assert readers == ["pytest_vllmqual/schema_errors.py"]

    schema = {"type": "object", "properties": {"size": {"type": "integer"}}}
    said = "key 'size' must be of type integer, got str 'two'"
    problem = first_problem({"size": "two"}, schema, where="recipe r.yaml")
    assert problem is not None and problem[0] == f"recipe r.yaml: {said}. Fix: write an integer value for 'size'."
    assert schema_problems({"size": "two"}, schema, "content") == [f"content violates the schema: {said}"]
    assert [v.worded("arguments of f violate the schema") for v in schema_violations({"size": "two"}, schema)] == \
        ["arguments of f violate the schema: key 'size' must be of type integer, got a string"]
    report_said = schema_errors({"run": {"status": "finished"}}, "report.schema.json")
    assert "key 'run.status' is 'finished', which is not one of complete, incomplete" in report_said
