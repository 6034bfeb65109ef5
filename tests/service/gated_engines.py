"""Fake engines whose every engine call waits at a gate the test opens, served by a real Serve app
(``serving: {engine: "gated_engines:GatedNLLEngine"}``): the test decides when each engine call
runs, so what a replica computes before a deadline or a disconnect never depends on how fast the
machine is. The start-gated variants (``StartGated*``) also wait at the gate before they are
built in a replica: a replica that replaces a killed one stays starting, and accepts nothing,
until the test lets it start.

The gate is a named Ray actor (tests/engine_gate.py: :func:`open_gate` in the test, :func:`gate`
in the replica); the replicas import this module because the session fixture puts ``tests/`` and
``tests/service/`` on their PYTHONPATH (the cluster fixture does the same on every node).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import ray

from engine_gate import GATE_NAME, GATE_NAMESPACE, Gate, caller, gate, open_gate  # noqa: F401
from fake_api import FakeDetector, FakeNLLEngine

#: The models of a gated app (:func:`gated_args`): a dialogue model and a classifier.
GPT = "fake-gpt"
NLI = "fake-nli"


#: The gate handles this process looked up as its engines were built, held for its life.
_FOUND: list[Any] = []


def find_gate() -> None:
    """Look the gate up and call it once, where one is open, as an engine is built, and hold the
    handle: the engine calls then reach the gate without the GCS (tests/cluster/test_gcs_loss.py
    takes the GCS away before the first engine call, which would otherwise wait for it)."""
    try:
        found = gate()
    except ValueError:
        return  # no gate yet: the first engine call looks it up
    try:
        ray.get(found.state.remote())
    except ray.exceptions.RayActorError:
        return  # a gate being replaced: the first engine call looks the new one up
    _FOUND.append(found)


class GatedNLLEngine(FakeNLLEngine):
    """The fake NLL engine; each engine call first waits at the gate."""

    @classmethod
    def from_options(cls, config, options):
        find_gate()
        return super().from_options(config, options)

    def score_encoded(self, encoded: Sequence[Any], guard=None):
        ray.get(gate().enter.remote([(e.item or {}).get("target", "") for e in encoded], caller()))
        return super().score_encoded(encoded, guard)


def replica_pid(model: str, item: dict[str, Any]) -> float:
    """A fake NLL: the process id of the replica computing it."""
    return float(os.getpid())


class PidGatedNLLEngine(GatedNLLEngine):
    """:class:`GatedNLLEngine` whose every NLL is the process id of the replica that computed
    it: each response says which replica served it."""

    def __init__(self, card: Any, scorer: Any = replica_pid):
        super().__init__(card, scorer)


class GatedDetector(FakeDetector):
    """The fake detector (the real pairing over a fake classifier); each engine call first waits
    at the gate."""

    @classmethod
    def from_options(cls, config, options):
        find_gate()
        return super().from_options(config, options)

    def detect_many(self, jobs, guard=None):
        ray.get(gate().enter.remote([d[-1].text for j in jobs for d in j.dialogues], caller()))
        return super().detect_many(jobs, guard)


class StartGatedNLLEngine(GatedNLLEngine):
    """:class:`GatedNLLEngine` whose construction in a replica waits for a start permit."""

    @classmethod
    def from_options(cls, config, options):
        ray.get(gate().start.remote())
        return super().from_options(config, options)


class StartGatedDetector(GatedDetector):
    """:class:`GatedDetector` whose construction in a replica waits for a start permit."""

    @classmethod
    def from_options(cls, config, options):
        ray.get(gate().start.remote())
        return super().from_options(config, options)


async def gated_deadline(seconds: float) -> None:
    """A deadline timer (AppArgs ``deadline_timer: "gated_engines:gated_deadline"``): a request's
    deadline passes when the test calls the gate's ``pass_deadlines``, whatever `seconds` is. The
    gate must be open before the app is deployed (its readiness checks are timed too); a request
    answered first cancels its wait at the gate."""
    waiting = gate().deadline.remote()
    try:
        await waiting
    except asyncio.CancelledError:
        ray.cancel(waiting)
        raise


def gated_args(stand_ins: Any, **extra: Any):
    """AppArgs of an app serving :data:`GPT` and :data:`NLI` on the gated engines (`extra`:
    further AppArgs fields)."""
    from serve_apps import ONE_THREAD, app_args

    return app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "serve_as": GPT,
         "serving": {**ONE_THREAD, "engine": "gated_engines:GatedNLLEngine"}}],
        classifiers=[{"name": "roberta-large-mnli", "serve_as": NLI,
                      "serving": {**ONE_THREAD, "engine": "gated_engines:GatedDetector"}}],
        **extra)


def fake_tokens(body: dict) -> int:
    """The tokens the fake NLL engine admits for a /v1/nll body (its work in the ledger)."""
    from dialscore_server.nll.protocol import NLLItemIn
    from fake_api import FAKE_CARDS

    engine = FakeNLLEngine(FAKE_CARDS[0])
    return sum(engine.encode(NLLItemIn.model_validate(i).to_item()).cost for i in body["items"])
