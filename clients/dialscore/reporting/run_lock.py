"""One run per output folder: an exclusive, non-blocking lock on ``<folder>/.lock``.

:class:`RunLock` takes an advisory ``flock`` (POSIX) or ``msvcrt`` lock (Windows) on the lock
file for as long as the run lasts; the operating system releases it when the process exits or
is killed, so a crashed run never leaves a folder locked. A second run on the same folder fails
at once with :class:`RunFolderInUse`, naming the folder and the pid that holds it.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import ParamSpec, TypeVar

__all__ = ["RunFolderInUse", "RunLock", "holds_out_dir"]

P = ParamSpec("P")
R = TypeVar("R")

LOCK_FILE = ".lock"


class RunFolderInUse(OSError):
    """Another run holds the folder's lock."""


class RunLock:
    """Context manager: hold ``folder/.lock`` exclusively (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock(fd)
        except OSError:
            try:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            finally:
                os.close(fd)
            raise RunFolderInUse(
                f"{self.folder} is in use by another run (pid {holder}); wait for it to finish or "
                "choose another output folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor releases the lock

    def __del__(self) -> None:  # a run that failed before releasing: free the descriptor
        self.release()

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def holds_out_dir(run: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorate an async run whose output folder is its ``out_dir`` argument: the folder's
    :class:`RunLock` is held for the whole run (:class:`RunFolderInUse` when another run has it)."""
    signature = inspect.signature(run)

    @functools.wraps(run)
    async def locked(*args: P.args, **kwargs: P.kwargs) -> R:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        with RunLock(bound.arguments["out_dir"]):
            return await run(*args, **kwargs)

    return locked


def _lock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
