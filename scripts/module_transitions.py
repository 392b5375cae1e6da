"""Count how often a real comparison crosses between the package's modules.

A reader follows a comparison from the command line through the judges; each time the code
moves into another module the reader opens another file. This script runs ``vllmqual compare``
(the command line's own entry, ``cli.main``) on the committed SmolLM2 CPU pair under
``reports/examples/cpu-smollm2/`` (the control, the FP8-KV candidate and the replay), writing
into a temporary folder, with :func:`sys.setprofile` watching every Python call. The figures:

- a **call between modules** is a Python call whose callee's module (the function's
  ``__name__`` global) is a ``pytest_vllmqual`` module other than the caller's, where the caller
  is the nearest ``pytest_vllmqual`` frame below the callee (frames of the standard library and
  other packages in between are skipped; the command's entry counts as the caller ``<entry>``).
  A generator expression's frame is not a callee: it is an expression of the module that wrote
  it, run by whoever iterates it;
- with ``--follow candidate`` (the default) a call counts only when it **carries the candidate**:
  one of the callee's arguments is the candidate report (a mapping whose ``run.id`` is the
  candidate's), its typed record (``run_id``), a view of it (``record.run_id``), or an object,
  list or tuple holding one of those one level down (as ``ABEvidence`` holds the candidate):
  the path of the candidate's data through the judges. ``--follow all`` counts every call;
- **steps**: the distinct (caller module, callee module) pairs among those calls, in the order
  first taken: the path a reader follows, each way between two files walked once;
- **modules**: the distinct ``pytest_vllmqual`` modules entered;
- **returns to a module already left**: the steps whose callee module had been entered before
  by another step: the reader is sent back to a file already read (calls back into the module
  the reader came from are not a new file and are counted the same way).

The command runs once untraced first, so importing a module is not counted as a step.
Generator resumptions count as calls (they are ``call`` events); a step taken many times counts
once. ``--scope judges`` counts only inside :func:`pytest_vllmqual.ab.compare.compare_reports`
(the judging of the three reports, without the command line, file reading and the page);
``--scope cli`` (the default) counts the whole command.

    .venv/bin/python scripts/module_transitions.py [--scope cli|judges] [--follow candidate|all] [--steps]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "reports" / "examples" / "cpu-smollm2"
PACKAGE = "pytest_vllmqual"


@dataclass
class Transitions:
    """The steps between modules, first-taken order, and the figures over them."""

    steps: list[tuple[str, str]] = field(default_factory=list)
    returns: list[tuple[str, str]] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"steps": len(self.steps), "modules": len(self.modules), "returns": len(self.returns)}


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__") or "")


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def _caller(frame: FrameType, scope_code: Any) -> tuple[str, bool]:
    """The nearest package module below ``frame`` and whether ``scope_code`` is on the stack."""
    caller, inside, back = "", scope_code is None, frame.f_back
    while back is not None:
        if not caller and _ours(_module(back)):
            caller = _module(back)
        if back.f_code is scope_code:
            inside = True
        if caller and inside:
            break
        back = back.f_back
    return caller or "<entry>", inside or frame.f_code is scope_code


def _is_run(value: Any, run_id: str) -> bool:
    """``value`` is the run ``run_id``'s report, typed record or view."""
    if isinstance(value, Mapping):
        run = value.get("run")
        return isinstance(run, Mapping) and run.get("id") == run_id
    record = getattr(value, "record", value)
    return getattr(record, "run_id", None) == run_id and hasattr(record, "gates")


def carries(frame: FrameType, run_id: str) -> bool:
    """One of the frame's arguments is the run's report, record or view, or holds one a level down."""
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    for name in names:
        value = frame.f_locals.get(name)
        if value is None or isinstance(value, str | int | float | bool):
            continue
        if _is_run(value, run_id):
            return True
        inner = list(value) if isinstance(value, list | tuple) else list(getattr(value, "__dict__", {}).values())
        if any(_is_run(v, run_id) for v in inner[:64]):
            return True
    return False


def trace(run: Callable[[], Any], scope_code: Any = None, follow: str | None = None) -> Transitions:
    """Run ``run`` under :func:`sys.setprofile` and collect its steps between package modules
    (only the calls that carry the run ``follow``, when given)."""
    out = Transitions()
    seen_steps: set[tuple[str, str]] = set()
    entered: set[str] = set()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        callee = _module(frame)
        if not _ours(callee) or frame.f_code.co_name == "<genexpr>":
            return
        caller, inside = _caller(frame, scope_code)
        if not inside or caller == callee or (caller, callee) in seen_steps:
            return
        if follow is not None and not carries(frame, follow):
            return
        seen_steps.add((caller, callee))
        out.steps.append((caller, callee))
        if callee in entered:
            out.returns.append((caller, callee))
        else:
            entered.add(callee)
            out.modules.append(callee)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return out


def compare_command(folder: Path = EXAMPLES) -> Callable[[], int]:
    """``vllmqual compare A.json B.json --replay A2.json -o TMP`` on the committed pair, silenced."""
    from pytest_vllmqual.cli import main

    def pick(prefix: str) -> str:
        return str(next(p for p in sorted(folder.glob(f"{prefix}-*.json")) if not p.name.endswith(".probe.json")))

    def run() -> int:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            return main(["compare", pick("A"), pick("B"), "--replay", pick("A2"), "-o",
                         str(Path(tmp) / "comparison.json")])
    return run


def candidate_id(folder: Path = EXAMPLES) -> str:
    """The run id of the committed candidate report (``B-*.json``)."""
    path = next(p for p in sorted(folder.glob("B-*.json")) if not p.name.endswith(".probe.json"))
    return str(json.loads(path.read_text(encoding="utf-8"))["run"]["id"])


def measure(scope: str = "cli", follow: str = "candidate", folder: Path = EXAMPLES) -> Transitions:
    """The transitions of one ``vllmqual compare`` of the committed pair (see the module docstring)."""
    from pytest_vllmqual.ab import compare

    scope_code = compare.compare_reports.__code__ if scope == "judges" else None
    command = compare_command(folder)
    command()  # once untraced: every module the command imports lazily is imported before counting
    return trace(command, scope_code, candidate_id(folder) if follow == "candidate" else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scope", choices=("cli", "judges"), default="cli")
    parser.add_argument("--follow", choices=("candidate", "all"), default="candidate")
    parser.add_argument("--steps", action="store_true", help="list every step, a return marked '<-'")
    args = parser.parse_args(argv)
    result = measure(args.scope, args.follow)
    if args.steps:
        returns = set(result.returns)
        for caller, callee in result.steps:
            print(f"{'<-' if (caller, callee) in returns else '  '} {caller} -> {callee}")
    print(json.dumps({"scope": args.scope, "follow": args.follow, **result.to_dict()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
