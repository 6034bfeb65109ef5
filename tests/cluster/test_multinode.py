"""The application on a real multi-node cluster (tests/cluster/conftest.py): where replicas run,
auth on every gateway replica, metric totals across replicas and nodes, and losing a worker
node or a gateway replica in the middle of a probe run.

Nothing here races a clock. Requests go over a fresh connection each until every replica has
answered some (which replica answers is the kernel's and Serve's choice; that each eventually
does is not a matter of speed), and totals are compared once the counters have caught up. The
model is served by the gated fake engine: a failure test lets a few engine calls through, then
kills the node or gateway that holds a request still in flight, so the client meets the failure
by construction and must retry. Times are printed, never asserted.

Traffic goes to the Serve proxies on 127.0.0.1 only, bounded in count (a few hundred requests).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from cluster_app import AUTH, FRESH, GPU_WORKER, MODEL, TOKEN, running, scaled_down
from cluster_metrics import scrape, total
from ray_metrics import sample_sum
from probe_checks import Answers, assert_retryable, assert_scored_once, probe_run
from waiting import InBackground, wait_until

pytestmark = [pytest.mark.slow]

BODY = {"model": MODEL, "items": [{"context": ["Hi there.", "Hello!"], "target": "How are you?"}] * 4}

#: A hang guard for every wait, not a speed requirement.
HANG_S = 180.0
#: Requests per round, and rounds at most, until every replica has answered some: a bound on
#: the count (what a kernel spreading connections at random needs is a handful), not on time.
ROUND, MOST_ROUNDS = 10, 30
#: Engine calls let through before a failure: the probe run is under way, far from done.
CALLS_BEFORE_KILL = 4


def body(n: int) -> dict[str, Any]:
    """BODY in a conversation of its own (`n`): affinity routing sends every request of one
    context to the same model replica, and the test needs both replicas to answer some."""
    return {**BODY, "items": [{**item, "context": [f"Hi there, {n}.", "Hello!"]} for item in BODY["items"]]}


def per_replica(texts: dict[str, str], name: str, replicas: list[str], **labels: str) -> dict[str, float]:
    """`name` (with `labels`) summed over every node, per replica."""
    return {r: sample_sum(texts, name, replica=r, **labels) for r in replicas}


def until_every_replica_answers(send_round: Callable[[], None], counted: Callable[[int], dict | None],
                                what: str) -> tuple[int, dict]:
    """Send rounds of ROUND requests (`send_round`) until every replica answered some: after
    each round, wait (hang guard) until `counted(sent)` sees all of them counted, and stop once
    it says every replica has its share (``"every"`` true). Returns the requests sent and the
    last counts."""
    sent = 0
    for _ in range(MOST_ROUNDS):
        send_round()
        sent += ROUND
        counts = wait_until(lambda: counted(sent), f"{sent} {what} counted", HANG_S)
        if counts["every"]:
            return sent, counts
    raise AssertionError(f"after {sent} {what} over fresh connections, a replica never answered: {counts}")


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
    """Requests through two gateway replicas and two model replicas (four replicas, three
    nodes), each over a fresh connection, until each of the four has answered some: the
    ray_dialscore_* series the nodes' metrics agents export sum to exactly the requests sent
    (and their items), per replica as in total, and both GPU nodes computed some of them."""
    gateways = [r["replica_id"] for r in running(cluster, "gateway")]
    models = {r["replica_id"]: r["node_id"] for r in running(cluster, f"nll-{MODEL}")}
    ok = {"endpoint": "/v1/nll", "status": "200"}

    def snapshot() -> dict[str, Any]:
        texts = scrape(cluster)
        return {"requests": sample_sum(texts, "ray_dialscore_requests_total", **ok),
                "items": sample_sum(texts, "ray_dialscore_items_scored_total", model=MODEL),
                "gateways": per_replica(texts, "ray_dialscore_requests_total", gateways, **ok),
                "models": per_replica(texts, "ray_dialscore_items_scored_total", list(models), model=MODEL)}

    before = snapshot()

    def counted(sent: int) -> dict | None:
        """The counts since `before` once every series has caught up with `sent` requests (each
        replica exports all its series together, so once its counts include its last request,
        a count it made twice would show as well)."""
        now = snapshot()
        got = {"requests": now["requests"] - before["requests"], "items": now["items"] - before["items"],
               "gateways": {r: v - before["gateways"][r] for r, v in now["gateways"].items()},
               "models": {r: v - before["models"][r] for r, v in now["models"].items()}}
        if (got["requests"] < sent or got["items"] < 4 * sent or sum(got["gateways"].values()) < sent
                or sum(got["models"].values()) < 4 * sent):
            return None
        got["every"] = all(v > 0 for v in [*got["gateways"].values(), *got["models"].values()])
        return got

    with httpx.Client(base_url=cluster.url, headers=AUTH, timeout=HANG_S, limits=FRESH) as http:
        sent = itertools.count()

        def send_round() -> None:
            statuses = [http.post("/v1/nll", json=body(next(sent))).status_code for _ in range(ROUND)]
            assert statuses == [200] * ROUND, statuses

        n, got = until_every_replica_answers(send_round, counted, "requests")
    assert got["requests"] == n and got["items"] == 4 * n, got
    assert sum(got["gateways"].values()) == n and sum(got["models"].values()) == 4 * n, got
    # Each replica exports its own series (the replica tag); all four took some, and the two
    # model replicas are on the two GPU nodes.
    assert len(got["gateways"]) == 2 and all(v > 0 for v in got["gateways"].values()), got
    assert len(got["models"]) == 2 and all(v > 0 for v in got["models"].values()), got
    assert len(set(models.values())) == 2, models
    print(f"\n{n} requests: per gateway replica {got['gateways']}, items per model replica "
          f"{ {models[r][:8]: v for r, v in got['models'].items()} } (by node)")


def test_every_gateway_replica_refuses_a_request_without_the_token(cluster):
    """Both gateway replicas (on different nodes) got the token from their node's environment;
    none serves the API without it: requests without it (or with a wrong one), each over a
    fresh connection, until each gateway replica has refused some; all are refused."""
    gateways = [r["replica_id"] for r in running(cluster, "gateway")]
    refused = {"endpoint": "/v1/models", "type": "unauthorized"}
    before = per_replica(scrape(cluster), "ray_dialscore_errors_total", gateways, **refused)
    answers: list[httpx.Response] = []

    def counted(sent: int) -> dict | None:
        now = per_replica(scrape(cluster), "ray_dialscore_errors_total", gateways, **refused)
        per = {r: now[r] - before[r] for r in gateways}
        if sum(per.values()) < sent:
            return None
        return {"per": per, "every": all(v > 0 for v in per.values())}

    with httpx.Client(base_url=cluster.url, timeout=HANG_S, limits=FRESH) as http:
        def send_round() -> None:
            wrong = {"Authorization": "Bearer nope"}
            sent = [http.get("/v1/models", headers=wrong if k % 3 == 0 else None) for k in range(ROUND)]
            assert {r.status_code for r in sent} == {401}, [r.status_code for r in sent]
            answers.extend(sent)

        n, got = until_every_replica_answers(send_round, counted, "requests without the token")
        assert http.get("/v1/models", headers=AUTH).status_code == 200
    assert all(r.json()["error"]["type"] == "unauthorized" for r in answers)
    assert sum(got["per"].values()) == n, got
    print(f"\n{n} requests without the token, 401 from each gateway replica: {got['per']}")


def in_progress(cluster, gateway: str) -> float:
    """Requests the gateway replica `gateway` is working on now (Serve's own gauge, which each
    replica sets continually)."""
    return total(cluster, "ray_serve_replica_processing_queries", deployment="gateway", replica=gateway)


def test_losing_a_worker_node_mid_probe_run_loses_nothing(cluster, gate, tmp_path):
    """SIGKILL of the GPU worker whose model replica holds a request of a probe run (with it
    maybe a gateway replica and a proxy): the run completes, every pair scored exactly once; a replacement node joins (as KubeRay recreates
    a pod) and Serve places the lost replica there."""
    nodes = {n["node_id"]: n for n in cluster.nodes()}
    gateway_nodes = {r["node_id"] for r in running(cluster, "gateway")}
    answers = Answers("/v1/nll")
    run = probe_run(cluster.url, MODEL, tmp_path, answers, token=TOKEN)
    gate.allow(CALLS_BEFORE_KILL)
    held = gate.wait_for(1, CALLS_BEFORE_KILL, HANG_S)
    assert run.is_alive()
    # A node whose model replica holds a request; one that also hosts a gateway, when one does
    # (the harder loss).
    holding = sorted({c["node_id"] for c in held["waiting_callers"]}, key=lambda n: n not in gateway_nodes)
    victim = holding[0]
    assert not nodes[victim]["is_head"], held
    started = time.monotonic()
    kill_s = cluster.kill_worker(victim)
    gate.open()  # before the new node: the cluster's child process does one thing at a time
    adder = InBackground(lambda: cluster.add_worker(**GPU_WORKER))
    report = run.result(2 * HANG_S)
    answers.close_inner()
    new_node = adder.result(HANG_S)

    # The call held on the killed node is lost with it: the client meets that failure (a 424
    # from the gateway, or a dropped connection where the gateway died too), retries it, and
    # every pair is there exactly once.
    assert answers.failures(), answers.statuses
    assert_retryable(answers.log, proxy_failures=True)
    pairs, items = assert_scored_once(tmp_path, cluster.url, MODEL, ["attribution"], report, token=TOKEN)

    def replaced():
        models = running(cluster, f"nll-{MODEL}")
        return models if len(models) == 2 and new_node in {r["node_id"] for r in models} else None

    models = wait_until(replaced, "the lost model replica re-placed on the new node", HANG_S)
    replaced_s = time.monotonic() - started
    assert victim not in {r["node_id"] for r in models}

    def gateways_recovered():  # Serve may list a gateway on the lost node until it notices
        gateways = running(cluster, "gateway")
        return len(gateways) == 2 and victim not in {r["node_id"] for r in gateways}

    wait_until(gateways_recovered, "two gateway replicas again, none on the lost node", HANG_S)
    assert httpx.get(f"{cluster.url}/v1/models", headers=AUTH, timeout=30).status_code == 200
    print(f"\nworker node kill (gateway there too: {victim in gateway_nodes}): SIGKILL took {kill_s:.2f} s, "
          f"run {run.seconds:.1f} s, client saw {dict(answers.statuses)}, model replica RUNNING on the "
          f"new node {replaced_s:.1f} s after the kill, {pairs} pairs / {items} items scored once, 0 lost")


def test_losing_a_gateway_replica_mid_probe_run_is_survived(cluster, gate, tmp_path):
    """ray.kill of the gateway replica that holds a request of a probe run: the proxy answers it
    with a plain 500 or drops the connection; the client re-sends (scoring is idempotent) and
    the run completes, every pair scored exactly once; Serve starts a new gateway replica."""
    answers = Answers("/v1/nll")
    run = probe_run(cluster.url, MODEL, tmp_path, answers, token=TOKEN)
    gate.allow(CALLS_BEFORE_KILL)
    gate.wait_for(1, CALLS_BEFORE_KILL, HANG_S)
    assert run.is_alive()
    # The run's requests are held at the model: the gateway replicas working on them say so.
    busy = wait_until(lambda: [r for r in running(cluster, "gateway")
                               if in_progress(cluster, r["replica_id"]) >= 1],
                      "a gateway replica working on a held request", HANG_S)
    victim = busy[0]
    started = time.monotonic()
    cluster.kill_actor(victim["actor_name"])
    gate.open()
    report = run.result(2 * HANG_S)
    answers.close_inner()

    assert answers.failures(), answers.statuses
    assert_retryable(answers.log, proxy_failures=True)
    pairs, items = assert_scored_once(tmp_path, cluster.url, MODEL, ["attribution"], report, token=TOKEN)

    def replaced():
        now = running(cluster, "gateway")
        return now if len(now) == 2 and victim["replica_id"] not in {r["replica_id"] for r in now} else None

    wait_until(replaced, "a new gateway replica", HANG_S)
    replaced_s = time.monotonic() - started
    print(f"\ngateway replica kill: run {run.seconds:.1f} s, client saw {dict(answers.statuses)}, a new "
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


def test_a_node_whose_proxy_died_is_covered_by_the_other_nodes_proxies(cluster):
    """SIGKILL of a worker node's Serve proxy (proxy_location EveryNode: one per node). The
    nodes' proxies share the HTTP port (here one loopback port, which the kernel spreads
    connections over; on Kubernetes the Service `dialscore-serve-svc` in front of every pod's
    port 8000, whose endpoints drop a pod once its readiness probe of the proxy fails): every
    request over a fresh connection is answered by another node's proxy, none is refused. Serve's
    controller then starts a new proxy on that node, which serves too."""
    nodes = {n["node_id"]: n for n in cluster.nodes()}
    # A node that joined in an earlier test (the one replacing a lost worker) gets its proxy
    # once the controller notices it: wait for a healthy proxy on every node first.
    wait_until(lambda: all(cluster.proxies().get(n) == "HEALTHY" for n in nodes),
               "a healthy proxy on every node", HANG_S)
    before = cluster.proxy_pids()
    assert set(before) == set(nodes), (before, nodes)      # a proxy on every node
    victim = next(n for n in sorted(nodes) if not nodes[n]["is_head"])
    started = time.monotonic()
    dead = cluster.kill_proxy(victim)
    with httpx.Client(base_url=cluster.url, headers=AUTH, timeout=HANG_S, limits=FRESH) as http:
        statuses = [http.get("/v1/models").status_code for _ in range(3 * ROUND)]
    answered_s = time.monotonic() - started
    replaced_during = cluster.proxy_pids().get(victim)
    assert statuses == [200] * (3 * ROUND), statuses

    def new_proxy():
        pid = cluster.proxy_pids().get(victim)
        return pid if pid is not None and pid != dead else None

    new_pid = wait_until(new_proxy, "a new proxy on the node whose proxy died", HANG_S)
    replaced_s = time.monotonic() - started
    wait_until(lambda: cluster.proxies().get(victim) == "HEALTHY",
               "the new proxy has its routes", HANG_S)
    with httpx.Client(base_url=cluster.url, headers=AUTH, timeout=HANG_S, limits=FRESH) as http:
        statuses = [http.get("/v1/models").status_code for _ in range(ROUND)]
    assert statuses == [200] * ROUND, statuses
    print(f"\nproxy of node {victim[:8]} (pid {dead}) SIGKILLed: {3 * ROUND} requests over fresh "
          f"connections all 200 within {answered_s:.1f} s (a new proxy there by then: "
          f"{replaced_during not in (None, dead)}); new proxy (pid {new_pid}) found {replaced_s:.1f} s "
          f"after the kill")
