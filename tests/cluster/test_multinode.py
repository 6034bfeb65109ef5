"""The application on a real multi-node cluster (tests/cluster/conftest.py): where replicas run,
auth on every gateway replica, metric totals across replicas and nodes, and losing a worker
node or a gateway replica in the middle of a probe run.

Traffic goes to the Serve proxies on 127.0.0.1 only, bounded in count (a few hundred requests)
and time (each run under the client's retry budget).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from cluster_app import GPU_WORKER, MODEL, TOKEN, scaled_down
from dialscore.client import DialscoreClient
from dialscore.probes import SAMPLE_DATA
from dialscore.probes.run import run_probes
from localcluster import sample_sum
from probe_checks import RETRY, KillAfter, assert_scored_once

pytestmark = [pytest.mark.slow]

AUTH = {"Authorization": f"Bearer {TOKEN}"}
BODY = {"model": MODEL, "items": [{"context": ["Hi there.", "Hello!"], "target": "How are you?"}] * 4}


def running(cluster, deployment: str) -> list[dict]:
    return [r for r in cluster.replicas().get(deployment, []) if r["state"] == "RUNNING"]


def wait_for(predicate, limit_s: float, what: str, step_s: float = 0.5):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step_s)
    raise AssertionError(f"{what}: not within {limit_s:.0f} s")


def totals(cluster, name: str, **labels: str) -> float:
    return sample_sum(cluster.metrics(), name, **labels)


def test_replicas_are_placed_as_the_cluster_config_says(cluster):
    nodes = {n["node_id"]: n for n in cluster.nodes()}
    assert len(nodes) == 3 and sum(n["is_head"] for n in nodes.values()) == 1
    models = running(cluster, f"nll-{MODEL}")
    gateways = running(cluster, "gateway")
    assert len(models) == 2 and len(gateways) == 2
    # num_gpus: 1 per model replica: one on each GPU worker, none on the head.
    assert {nodes[r["node_id"]]["resources"].get("GPU", 0) for r in models} == {1.0}
    assert len({r["node_id"] for r in models}) == 2
    # gateway_max_replicas_per_node: 1 spreads the gateways over two nodes.
    assert len({r["node_id"] for r in gateways}) == 2


def test_requests_are_served_on_two_nodes_and_metrics_total_exactly(cluster):
    """N requests through two gateway replicas and two model replicas (four replicas, three
    nodes): the ray_dialscore_* series the nodes' metrics agents export sum to exactly N, and
    Serve's own per-replica request counters show both GPU nodes computed some of them."""
    n = 60
    before = totals(cluster, "ray_dialscore_requests_total", endpoint="/v1/nll", status="200")
    items_before = totals(cluster, "ray_dialscore_items_scored_total", model=MODEL)
    with httpx.Client(base_url=cluster.url, headers=AUTH, timeout=60) as http, ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(lambda _: http.post("/v1/nll", json=BODY).status_code, range(n)))
    assert statuses == [200] * n

    def settled():
        texts = cluster.metrics()
        got = sample_sum(texts, "ray_dialscore_requests_total", endpoint="/v1/nll", status="200") - before
        return (texts, got) if got >= n else None

    texts, got = wait_for(settled, 20, "metrics reaching the agents")
    time.sleep(2)  # one more report interval: a late extra count would show now
    texts = cluster.metrics()
    assert sample_sum(texts, "ray_dialscore_requests_total", endpoint="/v1/nll", status="200") - before == n
    assert sample_sum(texts, "ray_dialscore_items_scored_total", model=MODEL) - items_before == 4 * n
    # Each gateway replica exports its own series (the replica tag); both took requests.
    per_gateway = {}
    for text in texts.values():
        for replica in {r["replica_id"] for r in running(cluster, "gateway")}:
            v = sample_sum([text], "ray_dialscore_requests_total", endpoint="/v1/nll", replica=replica)
            per_gateway[replica] = per_gateway.get(replica, 0) + v
    assert len(per_gateway) == 2 and all(v > 0 for v in per_gateway.values()), per_gateway
    # The model replicas' nodes: each GPU worker's agent reports requests computed there.
    model_nodes = {r["node_id"] for r in running(cluster, f"nll-{MODEL}")}
    served = {node: sample_sum([texts[node]], "ray_serve_deployment_request_counter_total",
                               deployment=f"nll-{MODEL}") for node in model_nodes}
    assert len(served) == 2 and all(v > 0 for v in served.values()), served
    print(f"\n{n} requests: per gateway replica {per_gateway}, per model node "
          f"{ {k[:8]: v for k, v in served.items()} }")


def test_every_gateway_replica_refuses_a_request_without_the_token(cluster):
    """Both gateway replicas (on different nodes) got the token from their node's environment;
    none serves the API without it."""
    before = totals(cluster, "ray_dialscore_errors_total", endpoint="/v1/models", type="unauthorized")
    # A new connection per request: the kernel spreads connections over the nodes' proxies
    # (they share the port), and a proxy prefers the gateway replica on its own node.
    fresh = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=cluster.url, timeout=30, limits=fresh) as http:
        answers = [http.get("/v1/models") for _ in range(30)]
        wrong = [http.get("/v1/models", headers={"Authorization": "Bearer nope"}) for _ in range(10)]
        assert http.get("/v1/models", headers=AUTH).status_code == 200
    assert {r.status_code for r in answers + wrong} == {401}
    assert all(r.json()["error"]["type"] == "unauthorized" for r in answers)

    def refused_by_both():
        texts = cluster.metrics()
        per = {r["replica_id"]: sample_sum(texts, "ray_dialscore_errors_total", endpoint="/v1/models",
                                           type="unauthorized", replica=r["replica_id"])
               for r in running(cluster, "gateway")}
        done = sum(per.values()) - before >= 40
        return per if done and all(v > 0 for v in per.values()) else None

    per = wait_for(refused_by_both, 20, "both gateway replicas recording refusals")
    print(f"\n40 requests without the token, 401 from each gateway replica: {per}")
    assert sum(per.values()) - before == 40, per


def probe_run(cluster, tmp_path, kill, after: int = 6):
    transport = KillAfter("/v1/nll", after=after, kill=kill)
    with DialscoreClient(cluster.url, token=TOKEN, retry=RETRY, max_concurrency=2,
                         transport=transport) as client:
        started = time.monotonic()
        report = run_probes(client, SAMPLE_DATA, [MODEL], ["attribution"], seed=0, out_dir=tmp_path,
                            chunk_size=16, progress=False, plots=False, n_boot=100)
        run_s = time.monotonic() - started
    transport.inner.close()
    pairs, items = assert_scored_once(tmp_path, cluster.url, MODEL, ["attribution"], report, token=TOKEN)
    return transport, report, run_s, pairs, items


def test_losing_a_worker_node_mid_probe_run_loses_nothing(cluster, tmp_path):
    """SIGKILL of a GPU worker (its raylet, a model replica, maybe a gateway replica and a
    proxy) in the middle of a probe run: the client's retries finish it, every pair is scored
    exactly once; a replacement node joins (as KubeRay recreates a pod) and Serve places the
    lost replica there."""
    nodes = {n["node_id"]: n for n in cluster.nodes()}
    workers = [n for n in nodes if not nodes[n]["is_head"]]
    gateways = {r["node_id"] for r in running(cluster, "gateway")}
    # The worker that also hosts a gateway, when one does: the harder loss.
    victim = next((n for n in workers if n in gateways), workers[0])
    events: dict = {}

    def kill():
        events["t_kill"] = time.monotonic()
        events["kill_s"] = cluster.kill_worker(victim)

        def replace():
            events["t_add"] = time.monotonic()
            events["new_node"] = cluster.add_worker(**GPU_WORKER)
        events["adder"] = threading.Thread(target=replace, daemon=True)
        events["adder"].start()

    transport, report, run_s, pairs, items = probe_run(cluster, tmp_path, kill)
    assert "t_kill" in events, "the kill never happened (the run was too short?)"
    events["adder"].join(120)

    def replaced():
        models = running(cluster, f"nll-{MODEL}")
        return models if len(models) == 2 and events.get("new_node") in {r["node_id"] for r in models} else None

    models = wait_for(replaced, 120, "the lost model replica re-placed on the new node")
    replaced_s = time.monotonic() - events["t_kill"]
    assert victim not in {r["node_id"] for r in models + running(cluster, "gateway")}
    wait_for(lambda: len(running(cluster, "gateway")) == 2, 60, "two gateway replicas again")
    assert httpx.get(f"{cluster.url}/v1/models", headers=AUTH, timeout=30).status_code == 200
    print(f"\nworker node kill: SIGKILL took {events['kill_s']:.2f} s, run {run_s:.1f} s, client saw "
          f"{dict(transport.statuses)}, model replica RUNNING on the new node {replaced_s:.1f} s after "
          f"the kill, {pairs} pairs / {items} items scored once, 0 lost")


def test_losing_a_gateway_replica_mid_probe_run_is_survived(cluster, tmp_path):
    """ray.kill of a gateway replica with requests in flight: the proxy answers them with a
    plain 500 or drops the connection; the client re-sends (scoring is idempotent) and the run
    completes, every pair scored exactly once; Serve starts a new gateway replica."""
    events: dict = {}

    def kill():
        victim = running(cluster, "gateway")[0]
        events["victim"] = victim["replica_id"]
        events["t_kill"] = time.monotonic()
        cluster.kill_actor(victim["actor_name"])

    transport, report, run_s, pairs, items = probe_run(cluster, tmp_path, kill)
    assert "victim" in events

    def replaced():
        now = running(cluster, "gateway")
        return now if len(now) == 2 and events["victim"] not in {r["replica_id"] for r in now} else None

    wait_for(replaced, 90, "a new gateway replica")
    replaced_s = time.monotonic() - events["t_kill"]
    print(f"\ngateway replica kill: run {run_s:.1f} s, client saw {dict(transport.statuses)}, a new "
          f"gateway RUNNING {replaced_s:.1f} s after the kill, {pairs} pairs / {items} items scored once, 0 lost")


def test_a_gateway_without_a_token_refuses_to_start_when_auth_is_required(cluster, stand_ins):
    """auth_required with a token variable no node has: the gateway replicas raise at start, the
    deployment fails and its routes never answer (fail closed, not open)."""
    args = scaled_down(stand_ins, gateway_replicas=1, auth_token_env="DIALSCORE_NO_SUCH_TOKEN")
    args["models"][0]["serving"].update(num_gpus=0, num_replicas=1)   # every GPU is taken
    port = cluster.url.rsplit(":", 1)[1]
    with pytest.raises(RuntimeError, match=r"Failed to update the deployments \['gateway'\]"):
        cluster.deploy(args, http_port=int(port), name="noauth", route_prefix="/noauth")
    why = cluster.status_messages("noauth")["gateway"]
    assert "DEPLOY_FAILED" in why and "AuthConfigError" in why, why
    assert "auth_required" in why and "DIALSCORE_NO_SUCH_TOKEN" in why, why
    r = httpx.get(f"{cluster.url}/noauth/v1/models", timeout=30)
    assert r.status_code in (404, 503) and "x-error-type" not in r.headers   # nothing of ours answered
    cluster.delete_app("noauth")
    assert httpx.get(f"{cluster.url}/v1/models", headers=AUTH, timeout=30).status_code == 200
