"""The one schedule of a replica's engine calls (``scheduling.serving.replica_schedule``), as both
endpoints build it from a model's serving options: the merge budget, the lane policy with its
interactive cap at the chunk size (cut to the budget), the stall bound, the engine thread's CPU
priority and the device gate. Without Ray and without an engine call."""

from __future__ import annotations

from dialscore_server.contract.options import ServingOptions
from dialscore_server.contradiction.serving import ContradictionServing
from dialscore_server.nll.serving import NLLServing
from dialscore_server.scheduling.device_gate import DeviceGate
from dialscore_server.scheduling.lanes import LaneQueue
from dialscore_server.scheduling.serving import lane_policy, replica_schedule
from fake_api import FakeNLLEngine
from test_fair_chunks import GatedDetector

OPTIONS = ServingOptions(max_batch_tokens=300, chunk_tokens=700, chunk_pairs=50, bulk_every=3,
                         batch_wait_timeout_s=0.02, engine_stall_s=9, engine_priority="low",
                         yield_to_interactive_s=0.5)


def test_the_schedule_is_the_options_with_the_interactive_cap_cut_to_the_budget(tmp_path):
    gate = DeviceGate("cpu", str(tmp_path))
    schedule = replica_schedule(OPTIONS, budget=300, chunk=700, gate=gate)
    assert schedule["lanes"] == lane_policy(OPTIONS, 300)
    assert schedule["lanes"].interactive_max_cost == 300 and schedule["lanes"].bulk_every == 3
    assert schedule["stall_s"] == 9 and schedule["priority"] == "low"
    assert schedule["gate"] is not None and schedule["gate"].yield_s == 0.5
    assert replica_schedule(OPTIONS, budget=300, chunk=700)["gate"] is None
    runner = schedule["runner"](lambda chunks: [], policy=schedule["lanes"], model="m", unit="tokens")
    assert isinstance(runner, LaneQueue)
    assert runner.max_batch_size == 300 and runner.batch_wait_timeout_s == 0.02


def test_both_endpoints_serve_with_that_schedule(tmp_path):
    gate = DeviceGate("cpu", str(tmp_path))
    detector = GatedDetector()
    nll = NLLServing.from_options(FakeNLLEngine(detector.card()), OPTIONS, "fake-nll", gate=gate)
    classifier = ContradictionServing.from_options(detector, OPTIONS, "fake-nli", gate=gate)
    assert nll.max_batch_tokens == 300 and nll.chunk_tokens == 300
    assert classifier.chunk_pairs == 50
    assert nll.chunks.lanes == lane_policy(OPTIONS, 300)
    assert classifier.chunks.lanes == lane_policy(OPTIONS, 50)
    for serving in (nll.chunks, classifier.chunks):
        assert serving.stall_s == 9 and serving.gate is not None and serving.gate.yield_s == 0.5
        assert serving.runner.max_batch_size == 300
