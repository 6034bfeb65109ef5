"""The output file: appended block by block (each block flushed and fsynced before the next is
counted done), and what a resumed job reads back from it.

A job stopped at any point (SIGKILL included) leaves whole lines, plus at most one torn last line
(a write cut short). :meth:`OutputFile.resume` keeps the whole lines, cuts the torn tail off the
file, and reports what is done: the ``custom_id`` of every answered request and the input
``line`` of every output line, so that a resumed job skips both and scores each ``custom_id``
once overall.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Done:
    """What an output file already answers."""

    custom_ids: set[str] = field(default_factory=set)
    lines: set[int] = field(default_factory=set)
    ok: int = 0
    failed: int = 0
    torn_bytes: int = 0

    def covers(self, line: int, custom_id: str | None) -> bool:
        """Whether input line `line` (with `custom_id`, if it has a usable one) is answered."""
        return line in self.lines or (custom_id is not None and custom_id in self.custom_ids)


class OutputFile:
    """Output lines appended to `path` (created when missing)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def resume(self) -> Done:
        """Read the lines already written; cut a torn or unparsable tail off the file (only the
        last line can be one: earlier lines were fsynced whole)."""
        done = Done()
        if not self.path.exists():
            return done
        data = self.path.read_bytes()
        good = 0  # bytes of whole, parsable lines
        for raw in data.splitlines(keepends=True):
            try:
                if not raw.endswith(b"\n"):
                    raise ValueError("no newline")
                row = json.loads(raw)
                line = int(row["line"])
            except (ValueError, KeyError, TypeError):
                break
            good += len(raw)
            done.lines.add(line)
            ok = row.get("error") is None
            if row.get("custom_id") is not None and not _refused_id(row):
                done.custom_ids.add(row["custom_id"])
            done.ok += ok
            done.failed += not ok
        done.torn_bytes = len(data) - good
        if done.torn_bytes:
            with self.path.open("r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
        return done

    def append(self, rows: Iterable[dict[str, Any]]) -> int:
        """Append `rows` as lines, flushed and fsynced before returning; how many."""
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        if not text:
            return 0
        with self.path.open("a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        return text.count("\n")


def _refused_id(row: dict[str, Any]) -> bool:
    """An output line refusing a line's custom_id itself (a duplicate): it answers that input
    line, not the custom_id, whose own line may still be pending."""
    err = (row.get("response") or {}).get("body") or {}
    detail = err.get("error") if isinstance(err, dict) else None
    return isinstance(detail, dict) and detail.get("param") == "custom_id"
