"""The report's ``load`` section: the load gate's levels as their own table, with the formulas.

The gate records one flat row per measured level (``load_levels``); the report carries them
here, once, with the SLOs, the goodput minimum, who set them, the server's ``max_num_seqs``
and the search for the highest level at SLO, plus the definitions of every figure (the same
words as the schema). Readers (the HTML page, the A/B) use :func:`load_of` instead of digging in
the gate's measurements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_vllmqual.gates.load_stats import DEFINITIONS
from pytest_vllmqual.recipe.load_gate_settings import SLOS
from pytest_vllmqual.records import GateRecord

__all__ = ["LOAD_GATE", "LOAD_LEVELS", "load_of", "load_section", "load_summary_line"]

LOAD_GATE = "load"
LOAD_LEVELS = "load_levels"
"""The gate measurement the section carries (not repeated under the gate)."""

_SEARCH_KEYS = {"max_at_slo": "max_at_slo", "max_first_failing": "first_failing", "max_ceiling": "ceiling",
                "max_search_steps": "steps", "max_search_tried": "tried", "max_search_converged": "converged"}


def _scalar(value: Any) -> Any:
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


def load_section(gates: Sequence[GateRecord]) -> dict[str, Any] | None:
    """The section for the run's load gate, or None when no load gate recorded levels."""
    gate = next((g for g in gates if g.gate == LOAD_GATE and g.measurements.get(LOAD_LEVELS)), None)
    if gate is None:
        return None
    measured, thresholds = gate.measurements, gate.thresholds
    levels = [{str(k): _scalar(v) for k, v in row.items()} for row in measured.get(LOAD_LEVELS) or []
              if isinstance(row, Mapping)]
    search = None
    if measured.get("max_ceiling") is not None:
        search = {name: measured.get(key) for key, name in _SEARCH_KEYS.items()}
        search["tried"] = [int(v) for v in search["tried"] or []]
    return {
        "outcome": str(gate.outcome),
        "definitions": dict(DEFINITIONS),
        "slo": {slo.key: thresholds.get(slo.key) for slo in SLOS},
        "min_goodput_pct": thresholds.get("min_goodput_pct"),
        "slos_set_by": measured.get("slos_set_by"),
        "max_num_seqs": measured.get("max_num_seqs"),
        "promoted_levels": [int(v) for v in measured.get("promoted_levels") or []],
        "levels": sorted(levels, key=lambda row: (row.get("level") or 0, str(row.get("phase")))),
        "search": search,
    }


def load_of(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """A report's load section (None for a report without one)."""
    section = report.get("load")
    return section if isinstance(section, dict) else None


def load_summary_line(report: Mapping[str, Any]) -> str | None:
    """The terminal summary's load line: which promoted levels met the SLOs, the lowest goodput, the search."""
    section = load_of(report)
    if section is None:
        return None
    promoted = [row for row in section.get("levels") or [] if row.get("phase") == "promoted"]
    met = [str(row.get("level")) for row in promoted if row.get("met_slo")]
    unmeasured = [str(row.get("level")) for row in promoted if row.get("slo_judgement") == "not measured"]
    missed = [str(row.get("level")) for row in promoted if not row.get("met_slo") and str(row.get("level")) not in unmeasured]
    goodputs = [row["goodput_pct"] for row in promoted if isinstance(row.get("goodput_pct"), int | float)]
    line = f"load: {len(met)}/{len(promoted)} promoted levels met the SLOs"
    line += f" ({', '.join(met)} in flight)" if met else ""
    line += f"; missed at {', '.join(missed)}" if missed else ""
    behind = any(row.get("client_fell_behind") for row in promoted if str(row.get("level")) in unmeasured)
    why = "the load generator fell behind" if behind else "the server's buckets could not tell"
    line += f"; not measured at {', '.join(unmeasured)} ({why})" if unmeasured else ""
    line += f"; lowest goodput {min(goodputs):.1f}%" if goodputs else ""
    search = section.get("search")
    if isinstance(search, Mapping):
        bound = "" if search.get("converged") else " (a lower bound: the search's steps ran out)"
        line += f"; max at SLO {search.get('max_at_slo') or 'none'} of ceiling {search.get('ceiling')}{bound}"
    return line
