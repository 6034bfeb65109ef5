"""The JSON Lines stores of resumable runs (probe runs, evaluation scores, detections): the one
durable append, and the reader of rows keyed by ``"key"`` under a run's ``"settings"``."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["KeyedRows", "append_rows", "content_key", "read_keyed_rows"]


def content_key(value: Any) -> str:
    """The sha256 (hex) of `value` as canonical JSON (keys sorted, no spaces, UTF-8): equal
    content, equal key, whatever the dict order."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def append_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append `rows` to `path` as JSON Lines in one write, then flush and fsync: the rows are
    stored whole or, after a crash mid-write, as a torn last line that readers skip. A torn line
    left by an earlier crash is ended first, so it cannot swallow the first new row."""
    if not rows:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                data = "\n" + data
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


@dataclass
class KeyedRows:
    """A store's usable rows by key, and the rows left out: `invalid` did not parse or failed
    the caller's check (a torn line, a wrong shape), `stale` were written under other settings."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    invalid: int = 0
    stale: int = 0


def read_keyed_rows(path: Path, settings: Mapping[str, Any],
                    valid: Callable[[dict[str, Any]], bool]) -> KeyedRows:
    """The rows of `path` (none when it does not exist) whose ``"settings"`` equal `settings`,
    by their ``"key"`` (a later row wins). A row must be a JSON object with a string key, a
    settings object, and pass `valid`."""
    out = KeyedRows()
    if not path.exists():
        return out
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                out.invalid += 1
                continue
            if not (isinstance(row, dict) and isinstance(row.get("key"), str)
                    and isinstance(row.get("settings"), dict) and valid(row)):
                out.invalid += 1
            elif row["settings"] != settings:
                out.stale += 1
            else:
                out.rows[row["key"]] = row
    return out
