"""The arms of a run: what is planned (``ArmSpec``, from ``--ab`` or a campaign) and what runs
(``Arm``: one recipe's server, gate records and report within the session)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.recipe.loader import Recipe
from pytest_vllmqual.records import GateRecord

from .server import ServerManager

__all__ = ["Arm", "ArmSpec", "ab_plan"]


@dataclass(frozen=True)
class ArmSpec:
    """One planned arm: its key (unique in the session), recipe and role in the A/B."""

    key: str
    recipe: str
    role: str


def ab_plan(spec: str, *, bracket: bool) -> list[ArmSpec]:
    """``--ab CONTROL,CANDIDATE`` (``--bracket``: control again after the candidate)."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if len(names) != 2:
        raise RecipeError(
            f"--ab takes exactly two recipes, CONTROL,CANDIDATE; got {spec!r}. "
            "Fix: e.g. --ab=131k-control,131k-4096 (add --bracket to replay the control after the candidate).")
    plan = [ArmSpec(f"A-{names[0]}", names[0], "control"), ArmSpec(f"B-{names[1]}", names[1], "candidate")]
    if bracket:
        plan.append(ArmSpec(f"A2-{names[0]}", names[0], "replay"))
    return plan


@dataclass
class Arm:
    """One recipe's run within the session."""

    key: str
    recipe: Recipe
    role: str
    run_id: str
    private_dir: Path
    started_utc: str
    manager: ServerManager | None = None
    gates: list[GateRecord] = field(default_factory=list)
    interrupted: bool = False
    report_path: Path | None = None
    report: dict[str, Any] | None = None

    @property
    def started(self) -> bool:
        """The arm ran: its server was asked for, or a gate recorded something."""
        return self.manager is not None or bool(self.gates)
