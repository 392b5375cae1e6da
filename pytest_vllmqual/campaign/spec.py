"""A campaign as written: an ordered list of arms, each with its requirements and relation to the others.

This module reads and checks what a campaign says (``campaign.decision`` decides from arm
reports which arm runs next).

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

  Arm keys: name, recipe, requires, fallback_for, stop_on_failure, stop_on_success
  (``schemas/campaign.schema.yaml`` checks a file, with the same wording as a recipe's errors).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pytest_vllmqual.errors import CampaignError
from pytest_vllmqual.privacy.failure_reason import first_line
from pytest_vllmqual.recipe.schema_check import checked

from .requirements import BUILTIN_REQUIREMENTS

__all__ = ["CAMPAIGN_KEYS", "CAMPAIGN_SCHEMA", "DEFAULT_REQUIREMENTS", "Campaign", "CampaignArm", "campaign_from_mapping",
           "campaigns_dir", "load_campaign", "load_campaign_file", "parse_arm_spec", "parse_campaign_spec"]

DEFAULT_REQUIREMENTS = ("gates",)
CAMPAIGN_KEYS = ("name", "description", "arms")
CAMPAIGN_SCHEMA = "campaign.schema.yaml"
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


def campaign_from_mapping(data: Any, *, where: str = "campaign", name: str = "campaign") -> Campaign:
    """A campaign from parsed YAML/JSON (``{name, description, arms: [...]}``), checked by the campaign
    schema; errors name ``where``, the key and the fix. ``name``: the campaign's name when the mapping has none."""
    if not isinstance(data, Mapping):
        raise CampaignError(f"{where} must be a mapping with keys {', '.join(CAMPAIGN_KEYS)}; got "
                            f"{type(data).__name__}. Fix: see fixtures/campaigns/393k.yaml for the form.")

    def fail(message: str, key: str) -> CampaignError:
        return CampaignError(message)

    checked_data = checked(dict(data), CAMPAIGN_SCHEMA, where=where, fail=fail)
    arms: list[CampaignArm] = []
    for item in checked_data["arms"]:
        if isinstance(item, str):
            arms.append(parse_arm_spec(item, arms))
            continue
        arms.append(CampaignArm(item["name"], requires=item["requires"], fallback_for=item["fallback_for"],
                                recipe=item["recipe"], stop_on_failure=item["stop_on_failure"],
                                stop_on_success=item["stop_on_success"]))
    return Campaign(arms, name=str(checked_data.get("name") or name),
                    description=str(checked_data["description"] or ""))


def load_campaign_file(path: Path) -> Campaign:
    """A campaign YAML file (named after the file unless it says ``name``); CampaignError names the file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CampaignError(f"campaign file {path} cannot be read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise CampaignError(f"campaign file {path} is not valid YAML: {first_line(exc)}") from None
    return campaign_from_mapping(data, where=f"campaign file {path}", name=path.stem)


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
