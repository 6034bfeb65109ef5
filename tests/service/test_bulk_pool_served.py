"""A model's bulk pool on a real Serve app (``bulk_pool`` of a model entry, nll/bulk_pool.py):
the model and its pool are served by a fake engine whose every NLL says the CPU priority of the
thread that computed it (priority_engines.py), the pool with ``engine_priority: idle``. So each
answer says where it was computed: requests asking for the bulk lane (by header or by body
``priority``), a bulk rerank's NLL term included, on the pool's engine thread under
SCHED_IDLE; every other request on the model's own replica, at the replica's priority.

The app's bulk ingress (``build_bulk_ingress``, a second app under ``/bulkpool-bulk``) serves
every request on the same deployments in the bulk lane, whatever it asks, from a gateway process
whose every thread runs at nice 19 (``ingress_priority: low``)."""

from __future__ import annotations

import os
import threading
import time

import httpx
import pytest

from priority_engines import decode
from serve_apps import ONE_THREAD, app_args, deploy_app, running_replicas

pytestmark = [pytest.mark.serve,
              pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")]

MODEL = "pooled-gpt"
APP = "bulkpool"
INGRESS = "bulkpool-bulk"
ENGINE = "priority_engines:HoldingNLLEngine"
#: The pool's yield_to_interactive_s.
YIELD_S = 3.0
#: A hang guard, not a speed requirement.
HANG_S = 120.0
BULK = {"X-Dialscore-Priority": "bulk"}
NLL = {"model": MODEL, "items": [{"context": ["I have a dog."], "target": "What is its name?"}]}
RERANK = {"context": [{"speaker": 1, "text": "I have a dog."}],
          "candidates": ["What is its name?", "I hate dogs."], "nll_model": MODEL}


@pytest.fixture(scope="module")
def pooled(served, stand_ins):
    args = app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "serve_as": MODEL, "serving": {**ONE_THREAD, "engine": ENGINE},
         "bulk_pool": {**ONE_THREAD, "engine": ENGINE, "engine_priority": "idle",
                       "yield_to_interactive_s": YIELD_S}}],
        classifiers=[{"name": "roberta-large-mnli",
                      "serving": {**ONE_THREAD, "engine": "fake_api:FakeDetector"}}])
    with deploy_app(served, APP, args) as app:
        yield app


@pytest.fixture(scope="module")
def ingress(pooled, served):
    from dialscore_server.gateway.args import BulkIngressArgs
    from dialscore_server.gateway.build import build_bulk_ingress

    args = BulkIngressArgs.model_validate({**pooled.args.model_dump(), "of_app": APP,
                                           "ingress_priority": "low"})
    with deploy_app(served, INGRESS, args, build_bulk_ingress) as app:
        yield app


def post(url: str, body: dict, headers: dict | None = None) -> httpx.Response:
    reply = httpx.post(url, json=body, headers=headers or {}, timeout=HANG_S)
    assert reply.status_code == 200, reply.text[:300]
    return reply


def test_the_pool_is_a_deployment_of_its_own(pooled):
    assert len(running_replicas(APP, f"bulk-nll-{MODEL}")) == 1
    assert len(running_replicas(APP, f"nll-{MODEL}")) == 1


@pytest.mark.parametrize("headers,body,pool", [
    (None, NLL, False), (BULK, NLL, True), (None, {**NLL, "priority": 1}, True),
    ({"X-Dialscore-Priority": "interactive"}, NLL, False), (None, {**NLL, "priority": 0}, False)])
def test_nll_requests_asking_for_bulk_are_computed_by_the_idle_pool(pooled, headers, body, pool):
    reply = post(f"{pooled.url}/v1/nll", body, headers)
    policy, _ = decode(reply.json()["results"][0]["nll"])
    assert policy == (os.SCHED_IDLE if pool else os.SCHED_OTHER)
    assert reply.headers["x-dialscore-lane"] == ("bulk" if pool else "interactive")


@pytest.mark.parametrize("headers,pool", [(None, False), (BULK, True)])
def test_a_bulk_reranks_nll_term_is_computed_by_the_pool(pooled, headers, pool):
    reply = post(f"{pooled.url}/v1/rerank", RERANK, headers)
    policies = {decode(r["nll"])[0] for r in reply.json()["results"]}
    assert policies == {os.SCHED_IDLE if pool else os.SCHED_OTHER}


def test_the_pool_waits_while_an_interactive_engine_call_is_at_work(pooled, tmp_path):
    (tmp_path / "hold").touch()
    held = {**NLL, "items": [{**NLL["items"][0], "knowledge": f"hold:{tmp_path}"}]}
    interactive: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: interactive.append(post(f"{pooled.url}/v1/nll", held)))
    thread.start()
    try:
        guard = time.monotonic() + HANG_S
        while not (tmp_path / "inside").exists():  # the interactive engine call is at work
            assert time.monotonic() < guard, "the interactive request never reached its engine"
            time.sleep(0.05)
        bulk = post(f"{pooled.url}/v1/nll", NLL, BULK)
        assert (tmp_path / "inside").exists()  # still at work: the bulk call went after the bound
        assert decode(bulk.json()["results"][0]["nll"])[0] == os.SCHED_IDLE
        assert int(bulk.headers["x-queue-time"]) >= YIELD_S * 1000
    finally:
        (tmp_path / "hold").unlink()
        thread.join(HANG_S)
    assert interactive and interactive[0].headers["x-dialscore-lane"] == "interactive"


@pytest.mark.parametrize("headers,body", [
    (None, NLL), ({"X-Dialscore-Priority": "interactive"}, NLL), (None, {**NLL, "priority": 0}),
    (BULK, NLL)])
def test_through_the_bulk_ingress_every_request_is_computed_by_the_pool(pooled, ingress,
                                                                       headers, body):
    reply = post(f"{ingress.url}/v1/nll", body, headers)
    assert reply.headers["x-dialscore-lane"] == "bulk"
    assert decode(reply.json()["results"][0]["nll"])[0] == os.SCHED_IDLE
    # the same answer as the service's own gateway gives a bulk request
    assert reply.json() == post(f"{pooled.url}/v1/nll", NLL, BULK).json()


def test_a_rerank_and_a_detection_through_the_bulk_ingress_are_bulk(ingress):
    reply = post(f"{ingress.url}/v1/rerank", RERANK)
    assert reply.headers["x-dialscore-lane"] == "bulk"
    assert {decode(r["nll"])[0] for r in reply.json()["results"]} == {os.SCHED_IDLE}
    detection = post(f"{ingress.url}/v1/contradiction", {"dialogues": [{"turns": [
        {"speaker": 1, "text": "I love dogs."}, {"speaker": 1, "text": "I hate dogs."}]}]})
    assert detection.headers["x-dialscore-lane"] == "bulk"


def test_the_bulk_ingress_is_one_gateway_at_its_priority(ingress):
    from dialscore_server.compat import serve_replicas

    replicas = [r for r in serve_replicas() if r["app"] == INGRESS and r["state"] == "RUNNING"]
    assert [r["deployment"] for r in replicas] == ["bulk-gateway"]  # no models of its own
    nice = set()
    for task in os.listdir(f"/proc/{replicas[0]['pid']}/task"):
        try:
            nice.add(os.getpriority(os.PRIO_PROCESS, int(task)))
        except ProcessLookupError:
            pass  # a thread that ended meanwhile
    assert nice == {19}, f"the ingress's threads run at nice {nice}"
