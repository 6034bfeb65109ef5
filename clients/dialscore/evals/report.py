"""Report rows: a terminal table, CSV, JSON and JSON Lines, each file written atomically.

A row is a flat mapping from column name to a value (str, int, float, bool or None). Every
writer goes through `atomic_write_text`: the text is written to a temporary file in the target's
folder, flushed to disk, then moved over the target with `os.replace`, so a reader never sees a
half-written report and an interrupted run leaves the previous file intact.

    >>> rows = [{"variant": "jumbled", "mean": -3.21, "n": 200}]
    >>> print(format_table(rows))
    variant     mean    n
    -------  -------  ---
    jumbled  -3.2100  200

Non-finite floats (NaN, inf) become `null` in JSON and an empty cell in CSV; the table shows them
as `nan` / `inf`, and None as `-`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

Row = Mapping[str, Any]


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Write `text` to `path` atomically (temp file in the same folder, fsync, `os.replace`).

    Creates missing parent folders. Returns the path written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """`atomic_write_text` for bytes (a PNG, say): temp file, fsync, `os.replace`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def columns_of(rows: Iterable[Row]) -> list[str]:
    """Column names in first-seen order over all rows."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def to_jsonable(value: Any) -> Any:
    """Dataclasses, mappings, sequences and sets as plain JSON values; NaN and inf as None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
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


def write_json(path: str | os.PathLike[str], obj: Any, indent: int | None = 2) -> Path:
    """Write any JSON-able object (rows, a dict of results, dataclasses) atomically."""
    text = json.dumps(to_jsonable(obj), indent=indent, ensure_ascii=False, allow_nan=False)
    return atomic_write_text(path, text + "\n")


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[Any]) -> Path:
    """One JSON object per line, atomically."""
    lines = [json.dumps(to_jsonable(r), ensure_ascii=False, allow_nan=False) for r in rows]
    return atomic_write_text(path, "".join(line + "\n" for line in lines))


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        return json.dumps(to_jsonable(value), ensure_ascii=False)
    return value


def write_csv(path: str | os.PathLike[str], rows: Sequence[Row],
              columns: Sequence[str] | None = None) -> Path:
    """Rows as CSV with a header line, atomically. Columns default to first-seen order."""
    cols = list(columns) if columns is not None else columns_of(rows)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: _csv_cell(row.get(c)) for c in cols})
    return atomic_write_text(path, buffer.getvalue())


def _cell(value: Any, floatfmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format(value, floatfmt) if math.isfinite(value) else str(value)
    return str(value)


def format_table(rows: Sequence[Row], columns: Sequence[str] | None = None,
                 floatfmt: str = ".4f", title: str | None = None) -> str:
    """A plain-text table (no trailing spaces); numbers right-aligned, text left-aligned."""
    cols = list(columns) if columns is not None else columns_of(rows)
    cells = [[_cell(row.get(c), floatfmt) for c in cols] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    numeric = [all(isinstance(row.get(c), (int, float)) and not isinstance(row.get(c), bool)
                   for row in rows if row.get(c) is not None) and any(row.get(c) is not None
                                                                       for row in rows)
               for c in cols]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    out = [title] if title else []
    out.append(line(cols))
    out.append(line(["-" * w for w in widths]))
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def write_reports(stem: str | os.PathLike[str], rows: Sequence[Row],
                  columns: Sequence[str] | None = None) -> dict[str, Path]:
    """`STEM.csv` and `STEM.json` from the same rows; returns {"csv": path, "json": path}."""
    base = Path(stem)
    return {
        "csv": write_csv(base.with_name(base.name + ".csv"), rows, columns),
        "json": write_json(base.with_name(base.name + ".json"), list(rows)),
    }
