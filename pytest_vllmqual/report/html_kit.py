"""The one kit of the offline HTML pages (a run's report, a fleet record): escaping, tables, lists, the page.

Everything a page shows from a record goes through :func:`esc`. A table or a list escapes its
cells; a cell that is already HTML (a link, bold words, a list of ``<code>`` items) is passed
as :class:`Markup`, built by the caller with :func:`esc` around every value it holds, so no
value is escaped twice or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape as _escape
from typing import Any

__all__ = ["BASE_CSS", "Markup", "bullets", "esc", "page", "table"]

#: The look both pages share; a page adds its own rules (its verdict colours) after these.
BASE_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1180px;
color:#1b1f24;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #d0d7de;
padding-bottom:.2rem}h3{font-size:1.02rem;margin-bottom:.3rem}
.meta{color:#57606a;font-size:.92rem}
table{border-collapse:collapse;margin:.6rem 0 1rem;font-size:.92rem}
th,td{border:1px solid #d0d7de;padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td{background:#ffebe9}tr.skip td{background:#fff8c5}tr.rejected td{background:#fff1e5}
.badge{display:inline-block;padding:.15rem .6rem;border-radius:1rem;font-weight:600;color:#fff;background:#57606a}
.decision{border:1px solid #d0d7de;border-radius:.5rem;padding:.2rem 1.2rem 1rem;background:#fbfcfd}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.85rem;word-break:break-all}
.scroll{overflow-x:auto;max-width:100%}
"""


class Markup(str):
    """HTML a caller built, every value in it already escaped: the kit inserts it as it is."""

    __slots__ = ()


def esc(value: Any) -> str:
    """HTML-escape anything (None becomes "n/a"); :class:`Markup` stays as it is."""
    if isinstance(value, Markup):
        return value
    return _escape("n/a" if value is None else str(value), quote=True)


def table(table_id: str, headers: Sequence[str], rows: Iterable[Sequence[Any]],
          row_classes: Sequence[str] | None = None, numeric: Sequence[int] = ()) -> str:
    """A table; every cell is escaped unless it is :class:`Markup`."""
    out = [f'<table id="{esc(table_id)}"><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in headers)
           + "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        cls = row_classes[i] if row_classes and i < len(row_classes) and row_classes[i] else ""
        cells = "".join(f'<td class="num">{esc(c)}</td>' if j in numeric else f"<td>{esc(c)}</td>"
                        for j, c in enumerate(row))
        out.append(f'<tr class="{esc(cls)}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    out.append("</tbody></table>")
    return '<div class="scroll">' + "".join(out) + "</div>"


def bullets(items: Iterable[Any], list_id: str) -> str:
    """A list of escaped items, or "None." when there are none."""
    body = "".join(f"<li>{esc(i)}</li>" for i in items)
    return f'<ul id="{esc(list_id)}">{body}</ul>' if body else f'<p id="{esc(list_id)}">None.</p>'


def page(title: str, body: Iterable[str], css: str) -> str:
    """The whole offline page: ``title`` is escaped, ``body`` is the sections' HTML, ``css`` this page's own rules."""
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{BASE_CSS}{css}</style></head><body>"
            + "".join(body) + "</body></html>\n")
