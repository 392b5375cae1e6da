"""One rule for a check the run could not decide: what it prints, what junit records, the exit code.

A check is *not measured* when the run could not produce the evidence that decides it, or the
evidence it produced decides neither way: a load level whose client and server views fall on both
sides of its minimum, a ladder with no rung it may send, an equivalence probe the server answers
without log probabilities, a comparison or a drift check whose equivalence is ``not measurable``
or ``inconclusive``. Such a check is neither a pass nor a failure, and every place says so the
same way, through this module:

- junit records it as skipped, with a message that starts ``not measured: `` and says why;
- the terminal's last vllmqual section, ``not measured``, names each one, then says the exit code;
- the exit code is 0 by default (a failure elsewhere still fails), and 1 under the strict option
  (``--vllmqual-strict`` for a pytest run, ``vllmqual compare --strict``);
- the verdict never reads it as a pass: a gate not measured did not pass (the run is at most
  ``healthy``), and an equivalence not measured caps a comparison below ``priority-challenger``.

A failure outranks a not-measured check: a load gate with one level missed and one not measured
fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .records import EquivalenceVerdict, FigureStatus, LevelJudgement, Word

__all__ = ["PREFIX", "STRICT_EXIT", "Measured", "Unmeasured", "equivalence_blocks", "equivalence_unmeasured", "exit_code", "is_not_measured", "junit_element",
           "not_measured", "of_equivalence", "of_figure", "of_level", "summary_lines"]

PREFIX = "not measured: "
"""How every not-measured reason begins: a skip reason, a junit message, a terminal line."""

STRICT_EXIT = 1
"""The exit code of a run that had nothing fail but something not measured, under the strict option."""


class Measured(Word):
    """What a check's evidence decided."""

    PASSED = "passed"
    FAILED = "failed"
    #: The run could not produce the evidence, or the evidence decides neither way.
    NOT_MEASURED = "not measured"


_EQUIVALENCE = {EquivalenceVerdict.EQUIVALENT: Measured.PASSED, EquivalenceVerdict.NOT_EQUIVALENT: Measured.FAILED,
                EquivalenceVerdict.INCONCLUSIVE: Measured.NOT_MEASURED,
                EquivalenceVerdict.NOT_MEASURABLE: Measured.NOT_MEASURED}
# A figure that can only show a difference (the KL lower bound) and did not has passed its one test.
_FIGURE = {FigureStatus.WITHIN: Measured.PASSED, FigureStatus.NOT_SHOWN: Measured.PASSED,
           FigureStatus.BEYOND: Measured.FAILED, FigureStatus.UNDECIDED: Measured.NOT_MEASURED,
           FigureStatus.NOT_MEASURED: Measured.NOT_MEASURED, FigureStatus.TOO_FEW: Measured.NOT_MEASURED}
_LEVEL = {LevelJudgement.MET: Measured.PASSED, LevelJudgement.MISSED: Measured.FAILED,
          LevelJudgement.NOT_MEASURED: Measured.NOT_MEASURED}


def of_equivalence(verdict: object) -> Measured:
    """An equivalence verdict (a comparison's or a drift's) under the rule; an unknown word is not measured."""
    return _EQUIVALENCE[EquivalenceVerdict(verdict)] if _known(EquivalenceVerdict, verdict) else Measured.NOT_MEASURED


def of_figure(status: object) -> Measured:
    """One equivalence figure's status under the rule."""
    return _FIGURE[FigureStatus(status)] if _known(FigureStatus, status) else Measured.NOT_MEASURED


def of_level(judgement: LevelJudgement | None) -> Measured | None:
    """One load level's judgement under the rule; None for a level not judged against SLOs."""
    return None if judgement is None else _LEVEL[judgement]


def _known(word: type[Word], value: object) -> bool:
    return value in {member.value for member in word}


def not_measured(why: str) -> str:
    """The reason a not-measured check gives (skip reason, junit message): ``not measured: WHY``."""
    return why if is_not_measured(why) else PREFIX + why


def is_not_measured(reason: object) -> bool:
    """Whether a skip reason is a not-measured one (and not, say, a gate not applicable to the recipe)."""
    return isinstance(reason, str) and reason.startswith(PREFIX)


def junit_element(measured: Measured) -> str | None:
    """The junit element a testcase carries: none for a pass, ``failure``, or ``skipped`` for not measured."""
    return {Measured.PASSED: None, Measured.FAILED: "failure", Measured.NOT_MEASURED: "skipped"}[measured]


@dataclass(frozen=True)
class Unmeasured:
    """One check that was not measured: what it is (``load (tiny-cpu)``) and why."""

    what: str
    why: str

    def line(self) -> str:
        return f"{self.what}: {not_measured(self.why)}"


def equivalence_blocks(section: Mapping[str, Any] | None) -> Measured | None:
    """What the rule that may block (the section's ``promotion``, the recipe's ``compare.promotion``)
    decided; a section written before that rule existed is judged by its token verdict. None without
    a section."""
    if not isinstance(section, Mapping):
        return None
    promotion = section.get("promotion")
    if isinstance(promotion, Mapping):
        status = promotion.get("status")
        return Measured(status) if status in {m.value for m in Measured} else Measured.NOT_MEASURED
    return of_equivalence(section.get("verdict"))


def equivalence_unmeasured(what: str, section: Mapping[str, Any] | None) -> Unmeasured | None:
    """An equivalence section (a comparison's or a drift's) whose blocking rule was not measured, as
    one check (``what`` names it); None when it was measured either way, or there is no section."""
    if not isinstance(section, Mapping) or equivalence_blocks(section) is not Measured.NOT_MEASURED:
        return None
    promotion = section.get("promotion")
    if isinstance(promotion, Mapping):
        reasons = [str(r) for r in promotion.get("reasons") or []]
        more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
        first = reasons[0] if reasons else "no reason recorded"
        return Unmeasured(what, f"compare.promotion {promotion.get('rule')}: {first}{more}")
    reasons = [str(r) for r in section.get("reasons") or []]
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return Unmeasured(what, f"{section.get('verdict')}: {reasons[0] if reasons else 'no reason recorded'}{more}")


def exit_code(code: int, unmeasured: Sequence[Unmeasured], *, strict: bool) -> int:
    """The exit code under the rule: ``code`` (what the run's own failures gave), raised from 0 to
    :data:`STRICT_EXIT` when something was not measured and the strict option is on."""
    return STRICT_EXIT if strict and unmeasured and code == 0 else code


def summary_lines(unmeasured: Sequence[Unmeasured], *, code: int, strict: bool, option: str) -> list[str]:
    """The terminal's last lines: one per check not measured, then what that does to the exit code
    (``code``, the exit the caller returns) and the option that makes it strict."""
    if not unmeasured:
        return []
    count = f"{len(unmeasured)} check{'s' if len(unmeasured) != 1 else ''} not measured"
    if strict:
        tail = f"{count}: not a pass; {option} makes that exit {STRICT_EXIT} (exit {code})"
    else:
        tail = f"{count}: not a pass and not a failure (exit {code}; {option} makes it exit {STRICT_EXIT})"
    return [*(item.line() for item in unmeasured), tail]
