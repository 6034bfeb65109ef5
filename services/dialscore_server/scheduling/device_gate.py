"""Bulk engines that step aside for interactive ones on the same device of a node.

A model's bulk pool (``bulk_pool``) runs its own replicas, but on a shared node they compute on
the same cores or the same GPU as the interactive replicas. CPU priority
(``engine_priority``) lowers what the bulk engine takes of the cores, not what it does to an
interactive pass running beside it (shared caches, memory bandwidth, the wake-up of a thread
team), and a GPU has no priority between processes at all. A :class:`DeviceGate` keeps them
apart in time instead:

* every interactive request holds the gate of its device **shared**
  (:meth:`DeviceGate.interactive`) from the moment its replica admits it until its answer is
  complete (its tokenization, its wait in the replica's queue and its engine calls), so a bulk
  call cannot start while it waits for the engine; interactive requests never wait for one
  another or for a bulk call;
* an engine that yields (``yield_to_interactive_s``: a bulk pool) starts each call only when no
  interactive request holds its device's gate (:meth:`DeviceGate.wait_until_clear`), and, with
  ``yield_inside_calls``, pauses a running call at its pause points (between passes and layers:
  :mod:`.pause_points`) while one does, each call's waits together within its bound: bulk
  work always progresses, by at least one call per bound while interactive requests follow
  each other with no gap;
* the last interactive request to leave the gate stamps the time in the lock file
  (:meth:`DeviceGate.last_held_at`), so a yielding engine also knows whether interactive work
  was about recently, not only now: it keeps its calls within ``bulk_max_batch`` only then
  (``bulk_max_batch_hold_s``), and merges up to its whole budget when the device has been
  quiet for longer.

The gate of a device is a lock on a file named for the device, in ``/dev/shm`` where it
exists (else the system's temporary directory), so it is shared by every process of the node's
filesystem: the replicas of one Ray node, or of one KubeRay pod. An interactive request that
arrives while a yielding call runs computes beside it (on a GPU, after it) until the call's
next pause point, or all of it without ``yield_inside_calls``, so bulk calls should be short
(``bulk_max_batch``). The lock is the kernel's, released when its holder exits, so a replica
that dies mid-call never blocks another.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

from dialscore_server.scheduling.pause_points import Paused, pausing

if sys.platform == "linux":
    import fcntl

#: Whether this system has the locks a gate needs: Linux's open file description locks, on a
#: 64-bit build (the layout of ``struct flock`` below).
HAS_GATES = (sys.platform == "linux" and hasattr(fcntl, "F_OFD_GETLK")
             and struct.calcsize("P") == 8)

logger = logging.getLogger("dialscore.serve")

#: Seconds between a yielding engine's looks at the gate while an interactive request holds it.
POLL_S = 0.002


def gate_dir() -> str:
    """Where the gates' lock files live: ``/dev/shm`` when it is a writable directory (memory,
    shared by the node's processes), else the system's temporary directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return tempfile.gettempdir()


def device_key(device: str | None) -> str:
    """The name of `device`'s gate: ``cpu`` for every CPU device (the node's cores are one
    resource); a CUDA device by the physical GPUs the process sees (``CUDA_VISIBLE_DEVICES``, as
    Ray sets it per replica) and its index among them, so replicas sharing a GPU share a gate and
    replicas on different GPUs of the node do not."""
    if not str(device).startswith("cuda"):
        return "cpu"
    index = str(device).partition(":")[2] or "0"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all")
    return re.sub(r"[^\w.-]", "_", f"cuda-{visible}-{index}")


def device_gate(device: str | None) -> DeviceGate:
    """The gate of `device` (a card's ``device``: ``cpu``, ``cuda:1``) on this node, in
    :func:`gate_dir`."""
    return DeviceGate(device_key(device))


#: Linux's ``struct flock`` (64-bit ``off_t``): type, whence, start, length, pid, padding.
_FLOCK = struct.Struct("@hhqqi4x")

#: The stamp at the start of a gate's lock file: when an interactive request last left it, in
#: the gate's clock (``time.monotonic``: Linux's CLOCK_MONOTONIC, one clock for the node's
#: processes).
_STAMP = struct.Struct("<d")


def _lock_request(kind: int) -> bytes:
    """An open-file-description lock of the whole file, of `kind` (F_RDLCK, F_WRLCK, F_UNLCK)."""
    return _FLOCK.pack(kind, os.SEEK_SET, 0, 0, 0)


class DeviceGate:
    """The gate of one device of this node (see the module docstring): a lock file in
    `directory` (default :func:`gate_dir`) named for `key` (:func:`device_key`). Each instance
    opens the file once, lazily, and may be used from any thread (an engine uses it from its one
    engine thread). `clock` and `sleep` time the wait of :meth:`wait_until_clear` (tests pass
    ones they drive).

    Interactive requests hold a read lock (Linux's open file description locks, ``F_OFD_SETLKW``),
    which never conflict with one another; a yielding engine only asks whether a write lock
    could be placed (``F_OFD_GETLK``) and never takes one, so it cannot hold up an interactive
    request, however low its own CPU priority. Where the system has no such locks (not Linux),
    or the lock file cannot be opened (logged once), the gate is open: interactive requests hold
    nothing and every look finds it clear."""

    def __init__(self, key: str, directory: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.path = os.path.join(directory or gate_dir(), f"dialscore-gate-{key}.lock")
        self._clock, self._sleep = clock, sleep
        self._fd: int | None = None
        self._unavailable = False
        self._lock = threading.Lock()
        #: Blocks of :meth:`interactive` open now; the lock is held while any is.
        self._holders = 0

    def _file(self) -> int | None:
        """The lock file, opened on first use; None where the gate is open (no such locks here,
        or the file cannot be opened: logged once, and the engine serves ungated)."""
        if not HAS_GATES:
            return None
        with self._lock:
            if self._fd is None and not self._unavailable:
                try:
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
                except OSError as exc:
                    self._unavailable = True
                    logger.warning("device gate %s cannot be opened, so engine calls here are "
                                   "not gated: %s", self.path, exc)
            return self._fd

    @contextlib.contextmanager
    def interactive(self) -> Iterator[None]:
        """Hold the gate shared for the block: interactive work is about. Blocks may overlap,
        from any threads: the lock is taken when the first opens and released when the last
        closes. Never waits: nothing takes the gate exclusively."""
        fd = self._file()
        if fd is None:
            yield
            return
        with self._lock:
            if self._holders == 0:
                fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, _lock_request(fcntl.F_RDLCK))
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0:
                    with contextlib.suppress(OSError):  # unstamped: a hold runs from the last stamp
                        os.pwrite(fd, _STAMP.pack(self._clock()), 0)
                    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _lock_request(fcntl.F_UNLCK))

    def is_clear(self) -> bool:
        """Whether no interactive request holds the gate now (asked without locking)."""
        fd = self._file()
        if fd is None:
            return True
        got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _lock_request(fcntl.F_WRLCK))
        return _FLOCK.unpack(got)[0] == fcntl.F_UNLCK

    def last_held_at(self) -> float | None:
        """When an interactive request last held the gate, by the gate's clock: now while one
        holds it, else when the last one left it (the stamp every process's last holder writes
        as it lets go); None when none has since the lock file was made, or where the gate is
        open. A stamp from beyond now (a torn read of a write in progress) reads as now."""
        fd = self._file()
        if fd is None:
            return None
        now = self._clock()
        if not self.is_clear():
            return now
        raw = os.pread(fd, _STAMP.size, 0)
        if len(raw) < _STAMP.size:
            return None
        stamp = _STAMP.unpack(raw)[0]
        return stamp if stamp == stamp and stamp <= now else now  # NaN or ahead: now

    def wait_until_clear(self, max_wait_s: float) -> float:
        """Wait until no interactive request holds the gate, looking every :data:`POLL_S`
        seconds, for at most `max_wait_s` seconds (by `clock`); then return the seconds waited
        (0.0 when it was clear at once). Returning does not hold the gate: an interactive request
        may begin the moment after."""
        begun: float | None = None
        while not self.is_clear():
            if begun is None:
                begun = self._clock()
            waited = self._clock() - begun
            if waited >= max_wait_s:
                return waited
            self._sleep(min(POLL_S, max_wait_s - waited))
        return 0.0 if begun is None else self._clock() - begun

    def close(self) -> None:
        """Close the lock file (a held gate is released with it)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class GatedCalls:
    """How one serving's requests and engine calls meet its device's `gate`. With `yield_s` (a
    bulk pool's ``yield_to_interactive_s``) every engine call waits while the gate is held:
    before it starts and, with `inside` (``yield_inside_calls``), at its pause points, for at
    most `yield_s` seconds in all (:meth:`call`); requests hold nothing, and the gate tells the
    serving's lanes when interactive work was last about on the device
    (:meth:`interactive_seen_at`). Without it, an interactive request holds the gate shared while
    the serving has it (:meth:`request`), its engine calls included, and every call runs as it
    comes."""

    def __init__(self, gate: DeviceGate, yield_s: float | None = None, inside: bool = True) -> None:
        self.gate, self.yield_s, self.inside = gate, yield_s, inside

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """The block of one interactive request in the serving: the gate is held shared
        throughout, unless this serving yields."""
        if self.yield_s is not None:
            yield
            return
        with self.gate.interactive():
            yield

    @contextlib.contextmanager
    def call(self) -> Iterator[Paused]:
        """The block of one engine call, on the thread that runs it. If this serving yields: wait
        for the gate to clear first, then, with `inside`, at every pause point of the block
        while the gate is held; the call's waits together at most `yield_s` seconds. Yields what
        was waited, before the call and inside it (nothing unless it yields)."""
        if self.yield_s is None:
            yield Paused()
            return
        left = self.yield_s

        def pause() -> float:
            nonlocal left
            waited = self.gate.wait_until_clear(left) if left > 0 else 0.0
            left -= waited
            return waited

        before = pause()
        waited = Paused(points=int(before > 0), seconds=before)
        if not self.inside:
            yield waited
            return
        with pausing(pause, waited):
            yield waited

    def interactive_seen_at(self) -> float | None:
        """For a yielding serving, when an interactive request last held the gate
        (:meth:`DeviceGate.last_held_at`: its lanes bound bulk calls for
        ``bulk_max_batch_hold_s`` after it, as after an interactive arrival of their own); None
        otherwise, or when none has."""
        return None if self.yield_s is None else self.gate.last_held_at()
