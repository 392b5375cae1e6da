"""The fleet file: jobs (a recipe, a gate selection, a placement), validated like a recipe.

A fleet file names what to qualify where; it never names a host. Placement is ``any`` (one run
on whichever node fits) or ``each_node`` (one run on every node with a Ray label or custom
resource). Errors name the file, the key and the fix, worded as a recipe's are (``recipe.schema_check``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pytest_vllmqual.errors import FleetError
from pytest_vllmqual.recipe.schema_check import checked
from pytest_vllmqual.records import FloorNodes, Word

__all__ = [
    "ANSWER_MARKERS",
    "FLEET_SCHEMA",
    "AnswersSpec",
    "FleetSpec",
    "JobSpec",
    "NodeOverride",
    "Placement",
    "PlacementMode",
    "RetryPolicy",
    "RetryWhen",
    "load_fleet",
    "parse_label",
]

FLEET_SCHEMA = "fleet.schema.yaml"
ANSWER_MARKERS = "equivalence or items"
"""The gates whose answers the fleet compares node by node: the probe and the item bank."""


class PlacementMode(Word):
    """Where a job's runs go."""

    ANY = "any"
    EACH_NODE = "each_node"


class RetryWhen(Word):
    """Row outcomes a retry policy may retry."""

    LOST = "lost"
    FAILED = "failed"
    ERROR = "error"


def parse_label(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of a Ray node label."""
    key, _, value = text.partition("=")
    return key.strip(), value.strip()


@dataclass(frozen=True)
class Placement:
    """``mode`` plus an optional node filter (a label ``KEY=VALUE`` and/or a custom resource)."""

    mode: PlacementMode
    label: str | None = None
    resource: str | None = None

    def describe(self) -> str:
        """The filter in words, for progress lines and the record."""
        parts = [f"label {self.label}" if self.label else "", f"resource {self.resource}" if self.resource else ""]
        where = " and ".join(p for p in parts if p) or "any node"
        return f"{self.mode.value} ({where})"


@dataclass(frozen=True)
class RetryPolicy:
    """Extra attempts after the first, and on which outcomes; the default retries nothing."""

    attempts: int = 0
    on: tuple[RetryWhen, ...] = (RetryWhen.LOST,)


@dataclass(frozen=True)
class NodeOverride:
    """Recipe overrides for the runs that land on a node carrying ``label``."""

    label: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class AnswersSpec:
    """Whether a job's nodes answer the probe (and the item bank) for the fleet to compare, and on
    which nodes the job runs twice for the floor (``one``: the first node; ``every``; ``none``)."""

    compare: bool = True
    floor: FloorNodes = FloorNodes.ONE


@dataclass(frozen=True)
class JobSpec:
    """One job of the fleet file."""

    name: str
    recipe: str
    placement: Placement
    markers: str | None = None
    keyword: str | None = None
    cpus: float | None = None
    gpus: int | None = None
    overrides: tuple[str, ...] = ()
    node_overrides: tuple[NodeOverride, ...] = ()
    deadline_s: float = 1800.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    answers: AnswersSpec = field(default_factory=AnswersSpec)

    def pytest_selection(self, *, floor: bool = False) -> list[str]:
        """The ``-m``/``-k`` arguments of the job's pytest run: a marker selection gains the probe and
        the item bank unless the job opts out of the answers; a floor run runs those alone."""
        if floor:
            return ["-m", ANSWER_MARKERS]
        args: list[str] = []
        if self.markers:
            args += ["-m", f"({self.markers}) or {ANSWER_MARKERS}" if self.answers.compare else self.markers]
        if self.keyword:
            args += ["-k", self.keyword]
        return args

    def overrides_for(self, node_labels: dict[str, str]) -> tuple[str, ...]:
        """The job's overrides, then those of every node override whose label the node carries."""
        extra: list[str] = []
        for node_override in self.node_overrides:
            key, value = parse_label(node_override.label)
            if node_labels.get(key) == value:
                extra.extend(node_override.overrides)
        return (*self.overrides, *extra)


@dataclass(frozen=True)
class FleetSpec:
    """A validated fleet file."""

    name: str
    path: Path
    description: str
    max_parallel: int
    jobs: tuple[JobSpec, ...]

    def recipe_argument(self, job: JobSpec) -> str:
        """A recipe path is taken relative to the fleet file; a name stays a name."""
        text = job.recipe
        if text.endswith((".yaml", ".yml")) or "/" in text:
            candidate = Path(text)
            return str(candidate if candidate.is_absolute() else (self.path.parent / candidate).resolve())
        return text


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FleetError(f"cannot read fleet file {path}: {exc.strerror or exc}. Fix: pass an existing "
                         "fleet YAML file (see fixtures/fleets/).", path=str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise FleetError(f"fleet file {path} is not valid YAML{where}. Fix: correct the YAML syntax there.",
                         path=str(path)) from None


def _job(raw: dict[str, Any]) -> JobSpec:
    placement = raw["placement"]
    retry = raw["retry"]
    resources = raw["resources"]
    return JobSpec(
        name=raw["name"],
        recipe=raw["recipe"],
        placement=Placement(PlacementMode(placement["mode"]), placement.get("label"), placement.get("resource")),
        markers=raw.get("markers"),
        keyword=raw.get("keyword"),
        cpus=resources.get("cpus"),
        gpus=resources.get("gpus"),
        overrides=tuple(raw["set"]),
        node_overrides=tuple(NodeOverride(n["label"], tuple(n["set"])) for n in raw["node_set"]),
        deadline_s=float(raw["deadline_s"]),
        retry=RetryPolicy(int(retry.get("attempts", 0)), tuple(RetryWhen(w) for w in retry.get("on", ["lost"]))),
        answers=AnswersSpec(bool(raw["answers"].get("compare", True)), FloorNodes(raw["answers"].get("floor", "one"))),
    )


def load_fleet(path: Path) -> FleetSpec:
    """Read and validate a fleet file; FleetError naming the file, the key and the fix."""
    path = Path(path)
    raw = _read(path)
    if not isinstance(raw, dict):
        raise FleetError(f"fleet file {path} must be a YAML mapping with 'name' and 'jobs'. Fix: see "
                         "fixtures/fleets/tiny-cpu.yaml for the form.", path=str(path))
    def fail(message: str, key: str) -> FleetError:
        return FleetError(message, path=str(path), key=key)

    data = checked(raw, FLEET_SCHEMA, where=f"fleet file {path}", fail=fail)
    jobs = tuple(_job(job) for job in data["jobs"])
    seen: set[str] = set()
    for index, job in enumerate(jobs):
        if job.name in seen:
            raise FleetError(f"fleet file {path}: key 'jobs.{index}.name' repeats the job name {job.name!r}. "
                             "Fix: give every job its own name.", path=str(path), key=f"jobs.{index}.name")
        seen.add(job.name)
    return FleetSpec(name=data["name"], path=path.resolve(), description=data["description"],
                     max_parallel=int(data["max_parallel"]), jobs=jobs)
