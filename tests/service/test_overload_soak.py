"""Overload, by construction (`python -m loadtests.soak` runs the long real soak): with more
requests than a model replica and its queue can hold, the service admits exactly what they hold
and sheds every other request at once with 503 ``overloaded`` and Retry-After; an admitted
request waits behind at most what the replica and the queue held when it came; once the load
stops, it serves again.

The app's one model (`gated-tiny`) holds 1 request and queues 1 (``max_ongoing_requests: 1``,
``max_queued_requests: 1``) and serves the gated fake NLL engine (gated_engines.py): every
engine call waits until the test lets it through. So while the test holds the engine, the replica
and its queue are full for as long as the test wants, and which request runs when is read from
the gate's call order: no count or bound here depends on how fast the machine is. The queue
deadline is off (``queue_timeout_s: null``): a queued request waits for the test, not for a
clock.
"""

from __future__ import annotations

import httpx
import pytest
import ray

from gated_engines import open_gate
from serve_apps import ONE_THREAD, app_args, deploy_app
from waiting import Posts

pytestmark = [pytest.mark.serve, pytest.mark.slow]

#: A hang guard for every wait, not a speed requirement.
HANG_S = 120.0
APP = "overload"
MODEL = "gated-tiny"
MAX_ONGOING, MAX_QUEUED = 1, 1
#: Requests sent at once while the replica and its queue are full, and how many such bursts.
BURST, ROUNDS = 8, 5


def nll_body(label: str) -> dict:
    """A one-item request; the gate records `label` (its target) when its engine call runs."""
    return {"model": MODEL, "items": [{"context": ["do you like dogs ?"], "target": label}]}


@pytest.fixture(scope="module")
def tiny(served, stand_ins):
    args = app_args(stand_ins, models=[{"name": "dialogpt-medium", "serve_as": MODEL, "serving": {
        **ONE_THREAD, "engine": "gated_engines:GatedNLLEngine",
        "max_ongoing_requests": MAX_ONGOING, "max_queued_requests": MAX_QUEUED}}],
        request_timeout_s=2 * HANG_S, queue_timeout_s=None)
    with deploy_app(served, APP, args) as app:
        # The gateway reads a model's card after scoring and caches it; a first lookup made
        # while the queue is full would itself be shed. Listing the models fills the cache.
        assert httpx.get(f"{app.url}/v1/models", timeout=HANG_S).status_code == 200
        yield app


@pytest.fixture()
def gate(tiny):
    """A fresh, closed gate; afterwards every engine call may pass."""
    g = open_gate()
    yield g
    ray.get(g.allow.remote(10_000))


def assert_shed(label: str, answer: httpx.Response | httpx.HTTPError) -> None:
    """`answer` is the service's 503 ``overloaded`` with a Retry-After of at least a second."""
    assert isinstance(answer, httpx.Response), (label, answer)
    assert answer.status_code == 503, (label, answer.status_code, answer.text[:300])
    assert answer.json()["error"]["type"] == "overloaded", (label, answer.text[:300])
    assert float(answer.headers["retry-after"]) >= 1, (label, answer.headers)


def test_overload_is_shed_exactly_admitted_requests_wait_behind_the_queue_and_it_recovers(tiny, gate):
    url = f"{tiny.url}/v1/nll"
    # The replica is full: the first request's engine call is held at the gate.
    posts = {"r0": Posts(url, {"r0": nll_body("r0")})}
    state = ray.get(gate.wait_for.remote(1, 0, HANG_S))
    assert state["waiting"] == 1 and state["passed"] == 0, state
    running = "r0"
    admitted = ["r0"]
    arrived_after = {"r0": 0}  # engine calls that had gone through when the request was sent
    shed = 0
    for r in range(ROUNDS):
        labels = [f"burst{r}.{i}" for i in range(BURST)]
        burst = Posts(url, {label: nll_body(label) for label in labels})
        arrived_after.update({label: r for label in labels})
        # The replica holds one, the queue one: exactly one of the burst is queued, every other
        # request is answered at once, 503 with Retry-After, while the engine is still held.
        answers = burst.wait_answers(BURST - MAX_QUEUED, HANG_S)
        assert len(answers) == BURST - MAX_QUEUED, answers
        for label, answer in answers.items():
            assert_shed(label, answer)
        shed += len(answers)
        (queued,) = set(labels) - set(answers)
        # One engine call through: the running request is answered, the queued one takes its
        # place in the replica (its engine call now waits at the gate).
        ray.get(gate.allow.remote(1))
        state = ray.get(gate.wait_for.remote(1, r + 1, HANG_S))
        assert state["waiting"] == 1 and state["passed"] == r + 1, state
        response = posts[running].answer(running, HANG_S)
        assert response.status_code == 200, (running, response.text[:300])
        assert len(burst.answers) == BURST - MAX_QUEUED, burst.answers  # still queued: no answer
        posts[queued], running = burst, queued
        admitted.append(queued)
    ray.get(gate.allow.remote(1))
    response = posts[running].answer(running, HANG_S)
    assert response.status_code == 200, response.text[:300]

    # Exact shedding: of 1 + ROUNDS x BURST requests, one per burst was admitted.
    assert shed == ROUNDS * (BURST - MAX_QUEUED) and len(admitted) == ROUNDS + 1
    # Only admitted requests reached the engine, in the order they were admitted, and each ran
    # behind at most what the replica and the queue held when it came (MAX_ONGOING running,
    # MAX_QUEUED - 1 queued before it): a bounded wait, read from the gate, not from a clock.
    calls = ray.get(gate.state.remote())["calls"]
    assert [c for call in calls for c in call] == admitted, (calls, admitted)
    for position, label in enumerate(admitted):
        ahead = position - arrived_after[label]
        assert 0 <= ahead <= MAX_ONGOING + MAX_QUEUED - 1, (label, position, arrived_after[label])

    # Recovery: with the engine free again, requests one after another are all answered 200.
    ray.get(gate.allow.remote(10_000))
    with httpx.Client(timeout=HANG_S) as http:
        for k in range(3):
            r = http.post(url, json=nll_body(f"after{k}"))
            assert r.status_code == 200, r.text[:300]
    print(f"\noverload: {1 + ROUNDS * BURST} requests, {shed} shed at once with 503 + Retry-After, "
          f"{len(admitted)} admitted and answered 200, each behind at most "
          f"{MAX_ONGOING + MAX_QUEUED - 1} other; 3 of 3 answered 200 after the load")
