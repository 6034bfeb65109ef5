"""The replica's health check (Serve's ``check_health``) against its engine thread, without Ray:
the engine's probe (its tiny real forward pass) runs on the engine thread, never beside an engine
call, and not at all while a call that is at work shows the engine alive; after a failed call the
probe runs, behind the calls before it, and its error fails the check; a call at work that shows
no progress (begins no pass or layer: reaches no pause point) for longer than the serving's
`stall_s` fails it too. The engine is a gated fake the test releases, and the
stall bound is timed by a clock the test advances: nothing here depends on how fast the machine
is."""

from __future__ import annotations

import asyncio
import queue
import threading

import pytest

from dialscore_server.contradiction.engine.pairing import DetectionJob, Turn
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contradiction.serving import ContradictionServing
from dialscore_server.scheduling.engine_thread import EngineThread
from dialscore_server.scheduling.pause_points import pause_point
from dialscore_server.scheduling.serving import EngineStalled
from merging_runner import HANG_S, until
from test_fair_chunks import GatedDetector


class DeviceLost(RuntimeError):
    """What the fake engine raises while :attr:`ProbedDetector.broken` is set."""


class ProbedDetector(GatedDetector):
    """:class:`GatedDetector` that also appends ``(what, thread name)`` to :attr:`log` for every
    classifier call and every health probe; both raise DeviceLost while :attr:`broken` is set."""

    def __init__(self, gated: bool = False):
        super().__init__(gated)
        self.log: list[tuple[str, str]] = []
        self.broken = False

    def _probs(self, pairs):
        self.log.append(("call", threading.current_thread().name))
        probs = super()._probs(pairs)
        if self.broken:
            raise DeviceLost("the device is gone")
        return probs

    def check_health(self) -> None:
        self.log.append(("probe", threading.current_thread().name))
        if self.broken:
            raise DeviceLost("the device is gone")


def job() -> DetectionJob:
    return DetectionJob([[Turn(1, "I like fish."), Turn(1, "I never eat fish.")]])


def test_the_probe_runs_on_the_engine_thread_and_never_beside_an_engine_call():
    engine = ProbedDetector(gated=True)
    serving = ContradictionServing(engine, max_batch_pairs=64)

    async def scenario() -> None:
        request = asyncio.create_task(serving.detect(job()))
        await until(lambda: len(engine.calls) == 1, "the engine call starts")
        # The call at work is the check: no probe beside it, and no wait for the call (the
        # limit only guards against a hang).
        await asyncio.wait_for(serving.check_health(), HANG_S)
        assert [what for what, _ in engine.log] == ["call"]
        engine.release.set()
        assert (await request).error is None
        await serving.check_health()  # idle: the probe runs, on the engine thread

    asyncio.run(scenario())
    (_, call_thread), (what, probe_thread) = engine.log
    assert what == "probe"
    assert probe_thread == call_thread and call_thread.startswith("dialscore-engine")


def test_after_a_failed_call_the_probe_runs_behind_the_calls_before_it_and_its_error_fails_the_check():
    engine = ProbedDetector()
    serving = ContradictionServing(engine, max_batch_pairs=64)

    async def scenario() -> None:
        engine.broken = True
        with pytest.raises(DeviceLost):
            await serving.detect(job())
        with pytest.raises(DeviceLost):
            await serving.check_health()  # idle after a failure: the probe's error fails it
        engine.broken = False
        engine.release.clear()
        request = asyncio.create_task(serving.detect(job()))
        await until(lambda: len(engine.calls) == 2, "the second engine call starts")
        # The engine is busy, but the last call to finish failed: the probe must run, and it
        # waits behind the call at work (one engine thread), so it cannot have run yet.
        check = asyncio.create_task(serving.check_health())
        await asyncio.sleep(0)
        assert [what for what, _ in engine.log] == ["call", "probe", "call"]
        engine.release.set()
        await check
        assert (await request).error is None

    asyncio.run(scenario())
    assert [what for what, _ in engine.log] == ["call", "probe", "call", "probe"]
    assert len({thread for _, thread in engine.log}) == 1


def test_the_deployment_checks_health_through_its_serving_on_the_engine_thread():
    """Serve calls the deployment's ``check_health``: it awaits the serving's, so the probe runs
    on the engine thread, not on the thread Serve would run a sync method on."""
    from dialscore_server.contract.deployment import ModelDeployment

    engine = ProbedDetector()
    deployment = object.__new__(ModelDeployment)  # the base, without building a real engine
    deployment.serving = ContradictionServing(engine, max_batch_pairs=64)
    asyncio.run(deployment.check_health())
    assert [what for what, _ in engine.log] == ["probe"]
    assert engine.log[0][1].startswith("dialscore-engine")


class Clock:
    """A monotonic clock the test advances (:attr:`now`, seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_engine_call_at_work_beyond_stall_s_fails_the_check_and_a_finished_one_clears_it():
    engine = ProbedDetector(gated=True)
    clock = Clock()
    serving = ContradictionServing(engine, max_batch_pairs=64, stall_s=600, clock=clock)

    async def scenario() -> None:
        request = asyncio.create_task(serving.detect(job()))
        await until(lambda: len(engine.calls) == 1, "the engine call starts")
        clock.now += 600  # at the bound, not beyond it: the call at work is still the check
        await asyncio.wait_for(serving.check_health(), HANG_S)
        clock.now += 1
        with pytest.raises(EngineStalled, match="no progress for 601 s \\(at work for 601 s\\), "
                           "beyond engine_stall_s \\(600 s\\)"):
            await asyncio.wait_for(serving.check_health(), HANG_S)
        assert [what for what, _ in engine.log] == ["call"]  # no probe queued behind the hang
        engine.release.set()
        assert (await request).error is None
        clock.now += 10_000  # idle for long after: the probe is the check again, and passes
        await serving.check_health()

    asyncio.run(scenario())
    assert [what for what, _ in engine.log] == ["call", "probe"]


class SteppingDetector(ProbedDetector):
    """A detector whose engine call reaches a pause point (as a real model's layers do) each time
    the test sends ``"step"`` to :attr:`commands`, and returns when it sends ``"end"``."""

    def __init__(self) -> None:
        super().__init__()
        self.commands: queue.Queue[str] = queue.Queue()
        self.reached = 0

    def _probs(self, pairs):
        self.calls.append(len(pairs))
        self.log.append(("call", threading.current_thread().name))
        while (command := self.commands.get(timeout=60)) == "step":
            pause_point()
            self.reached += 1
        assert command == "end"
        return [0.1] * len(pairs)


def test_a_call_that_keeps_reaching_pause_points_passes_the_check_however_long_it_runs():
    """engine_stall_s bounds the time without progress, not the call: a call that reaches a pause
    point every 500 s passes at 2,500 s at work; once it stops, it fails 601 s after its last."""
    engine = SteppingDetector()
    clock = Clock()
    serving = ContradictionServing(engine, max_batch_pairs=64, stall_s=600, clock=clock)

    async def scenario() -> None:
        request = asyncio.create_task(serving.detect(job()))
        await until(lambda: len(engine.calls) == 1, "the engine call starts")
        for step in range(1, 6):
            clock.now += 500
            engine.commands.put("step")
            await until(lambda: engine.reached == step, "the call reaches a pause point")
            await asyncio.wait_for(serving.check_health(), HANG_S)
        clock.now += 600  # at the bound since the last pause point: still progressing
        await asyncio.wait_for(serving.check_health(), HANG_S)
        clock.now += 1
        with pytest.raises(EngineStalled, match="no progress for 601 s \\(at work for 3101 s\\)"):
            await asyncio.wait_for(serving.check_health(), HANG_S)
        engine.commands.put("end")
        assert (await request).error is None

    asyncio.run(scenario())
    assert [what for what, _ in engine.log] == ["call"]


def test_without_stall_s_a_call_at_work_always_passes_the_check():
    engine = ProbedDetector(gated=True)
    clock = Clock()
    serving = ContradictionServing(engine, max_batch_pairs=64, stall_s=None, clock=clock)

    async def scenario() -> None:
        request = asyncio.create_task(serving.detect(job()))
        await until(lambda: len(engine.calls) == 1, "the engine call starts")
        clock.now += 10**9
        await asyncio.wait_for(serving.check_health(), HANG_S)
        engine.release.set()
        assert (await request).error is None

    asyncio.run(scenario())
    assert [what for what, _ in engine.log] == ["call"]


def test_at_work_counts_the_running_call_only():
    """A call waiting for the thread behind the one at work is not timed; each call is timed from
    when it begins on the thread."""
    clock = Clock()
    gates = [threading.Event(), threading.Event()]
    began: list[int] = []

    def run(batch):
        began.append(batch[0])
        assert gates[batch[0]].wait(60), "the test never released the call"
        return batch

    thread: EngineThread[int, list[int]] = EngineThread(run, clock)

    async def scenario() -> None:
        assert thread.at_work_s is None
        first = asyncio.create_task(thread.call([0]))
        await until(lambda: began == [0], "the first call begins")
        second = asyncio.create_task(thread.call([1]))
        clock.now += 30
        assert thread.at_work_s == 30 and thread.busy
        gates[0].set()
        await first
        await until(lambda: began == [0, 1], "the second call begins")
        clock.now += 5
        assert thread.at_work_s == 5
        gates[1].set()
        await second
        assert thread.at_work_s is None and not thread.busy

    asyncio.run(scenario())


def test_the_replica_servings_take_engine_stall_s_from_their_options():
    from dialscore_server.nll.serving import NLLServing
    from fake_api import FakeNLLEngine

    assert ServingOptions().engine_stall_s == 600
    detector = ProbedDetector()
    for stall in (5.0, None):
        options = ServingOptions(engine_stall_s=stall)
        classifier = ContradictionServing.from_options(detector, options, "fake-nli")
        nll = NLLServing.from_options(FakeNLLEngine(detector.card()), options, "fake-nll")
        assert classifier.chunks.stall_s == nll.chunks.stall_s == stall
    with pytest.raises(ValueError, match="engine_stall_s"):
        ServingOptions(engine_stall_s=0)


def test_a_pool_may_not_wait_for_interactive_work_as_long_as_the_stall_bound():
    """A call waits up to yield_to_interactive_s without progress, so that wait must stay below
    engine_stall_s; either one off (null) is fine."""
    with pytest.raises(ValueError, match="yield_to_interactive_s \\(600 s\\) must be below "
                                         "engine_stall_s \\(600 s\\)"):
        ServingOptions(yield_to_interactive_s=600)
    assert ServingOptions(yield_to_interactive_s=599).yield_to_interactive_s == 599
    assert ServingOptions(yield_to_interactive_s=10**6, engine_stall_s=None).engine_stall_s is None
