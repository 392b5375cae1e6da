"""The HTML page's building blocks shared by its sections: an escaped table and an escaped list."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .html_svg import esc

__all__ = ["bullets", "table"]


def table(table_id: str, headers: Sequence[str], rows: Iterable[Sequence[Any]],
          row_classes: Sequence[str] | None = None, numeric: Sequence[int] = ()) -> str:
    """A table; cells are escaped text."""
    out = [f'<table id="{esc(table_id)}"><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in headers)
           + "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        cls = row_classes[i] if row_classes and i < len(row_classes) and row_classes[i] else ""
        cells = "".join(f'<td class="num">{esc(c)}</td>' if j in numeric else f"<td>{esc(c)}</td>"
                        for j, c in enumerate(row))
        out.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    out.append("</tbody></table>")
    return '<div class="scroll">' + "".join(out) + "</div>"


def bullets(items: Iterable[Any], list_id: str) -> str:
    """A list of escaped items, or "None." when there are none."""
    body = "".join(f"<li>{esc(i)}</li>" for i in items)
    return f'<ul id="{esc(list_id)}">{body}</ul>' if body else f'<p id="{esc(list_id)}">None.</p>'
