"""Deprecated: the comparison's equivalence section moved to :mod:`pytest_vllmqual.equivalence.comparison`.

Its public names are re-exported here, as the very objects of their new home, for one release.
"""

from __future__ import annotations

from pytest_vllmqual.equivalence.comparison import (
    LOWER_BOUND_NOTE,
    ArmWords,
    equivalence_section,
    flip_items,
    load_sidecars,
    markdown_lines,
    summary_line,
)

__all__ = ["LOWER_BOUND_NOTE", "ArmWords", "equivalence_section", "flip_items", "load_sidecars", "markdown_lines",
           "summary_line"]
