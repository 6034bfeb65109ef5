"""Report rows as CSV, JSON and JSON Lines, each file written by the one atomic writer.

A row is a flat mapping from column name to a value (str, int, float, bool or None); nested
values (lists, mappings, sets) are allowed and travel as JSON. Conversions:

* JSON and JSON Lines (:func:`to_jsonable`): dataclasses and pydantic models become objects,
  sets sorted lists, paths strings, and non-finite floats (NaN, inf) ``null``; any other value
  that JSON cannot hold raises ``TypeError`` before anything is written.
* CSV: a header line, then one line per row, ``\\n`` line ends; None and non-finite floats are
  empty cells, nested values JSON text; other values as ``csv`` writes them (``True``, ``0.25``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dialscore.reporting.atomic import atomic_write_text

__all__ = ["Row", "columns_of", "to_jsonable", "write_csv", "write_json", "write_jsonl",
           "write_reports"]

Row = Mapping[str, Any]


def columns_of(rows: Iterable[Row]) -> list[str]:
    """Column names in first-seen order over all rows."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def to_jsonable(value: Any) -> Any:
    """`value` as plain JSON values (see the module docstring)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if hasattr(value, "model_dump") and not isinstance(value, type):  # a pydantic model
        return to_jsonable(value.model_dump(mode="json"))
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return [to_jsonable(v) for v in sorted(value, key=repr)]
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _json(value: Any, indent: int | None = None) -> str:
    return json.dumps(to_jsonable(value), indent=indent, ensure_ascii=False, allow_nan=False)


def write_json(path: str | os.PathLike[str], obj: Any, indent: int | None = 2) -> Path:
    """Any JSON-able object (rows, a report, dataclasses) as one JSON document; returns the path."""
    return atomic_write_text(path, _json(obj, indent) + "\n")


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[Any]) -> Path:
    """One JSON object per line; returns the path."""
    return atomic_write_text(path, "".join(_json(r) + "\n" for r in rows))


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        return _json(value)
    return value


def write_csv(path: str | os.PathLike[str], rows: Iterable[Row],
              columns: Sequence[str] | None = None) -> Path:
    """Rows as CSV with a header line; `columns` (default: first-seen order) picks and orders
    the columns, and a row's other keys are left out. Returns the path."""
    rows = list(rows)
    cols = list(columns) if columns is not None else columns_of(rows)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: _csv_cell(row.get(c)) for c in cols})
    return atomic_write_text(path, buffer.getvalue())


def write_reports(stem: str | os.PathLike[str], rows: Sequence[Row],
                  columns: Sequence[str] | None = None) -> dict[str, Path]:
    """``STEM.csv`` and ``STEM.json`` from the same rows; returns ``{"csv": path, "json": path}``."""
    base = Path(stem)
    return {
        "csv": write_csv(base.with_name(base.name + ".csv"), rows, columns),
        "json": write_json(base.with_name(base.name + ".json"), list(rows)),
    }
