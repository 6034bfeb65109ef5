"""A yielding engine call steps aside mid-call (dialscore_server.scheduling.pause_points): between
its forward passes and before each layer of its model, while an interactive request holds its
device's gate, within the call's budget.

The gate is real (a lock file in the test's folder) and its clock is driven by the waiting side
(tests/driven_time.py): the test decides when the interactive request leaves, counted in the
yielding side's looks at the gate, so no check depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import torch

from dialscore_server.checkpoints.loading import load_model
from dialscore_server.checkpoints.standins import reinit_
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.engine.pairing import DetectionJob
from dialscore_server.contradiction.serving import ContradictionServing
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.scheduling import pause_points
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.scheduling.device_gate import POLL_S, DeviceGate, GatedCalls
from dialscore_server.scheduling.pause_points import pause_point, paused_seconds, pausing
from driven_time import DrivenTime
from test_fair_chunks import dialogue

TOL = 1e-5


class Layers(torch.nn.Module):
    """Three layers in a ModuleList, and a head outside it."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def test_every_layer_of_a_module_list_is_a_pause_point_inside_a_pausing_block_only():
    model = Layers()
    assert pause_points.install(model) == 3
    calls: list[int] = []
    model(torch.zeros(1, 4))
    assert calls == []  # outside a block: nothing is called
    with pausing(lambda: calls.append(1) or 0.5) as paused:
        model(torch.zeros(1, 4))
        assert paused_seconds() == 1.5
    assert calls == [1, 1, 1] and (paused.points, paused.seconds) == (3, 1.5)
    assert paused_seconds() == 0.0


def test_every_pause_point_marks_progress_on_a_reporting_thread_paused_or_not():
    """Progress is marked on arrival at every layer, outside a pausing block too, and again after
    a pause that waited; a thread that stopped reporting marks none."""
    model = Layers()
    pause_points.install(model)
    marks: list[str] = []
    pause_points.report_progress(lambda: marks.append("progress"))
    try:
        model(torch.zeros(1, 4))
        assert marks == ["progress"] * 3
        marks.clear()
        with pausing(lambda: marks.append("pause") or (0.5 if len(marks) < 3 else 0.0)):
            model(torch.zeros(1, 4))
        # layer 1 waited (a mark after the pause), layers 2 and 3 did not
        assert marks == ["progress", "pause", "progress", "progress", "pause", "progress",
                         "pause"]
    finally:
        pause_points.report_progress(None)
    marks.clear()
    model(torch.zeros(1, 4))
    assert marks == []


def test_pausing_blocks_do_not_nest():
    with pausing(lambda: 0.0), pytest.raises(RuntimeError, match="nest"):
        with pausing(lambda: 0.0):
            pass


def test_time_paused_in_a_pass_is_not_charged_to_its_items():
    """A pass whose pause points report 1000 s waited charges none of it (the pass's own
    seconds, far below that, less the pause, are clamped at 0)."""
    guard = CallGuard()
    with pausing(lambda: 1000.0):
        with guard.forward([0, 1]):
            pause_point()
    assert guard.seconds.get(0, 0.0) == guard.seconds.get(1, 0.0) == 0.0


def held_gate(tmp_path, leave_after: int | None):
    """An interactive request holding the CPU gate in `tmp_path`, and the yielding side's gate
    whose driven clock moves only as it looks: the request leaves at its `leave_after`-th look
    (None: never)."""
    held = contextlib.ExitStack()
    held.enter_context(DeviceGate("cpu", str(tmp_path)).interactive())
    time = DrivenTime(on_sleep=lambda n: held.close() if n == leave_after else None)
    return held, time, DeviceGate("cpu", str(tmp_path), clock=time.clock, sleep=time.sleep)


def test_a_call_waits_at_its_pause_points_and_all_its_waits_share_one_budget(tmp_path):
    held, time, gate = held_gate(tmp_path, leave_after=None)
    with held, GatedCalls(gate, yield_s=10 * POLL_S).call() as waited:
        assert time.sleeps == 10  # before the call: the whole budget, then it runs anyway
        pause_point()
        pause_point()
    assert time.sleeps == 10  # no budget left for the pause points
    assert waited.seconds == pytest.approx(10 * POLL_S) and waited.points == 1


def test_a_pause_point_waits_while_the_gate_is_held_and_goes_on_when_it_clears(tmp_path):
    leave = contextlib.ExitStack()
    time = DrivenTime(on_sleep=lambda n: leave.close() if n == 4 else None)
    gate = DeviceGate("cpu", str(tmp_path), clock=time.clock, sleep=time.sleep)
    with GatedCalls(gate, yield_s=60).call() as waited:
        assert time.sleeps == 0  # clear at the start: no wait
        leave.enter_context(DeviceGate("cpu", str(tmp_path)).interactive())  # arrives mid-call
        pause_point()
        assert time.sleeps == 4 and gate.is_clear()
        pause_point()
    assert time.sleeps == 4 and waited.points == 1
    assert waited.seconds == pytest.approx(4 * POLL_S)


def test_without_yield_inside_calls_a_call_waits_only_before_it_starts(tmp_path):
    held, time, gate = held_gate(tmp_path, leave_after=2)
    with held, GatedCalls(gate, yield_s=60, inside=False).call() as waited:
        assert time.sleeps == 2
        held.enter_context(DeviceGate("cpu", str(tmp_path)).interactive())
        pause_point()
    assert time.sleeps == 2 and waited.seconds == pytest.approx(2 * POLL_S)


def test_a_serving_that_does_not_yield_has_no_pause_points(tmp_path):
    held, time, gate = held_gate(tmp_path, leave_after=None)
    with held, GatedCalls(gate).call() as waited:
        pause_point()
    assert time.sleeps == 0 and waited.seconds == 0.0


@pytest.fixture()
def gpt2(stand_in_registry):
    lm = load_model(stand_in_registry.get("dialogpt-medium"))
    reinit_(lm.model, 0.3, seed=3)
    return lm


def test_a_real_nll_call_pauses_between_its_layers_and_scores_the_same(gpt2, tmp_path):
    """The interactive request arrives as the call's first forward pass begins (after the
    pause point before the pass) and leaves at the yielding side's third look: every look is
    taken inside the pass, before its first layer runs, and the numbers are those of a call
    that never paused."""
    engine = NLLEngine(gpt2.config, loaded=gpt2, num_threads=1)
    items = [NLLItem(context=("hello there", "how are you"), target=t) for t in ("fine", "ok")]
    want = engine.score(items)

    ran = {"pass": False, "layer 0": False}
    leave = contextlib.ExitStack()

    def pass_begins(*_):
        if not ran["pass"]:
            ran["pass"] = True
            leave.enter_context(DeviceGate("cpu", str(tmp_path)).interactive())

    engine.model.base_model.register_forward_pre_hook(pass_begins)
    # After the engine's own pause point on this layer (hooks run in the order registered).
    engine.model.base_model.h[0].register_forward_pre_hook(
        lambda *_: ran.__setitem__("layer 0", True))
    looks: list[tuple[bool, bool]] = []

    def look(n: int) -> None:
        looks.append((ran["pass"], ran["layer 0"]))
        if n == 3:
            leave.close()

    time = DrivenTime(on_sleep=look)
    gate = DeviceGate("cpu", str(tmp_path), clock=time.clock, sleep=time.sleep)
    with GatedCalls(gate, yield_s=60).call() as waited:
        got = engine.score(items)
    assert looks == [(True, False)] * 3 and waited.points == 1
    for a, b in zip(want, got):
        assert b.token_nlls == pytest.approx(a.token_nlls, abs=TOL)


def test_a_yielding_detector_pauses_mid_call_in_its_serving(stand_in_registry, tmp_path):
    """Through the serving: a bulk detection on a yielding replica starts on a clear gate, meets
    an interactive request at its first pause point, waits until it leaves, and answers as an
    unpaused call does."""
    detector = ContradictionDetector.from_options(
        stand_in_registry.get("roberta-large-mnli"), ServingOptions())
    job = DetectionJob([dialogue(3)])
    plain = ContradictionServing.from_options(detector, ServingOptions(), "plain")
    want = asyncio.run(plain.detect(job, "bulk"))

    leave = contextlib.ExitStack()
    time = DrivenTime(on_sleep=lambda n: leave.close() if n == 2 else None)
    arrive = [True]

    def interactive_arrives(*_):
        if arrive[0]:
            arrive[0] = False
            leave.enter_context(DeviceGate("cpu", str(tmp_path)).interactive())

    detector.classifier.model.register_forward_pre_hook(interactive_arrives)
    serving = ContradictionServing.from_options(
        detector, ServingOptions(yield_to_interactive_s=60), "yielding",
        gate=DeviceGate("cpu", str(tmp_path), clock=time.clock, sleep=time.sleep))
    got = asyncio.run(serving.detect(job, "bulk"))
    assert time.sleeps == 2 and not arrive[0]
    assert [r.probability for r in got.value] == pytest.approx(
        [r.probability for r in want.value], abs=TOL)
