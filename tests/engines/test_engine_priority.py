"""The engine thread's CPU priority (``engine_priority``, scheduling/cpu_priority.py), without
Ray: the thread lowers its own priority before its first call, the threads it starts later (as
PyTorch's OpenMP team) inherit it, and the thread that built the serving keeps its own."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from dialscore_server.contract.options import ServingOptions
from dialscore_server.contradiction.serving import ContradictionServing
from dialscore_server.scheduling.cpu_priority import lower_thread_priority
from dialscore_server.scheduling.engine_thread import EngineThread
from test_fair_chunks import GatedDetector

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="thread priorities are Linux's")


def priority() -> tuple[int, int]:
    """(scheduling policy, nice value) of the calling thread."""
    tid = threading.get_native_id()
    return os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid)


def on_a_thread(fn):
    """`fn()` on a new thread; its result."""
    out: list = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


@pytest.mark.parametrize("level,policy,nice", [
    ("low", os.SCHED_OTHER, 19), ("idle", os.SCHED_IDLE, None), ("normal", os.SCHED_OTHER, None)])
def test_a_thread_lowers_only_itself_and_what_it_starts_afterwards(level, policy, nice):
    mine = priority()

    def lowered_then_child():
        lower_thread_priority(level)
        return priority(), on_a_thread(priority)

    own, child = on_a_thread(lowered_then_child)
    expected = (policy, mine[1] if nice is None else nice)
    assert own == expected
    assert child == expected  # PyTorch's OpenMP workers are started the same way
    assert priority() == mine


#: In a process of its own (it lowers the whole process): a thread started before, the main
#: thread and a thread started after lower_process_priority; their (policy, nice) and the count.
WHOLE_PROCESS = """
import json, os, threading, sys
from dialscore_server.scheduling.cpu_priority import lower_process_priority

def priority():
    tid = threading.get_native_id()
    return os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid)

go, seen = threading.Event(), {}
def before():
    go.wait()
    seen["before"] = priority()
early = threading.Thread(target=before)
early.start()
count = lower_process_priority(sys.argv[1], "ingress_priority")
go.set()
early.join()
late = threading.Thread(target=lambda: seen.update(after=priority()))
late.start()
late.join()
print(json.dumps({"count": count, "main": priority(), **seen,
                  "threads": len(os.listdir("/proc/self/task"))}))
"""


@pytest.mark.parametrize("level,policy,nice", [("low", os.SCHED_OTHER, 19),
                                               ("idle", os.SCHED_IDLE, None)])
def test_a_process_lowers_every_thread_it_has_and_starts(level, policy, nice):
    import json
    import subprocess

    out = subprocess.run([sys.executable, "-c", WHOLE_PROCESS, level], capture_output=True,
                         text=True, check=True, timeout=120)
    got = json.loads(out.stdout)
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    expected = [policy, mine if nice is None else nice]
    assert got["main"] == got["before"] == got["after"] == expected
    assert got["count"] >= 2  # the main thread and the one started before, at least


@pytest.mark.parametrize("level,expected", [("idle", os.SCHED_IDLE), ("normal", os.SCHED_OTHER)])
def test_the_engine_thread_runs_every_call_at_its_priority(level, expected):
    thread = EngineThread(lambda batch: priority(), priority=level)

    async def calls():
        return [await thread.call([]), await thread.submit(priority)]

    got = asyncio.run(calls())
    assert [policy for policy, _ in got] == [expected, expected]
    assert priority()[0] == os.SCHED_OTHER


def test_a_refused_priority_is_logged_and_the_engine_still_serves(monkeypatch, caplog):
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    thread = EngineThread(lambda batch: priority(), priority="idle")
    with caplog.at_level("WARNING", logger="dialscore.serve"):
        got = asyncio.run(thread.call([]))
    assert got == priority()
    assert "engine_priority 'idle' not applied" in caplog.text


def test_a_serving_from_options_runs_its_engine_at_the_options_priority():
    serving = ContradictionServing.from_options(
        GatedDetector(), ServingOptions(engine_priority="low"), "fake")
    seen: list[tuple[int, int]] = []
    asyncio.run(serving.chunks.check_health(lambda: seen.append(priority())))  # on the engine thread
    assert seen == [(os.SCHED_OTHER, 19)]
    assert priority()[1] < 19
