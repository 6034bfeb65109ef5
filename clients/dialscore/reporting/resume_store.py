"""The one resume store of probe runs and evaluations: durable JSON Lines rows keyed by a stable id.

A run appends the service's answers to its store as soon as it has them; a run started again on
the same output folder reads them back and sends only what is missing (:meth:`ResumeStore.missing`:
the ids without a usable row).

* **Rows.** One JSON object per line. Its id, a string under the store's `key` field, is stable:
  a hash of everything the service was asked (:func:`content_key`) or a record's own id. A store
  made with `settings` writes them into every row (``"settings"``) and reuses only rows whose
  settings are equal: a row written under others (another model revision, mode, threshold) is
  *stale*. A line that does not parse (a torn last line after a crash mid-write), a row without a
  string id, without a settings object where settings are kept, or failing the store's `valid`
  check, is *invalid*. Stale and invalid rows stay in the file, are counted, and their ids are
  missing again. Of several usable rows for one id, the last wins.
* **Appends** (:meth:`ResumeStore.append`) write their rows in one write, then flush and fsync:
  the rows are stored whole or, after a crash mid-write, as a torn last line, which the next
  append ends first so that it cannot swallow the first new row.

The stores, their files and ids: a probe run's ``scores.jsonl`` (``"id"``, a hash of the model's
provenance, the setting and the item; no settings, the id carries them:
:class:`dialscore.probes.run.ScoreStore`), an evaluation's ``*.scores.jsonl`` (``"key"``, one row
per scoring job: :mod:`dialscore.evals.runners.score_store`), DECODE's ``*.detections.jsonl``
(``"key"``, one row per dialogue: :mod:`dialscore.evals.runners.detection_store`), the human-bot
analyses' ``*.predictions.jsonl`` (``"id"``, the utterance's).

The caller holds the output folder's :class:`~dialscore.reporting.run_lock.RunLock` for the run:
two runs appending to one store would each score the other's missing rows.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from dialscore.batching import chunked

__all__ = ["ResumeStore", "content_key"]

V = TypeVar("V")
Row = dict[str, Any]


def content_key(value: Any) -> str:
    """The sha256 (hex) of `value` as canonical JSON (keys sorted, no spaces, UTF-8): equal
    content, equal key, whatever the dict order."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResumeStore:
    """The rows of one JSON Lines file by id (see the module docstring).

    Args:
        path: the file (created with its folder on the first append).
        key: the field that holds a row's id.
        settings: written into every row and required equal for a row to be reused; None: no
            settings are kept (the ids must then change with everything the answers depend on).
        valid: what else a row must satisfy to be reused (a finite score, a parseable result).
    """

    def __init__(self, path: str | Path, *, key: str = "id",
                 settings: Mapping[str, Any] | None = None,
                 valid: Callable[[Row], bool] | None = None):
        self.path = Path(path)
        self.key = key
        self.settings = None if settings is None else dict(settings)
        self._valid = valid
        #: The usable rows by id, as of :meth:`load` and the appends since.
        self.rows: dict[str, Row] = {}
        #: Rows that did not parse or were not valid; rows written under other settings, and
        #: the settings of the first of them.
        self.invalid = 0
        self.stale = 0
        self.stale_settings: dict[str, Any] | None = None

    def load(self) -> dict[str, Row]:
        """Read the file (none yet: no rows) and return the usable rows by id; counts the
        invalid and stale ones."""
        self.rows, self.invalid, self.stale, self.stale_settings = {}, 0, 0, None
        if not self.path.exists():
            return self.rows
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.strip():
                    self._read(line)
        return self.rows

    def _read(self, line: str) -> None:
        try:
            row = json.loads(line)
        except ValueError:
            self.invalid += 1
            return
        if not (isinstance(row, dict) and isinstance(row.get(self.key), str)
                and (self.settings is None or isinstance(row.get("settings"), dict))
                and (self._valid is None or self._valid(row))):
            self.invalid += 1
        elif self.settings is not None and row["settings"] != self.settings:
            self.stale += 1
            if self.stale_settings is None:
                self.stale_settings = row["settings"]
        else:
            self.rows[row[self.key]] = row

    def missing(self, keyed: Iterable[tuple[str, V]],
                fits: Callable[[Row, V], bool] | None = None) -> list[tuple[str, V]]:
        """The ``(id, value)`` pairs whose id has no usable row, each id once, in first-seen
        order. A stored row that does not `fit` its value (e.g. fewer scores than the job has
        candidates) is invalid: counted, and dropped from :attr:`rows`."""
        todo: dict[str, V] = {}
        for ident, value in keyed:
            if ident in todo:
                continue
            row = self.rows.get(ident)
            if row is not None and fits is not None and not fits(row, value):
                self.invalid += 1
                del self.rows[ident]
                row = None
            if row is None:
                todo[ident] = value
        return list(todo.items())

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append `rows` (each with its id under :attr:`key`; the store's settings are added) in
        one durable write, and make them usable."""
        if not rows:
            return
        if self.settings is not None:
            rows = [{self.key: r[self.key], "settings": self.settings, **r} for r in rows]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    data = "\n" + data
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        self.rows.update((r[self.key], dict(r)) for r in rows)

    async def fill(self, todo: Sequence[tuple[str, V]], block: int,
                   compute: Callable[[list[V]], Awaitable[list[Row]]]) -> None:
        """Compute the rows of `todo` (from :meth:`missing`) `block` values at a time:
        ``await compute(values)`` returns one row per value, without its id; each block is
        appended as soon as it is computed, so a run that stops loses at most one block."""
        for _, part in chunked(todo, block):
            rows = await compute([value for _, value in part])
            self.append([{self.key: ident, **row} for (ident, _), row in zip(part, rows, strict=True)])
