"""The engine gate (tests/engine_gate.py) on a local multi-node cluster, driven from the test.

The cluster's Ray connection lives in a child process (localcluster), so each gate operation is a
module-level function here that :meth:`LocalCluster.call` runs there. The gate is placed on the
head node, which no test kills; model replicas on any node wait at it
(``serving: {engine: "gated_engines:GatedNLLEngine"}``: the nodes have tests/ and tests/service/
on their PYTHONPATH, see :data:`NODE_PYTHONPATH`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
#: What the nodes need on their PYTHONPATH to import the gated engines.
NODE_PYTHONPATH = os.pathsep.join([str(TESTS / "service"), str(TESTS)])
#: Permits enough for any test: the gate is open.
OPEN = 10**9

_HELD: dict[str, Any] = {}  # the gate's handle, held in the child: Ray ends an actor nobody holds


def _open(node_id: str) -> None:
    from engine_gate import open_gate

    _HELD["gate"] = open_gate(node_id)


def _call(method: str, *args: Any) -> Any:
    import ray

    return ray.get(getattr(_HELD["gate"], method).remote(*args))


class ClusterGate:
    """A gate on `cluster`'s head node (a new one: any previous gate is ended), closed: every
    engine call waits until :meth:`allow` or :meth:`open`."""

    def __init__(self, cluster: Any):
        self.cluster = cluster
        (head,) = [n["node_id"] for n in cluster.nodes() if n["is_head"]]
        cluster.call(_open, head)

    def allow(self, n: int) -> None:
        """Let `n` more engine calls through."""
        self.cluster.call(_call, "allow", n)

    def open(self) -> None:
        """Let every engine call through (until :meth:`close`)."""
        self.allow(OPEN)

    def close(self) -> None:
        """Take back the permits not used yet: every engine call from now on waits."""
        self.cluster.call(_call, "close")

    def wait_for(self, waiting: int, passed: int, limit_s: float) -> dict[str, Any]:
        """The gate's state once at least `waiting` calls wait and `passed` went through since it
        was opened; fails if that does not happen within `limit_s` (a hang guard)."""
        state = self.cluster.call(_call, "wait_for", waiting, passed, limit_s)
        assert state["waiting"] >= waiting and state["passed"] >= passed, state
        return state
