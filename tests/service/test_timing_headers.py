"""The timing headers are milliseconds, as text-embeddings-inference sends them: on the gated app
the test holds an engine call for at least half a second (a lower bound it controls), so the
answer's ``x-compute-time`` is at least 500 and a request queued behind it reports at least 500
of ``x-queue-time`` (in seconds both would read 0 or 1)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import ray

from gated_engines import GPT, fake_tokens
from serve_apps import wait_until, work

pytestmark = [pytest.mark.serve, pytest.mark.slow]

HELD_S = 0.5
HANG_S = 120.0


def body(target: str) -> dict:
    return {"model": GPT, "items": [{"context": ["hi"], "target": target}]}


def test_compute_and_queue_times_are_milliseconds(fair, gate):
    answers: dict[str, httpx.Response] = {}

    def post(name: str, target: str) -> None:
        answers[name] = httpx.post(f"{fair.url}/v1/nll", json=body(target), timeout=HANG_S)

    before = work("fair", GPT)
    first = threading.Thread(target=post, args=("first", "one"))
    first.start()
    assert ray.get(gate.wait_for.remote(1, 0, HANG_S))["waiting"] == 1  # the first call is held
    second = threading.Thread(target=post, args=("second", "two"))
    second.start()
    admitted = fake_tokens(body("one")) + fake_tokens(body("two"))
    wait_until(lambda: work("fair", GPT)["admitted"] - before["admitted"] >= admitted,
               "the second request admitted and queued")
    time.sleep(HELD_S)  # both wait at least this long: the first in its call, the second queued
    ray.get(gate.allow.remote(2))
    first.join(HANG_S)
    second.join(HANG_S)
    assert answers["first"].status_code == answers["second"].status_code == 200
    assert int(answers["first"].headers["x-compute-time"]) >= HELD_S * 1000
    assert int(answers["second"].headers["x-queue-time"]) >= HELD_S * 1000
    assert int(answers["first"].headers["x-tokenization-time"]) >= 0
