"""The resume cache of an evaluation: an append-only JSON Lines file of predictions keyed by id.

Each row is `{"id", "settings", "is_contradiction", "probability"}`; `settings` (mode, threshold,
model...) must equal the run's, so a store written under other settings is never reused silently.
A torn last line (a crash mid-write) is counted and ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dialscore.reporting.jsonl_store import append_rows

__all__ = ["PredictionStore"]


class PredictionStore:
    def __init__(self, path: str | Path, settings: Mapping[str, Any]):
        self.path = Path(path)
        self.settings = dict(settings)
        self.torn_lines = 0

    def load(self) -> dict[str, dict[str, Any]]:
        """The stored rows by id. Raises ValueError when a row was written under other settings."""
        rows: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return rows
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                    float(row["probability"])
                    bool(row["is_contradiction"])
                    ident, settings = row["id"], row["settings"]
                except (ValueError, KeyError, TypeError):
                    self.torn_lines += 1
                    continue
                if settings != self.settings:
                    raise ValueError(f"{self.path} holds predictions made with {settings}, not "
                                     f"{self.settings}: choose another output folder")
                rows[ident] = row
        return rows

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append rows (each with id, is_contradiction, probability) in one fsync'd write."""
        append_rows(self.path, [{**r, "settings": self.settings} for r in rows])
