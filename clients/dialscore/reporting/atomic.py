"""The one atomic file writer of every report: a reader sees the old content or the new, never a mix.

:func:`atomic_write_bytes` (and :func:`atomic_write_text`) guarantee, for a target ``DIR/NAME``:

1. missing parent folders are created;
2. temporaries a killed earlier write of the same target left (``DIR/.NAME.<pid>.*.tmp`` whose
   process ``<pid>`` is gone) are removed; a live process's temporaries are left alone, so two
   writers never delete each other's files;
3. the data goes to a new temporary file beside the target (``DIR/.NAME.<pid>.<random>.tmp``, so on
   the same file system), made mode 0644 (``mkstemp`` makes 0600; reports are meant to be
   shared), written, flushed and fsynced;
4. the temporary file is renamed over the target with ``os.replace`` (atomic on POSIX and
   Windows), the one step that publishes the new content;
5. the folder is fsynced, so the rename itself survives a power cut (where the platform allows
   opening a folder; elsewhere this step is skipped).

If anything fails before the rename (a serialisation error, a full disk, a crash simulated in
tests), the temporary file is removed and the target keeps its old content (or stays absent).
A process killed between steps 3 and 4 leaves at most its temporary file, which the next write
of that target (step 2) or :func:`remove_stale_temporaries` deletes.

Concurrent writers of one target each publish whole files (the last rename wins); a run also
locks its output folder (:mod:`dialscore.reporting.run_lock`), so two runs never share one.
"""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text", "remove_stale_temporaries"]

#: The one step that publishes a file; tests replace it to simulate a crash before the rename.
_replace = os.replace

FILE_MODE = 0o644


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process writes one file at a time: its leftovers are stale
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's), or cannot tell: leave its files alone
    return True


def _temporaries(folder: Path, name: str) -> list[Path]:
    """The temporary files a killed write of ``folder/name`` left: those of processes that are
    gone (the pid is the first dot-separated part after the name), and those of an older writer
    that recorded no pid."""
    prefix = f".{name}."
    out = []
    for p in glob.glob(os.path.join(glob.escape(str(folder)), f".{glob.escape(name)}.*.tmp")):
        owner = Path(p).name[len(prefix):].split(".", 1)[0]
        if owner.isdigit() and _alive(int(owner)):
            continue
        out.append(Path(p))
    return out


def remove_stale_temporaries(folder: str | os.PathLike[str], names: Iterable[str]) -> list[Path]:
    """Delete the ``.NAME.*.tmp`` files that killed writes of ``folder/NAME`` left, for every
    name in `names`; returns the paths removed. A folder that does not exist holds none."""
    removed = []
    for name in names:
        for tmp in _temporaries(Path(folder), name):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders (Windows): the rename is all we have
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace ``path`` with `data` atomically (see the module docstring); returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target.parent, [target.name])
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.{os.getpid()}.",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.chmod(tmp, FILE_MODE)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        _replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(target.parent)
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`atomic_write_bytes` of `text` in UTF-8, newlines written as given."""
    return atomic_write_bytes(path, text.encode("utf-8"))
