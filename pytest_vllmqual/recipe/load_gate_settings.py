"""The recipe's ``gates.load`` section, typed, with the checks the schema cannot express.

The schema closes the section (an unknown key is an error with its close match) and bounds
each value; this module adds the rules that relate values to each other: the levels are
distinct, at least one SLO is set, ``requests_per_level`` reaches the floor of
``max(32, 4 x level)`` at every promoted level, and a search has a ceiling at or above the
promoted levels. Each error names the file, the key and the fix, like the loader's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.records import Word

__all__ = ["MIN_REQUESTS_PER_LEVEL", "REQUESTS_PER_IN_FLIGHT", "SLOS", "LoadSettings", "Slo", "SloSource",
           "check_load_section", "load_settings", "requests_floor", "slo_caveat"]

MIN_REQUESTS_PER_LEVEL = 32
"""The fewest requests a level is measured with: a p95 of fewer is one or two requests."""
REQUESTS_PER_IN_FLIGHT = 4
"""Each of a level's in-flight slots serves at least this many requests (4 x level in all)."""


@dataclass(frozen=True)
class Slo:
    """One SLO a load level's requests are held to: its key in ``gates.load`` (and in a report's
    thresholds), the request figure it bounds (a request's ``<figure>_s``, the server histogram of
    the same short name), how a person reads it, and its unit."""

    key: str
    figure: str
    label: str
    unit: str
    per_second: float
    """The factor from seconds to ``unit``."""

    def of_seconds(self, seconds: float) -> float:
        """A figure measured in seconds, in this SLO's unit."""
        return seconds * self.per_second

    def worded(self, limit: float) -> str:
        """``TTFT <= 500 ms``: the SLO as a person reads it."""
        return f"{self.label} <= {limit:g} {self.unit}"


SLOS: tuple[Slo, ...] = (Slo("ttft_ms", "ttft", "TTFT", "ms", 1000.0), Slo("tpot_ms", "tpot", "TPOT", "ms", 1000.0),
                         Slo("e2e_s", "e2e", "E2E", "s", 1.0))
"""Every SLO the load gate knows, in the order a report lists them: the one table of them."""


class SloSource(Word):
    """Who set a recipe's load levels and SLOs (``gates.load.slos_set_by``). Only ``operator``
    makes them a target a promotion can rest on; every other value is a caveat in the report."""

    OPERATOR = "operator"
    """An operator chose them for the load this configuration is promoted for."""
    PROJECT = "project"
    """This project's own, set for its fixture model: they show the gate works, not a target."""
    PLACEHOLDER = "placeholder"
    """This project's placeholder (not in the reference campaign) until an operator sets them."""
    NOT_STATED = "not stated"
    """The recipe does not say who set them (the default)."""

    @property
    def caveat(self) -> str:
        """What a report says of load figures judged against these SLOs; empty for an operator's."""
        return _SLO_CAVEATS[self]


_SLO_CAVEATS = {
    SloSource.OPERATOR: "",
    SloSource.PROJECT: "the load levels and SLOs are this project's own, set for its fixture model, not an "
                       "operator's target",
    SloSource.PLACEHOLDER: "the load levels and SLOs are placeholders, not in the reference campaign",
    SloSource.NOT_STATED: "the recipe does not say who set the load levels and SLOs (gates.load.slos_set_by), so "
                          "they are not taken as an operator's target",
}


def slo_caveat(value: Any) -> str:
    """The caveat for a recorded ``slos_set_by`` word; a missing or unknown word is not stated."""
    try:
        return SloSource(value).caveat
    except ValueError:
        return SloSource.NOT_STATED.caveat


def requests_floor(level: int) -> int:
    """The fewest requests a level of ``level`` in flight is measured with."""
    return max(MIN_REQUESTS_PER_LEVEL, REQUESTS_PER_IN_FLIGHT * level)


@dataclass(frozen=True)
class LoadSettings:
    """What the load gate measures and the SLOs each request must meet."""

    levels: tuple[int, ...]
    requests_per_level: int = MIN_REQUESTS_PER_LEVEL
    prompt_tokens: int = 256
    output_tokens: int = 32
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_s: float | None = None
    min_goodput_pct: float = 99.0
    find_max: bool = False
    max_ceiling: int | None = None
    max_steps: int = 6
    slos_set_by: SloSource = SloSource.NOT_STATED

    def requests_at(self, level: int) -> int:
        """Requests measured at ``level``: the recipe's count, raised to the floor for a searched level."""
        return max(self.requests_per_level, requests_floor(level))

    def slo(self) -> dict[str, float]:
        """The SLOs that are set, by name (``ttft_ms``, ``tpot_ms``, ``e2e_s``)."""
        values = {slo.key: getattr(self, slo.key) for slo in SLOS}
        return {name: float(value) for name, value in values.items() if value is not None}


def _fail(path: Path | str, key: str, text: str) -> RecipeError:
    return RecipeError(f"recipe {path}: key 'gates.load.{key}' {text}", path=str(path), key=f"gates.load.{key}")


def check_load_section(path: Path | str, raw: Mapping[str, Any]) -> None:
    """The cross-value rules of ``gates.load`` (the schema has checked each value's type and range)."""
    section = (raw.get("gates") or {}).get("load")
    if not isinstance(section, Mapping):
        return
    levels = [int(level) for level in section.get("levels") or []]
    if len(set(levels)) != len(levels):
        raise _fail(path, "levels", f"lists a level twice ({levels}). Fix: list each concurrency level once.")
    if not any(section.get(slo.key) is not None for slo in SLOS):
        raise _fail(path, "ttft_ms", "is not set, nor tpot_ms nor e2e_s: goodput needs at least one SLO. Fix: set "
                    "one or more of ttft_ms, tpot_ms (milliseconds) and e2e_s (seconds).")
    requests = int(section.get("requests_per_level", MIN_REQUESTS_PER_LEVEL))
    floor = max(requests_floor(level) for level in levels)
    if requests < floor:
        top = max(levels)
        raise _fail(path, "requests_per_level", f"is {requests}, below the floor of {floor} for level {top} "
                    f"(max({MIN_REQUESTS_PER_LEVEL}, {REQUESTS_PER_IN_FLIGHT} x level)). Fix: set "
                    f"requests_per_level: {floor} or more, or lower the levels.")
    ceiling = section.get("max_ceiling")
    if section.get("find_max") and ceiling is None:
        raise _fail(path, "max_ceiling", "is missing, and find_max: true needs the highest level the search may "
                    "try. Fix: add max_ceiling: N (N at or above every promoted level).")
    if ceiling is not None and int(ceiling) < max(levels):
        raise _fail(path, "max_ceiling", f"is {ceiling}, below the promoted level {max(levels)}. Fix: set "
                    f"max_ceiling: {max(levels)} or more.")


def load_settings(gates: Mapping[str, Any]) -> LoadSettings | None:
    """The typed ``gates.load`` section (None when the recipe has none); the loader checked it."""
    section = gates.get("load")
    if not isinstance(section, Mapping):
        return None
    known = {key: section[key] for key in LoadSettings.__dataclass_fields__ if key in section}
    known["levels"] = tuple(sorted(int(level) for level in section.get("levels") or []))
    if "slos_set_by" in known:
        known["slos_set_by"] = SloSource(known["slos_set_by"])
    return LoadSettings(**known)
