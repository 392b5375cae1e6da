"""An ordered campaign of arms with stop conditions and fallbacks, decided from arm reports.

The reference campaign's next step: an arm that starts with a reported KV pool of at least
393,216 tokens, serves an actual prompt above 300,000 tokens and passes the post-probe smoke
after it, with the prepared native-offload arm as the fallback if it does not. As a campaign::

    Campaign([CampaignArm("393k-fp8kv", requires=["startup", "kv_pool", "ladder"]),
              CampaignArm("393k-offload", requires=["startup", "ladder"], fallback_for="393k-fp8kv")])

This module is pure logic over public report dicts (no pytest, no server):
``plan = campaign.plan(); plan.next_arm(reports_so_far)`` says which arm runs next (None
when the campaign is over) and ``plan.record()`` says which arm ran and why, e.g.
"393k-offload ran because 393k-fp8kv failed kv_pool: 283,917 < 393,216".

Rules, in arm order:

- a regular arm runs unless the campaign has stopped;
- a fallback arm (``fallback_for=P``) runs only when P ran and failed one of its required
  gates; it is skipped when P passed or was skipped;
- after an arm fails, the campaign stops (later arms are skipped) unless a fallback for it
  follows or the arm says ``stop_on_failure=False``; after an arm passes, the campaign stops
  when the arm says ``stop_on_success=True``.

"Passed" and "failed" here are about an arm's ``requires`` only: they decide which arm runs next.
Which arm *qualifies* the campaign (its own verdict at least ``healthy`` over the gates that ran)
and the exit code that gives are decided in ``campaign.qualify``.

Requirements (``requires``) are gate names, evaluated by ``campaign.requirements``. When the
report has gates of that name, their outcome decides (all passed = met); otherwise these names are evaluated from the report's
sections: ``startup`` (the server became ready), ``kv_pool`` (engine-reported KV tokens ≥ the
recipe's ``min_kv_tokens``, else ≥ max_model_len), ``ladder`` (a completed rung above the
recipe's ``min_largest_prompt`` and every post-probe smoke passed), ``preflight`` (k/k) and
``gates`` (every gate that ran passed and the run is complete: the default). Any other name
that did not run is unmet ("did not run").

Spec formats (:func:`load_campaign` picks one):

- a string: ``ARM[:REQ+REQ...][?FLAG...]`` joined by commas, flags ``fallback`` (for the
  nearest earlier non-fallback arm), ``fallback=NAME``, ``stop`` (stop on success),
  ``continue`` (do not stop on failure), ``recipe=NAME``. Example:
  ``"393k-fp8kv:startup+kv_pool+ladder,393k-offload:startup+ladder?fallback"``.
- a YAML file (``fixtures/campaigns/NAME.yaml``)::

      name: 393k
      description: ...
      arms:
        - {name: 393k-fp8kv, requires: [startup, kv_pool, ladder]}
        - {name: 393k-offload, requires: [startup, ladder], fallback_for: 393k-fp8kv}

  Arm keys: name, recipe, requires, fallback_for, stop_on_failure, stop_on_success.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pytest_vllmqual.errors import CampaignError
from pytest_vllmqual.privacy.failure_reason import first_line

from .qualify import arm_facts, campaign_exit, qualified_arm
from .requirements import BUILTIN_REQUIREMENTS, Requirement, evaluate_requirement

__all__ = ["DEFAULT_REQUIREMENTS", "ArmDecision", "Campaign", "CampaignArm", "CampaignPlan",
           "campaign_from_mapping", "campaigns_dir", "load_campaign", "load_campaign_file", "parse_arm_spec",
           "parse_campaign_spec", "requalify"]

DEFAULT_REQUIREMENTS = ("gates",)
ARM_KEYS = ("name", "recipe", "requires", "fallback_for", "stop_on_failure", "stop_on_success")
CAMPAIGN_KEYS = ("name", "description", "arms")
CAMPAIGN_SUFFIXES = (".yaml", ".yml")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REQUIREMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class CampaignArm:
    """One arm of a campaign: a recipe, the gates it must pass, and how it relates to earlier arms."""

    name: str
    requires: Sequence[str] = DEFAULT_REQUIREMENTS
    fallback_for: str | None = None
    recipe: str | None = None
    stop_on_failure: bool = True
    stop_on_success: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise CampaignError(f"arm name {self.name!r} is not a recipe-style name (letters, digits, ._-). "
                                "Fix: name the arm after its recipe, e.g. 393k-fp8kv.")
        if isinstance(self.requires, str):
            raise CampaignError(f"arm {self.name}: requires must be a list of gate names, not the string "
                                f"{self.requires!r}. Fix: requires=[{self.requires!r}].")
        requires = tuple(str(r) for r in self.requires)
        bad = [r for r in requires if not _REQUIREMENT.match(r)]
        if bad:
            raise CampaignError(f"arm {self.name}: requirement(s) {bad} are not gate names. "
                                f"Fix: use gate names such as {', '.join(BUILTIN_REQUIREMENTS)}.")
        object.__setattr__(self, "requires", requires or DEFAULT_REQUIREMENTS)
        if self.recipe is not None and not _NAME.match(str(self.recipe)):
            raise CampaignError(f"arm {self.name}: recipe {self.recipe!r} is not a recipe name")
        if self.fallback_for == self.name:
            raise CampaignError(f"arm {self.name} cannot be its own fallback")

    @property
    def recipe_name(self) -> str:
        """The recipe this arm runs (the arm's name unless ``recipe`` says otherwise)."""
        return self.recipe or self.name

    def spec(self) -> str:
        """This arm in the string format."""
        text = self.name
        if tuple(self.requires) != DEFAULT_REQUIREMENTS:
            text += ":" + "+".join(self.requires)
        if self.fallback_for:
            text += f"?fallback={self.fallback_for}"
        if self.recipe:
            text += f"?recipe={self.recipe}"
        if self.stop_on_success:
            text += "?stop"
        if not self.stop_on_failure:
            text += "?continue"
        return text


@dataclass
class ArmDecision:
    """What the campaign decided for one arm, and why."""

    arm: CampaignArm
    status: str  # "passed" | "failed" | "skipped" | "pending" | "waiting"
    reason: str
    requirements: list[Requirement] = field(default_factory=list)
    report: Mapping[str, Any] | None = None

    @property
    def ran(self) -> bool:
        return self.status in ("passed", "failed")

    @property
    def failed_requirements(self) -> list[Requirement]:
        return [r for r in self.requirements if not r.ok]

    def failure_text(self) -> str:
        """"kv_pool: 283,917 < 393,216" (every unmet requirement, ';'-joined)."""
        return "; ".join(f"{r.name}: {r.detail}" for r in self.failed_requirements)

    def to_dict(self) -> dict[str, Any]:
        report = self.report or {}
        run = report.get("run") or {}
        return {
            "name": self.arm.name,
            "recipe": self.arm.recipe_name,
            "role": "fallback" if self.arm.fallback_for else "primary",
            "fallback_for": self.arm.fallback_for,
            "requires": list(self.arm.requires),
            "status": self.status,
            "ran": self.ran,
            "reason": self.reason,
            "requirements": [r.to_dict() for r in self.requirements],
            "run_id": run.get("id") if self.report is not None else None,
            **arm_facts(self.report if self.ran else None, met_requirements=self.status == "passed"),
        }


# -- the campaign ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Campaign:
    """An ordered list of arms (validated: unique names, fallbacks point at earlier arms)."""

    arms: Sequence[CampaignArm]
    name: str = "campaign"
    description: str = ""

    def __post_init__(self) -> None:
        arms = tuple(self.arms)
        if not arms:
            raise CampaignError(f"campaign {self.name} has no arms. Fix: list at least one arm.")
        seen: list[str] = []
        for arm in arms:
            if not isinstance(arm, CampaignArm):
                raise CampaignError(f"campaign {self.name}: {arm!r} is not a CampaignArm")
            if arm.name in seen:
                raise CampaignError(f"campaign {self.name}: arm {arm.name} appears twice. Fix: give each arm its own "
                                    "name (set recipe= to run one recipe twice).")
            if arm.fallback_for is not None and arm.fallback_for not in seen:
                where = "a later arm" if arm.fallback_for in {a.name for a in arms} else "not an arm of this campaign"
                raise CampaignError(f"campaign {self.name}: arm {arm.name} is the fallback for {arm.fallback_for}, "
                                    f"which is {where}. Fix: list the primary arm before its fallback.")
            seen.append(arm.name)
        object.__setattr__(self, "arms", arms)

    def arm(self, name: str) -> CampaignArm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise CampaignError(f"campaign {self.name} has no arm {name!r}; arms: {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.arms]

    def spec(self) -> str:
        """The campaign in the string format (round-trips through :func:`parse_campaign_spec`)."""
        return ",".join(a.spec() for a in self.arms)

    def plan(self) -> CampaignPlan:
        return CampaignPlan(self)

    def decide_arms(self, reports: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]]) -> list[ArmDecision]:
        """Every arm's decision given the reports so far (pure: the same reports, the same answer)."""
        by_arm = self._by_arm(reports)
        decisions: dict[str, ArmDecision] = {}
        stopped: str | None = None
        waiting: str | None = None
        previous: ArmDecision | None = None
        for arm in self.arms:
            if waiting is not None:
                decisions[arm.name] = ArmDecision(arm, "waiting", f"waits for {waiting}")
                continue
            if stopped is not None:
                decisions[arm.name] = ArmDecision(arm, "skipped", stopped)
                continue
            if arm.fallback_for is not None:
                primary = decisions[arm.fallback_for]
                if primary.status == "failed":
                    reason = f"{arm.name} ran because {primary.arm.name} failed {primary.failure_text()}"
                elif primary.status == "passed":
                    decisions[arm.name] = ArmDecision(
                        arm, "skipped", f"{arm.name} skipped: {primary.arm.name} passed "
                        f"{', '.join(primary.arm.requires)}, so its fallback is not needed")
                    continue
                else:
                    decisions[arm.name] = ArmDecision(
                        arm, "skipped", f"{arm.name} skipped: its primary {primary.arm.name} did not run "
                        f"({primary.reason})")
                    continue
            elif previous is None:
                reason = f"{arm.name} ran as the first arm of the campaign"
            else:
                reason = f"{arm.name} ran after {previous.arm.name} {previous.status}"
            report = by_arm.get(arm.name)
            if report is None:
                decisions[arm.name] = ArmDecision(arm, "pending", reason.replace(" ran ", " runs ", 1))
                waiting = arm.name
                continue
            requirements = [evaluate_requirement(report, r) for r in arm.requires]
            status = "passed" if all(r.ok for r in requirements) else "failed"
            decision = ArmDecision(arm, status, reason, requirements, report)
            decisions[arm.name] = decision
            previous = decision
            if status == "failed":
                has_fallback = any(a.fallback_for == arm.name for a in self.arms)
                if not has_fallback and arm.stop_on_failure:
                    stopped = (f"campaign stopped: {arm.name} failed {decision.failure_text()}"
                               + (" and has no fallback" if not arm.fallback_for else ""))
            elif arm.stop_on_success:
                stopped = f"campaign stopped: {arm.name} passed {', '.join(arm.requires)} (stop on success)"
        unexpected = [name for name, d in decisions.items() if d.status == "skipped" and name in by_arm]
        if unexpected:
            name = unexpected[0]
            raise CampaignError(f"campaign {self.name}: there is a report for arm {name}, but the campaign skipped it "
                                f"({decisions[name].reason}). Fix: run the arms in the order next_arm() gives.")
        return [decisions[a.name] for a in self.arms]

    def _by_arm(self, reports: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]]
                ) -> dict[str, Mapping[str, Any]]:
        if isinstance(reports, Mapping):
            by_arm = {str(k): v for k, v in reports.items()}
        else:
            by_arm = {}
            for report in reports:
                run = report.get("run") or {}
                name = str(run.get("arm") or (report.get("recipe") or {}).get("name") or "")
                if name not in self.names:
                    name = str((report.get("recipe") or {}).get("name") or name)
                if name in by_arm:
                    raise CampaignError(f"campaign {self.name}: two reports for arm {name}")
                by_arm[name] = report
        unknown = [n for n in by_arm if n not in self.names]
        if unknown:
            raise CampaignError(f"campaign {self.name}: report(s) for {', '.join(unknown)}, which are not arms of "
                                f"this campaign ({', '.join(self.names)})")
        return by_arm


class CampaignPlan:
    """The running campaign: ``next_arm(reports_so_far)`` then, at the end, ``record()``."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self._reports: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]] = {}

    def next_arm(self, reports_so_far: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]]) -> str | None:
        """The arm to run now, or None when every arm has run or been skipped.

        ``reports_so_far`` maps arm name → report (or is a list of reports, keyed by
        ``run.arm``). The plan keeps them for :meth:`record`.
        """
        self._reports = reports_so_far
        for decision in self.campaign.decide_arms(reports_so_far):
            if decision.status == "pending":
                return decision.arm.name
        return None

    def decisions(self) -> list[ArmDecision]:
        return self.campaign.decide_arms(self._reports)

    def record(self, *, failed_tests: int | None = None) -> dict[str, Any]:
        """Which arm ran and why, per arm, which arm qualified, and the exit code that gives
        (plain JSON; ``failed_tests``: pytest's count, when the session knows it)."""
        decisions = self.decisions()
        pending = next((d.arm.name for d in decisions if d.status == "pending"), None)
        passed = [d for d in decisions if d.status == "passed"]
        stopped = next((d.reason for d in decisions if d.status == "skipped" and d.reason.startswith("campaign "
                                                                                                      "stopped")), None)
        if pending is not None:
            outcome = f"in progress: {pending} runs next"
        elif passed:
            last = passed[-1]
            outcome = f"{last.arm.name} met its requirements ({', '.join(last.arm.requires)})"
        else:
            outcome = "no arm met its requirements"
        record: dict[str, Any] = {
            "campaign": self.campaign.name,
            "description": self.campaign.description,
            "spec": self.campaign.spec(),
            "arms": [d.to_dict() for d in decisions],
            "ran": [d.arm.name for d in decisions if d.ran],
            "skipped": [d.arm.name for d in decisions if d.status == "skipped"],
            "pending": pending,
            "complete": pending is None,
            "stopped": stopped,
            "outcome": outcome,
            "reasons": [d.reason for d in decisions if d.status != "waiting"],
        }
        record["qualified"] = qualified_arm(record)
        record["exit"] = campaign_exit(record, self.campaign._by_arm(self._reports), failed_tests)
        return record


# -- parsing -------------------------------------------------------------------------------------


def parse_arm_spec(text: str, previous: Sequence[CampaignArm] = ()) -> CampaignArm:
    """One arm of the string format: ``NAME[:REQ+REQ][?FLAG...]``."""
    head, *flags = text.strip().split("?")
    name, _, reqs = head.partition(":")
    name = name.strip()
    requires = tuple(r.strip() for r in reqs.split("+") if r.strip()) if reqs else DEFAULT_REQUIREMENTS
    options: dict[str, Any] = {}
    for flag in flags:
        key, _, value = flag.strip().partition("=")
        if key == "fallback":
            if value:
                options["fallback_for"] = value.strip()
            else:
                primaries = [a for a in previous if a.fallback_for is None]
                if not primaries:
                    raise CampaignError(f"campaign arm {text!r}: '?fallback' needs an earlier non-fallback arm. "
                                        "Fix: list the primary first, or write ?fallback=NAME.")
                options["fallback_for"] = primaries[-1].name
        elif key == "stop" and not value:
            options["stop_on_success"] = True
        elif key == "continue" and not value:
            options["stop_on_failure"] = False
        elif key == "recipe" and value:
            options["recipe"] = value.strip()
        else:
            raise CampaignError(f"campaign arm {text!r}: unknown flag {flag!r}. Fix: use ?fallback, ?fallback=NAME, "
                                "?stop, ?continue or ?recipe=NAME.")
    if not name:
        raise CampaignError(f"campaign arm {text!r} has no name. Fix: write ARM[:REQ+REQ][?fallback].")
    return CampaignArm(name, requires=requires, **options)


def parse_campaign_spec(spec: str, *, name: str = "campaign") -> Campaign:
    """A campaign from the string format, e.g. ``"393k-fp8kv:kv_pool+ladder,393k-offload?fallback"``."""
    parts = [p for p in (s.strip() for s in spec.split(",")) if p]
    if not parts:
        raise CampaignError(f"campaign spec {spec!r} names no arm. Fix: e.g. 393k-fp8kv,393k-offload?fallback.")
    arms: list[CampaignArm] = []
    for part in parts:
        arms.append(parse_arm_spec(part, arms))
    return Campaign(arms, name=name)


def campaign_from_mapping(data: Any, *, where: str = "campaign") -> Campaign:
    """A campaign from parsed YAML/JSON (``{name, description, arms: [...]}``); errors name the key."""
    if not isinstance(data, Mapping):
        raise CampaignError(f"{where} must be a mapping with keys {', '.join(CAMPAIGN_KEYS)}; got "
                            f"{type(data).__name__}")
    unknown = [k for k in data if k not in CAMPAIGN_KEYS]
    if unknown:
        raise CampaignError(f"{where}: unknown key(s) {unknown}. Fix: use {', '.join(CAMPAIGN_KEYS)}.")
    arms_data = data.get("arms")
    if not isinstance(arms_data, list) or not arms_data:
        raise CampaignError(f"{where}: key 'arms' must be a non-empty list of arms")
    arms: list[CampaignArm] = []
    for i, item in enumerate(arms_data):
        if isinstance(item, str):
            arms.append(parse_arm_spec(item, arms))
            continue
        if not isinstance(item, Mapping):
            raise CampaignError(f"{where}: arms[{i}] must be a mapping or an arm spec string")
        bad = [k for k in item if k not in ARM_KEYS]
        if bad:
            raise CampaignError(f"{where}: arms[{i}] has unknown key(s) {bad}. Fix: use {', '.join(ARM_KEYS)}.")
        if "name" not in item:
            raise CampaignError(f"{where}: arms[{i}] has no 'name'")
        requires = item.get("requires", list(DEFAULT_REQUIREMENTS))
        if not isinstance(requires, list):
            raise CampaignError(f"{where}: arms[{i}].requires must be a list of gate names")
        for key in ("stop_on_failure", "stop_on_success"):
            if key in item and not isinstance(item[key], bool):
                raise CampaignError(f"{where}: arms[{i}].{key} must be true or false")
        arms.append(CampaignArm(str(item["name"]), requires=requires, fallback_for=item.get("fallback_for"),
                        recipe=item.get("recipe"), stop_on_failure=item.get("stop_on_failure", True),
                        stop_on_success=item.get("stop_on_success", False)))
    return Campaign(arms, name=str(data.get("name") or "campaign"), description=str(data.get("description") or ""))


def load_campaign_file(path: Path) -> Campaign:
    """A campaign YAML file; CampaignError names the file on a read or YAML error."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CampaignError(f"campaign file {path} cannot be read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise CampaignError(f"campaign file {path} is not valid YAML: {first_line(exc)}") from None
    campaign = campaign_from_mapping(data, where=f"campaign file {path}")
    if campaign.name == "campaign":
        campaign = Campaign(campaign.arms, name=path.stem, description=campaign.description)
    return campaign


def campaigns_dir(root: Path) -> Path:
    """Where named campaigns live: ``fixtures/campaigns`` under the project root."""
    return Path(root) / "fixtures" / "campaigns"


def load_campaign(value: str, *, search_dirs: Iterable[Path] = ()) -> Campaign:
    """A campaign from ``--campaign VALUE``: a YAML path, a campaign name in ``search_dirs``, or a spec string.

    A value ending in .yaml/.yml, or naming an existing file, is a file. Otherwise, when a
    search directory holds ``VALUE.yaml``, that file; otherwise the string format.
    """
    text = value.strip()
    if text.endswith(CAMPAIGN_SUFFIXES) or Path(text).is_file():
        return load_campaign_file(Path(text))
    if _NAME.match(text):
        for directory in search_dirs:
            for suffix in CAMPAIGN_SUFFIXES:
                candidate = Path(directory) / f"{text}{suffix}"
                if candidate.is_file():
                    return load_campaign_file(candidate)
    return parse_campaign_spec(text)


def requalify(record: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A written campaign record decided again by today's rules from its arms' reports (by arm
    name); its description and report file names are kept."""
    plan = parse_campaign_spec(str(record["spec"]), name=str(record["campaign"])).plan()
    plan.next_arm(reports)
    again = plan.record()
    again["description"] = record.get("description", "")
    again["reports"] = dict(record.get("reports") or {})
    return again
