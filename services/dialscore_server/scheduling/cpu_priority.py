"""Lowering the CPU priority of a thread (a replica's engine thread, ``engine_priority``) or of a
whole process (the bulk ingress's gateway, ``ingress_priority``), on Linux.

A priority is only ever lowered, which needs no privilege. Where the system refuses all the same
(a seccomp profile), the thread keeps its priority and the refusal is logged as a warning naming
the setting, so that what it runs still serves. Elsewhere than Linux a warning, and nothing else.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from dialscore_server.contract.options import CpuPriority

logger = logging.getLogger("dialscore.serve")


def lower_thread_priority(priority: CpuPriority, setting: str = "engine_priority") -> None:
    """Lower the calling thread's CPU priority to `priority`. Only the calling thread changes,
    and the threads it starts afterwards inherit it (PyTorch's OpenMP team for an engine
    thread's CPU kernels, started by its first parallel kernel). `setting` names the option in
    the warnings. ``normal`` changes nothing."""
    if _applies(priority, setting):
        _lower(threading.get_native_id(), priority, setting)


def lower_process_priority(priority: CpuPriority, setting: str) -> int:
    """Lower every thread of this process to `priority` (its threads now: those it starts later
    inherit the priority of the thread that starts them, so every thread does). The number of
    threads lowered (0 for ``normal``, off Linux, or where every one was refused); a thread that
    ends while this runs is skipped."""
    if not _applies(priority, setting):
        return 0
    lowered = 0
    for name in os.listdir("/proc/self/task"):
        lowered += _lower(int(name), priority, setting)
    return lowered


def _applies(priority: CpuPriority, setting: str) -> bool:
    if priority == "normal":
        return False
    if sys.platform != "linux":
        logger.warning("%s %r is ignored: it needs Linux (this is %s)", setting, priority,
                       sys.platform)
        return False
    return True


def _lower(tid: int, priority: CpuPriority, setting: str) -> bool:
    """Lower thread `tid`; whether it was."""
    try:
        if priority == "idle":
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        else:
            os.setpriority(os.PRIO_PROCESS, tid, 19)
    except ProcessLookupError:
        return False  # the thread ended meanwhile
    except OSError as exc:
        logger.warning("%s %r not applied, the thread keeps its priority: %s", setting,
                       priority, exc)
        return False
    return True
