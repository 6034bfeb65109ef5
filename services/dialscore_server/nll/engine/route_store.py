"""A JSON file of choices made once per machine and read by every process on it.

The file maps a *machine* key (what the choice depends on besides the entry itself) to entries,
each a small JSON object::

    {"<machine>": {"<entry>": {...}, ...}, ...}

:meth:`RouteStore.get_or_create` returns an entry, creating it only when no process has yet:
the first asker takes an exclusive ``flock`` on a lock file beside the JSON file, checks again,
creates the entry, writes the whole file to a temporary file in the same folder and renames it
over the old one. Readers never see a half-written file, two processes asking at once for a
missing entry get the same one (the second waits for the first and then reads its result), and an
entry once written never changes. Deleting the file makes the next asker create entries anew.

Limits: the lock is POSIX ``flock``; a folder on a network filesystem that does not honour it can
let two machines create the same entry, the last rename winning for later readers. The folder is
:func:`cache_dir`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Environment variable naming the folder of the service's per-machine files.
CACHE_DIR_VARIABLE = "DIALSCORE_CACHE_DIR"

Entry = dict[str, Any]


def cache_dir() -> Path:
    """``$DIALSCORE_CACHE_DIR``, or ``~/.cache/dialscore`` when it is unset or empty."""
    return Path(os.environ.get(CACHE_DIR_VARIABLE) or Path.home() / ".cache" / "dialscore")


class RouteStore:
    """The entries in the JSON file at `path` (created with its folder on the first write)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    def get_or_create(self, machine: str, entry: str, create: Callable[[], Entry]) -> Entry:
        """The entry `entry` of `machine`: read from the file, or, when no process has written it
        yet, ``create()`` called under the file lock and written before the lock is released.

        Raises OSError when the folder cannot be created or the file written, and whatever
        `create` raises (nothing is written then)."""
        found = self.read().get(machine, {}).get(entry)
        if found is not None:
            return found
        with self._locked():
            data = self.read()
            found = data.get(machine, {}).get(entry)
            if found is None:
                found = create()
                data.setdefault(machine, {})[entry] = found
                self._write(data)
        return found

    def read(self) -> dict[str, dict[str, Entry]]:
        """Every machine's entries; empty when the file (or its folder) is missing. A file that is not such a JSON
        object (edited by hand) reads as empty, with a warning, and is replaced at the next write."""
        try:
            text = self.path.read_text()
        except (FileNotFoundError, NotADirectoryError):
            return {}
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if not (isinstance(data, dict) and all(isinstance(v, dict) for v in data.values())):
            logger.warning("%s is not a JSON object of machines: ignored, to be rewritten", self.path)
            return {}
        return data

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _write(self, data: dict[str, dict[str, Entry]]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
