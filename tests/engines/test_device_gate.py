"""The device gate: interactive engine calls hold it shared while they run; a yielding engine
(a bulk pool's ``yield_to_interactive_s``) starts a call only once it is clear or after its bound.
Time is the test's: the yielding side's clock and sleep are driven here, never waited on."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import subprocess
import sys
from time import monotonic

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="device gates need Linux's "
                                "open file description locks")

from dialscore_server.contract.options import ServingOptions
from dialscore_server.contradiction.engine.pairing import DetectionJob
from dialscore_server.contradiction.serving import ContradictionServing
from dialscore_server.nll.serving import NLLServing
from dialscore_server.scheduling.device_gate import (
    POLL_S, DeviceGate, GatedCalls, _lock_request, device_key,
)
from dialscore_server.scheduling.serving import gated_calls
from driven_time import DrivenTime
from fake_api import FakeNLLEngine
from test_fair_chunks import GatedDetector, dialogue
from test_nll_chunks import CARD


def test_an_interactive_call_closes_the_gate_to_others_until_it_ends(tmp_path):
    holder, other = DeviceGate("cpu", str(tmp_path)), DeviceGate("cpu", str(tmp_path))
    assert other.is_clear()
    with holder.interactive():
        assert not other.is_clear()
    assert other.is_clear()


def test_interactive_calls_never_wait_for_one_another(tmp_path):
    first, second = DeviceGate("cpu", str(tmp_path)), DeviceGate("cpu", str(tmp_path))
    with first.interactive():
        fd = os.open(second.path, os.O_RDWR)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _lock_request(fcntl.F_RDLCK))  # raises if excluded
        finally:
            os.close(fd)


def test_gates_of_different_devices_are_independent(tmp_path):
    cpu, gpu = DeviceGate("cpu", str(tmp_path)), DeviceGate("cuda-0-0", str(tmp_path))
    with cpu.interactive():
        assert gpu.is_clear()


def test_a_yielding_engine_waits_until_the_interactive_call_ends(tmp_path):
    holder = DeviceGate("cpu", str(tmp_path))
    held = contextlib.ExitStack()
    held.enter_context(holder.interactive())
    time = DrivenTime(on_sleep=lambda n: held.close() if n == 3 else None)
    waiter = DeviceGate("cpu", str(tmp_path), clock=time.clock, sleep=time.sleep)
    waited = waiter.wait_until_clear(max_wait_s=10.0)
    assert time.sleeps == 3
    assert waited == pytest.approx(3 * POLL_S)
    assert waiter.is_clear()


def test_a_yielding_engine_goes_ahead_after_its_bound(tmp_path):
    holder = DeviceGate("cpu", str(tmp_path))
    time = DrivenTime()
    waiter = DeviceGate("cpu", str(tmp_path), clock=time.clock, sleep=time.sleep)
    with holder.interactive():
        waited = waiter.wait_until_clear(max_wait_s=10 * POLL_S)
        assert not waiter.is_clear()  # still held: the bulk call runs anyway
    assert waited == pytest.approx(10 * POLL_S)
    assert time.sleeps == 10


def test_a_clear_gate_costs_no_wait(tmp_path):
    time = DrivenTime()
    waiter = DeviceGate("cpu", str(tmp_path), clock=time.clock, sleep=time.sleep)
    assert waiter.wait_until_clear(max_wait_s=1.0) == 0.0
    assert time.sleeps == 0


def test_a_holder_that_dies_releases_the_gate(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from dialscore_server.scheduling.device_gate import DeviceGate\n"
         f"gate = DeviceGate('cpu', {str(tmp_path)!r})\n"
         "with gate.interactive():\n"
         "    print('held', flush=True)\n"
         "    sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline().strip() == "held"
        gate = DeviceGate("cpu", str(tmp_path))
        assert not gate.is_clear()
        holder.kill()
        holder.wait()
        assert gate.is_clear()
    finally:
        holder.kill()


def test_device_keys_name_the_cores_once_and_each_visible_gpu_apart(monkeypatch):
    assert device_key("cpu") == device_key(None) == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    three = device_key("cuda:0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert device_key("cuda") == device_key("cuda:0") != three
    assert device_key("cuda:1") != device_key("cuda:0")
    assert all(c.isalnum() or c in "-_." for c in three)


class GateWitness(GatedDetector):
    """A detector whose classifier records, at each call, whether `witness` saw the device's
    gate clear."""

    def __init__(self, witness: DeviceGate):
        self.witness, self.seen = witness, []
        super().__init__()

    def _probs(self, pairs):
        self.seen.append(self.witness.is_clear())
        return super()._probs(pairs)


def test_a_replica_holds_the_gate_only_while_it_computes_interactive_chunks(tmp_path):
    engine = GateWitness(DeviceGate("cpu", str(tmp_path)))
    serving = ContradictionServing.from_options(
        engine, ServingOptions(), "fake", gate=DeviceGate("cpu", str(tmp_path)))
    job = DetectionJob([dialogue(3)])

    async def both():
        await serving.detect(job, "interactive")
        await serving.detect(job, "bulk")

    asyncio.run(both())
    assert engine.seen == [False, True]


def test_a_yielding_replica_computes_only_once_the_interactive_call_ends(tmp_path):
    holder = DeviceGate("cpu", str(tmp_path))
    held = contextlib.ExitStack()
    held.enter_context(holder.interactive())
    time = DrivenTime(on_sleep=lambda n: held.close() if n == 2 else None)
    engine = GateWitness(DeviceGate("cpu", str(tmp_path)))
    serving = ContradictionServing.from_options(
        engine, ServingOptions(yield_to_interactive_s=60), "fake",
        gate=DeviceGate("cpu", str(tmp_path), clock=time.clock, sleep=time.sleep))
    asyncio.run(serving.detect(DetectionJob([dialogue(3)]), "bulk"))
    assert engine.seen == [True] and time.sleeps == 2


def test_options_make_no_gate_without_a_device_gate_and_yield_only_when_set(tmp_path):
    gate = DeviceGate("cpu", str(tmp_path))
    assert gated_calls(ServingOptions(yield_to_interactive_s=1), None) is None
    assert gated_calls(ServingOptions(), gate).yield_s is None
    calls = gated_calls(ServingOptions(yield_to_interactive_s=0.5), gate)
    assert isinstance(calls, GatedCalls) and calls.yield_s == 0.5
    with pytest.raises(ValueError, match="yield_to_interactive_s"):
        ServingOptions(yield_to_interactive_s=0)


def test_a_gate_whose_file_cannot_be_opened_is_open_and_says_so(tmp_path, caplog):
    gate = DeviceGate("cpu", str(tmp_path / "missing"))
    with gate.interactive():
        assert gate.is_clear()
    assert gate.wait_until_clear(max_wait_s=1.0) == 0.0
    warnings = [r for r in caplog.records if "cannot be opened" in r.getMessage()]
    assert len(warnings) == 1 and str(tmp_path / "missing") in warnings[0].getMessage()


def test_an_interactive_request_holds_the_gate_while_it_waits_for_the_engine(tmp_path):
    """A bulk call is at work (the engine holds it until the test releases it); an interactive
    request that arrives meanwhile closes the gate while it waits in the replica's queue, before
    any engine call of its own, and the gate clears once it is answered."""
    witness = DeviceGate("cpu", str(tmp_path))
    engine = GatedDetector(gated=True)
    serving = ContradictionServing.from_options(
        engine, ServingOptions(), "fake", gate=DeviceGate("cpu", str(tmp_path)))
    job = DetectionJob([dialogue(3)])

    async def scenario():
        bulk = asyncio.create_task(serving.detect(job, "bulk"))
        for _ in range(10_000):
            if engine.calls:
                break
            await asyncio.sleep(0.001)
        assert engine.calls == [3] and witness.is_clear()   # a bulk call holds nothing
        interactive = asyncio.create_task(serving.detect(job, "interactive"))
        for _ in range(10_000):
            if not witness.is_clear():
                break
            await asyncio.sleep(0.001)
        closed_while_waiting = not witness.is_clear() and engine.calls == [3]
        engine.release.set()
        await asyncio.gather(bulk, interactive)
        return closed_while_waiting

    assert asyncio.run(scenario())
    assert engine.calls == [3, 3] and witness.is_clear()


def test_a_request_served_as_bulk_for_its_cost_leaves_the_gate_clear(tmp_path):
    witness = DeviceGate("cpu", str(tmp_path))
    engine = GateWitness(witness)
    serving = ContradictionServing.from_options(
        engine, ServingOptions(interactive_max_cost=1), "fake",
        gate=DeviceGate("cpu", str(tmp_path)))
    reply = asyncio.run(serving.detect(DetectionJob([dialogue(3)]), "interactive"))
    assert reply.lane == "bulk" and engine.seen == [True] and witness.is_clear()


def test_overlapping_holds_of_one_gate_release_it_with_the_last(tmp_path):
    holder, other = DeviceGate("cpu", str(tmp_path)), DeviceGate("cpu", str(tmp_path))
    first = contextlib.ExitStack()
    first.enter_context(holder.interactive())
    with holder.interactive():
        first.close()
        assert not other.is_clear()
    assert other.is_clear()


def test_the_last_holder_to_leave_stamps_when_interactive_work_was_last_about(tmp_path):
    """Another process's gate (another open file) reads None before any holder, now while one
    holds the gate, and the holder's clock at the moment the last holder left afterwards."""
    held_at, seen_at = DrivenTime(), DrivenTime()
    holder = DeviceGate("cpu", str(tmp_path), clock=held_at.clock)
    other = DeviceGate("cpu", str(tmp_path), clock=seen_at.clock)
    assert other.last_held_at() is None
    seen_at.now = 5.0
    first = contextlib.ExitStack()
    first.enter_context(holder.interactive())
    with holder.interactive():
        held_at.now = 3.0
        first.close()
        assert other.last_held_at() == 5.0  # held: now
        held_at.now = 4.0
    seen_at.now = 9.0
    assert other.last_held_at() == 4.0 and other.is_clear()


def test_only_a_yielding_serving_is_told_when_interactive_work_was_about(tmp_path):
    gate = DeviceGate("cpu", str(tmp_path))
    with gate.interactive():
        pass
    assert GatedCalls(gate).interactive_seen_at() is None
    assert GatedCalls(gate, yield_s=0.25).interactive_seen_at() is not None


def test_a_yielding_nll_replica_bounds_its_bulk_calls_only_after_interactive_work_on_its_device(
        tmp_path):
    """The serving options of a bulk pool reach its lanes: a yielding NLL replica's bulk calls
    are held to bulk_max_batch while an interactive request holds its device's gate (in another
    replica) and within bulk_max_batch_hold_s after it left, and merge the whole budget before
    any and after the hold. The hold (an hour) is longer than any test run, and the gate's stamp
    is set by the holder's clock, so no outcome depends on how fast the machine is."""
    left_at = [monotonic() - 7200.0]  # two hours ago: beyond the hold
    holder = DeviceGate("cpu", str(tmp_path), clock=lambda: left_at[0])
    options = ServingOptions(yield_to_interactive_s=0.25, bulk_max_batch=64,
                             bulk_max_batch_hold_s=3600.0)
    serving = NLLServing.from_options(FakeNLLEngine(CARD), options, "fake",
                                      gate=DeviceGate("cpu", str(tmp_path)))
    queue = serving.chunks.runner
    assert not queue.bulk_bounded()  # no interactive request yet
    with holder.interactive():
        assert queue.bulk_bounded()
    assert not queue.bulk_bounded()  # it left two hours ago
    left_at[0] = monotonic()
    with holder.interactive():
        pass
    assert queue.bulk_bounded()  # it left just now
    plain = NLLServing.from_options(FakeNLLEngine(CARD), options.model_copy(
        update={"yield_to_interactive_s": None}), "fake", gate=DeviceGate("cpu", str(tmp_path)))
    assert not plain.chunks.runner.bulk_bounded()  # only its own arrivals count
