"""A batch job is bulk work: each dialogue model is scored with its bulk pool's serving options
where the config has a pool, every request asks for the bulk lane, and a model whose options
yield (``yield_to_interactive_s``) computes only while no interactive request holds its device's
gate, as the pool's replicas do. Time is the test's: the job's clock and sleep at the gate are
driven here."""

from __future__ import annotations

import sys

import pytest

from dialscore_server.batch.lines import Request
from dialscore_server.batch.models import JobModels
from dialscore_server.batch.scorer import BatchScorer
from dialscore_server.gateway.args import AppArgs
from dialscore_server.scheduling.device_gate import DeviceGate
from driven_time import DrivenTime
from fake_api import FakeNLLEngine

#: The gate WitnessNLLEngine looks at when it computes, and what it saw (set by the test).
WITNESS: dict[str, object] = {"gate": None, "seen": []}


class WitnessNLLEngine(FakeNLLEngine):
    """The fake NLL engine, recording at each engine call whether ``WITNESS["gate"]`` was clear."""

    def score_encoded(self, encoded, guard=None):
        WITNESS["seen"].append(WITNESS["gate"].is_clear())
        return super().score_encoded(encoded, guard)


def pooled_args(pool: dict) -> dict:
    return {"models": [
        {"name": "dialogpt-medium", "serve_as": "pooled",
         "serving": {"engine": "test_batch_bulk:WitnessNLLEngine"},
         "bulk_pool": {"engine": "test_batch_bulk:WitnessNLLEngine", **pool}},
        {"name": "dialogpt-medium", "serve_as": "plain",
         "serving": {"engine": "fake_api:FakeNLLEngine", "bulk_max_batch": 7}}]}


def test_a_job_scores_a_pooled_model_with_its_pools_options():
    app = AppArgs.model_validate(pooled_args({"yield_to_interactive_s": 5, "bulk_max_batch": 64}))
    options = {cfg.name: opts for cfg, opts in app.batch_model_configs()}
    assert options["pooled"].yield_to_interactive_s == 5
    assert options["pooled"].bulk_max_batch == 64
    assert options["plain"].yield_to_interactive_s is None and options["plain"].bulk_max_batch == 7


@pytest.mark.skipif(sys.platform != "linux", reason="device gates need Linux's open file "
                    "description locks")
def test_a_yielding_job_computes_only_once_the_interactive_request_ends(tmp_path):
    """A Serve replica's interactive request holds the node's CPU gate; the job's line waits at
    the gate (the driven clock never reaches the 500 s bound) and is computed, in the bulk lane,
    only after the test lets go on the job's second look."""
    holder = DeviceGate("cpu", str(tmp_path))
    held = holder.interactive()
    held.__enter__()
    time = DrivenTime(on_sleep=lambda n: held.__exit__(None, None, None) if n == 2 else None)
    WITNESS.update(gate=DeviceGate("cpu", str(tmp_path)), seen=[])
    app = AppArgs.model_validate(pooled_args({"yield_to_interactive_s": 500}))
    models = JobModels(nll=app.batch_model_configs())
    scorer = BatchScorer(models, gate_of=lambda device: DeviceGate(
        "cpu", str(tmp_path), clock=time.clock, sleep=time.sleep))
    body = {"model": "pooled", "items": [{"context": ["hi there"], "target": "hello you"}]}
    [line] = scorer.score([Request(1, "a", "POST", "/v1/nll", body)])
    assert line["response"]["status_code"] == 200, line
    assert WITNESS["seen"] == [True] and time.sleeps == 2
    lanes = scorer.directory.nll("pooled").chunks.runner.counts.work
    assert lanes["bulk"] > 0 and lanes["interactive"] == 0
    assert scorer.directory.nll("plain").chunks.gate is None   # a job holds no gate
