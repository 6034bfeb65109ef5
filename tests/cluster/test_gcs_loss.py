"""Losing the head's GCS (the control plane) on a cluster with GCS fault tolerance: a Redis the
test starts (redis_server.py) holds the GCS's tables, as KubeRay's ``gcsFaultToleranceOptions``
does.

By construction, no clock raced: once every node's proxy is healthy (Serve may start a worker
node's proxy after the application reports running, and a proxy that has not found its routes
cannot find them without the GCS), a call of a probe run is held in the engine gate when the GCS
server is SIGKILLed (only this cluster's, by its pid); the gate is then opened, so the held call
and every later one of the run are computed and answered with no GCS, and new requests over fresh
connections are answered too before the GCS comes back. The GCS is then started again on its port
(what KubeRay's restarted head pod does: Ray's raylet never restarts it), it reloads its state
from Redis, the raylets reconnect, and Serve's controller reconciles: a model replica killed after
that is replaced. Every pair of the run is scored exactly once. Times are printed, never asserted.
"""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

import redis_server
from cluster_app import (AUTH, FRESH, GPU_WORKER, HEAD, MODEL, SERVE_ENV, TOKEN, deploy, running,
                         scaled_down)
from cluster_gate import NODE_PYTHONPATH, ClusterGate
from probe_checks import Answers, assert_retryable, assert_scored_once, probe_run
from waiting import wait_until

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not redis_server.available(), reason=redis_server.MISSING)]

BODY = {"model": MODEL, "items": [{"context": ["Hi there.", "Hello!"], "target": "How are you?"}] * 2}
#: A hang guard for every wait, not a speed requirement.
HANG_S = 180.0
#: Engine calls let through before the GCS goes: the probe run is under way, far from done.
CALLS_BEFORE_KILL = 4
#: Requests sent, each over a fresh connection, while the GCS is down.
WHILE_DOWN = 6
#: How long raylets and workers wait for a GCS that went away before they exit (Ray's default
#: 60 s; the same value as deployments/kuberay/rayservice.yaml's workers): beyond every hang
#: guard of a test, so that nothing races it.
RECONNECT_S = "600"


@pytest.fixture(scope="module")
def ft_cluster(stand_ins, tmp_path_factory):
    """The scaled-down application on a cluster whose GCS keeps its state in Redis; gate open."""
    from dialscore_server.gateway.embedded import free_port
    from localcluster import LocalCluster

    with redis_server.redis_server(tmp_path_factory.mktemp("redis")) as address:
        env = {"PYTHONPATH": NODE_PYTHONPATH, **SERVE_ENV, "RAY_REDIS_ADDRESS": address,
               "RAY_external_storage_namespace": f"dialscore-test-{uuid.uuid4().hex[:8]}",
               "RAY_gcs_rpc_server_reconnect_timeout_s": RECONNECT_S}
        head = {**HEAD, "gcs_server_port": free_port()}
        with LocalCluster(head=head, workers=[GPU_WORKER, GPU_WORKER], env=env) as local:
            local.gate = ClusterGate(local)
            local.gate.open()
            args = scaled_down(stand_ins, engine="gated_engines:GatedNLLEngine", queue_timeout_s=60)
            local.url = deploy(local, args, http_port=free_port())
            yield local


def restart_gcs(cluster) -> int:
    """Start the GCS again and wait until the three raylets are back; returns its pid."""
    pid = cluster.start_gcs()
    wait_until(lambda: len(cluster.nodes()) == 3, "the three raylets reconnected to the new GCS", HANG_S)
    return pid


def test_requests_are_served_without_the_gcs_and_the_controller_reconciles_after(ft_cluster, tmp_path):
    cluster = ft_cluster
    wait_until(lambda: list(cluster.proxies().values()) == ["HEALTHY"] * 3,
               "a healthy Serve proxy on each of the three nodes", HANG_S)
    models_before = running(cluster, f"nll-{MODEL}")
    assert len(models_before) == 2
    cluster.gate.close()
    answers = Answers("/v1/nll")
    run = probe_run(cluster.url, MODEL, tmp_path, answers, token=TOKEN)
    cluster.gate.allow(CALLS_BEFORE_KILL)
    held = cluster.gate.wait_for(1, CALLS_BEFORE_KILL, HANG_S)
    assert run.is_alive()

    # The control plane goes, with a call of the run held in a model replica.
    down_at = time.monotonic()
    gcs_pid = cluster.kill_gcs()
    killed_s = time.monotonic() - down_at
    cluster.gate.open()   # an actor call between workers: no GCS needed
    report = run.result(2 * HANG_S)
    run_done_s = time.monotonic() - down_at
    with httpx.Client(base_url=cluster.url, headers=AUTH, timeout=HANG_S, limits=FRESH) as http:
        statuses = [http.post("/v1/nll", json=BODY).status_code for _ in range(WHILE_DOWN)]
    served_while_down_s = time.monotonic() - down_at
    # Everything above happened with no GCS (nothing has started it again yet).
    assert statuses == [200] * WHILE_DOWN, statuses

    up_pid = restart_gcs(cluster)
    reconnected_s = time.monotonic() - down_at
    assert up_pid != gcs_pid

    # The controller reconciles again: a model replica killed now is replaced.
    victim = models_before[0]
    cluster.kill_actor(victim["actor_name"])
    killed_replica_at = time.monotonic()

    def replaced():
        now = running(cluster, f"nll-{MODEL}")
        ids = {r["replica_id"] for r in now}
        return now if len(now) == 2 and victim["replica_id"] not in ids else None

    wait_until(replaced, "a new model replica after the GCS came back", HANG_S)
    replaced_s = time.monotonic() - killed_replica_at
    answers.close_inner()

    assert_retryable(answers.log, proxy_failures=True)
    pairs, items = assert_scored_once(tmp_path, cluster.url, MODEL, ["attribution"], report, token=TOKEN)
    assert httpx.post(f"{cluster.url}/v1/nll", json=BODY, headers=AUTH, timeout=60).status_code == 200
    print(f"\nGCS (pid {gcs_pid}) SIGKILL took {killed_s:.2f} s with {held['waiting']} call(s) held; "
          f"without a GCS: the probe run finished {run_done_s:.1f} s after the kill "
          f"({pairs} pairs / {items} items scored once, client saw {dict(answers.statuses)}), "
          f"{WHILE_DOWN} new requests answered 200 by {served_while_down_s:.1f} s; GCS started "
          f"again (pid {up_pid}), raylets back at {reconnected_s:.1f} s (the control plane "
          f"gap); a replica killed then was replaced in {replaced_s:.1f} s")
