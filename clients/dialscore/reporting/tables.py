"""The one plain-text table renderer of the terminal and the ``.txt`` reports.

:func:`render_grid` lays out cells that are already text: columns two spaces apart, each as wide
as its widest cell, a line of dashes under the header rows, no trailing spaces. A column listed
in `right` is right-aligned, its header included; every other cell is left-aligned.

:func:`format_table` renders rows (mappings) through it: numbers right-aligned (a column whose
non-None values are all int or float, bools excepted), text left-aligned; floats with
`floatfmt`, NaN and inf as ``nan`` / ``inf``, None as ``-``, bools as ``yes`` / ``no``.

    >>> print(format_table([{"variant": "jumbled", "mean": -3.21, "n": 200}]))
    variant     mean    n
    -------  -------  ---
    jumbled  -3.2100  200
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

from dialscore.reporting.rows import Row, columns_of

__all__ = ["format_table", "render_grid"]


def render_grid(rows: Sequence[Sequence[str]], header_rows: int = 1,
                right: Collection[int] = ()) -> str:
    """Text cells as a table: the first `header_rows` rows are the header (see the module
    docstring); `right` holds the indices of the right-aligned columns."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = []
    for n, row in enumerate(rows):
        out.append(line(row))
        if n == header_rows - 1:
            out.append(line(["-" * w for w in widths]))
    return "\n".join(out)


def _cell(value: Any, floatfmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format(value, floatfmt) if math.isfinite(value) else str(value)
    return str(value)


def _numeric(rows: Sequence[Row], column: str) -> bool:
    values = [row.get(column) for row in rows if row.get(column) is not None]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                for v in values)


def format_table(rows: Sequence[Row], columns: Sequence[str] | None = None,
                 floatfmt: str = ".4f", title: str | None = None) -> str:
    """Rows as a table under an optional title line; `columns` (default: first-seen order) picks
    and orders the columns."""
    cols = list(columns) if columns is not None else columns_of(rows)
    cells = [[_cell(row.get(c), floatfmt) for c in cols] for row in rows]
    right = {i for i, c in enumerate(cols) if _numeric(rows, c)}
    table = render_grid([cols, *cells], header_rows=1, right=right)
    return f"{title}\n{table}" if title else table
