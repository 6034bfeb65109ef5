"""The engine thread's CPU priority (``engine_priority``, scheduling/engine_thread.py), without
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
from dialscore_server.scheduling.engine_thread import EngineThread, lower_thread_priority
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
