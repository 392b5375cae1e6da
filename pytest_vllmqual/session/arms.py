"""The arms of a run: what is planned (``ArmSpec``, from ``--ab`` or a campaign) and what runs
(``Arm``: one recipe's server, gate records and report within the session)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vllmqual.errors import RecipeError, VllmQualError
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import GateRecord

from .server import ServerManager

__all__ = ["AB_ROLES", "Arm", "ArmMarks", "ArmSpec", "ab_plan", "arm_marks"]


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


AB_ROLES = ("control", "candidate", "replay")
_ARM_MARKS = "--vllmqual-arm-marks"
_EXAMPLE = f"{_ARM_MARKS} candidate='smoke or equivalence'"


@dataclass(frozen=True)
class ArmMarks:
    """The gates one A/B arm runs: a marker expression (as ``-m`` takes) for the arm of ``role``."""

    role: str
    expression: str

    @property
    def how(self) -> str:
        """The option as the report's deselection reason says it."""
        return f"{_ARM_MARKS} {self.role}={self.expression!r}"


def arm_marks(values: Sequence[str], plan: Sequence[ArmSpec]) -> dict[str, ArmMarks]:
    """``--vllmqual-arm-marks ROLE=EXPR`` (repeatable), per planned arm key: which gates that arm
    runs, so that an A/B can run the whole suite on the control and only what it compares on the
    candidate. Raises VllmQualError naming the bad value and the fix."""
    if not values:
        return {}
    roles = {spec.role: spec.key for spec in plan if spec.role in AB_ROLES}
    if not roles:
        raise VllmQualError(f"{_ARM_MARKS} picks the gates of an A/B arm and needs --ab CONTROL,CANDIDATE. "
                            "Fix: add --ab=CONTROL,CANDIDATE, or use -m to pick the gates of a single run.")
    chosen: dict[str, ArmMarks] = {}
    for value in values:
        role, equals, expression = (part.strip() for part in value.partition("="))
        if not equals or not expression:
            raise VllmQualError(f"{_ARM_MARKS} takes ROLE=EXPR; got {value!r}. Fix: e.g. {_EXAMPLE}.")
        if role not in AB_ROLES:
            raise VllmQualError(f"{_ARM_MARKS} {value!r}: {role!r} is not a role of an A/B arm. "
                                f"Fix: ROLE is one of {', '.join(AB_ROLES)}, e.g. {_EXAMPLE}.")
        if role not in roles:
            raise VllmQualError(f"{_ARM_MARKS} {value!r}: this A/B has no {role} arm. "
                                "Fix: add --bracket to replay the control, or drop this value.")
        key = roles[role]
        if key in chosen:
            raise VllmQualError(f"{_ARM_MARKS} names the {role} arm twice ({chosen[key].expression!r} and "
                                f"{expression!r}). Fix: one expression per arm, e.g. "
                                f"{role}='({chosen[key].expression}) or ({expression})'.")
        chosen[key] = ArmMarks(role, expression)
    return chosen


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
