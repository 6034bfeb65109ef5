"""A client that leaves while its request waits for a replica cancels the model call: the request
never reaches the engine once the replica frees up. On a gated app whose one replica holds one
request at a time, the first request is held in the engine, the second waits for the replica, its
client leaves; after the gateway has let go of it (its queue-length gauge says so), the first is
released, and only the first is ever computed."""

from __future__ import annotations

import re

import httpx
import pytest
import ray

from gated_engines import GPT, open_gate
from serve_apps import ONE_THREAD, app_args, deploy_app, wait_until

pytestmark = [pytest.mark.serve, pytest.mark.slow]

HANG_S = 120.0

def queue_length(url: str) -> float:
    """The gateway's own count of requests sent to the model and not yet answered."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    m = re.search(rf'^dialscore_queue_length{{model="{GPT}"}} ([0-9.e+]+)$', text, re.M)
    return float(m.group(1)) if m else 0.0

def body(target: str) -> dict:
    return {"model": GPT, "items": [{"context": ["hi"], "target": target}]}

def test_a_client_leaving_while_its_request_waits_for_a_replica_cancels_it(served, stand_ins):
    args = app_args(stand_ins, models=[{"name": "dialogpt-medium", "serve_as": GPT, "serving": {
        **ONE_THREAD, "engine": "gated_engines:GatedNLLEngine", "max_ongoing_requests": 1}}],
        queue_timeout_s=60.0)
    with deploy_app(served, "queued", args) as app:
        gate = open_gate()
        try:
            answers: dict[str, object] = {}

            def post(name: str, target: str, read_s: float) -> None:
                try:
                    answers[name] = httpx.post(f"{app.url}/v1/nll", json=body(target),
                                               timeout=httpx.Timeout(HANG_S, read=read_s))
                except httpx.ReadTimeout as exc:
                    answers[name] = exc

            import threading

            first = threading.Thread(target=post, args=("first", "held", HANG_S))
            first.start()
            assert ray.get(gate.wait_for.remote(1, 0, HANG_S))["waiting"] == 1
            second = threading.Thread(target=post, args=("second", "abandoned", 1.0))
            second.start()
            second.join(HANG_S)  # no replica can take it: its client gives up after 1 s
            assert isinstance(answers["second"], httpx.ReadTimeout)
            wait_until(lambda: queue_length(app.url) == 1, "the gateway letting go of the second")
            ray.get(gate.allow.remote(10))
            first.join(HANG_S)
            assert answers["first"].status_code == 200
            # The replica is free now: a call of the abandoned request would reach the engine.
            # A third request, sent after, is computed after it would have been.
            third = httpx.post(f"{app.url}/v1/nll", json=body("after"), timeout=HANG_S)
            assert third.status_code == 200
            calls = ray.get(gate.state.remote())["calls"]
            assert calls == [["held"], ["after"]], calls
        finally:
            ray.get(gate.allow.remote(10_000))
