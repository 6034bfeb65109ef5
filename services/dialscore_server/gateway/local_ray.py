"""Starting the embedded default's local Ray on a machine that may be busy.

``ray.init`` gives the raylet it starts a fixed 30 s to register with the GCS it started, then
raises; on a host whose cores are saturated (a CI machine, a laptop running a build) that can
take longer, and ``dialscore serve`` would exit before serving anything. :func:`start_local_ray`
tries again, up to :data:`RAY_START_TRIES` times, after stopping the processes the failed try
left behind. Any other error from ``ray.init`` is raised at once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from dialscore_server import compat

logger = logging.getLogger(__name__)

#: Tries of ``ray.init`` in all (so at most this many times Ray's 30 s registration wait).
RAY_START_TRIES = 3
#: How long the processes a failed try started get to exit on SIGTERM before SIGKILL.
STOP_GRACE_S = 10.0


def start_local_ray(init: Callable[..., Any] | None = None, *, tries: int = RAY_START_TRIES,
                    **options: Any) -> None:
    """Call ``init(**options)`` (default ``ray.init``), again while it fails because Ray's node
    startup timed out (:func:`dialscore_server.compat.ray_start_timed_out`), at most `tries`
    times; the last try's error is raised. Between tries, every process that this process
    gained during the failed try (its GCS, raylet and their helpers) is stopped, so that a retry
    does not compete with them for the cores."""
    import psutil

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
