"""The one number formatter: how every figure of a report, a summary or a comparison is written.

Two families, both with thousands separators. :func:`fmt_num` prints a value as a report
carries it (ints exact, floats to ``digits`` places, "n/a" when missing); the terminal
summary, the decision's sentences and the HTML page use it. The exact-decimal helpers
(:func:`to_decimal`, :func:`fixed`, :func:`signed`, :func:`signed_percent`,
:func:`rounded`) serve the A/B comparison, whose changes are computed from the values as
carried (never from a rounded display) and rounded half-up. :func:`short_tokens` writes
token counts the reference campaign's way (300K). :func:`readable` writes any other value a
person reads on a page (a list, a yes/no, a small record, a missing value) in words.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

__all__ = ["fixed", "fmt_decode", "fmt_num", "fmt_places", "readable", "rounded", "short_tokens", "signed",
           "signed_percent", "to_decimal"]


def fmt_num(value: Any, digits: int = 2, unit: str = "") -> str:
    """A number with thousands separators (floats to ``digits`` places), or "n/a" when missing."""
    if value is None or isinstance(value, bool):
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value}{unit}"


def readable(value: Any, missing: str = "not measured") -> str:
    """A value as a person reads it, never as Python prints it: a list joined with commas ("none"
    when empty), True/False as yes/no, a record as "key value" pairs joined with semicolons,
    numbers with thousands separators, and None as ``missing``."""
    if value is None:
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return f"{value:,}"
    if isinstance(value, Mapping):
        return "; ".join(f"{str(k).replace('_', ' ')} {readable(v, missing)}" for k, v in value.items()) or "none"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(readable(v, missing) for v in value) or "none"
    return str(value)


def fmt_decode(decode_tok_s: Any, source: Any = None, not_measured: Any = None, unit: str = " decode tok/s") -> str:
    """A rung's decode rate with whose view it is: "73.86 decode tok/s (server metrics)" where the
    server's histogram gave it, "decode not measured (...)" where neither view did."""
    if decode_tok_s is None and not_measured:
        return "decode not measured (the client read the answer late)"
    figure = fmt_num(decode_tok_s, 2, unit)
    return f"{figure} (server metrics: the client read the answer late)" if source == "server_metrics" else figure


def fmt_places(value: Any, digits: int = 2) -> str:
    """Always ``digits`` places, ints included (per-rank columns line up: "75.00 / 75.64")."""
    return f"{value:,.{digits}f}"


def short_tokens(n: int | float) -> str:
    """Token counts the way the reference campaign writes them: 300,000 → 300K, 117,500 → 117.5K, 131,072 → 131K.

    Whole thousands and exact hundreds are written exactly; other sizes (the binary context
    lengths 32,768, 131,072, 393,216) are floored to whole thousands.
    """
    if n < 1000:
        return f"{n:,.0f}"
    whole = int(n)
    if whole % 1000 == 0:
        return f"{whole // 1000:,}K"
    if whole % 100 == 0:
        return f"{whole / 1000:,.1f}K"
    return f"{whole // 1000:,}K"


def to_decimal(value: Any) -> Decimal | None:
    """A number exactly as the report carries it (floats via their shortest repr); None if not a number."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        return None


def _quantum(places: int) -> Decimal:
    return Decimal(1).scaleb(-places)


def fixed(value: Decimal, places: int) -> str:
    """Half-up rounding to ``places`` decimals, with thousands separators."""
    return f"{value.quantize(_quantum(places), rounding=ROUND_HALF_UP):,.{places}f}"


def signed(value: Decimal, places: int) -> str:
    """Like :func:`fixed`, with an explicit sign ("+0.72", "-0.13"; zero has none)."""
    rounded_value = value.quantize(_quantum(places), rounding=ROUND_HALF_UP)
    sign = "+" if value > 0 else ("-" if value < 0 else "")
    return sign + f"{abs(rounded_value):,.{places}f}"


def signed_percent(pct: Decimal) -> str:
    """A percent change with three decimals and its sign: "+4.715%"."""
    return signed(pct, 3) + "%"


def rounded(value: Decimal | None, places: int) -> float | None:
    """The half-up rounded value as a float (for the JSON record), None stays None."""
    return None if value is None else float(value.quantize(_quantum(places), rounding=ROUND_HALF_UP))
