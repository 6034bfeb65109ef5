"""Autoscaling across nodes with Ray's fake autoscaler (`python -m loadtests.autoscale_cluster` is
the timed demo, with its timeline plot): requests in progress on the model replica make Serve ask
for a second model replica (`num_gpus: 1`), the autoscaler starts a second GPU-typed worker node
for it; once they are answered the replica stops and the idle node is removed.

The load is made, not timed: the model is served by the gated fake engine (cluster_gate.py), and
the test holds LOAD requests on the one replica, so Serve's count of requests in progress there
is exactly LOAD (4x the target) for as long as the test waits, however fast the machine; then it
lets them all through. Each change is waited for with a hang guard, and the test asserts what
changed and in which order, never how fast (the times are printed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster_app import SERVE_ENV, deploy
from cluster_gate import NODE_PYTHONPATH, ClusterGate
from cluster_metrics import total
from loadtests.autoscale_cluster import AUTOSCALING, DEPLOYMENT, MODEL
from loadtests.autoscale_cluster import app_args as demo_app_args
from waiting import Posts, wait_until

pytestmark = [pytest.mark.slow]

#: With LOAD requests in progress and the demo's target per replica, Serve wants more replicas
#: than its maximum (2) while they are held, its minimum (1) after.
LOAD = 4 * AUTOSCALING["target_ongoing_requests"]
#: A hang guard for every wait (a node and a replica start in seconds; minutes mean stuck).
HANG_S = 240.0


def app_args(stand_ins: Path) -> dict[str, Any]:
    """The demo's application (the stand-in model with `num_gpus: 1`, Serve autoscaling 1-2
    replicas; one gateway, on the head: the only node when it is placed), served by the gated
    engine. No queue deadline and a long request deadline: the held requests wait for the test,
    not for a clock."""
    args = demo_app_args(stand_ins)
    args.update(request_timeout_s=3 * HANG_S, queue_timeout_s=None)
    args["models"][0]["serving"]["engine"] = "gated_engines:GatedNLLEngine"
    return args


@dataclass(frozen=True)
class Sample:
    """The cluster at one moment: alive GPU worker nodes (read first), then model replicas."""

    t: float
    worker_nodes: int
    running: int
    starting: int
    replica_nodes: frozenset[str]


def sample(cluster, started: float) -> Sample:
    nodes = sum(not n["is_head"] for n in cluster.nodes())
    replicas = cluster.replicas().get(DEPLOYMENT, [])
    running = [r for r in replicas if r["state"] == "RUNNING"]
    return Sample(round(time.monotonic() - started, 1), nodes, len(running),
                  sum(r["state"] in ("STARTING", "PENDING_MIGRATION") for r in replicas),
                  frozenset(r["node_id"] for r in running))


def in_progress(cluster) -> float:
    """Requests the model replicas are working on now (Serve's gauge, set continually)."""
    return total(cluster, "ray_serve_replica_processing_queries", deployment=DEPLOYMENT)


def queue_length(cluster) -> float:
    """The gateway's own gauge: requests sent to the model and not answered yet."""
    return total(cluster, "ray_dialscore_queue_length", model=MODEL)


def test_replicas_and_nodes_scale_up_under_load_and_down_after(stand_ins):
    from dialscore_server.gateway.embedded import free_port
    from localcluster import Autoscaler, LocalCluster

    assert (AUTOSCALING["min_replicas"], AUTOSCALING["max_replicas"]) == (1, 2), AUTOSCALING
    spec = Autoscaler(resources={"CPU": 2, "GPU": 1}, min_workers=0, max_workers=2, idle_timeout_s=6)
    timeline: list[Sample] = []
    with LocalCluster(head={"num_cpus": 2, "num_gpus": 0}, autoscaler=spec,
                      env={"PYTHONPATH": NODE_PYTHONPATH, **SERVE_ENV}) as cluster:
        started = time.monotonic()

        def when(test) -> Sample | None:
            s = sample(cluster, started)
            timeline.append(s)
            return s if test(s) else None

        # No GPU node before the application asks for one (min_workers: 0); deploying it makes
        # the autoscaler start the first.
        assert [n for n in cluster.nodes() if not n["is_head"]] == []
        gate = ClusterGate(cluster)
        url = deploy(cluster, app_args(stand_ins), http_port=free_port(), wait=False)
        wait_until(lambda: when(lambda s: s.running == 1 and s.worker_nodes == 1),
                   "one model replica running on the first GPU node", HANG_S, step_s=1)
        wait_until(lambda: httpx.get(f"{url}/readyz", timeout=30).status_code == 200, "ready", HANG_S)

        # The load: LOAD requests held on the replica, exactly.
        body = {"model": MODEL, "items": [{"context": ["do you like dogs ?"], "target": "yes ."}]}
        posts = Posts(f"{url}/v1/nll", {f"load{k}": body for k in range(LOAD)}, timeout_s=3 * HANG_S)
        wait_until(lambda: queue_length(cluster) == LOAD, f"the gateway's queue length at {LOAD}", HANG_S)
        wait_until(lambda: in_progress(cluster) == LOAD, f"{LOAD} requests in progress", HANG_S)
        loaded = time.monotonic() - started
        up = wait_until(lambda: when(lambda s: s.running == 2 and s.worker_nodes == 2),
                        "a second replica running on a second GPU node", HANG_S, step_s=1)
        assert len(up.replica_nodes) == 2, up  # one per GPU node
        assert not posts.answers, posts.answers  # the load was there all along
        assert in_progress(cluster) == LOAD

        # The load ends: every held request is answered.
        gate.open()
        answers = posts.wait_answers(LOAD, HANG_S)
        assert sorted(a.status_code for a in answers.values()) == [200] * LOAD, answers
        released = time.monotonic() - started
        down = wait_until(lambda: when(lambda s: s.running == 1 and s.worker_nodes == 1),
                          "back to one replica and one GPU node", HANG_S, step_s=1)
        wait_until(lambda: in_progress(cluster) == 0, "no request in progress", HANG_S)
        assert httpx.post(f"{url}/v1/nll", json=body, timeout=HANG_S).status_code == 200

    # In order: the replica stopped before its node went (every sample from the release on,
    # nodes read first, shows at least as many GPU nodes as running replicas), and nothing
    # else started on the way down.
    after = [s for s in timeline if s.t >= released]
    assert all(s.worker_nodes >= s.running for s in after), after
    assert all(s.running <= 2 and s.worker_nodes <= 2 for s in timeline), timeline
    print(f"\nautoscaling: load of {LOAD} held from {loaded:.0f} s, 2 replicas on 2 nodes at {up.t:.0f} s, "
          f"released at {released:.0f} s, 1 replica on 1 node at {down.t:.0f} s "
          f"({len(timeline)} samples)")
