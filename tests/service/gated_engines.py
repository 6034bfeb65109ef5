"""Fake engines whose every engine call waits at a gate the test opens, served by a real Serve app
(``serving: {engine: "gated_engines:GatedNLLEngine"}``): the test decides when each engine call
runs, so what a replica computes before a deadline or a disconnect never depends on how fast the
machine is.

The gate is a named Ray actor (:func:`open_gate` in the test, :func:`gate` in the replica); the
replicas import this module because the session fixture puts ``tests/`` on their PYTHONPATH.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import ray

from fake_api import FakeDetector, FakeNLLEngine

#: The models of a gated app (:func:`gated_args`): a dialogue model and a classifier.
GPT = "fake-gpt"
NLI = "fake-nli"
GATE_NAME = "dialscore-test-gate"
GATE_NAMESPACE = "dialscore-tests"


@ray.remote(num_cpus=0)
class Gate:
    """Engine calls enter one at a time as the test allows: :meth:`enter` waits for a permit,
    :meth:`allow` gives some; :meth:`state` says how many calls wait and how many went through,
    and what each call that went through computed (``calls``: one label per item or dialogue:
    its target, or its last turn)."""

    def __init__(self) -> None:
        self.permits = 0
        self.waiting = 0
        self.calls: list[list[str]] = []
        self.changed = asyncio.Condition()

    async def enter(self, labels: list[str]) -> None:
        async with self.changed:
            self.waiting += 1
            self.changed.notify_all()
            await self.changed.wait_for(lambda: self.permits > 0)
            self.permits -= 1
            self.waiting -= 1
            self.calls.append(labels)
            self.changed.notify_all()

    async def allow(self, n: int = 1) -> None:
        async with self.changed:
            self.permits += n
            self.changed.notify_all()

    async def wait_for(self, waiting: int, passed: int, timeout_s: float) -> dict[str, Any]:
        """The state once at least `waiting` calls wait and `passed` went through (or after
        `timeout_s`, a hang guard)."""
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(
                    lambda: self.waiting >= waiting and len(self.calls) >= passed), timeout_s)
            except TimeoutError:
                pass
            return self.state()

    def state(self) -> dict[str, Any]:
        return {"waiting": self.waiting, "passed": len(self.calls), "calls": list(self.calls)}


def open_gate() -> Any:
    """A new gate for the replicas (the previous one, if any, is killed first)."""
    try:
        ray.kill(ray.get_actor(GATE_NAME, namespace=GATE_NAMESPACE))
    except ValueError:
        pass
    return Gate.options(name=GATE_NAME, namespace=GATE_NAMESPACE).remote()


def gate() -> Any:
    return ray.get_actor(GATE_NAME, namespace=GATE_NAMESPACE)


class GatedNLLEngine(FakeNLLEngine):
    """The fake NLL engine; each engine call first waits at the gate."""

    def score_encoded(self, encoded: Sequence[Any], guard=None):
        ray.get(gate().enter.remote([(e.item or {}).get("target", "") for e in encoded]))
        return super().score_encoded(encoded, guard)


class GatedDetector(FakeDetector):
    """The fake detector (the real pairing over a fake classifier); each engine call first waits
    at the gate."""

    def detect_many(self, jobs, guard=None):
        ray.get(gate().enter.remote([d[-1].text for j in jobs for d in j.dialogues]))
        return super().detect_many(jobs, guard)


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
