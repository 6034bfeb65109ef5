"""A gate that fake engines wait at until the test lets them through: every engine call
(:meth:`Gate.enter`) and, for the start-gated engines, every engine start-up in a replica
(:meth:`Gate.start`). The test, not the machine's speed, then decides how much a replica computes
before something happens (a kill, a burst, a deadline) and when a replacement replica may start.

The gate is a named Ray actor: the test opens it with :func:`open_gate`, the engines in the
replicas find it with :func:`gate`. It lives here, apart from the engines that use it
(tests/service/gated_engines.py), so that a driver that only drives the gate (the multi-node
cluster's child process, tests/cluster/cluster_gate.py) imports nothing else of the tests.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import ray

GATE_NAME = "dialscore-test-gate"
GATE_NAMESPACE = "dialscore-tests"

#: Where an engine call or start-up came from: ``{"node_id": ..., "pid": ...}``.
Caller = dict[str, Any]


@ray.remote(num_cpus=0)
class Gate:
    """Engine calls enter one at a time as the test allows: :meth:`enter` waits for a permit,
    :meth:`allow` gives some, :meth:`close` takes back those not used. Start-ups likewise:
    :meth:`start` waits for a start permit, :meth:`allow_starts` gives some, :meth:`close_starts`
    takes them back.

    Request deadlines too, where the app's ``deadline_timer`` is
    :func:`gated_engines.gated_deadline <gated_engines.gated_deadline>`: :meth:`deadline` waits
    until the test calls :meth:`pass_deadlines`, and every deadline timed then passes.

    :meth:`state` says how many calls wait and how many went through, what each call that went
    through computed (``calls``: one label per item or dialogue: its target, or its last turn),
    where each call that is waiting runs (``waiting_callers``: the caller's fields), and how many
    start-ups wait
    (``starting``) and went through (``started``)."""

    def __init__(self) -> None:
        self.permits = 0
        self.waiting = 0
        self.calls: list[list[str]] = []
        self.waiting_callers: dict[int, Caller] = {}
        self.tickets = 0
        self.start_permits = 0
        self.starting = 0
        self.started = 0
        self.changed = asyncio.Condition()
        self.deadlines_passed = False

    async def enter(self, labels: list[str], caller: Caller | None = None) -> None:
        async with self.changed:
            self.tickets += 1
            ticket = self.tickets
            self.waiting += 1
            self.waiting_callers[ticket] = caller or {}
            self.changed.notify_all()
            await self.changed.wait_for(lambda: self.permits > 0)
            self.permits -= 1
            self.waiting -= 1
            del self.waiting_callers[ticket]
            self.calls.append(labels)
            self.changed.notify_all()

    async def allow(self, n: int = 1) -> None:
        async with self.changed:
            self.permits += n
            self.changed.notify_all()

    async def close(self) -> None:
        """Take back the permits not used yet: from now on every engine call waits."""
        async with self.changed:
            self.permits = 0

    async def start(self) -> None:
        async with self.changed:
            self.starting += 1
            self.changed.notify_all()
            await self.changed.wait_for(lambda: self.start_permits > 0)
            self.start_permits -= 1
            self.starting -= 1
            self.started += 1
            self.changed.notify_all()

    async def allow_starts(self, n: int = 1) -> None:
        async with self.changed:
            self.start_permits += n
            self.changed.notify_all()

    async def close_starts(self) -> None:
        """Take back the start permits not used yet: from now on every start-up waits."""
        async with self.changed:
            self.start_permits = 0

    async def deadline(self) -> None:
        """Return once the test let deadlines pass (:meth:`pass_deadlines`)."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.deadlines_passed)

    async def pass_deadlines(self) -> None:
        """Every deadline waiting at :meth:`deadline`, and every one timed from now on, passes."""
        async with self.changed:
            self.deadlines_passed = True
            self.changed.notify_all()

    async def wait_for(self, waiting: int, passed: int, timeout_s: float) -> dict[str, Any]:
        """The state once at least `waiting` calls wait and `passed` went through (or after
        `timeout_s`, a hang guard)."""
        return await self._state_when(
            lambda: self.waiting >= waiting and len(self.calls) >= passed, timeout_s)

    async def wait_starting(self, starting: int, timeout_s: float) -> dict[str, Any]:
        """The state once at least `starting` start-ups wait for a permit (or after `timeout_s`,
        a hang guard)."""
        return await self._state_when(lambda: self.starting >= starting, timeout_s)

    async def _state_when(self, condition, timeout_s: float) -> dict[str, Any]:
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(condition), timeout_s)
            except TimeoutError:
                pass
            return self.state()

    def state(self) -> dict[str, Any]:
        return {"waiting": self.waiting, "passed": len(self.calls), "calls": list(self.calls),
                "waiting_callers": list(self.waiting_callers.values()),
                "starting": self.starting, "started": self.started}


def open_gate(node_id: str | None = None) -> Any:
    """A new, closed gate for the replicas (the previous one, if any, is killed first); on the
    node `node_id` when given (a node the test will not kill). Keep the handle: Ray ends an
    actor nobody holds a handle to."""
    _end_gate()
    options: dict[str, Any] = {"name": GATE_NAME, "namespace": GATE_NAMESPACE}
    if node_id is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return Gate.options(**options).remote()


def _end_gate(limit_s: float = 60.0) -> None:
    """Kill the gate, if there is one, and wait until its name is free (``ray.kill`` returns
    before the actor is dead; its name is released with it). A hang guard: `limit_s`."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            old = ray.get_actor(GATE_NAME, namespace=GATE_NAMESPACE)
        except ValueError:
            return
        ray.kill(old)
        if time.monotonic() > deadline:
            raise AssertionError(f"the previous gate still holds its name after {limit_s:.0f} s")
        time.sleep(0.05)


def gate() -> Any:
    """The open gate (from a replica, or the test)."""
    return ray.get_actor(GATE_NAME, namespace=GATE_NAMESPACE)


def caller() -> Caller:
    """Where this process runs: its Ray node and its process id."""
    return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}
