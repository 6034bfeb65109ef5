"""Starting the embedded default's local Ray on a machine that may be busy.

``ray.init`` gives the raylet it starts a fixed 30 s to register with the GCS it started, then
raises; on a host whose cores are saturated (a CI machine, a laptop running a build) that can
take longer, and ``dialscore serve`` would exit before serving anything. :func:`start_local_ray`
tries again, up to :func:`ray_start_tries` times, after stopping the processes the failed try
left behind. Any other error from ``ray.init`` is raised at once."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from dialscore_server import compat

logger = logging.getLogger(__name__)

#: Tries of ``ray.init`` in all, by default (so at most this many times Ray's 30 s registration
#: wait, and the time each failed try's processes take to stop).
RAY_START_TRIES = 5
#: The environment variable that sets the tries instead: a whole number, at least 1.
RAY_START_TRIES_VARIABLE = "DIALSCORE_RAY_START_TRIES"
#: How long the processes a failed try started get to exit on SIGTERM before SIGKILL.
STOP_GRACE_S = 10.0


def ray_start_tries() -> int:
    """The tries of :func:`start_local_ray`: ``DIALSCORE_RAY_START_TRIES`` where it is set, else
    :data:`RAY_START_TRIES`. A value that is not a whole number of at least 1 raises ValueError
    naming the variable."""
    raw = os.environ.get(RAY_START_TRIES_VARIABLE)
    if raw is None:
        return RAY_START_TRIES
    try:
        tries = int(raw)
    except ValueError:
        tries = 0
    if tries < 1:
        raise ValueError(f"{RAY_START_TRIES_VARIABLE} must be a whole number of at least 1, "
                         f"not {raw!r}")
    return tries


def start_local_ray(init: Callable[..., Any] | None = None, *, tries: int | None = None,
                    **options: Any) -> None:
    """Call ``init(**options)`` (default ``ray.init``), again while it fails because Ray's node
    startup timed out (:func:`dialscore_server.compat.ray_start_timed_out`), at most `tries`
    times (default :func:`ray_start_tries`); the last try's error is raised. Between tries,
    every process that this process gained during the failed try (its GCS, raylet and their
    helpers) is stopped, so that a retry does not compete with them for the cores."""
    import psutil

    if tries is None:
        tries = ray_start_tries()
    if init is None:
        import ray

        init = ray.init
    for attempt in range(1, tries + 1):
        before = {child.pid for child in psutil.Process().children(recursive=True)}
        try:
            init(**options)
            return
        except Exception as exc:
            if attempt == tries or not compat.ray_start_timed_out(exc):
                raise
            logger.warning("local Ray did not start (try %d of %d): %s; stopping what it "
                           "started and trying again", attempt, tries, exc)
            stop_new_children(before)


def stop_new_children(before: set[int], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every descendant of this process whose pid is not in `before`, and SIGKILL those
    still running after `grace_s`."""
    import psutil

    new = [child for child in psutil.Process().children(recursive=True) if child.pid not in before]
    for child in new:
        try:
            child.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(new, timeout=grace_s)
    for child in alive:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
