"""Fair and bounded serving on a real Serve app: a large request is computed in chunks that share
the model replica with other requests, and its remaining chunks are dropped when nobody waits for
it any more (client gone, deadline passed).

The app serves fake engines whose every engine call waits at a gate the test opens
(gated_engines.py), and the replica's work is read from its own metrics (``dialscore_work_*``
through Ray's metrics agent). So the test, not the machine's speed, decides how much is computed
before a small request arrives, a client leaves or a deadline passes: each count is exact.
"""

from __future__ import annotations

import threading

import httpx
import pytest
import ray

from gated_engines import GPT, NLI, fake_tokens, gated_args, open_gate
from raw_socket import send_json
from serve_apps import deploy_app, wait_until, work

pytestmark = [pytest.mark.serve, pytest.mark.slow]

#: A hang guard for gate waits, not a speed requirement.
HANG_S = 120.0
#: The deadline test's request deadline by the clock: longer than any hang guard, so that only
#: the gated deadline timer, which the test drives, can end the request first.
CLOCK_DEADLINE_S = 3600.0

#: 128 dialogues x 128 earlier turns of the last speaker = 16384 pairs (max_request_pairs): 128
#: chunks of one dialogue each (a dialogue is never split; default chunk_pairs 64).
LARGE = {"model": NLI, "dialogues": [
    {"turns": [{"speaker": 1, "text": f"I have {j} dogs and {d} cats."} for j in range(129)]}
    for d in range(128)]}
PAIRS = 128 * 128
CHUNK = 128
SMALL = {"model": NLI, "dialogues": [{"turns": [
    {"speaker": 1, "text": "I love dogs."}, {"speaker": 2, "text": "Me too."},
    {"speaker": 1, "text": "I hate dogs."}]}]}
#: 1024 items (max_items) of distinct 4-turn contexts: many chunks of chunk_tokens (2048).
LARGE_NLL = {"model": GPT, "items": [
    {"context": [f"i have {t} dogs and {d} cats ." for t in range(4)],
     "target": f"i never had a dog , i have {d} cats ."} for d in range(1024)]}
SMALL_NLL = {"model": GPT, "items": [{"context": ["do you like dogs ?"], "target": "yes ."}]}


def post_in_background(url: str, body: dict, results: dict, name: str) -> threading.Thread:
    def run() -> None:
        try:
            results[name] = httpx.post(url, json=body, timeout=HANG_S)
        except httpx.HTTPError as exc:
            results[name] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def settled(app: str, model: str, before: dict, **grew: float) -> dict:
    """The replica's work once each counter in `grew` grew by exactly that much and nothing is in
    flight (the counts reach the metrics agent about once a second)."""
    def check():
        now = work(app, model)
        delta = {k: now[k] - before[k] for k in now}
        ok = delta["in_flight"] == 0 and all(delta[k] == v for k, v in grew.items())
        return delta if ok else None

    return wait_until(check, f"{model}'s work to grow by {grew}")


def admitted(app: str, model: str, before: dict, cost: float) -> None:
    """Wait until the replica admitted `cost` more work (a request's chunks are queued as soon as
    it is admitted)."""
    wait_until(lambda: work(app, model)["admitted"] - before["admitted"] >= cost,
               f"{cost} more work admitted on {model}")


def calls_until(gate, label: str, most: int) -> list[list[str]]:
    """Let engine calls through one at a time until one computed `label` (at most `most` calls);
    the calls that went through."""
    for k in range(1, most + 1):
        ray.get(gate.allow.remote(1))
        calls = ray.get(gate.wait_for.remote(0, k, HANG_S))["calls"]
        assert len(calls) == k, f"engine call {k} never ran"
        if label in calls[-1]:
            return calls
    raise AssertionError(f"{label!r} was not computed within {most} engine calls: {calls}")


def test_a_small_request_is_not_stuck_behind_a_large_one(fair, gate):
    """Sent while a 16384-pair request's first chunk is in the engine, a 1-pair request rides in
    the very next engine call, beside the large request's second chunk, and is answered while
    the large one still has 126 chunks to go."""
    url = f"{fair.url}/v1/contradiction"
    before = work("fair", NLI)
    answers: dict = {}
    large = post_in_background(url, LARGE, answers, "large")
    assert ray.get(gate.wait_for.remote(1, 0, HANG_S))["waiting"] == 1  # first chunk in the engine
    small = post_in_background(url, SMALL, answers, "small")
    admitted("fair", NLI, before, PAIRS + 1)  # the small request is queued
    # A request's next chunk is queued when its current one's call begins; the small request
    # (interactive; the large one is over the interactive cap, so bulk) rides within the next
    # two calls, and no call carries more than one chunk (one dialogue) of the large request.
    calls = calls_until(gate, "I hate dogs.", 3)
    assert all(sum(t != "I hate dogs." for t in c) <= 1 for c in calls)
    small.join(HANG_S)
    assert answers["small"].status_code == 200, answers["small"].text[:300]
    assert large.is_alive()
    ray.get(gate.allow.remote(CHUNK))
    large.join(HANG_S)
    assert answers["large"].status_code == 200, answers["large"].text[:300]
    assert len(answers["large"].json()["results"]) == 128
    settled("fair", NLI, before, done=PAIRS + 1, dropped=0, wasted=0)
    # one chunk per engine call for the large request: 128 calls, plus at most one for the small
    calls = ray.get(gate.state.remote())["calls"]
    assert sum(len(c) for c in calls) == 129 and all(len(c) <= 2 for c in calls)
    assert len(calls) in (128, 129)


def test_a_disconnected_clients_remaining_work_is_dropped(fair, gate):
    """The client closes its connection while the first chunk is in the engine: the replica drops
    the chunks it had not computed yet and the metrics say so; only the chunk that was running is computed
    for nobody."""
    before = work("fair", NLI)
    client = send_json(f"{fair.url}/v1/contradiction", LARGE)
    assert ray.get(gate.wait_for.remote(1, 0, HANG_S))["waiting"] == 1
    client.close()  # the engine is held: no answer has come, and the client leaves
    settled("fair", NLI, before, done=0, dropped=PAIRS - CHUNK, wasted=CHUNK)
    ray.get(gate.allow.remote(1))  # the running chunk finishes, for nobody
    assert ray.get(gate.wait_for.remote(0, 1, HANG_S))["passed"] == 1
    settled("fair", NLI, before, done=0, dropped=PAIRS - CHUNK, wasted=CHUNK)


def test_work_is_dropped_when_the_deadline_passes(served, stand_ins):
    """The request deadline passes while the first chunk is held in the engine: the gateway answers
    408 and the replica drops the rest; every count is exact. The test decides when the deadline
    passes (the app's deadline timer waits at the gate), after the first chunk reached the
    engine."""
    args = gated_args(stand_ins, request_timeout_s=CLOCK_DEADLINE_S,
                      deadline_timer="gated_engines:gated_deadline")
    gate = open_gate()  # before the app: every deadline the gateway times waits at it
    try:
        with deploy_app(served, "deadline", args) as app:
            before = work("deadline", NLI)
            results: dict = {}
            post = post_in_background(f"{app.url}/v1/contradiction", LARGE, results, "large")
            state = ray.get(gate.wait_for.remote(1, 0, HANG_S))
            assert state["waiting"] == 1, state  # the first chunk is in the engine
            ray.get(gate.pass_deadlines.remote())
            post.join(HANG_S)
            r = results.get("large")
            assert isinstance(r, httpx.Response) and r.status_code == 408, r
            assert r.headers["x-work-dropped"] == "true"
            state = ray.get(gate.state.remote())
            assert state["waiting"] == 1 and state["passed"] == 0
            settled("deadline", NLI, before, done=0, dropped=PAIRS - CHUNK, wasted=CHUNK)
    finally:
        ray.get(gate.allow.remote(10_000))


def test_a_small_nll_request_is_not_stuck_behind_a_large_one(fair, gate):
    """NLL replicas share too: sent while a 1024-item request's first chunk is in the engine, a
    one-item request rides in the next engine call and is answered first, and every token of
    both is computed once."""
    url = f"{fair.url}/v1/nll"
    before = work("fair", GPT)
    answers: dict = {}
    large = post_in_background(url, LARGE_NLL, answers, "large")
    assert ray.get(gate.wait_for.remote(1, 0, HANG_S))["waiting"] == 1
    small = post_in_background(url, SMALL_NLL, answers, "small")
    admitted("fair", GPT, before, fake_tokens(LARGE_NLL) + fake_tokens(SMALL_NLL))
    calls = calls_until(gate, "yes .", 3)
    assert calls[-1][-1] == "yes ." and all("yes ." not in c for c in calls[:-1])
    small.join(HANG_S)
    assert answers["small"].status_code == 200, answers["small"].text[:300]
    assert large.is_alive()
    ray.get(gate.allow.remote(1024))
    large.join(HANG_S)
    assert answers["large"].status_code == 200, answers["large"].text[:300]
    usage = {name: r.json()["usage"]["source_tokens"] + r.json()["usage"]["target_tokens"]
             for name, r in answers.items()}
    settled("fair", GPT, before, done=usage["large"] + usage["small"], dropped=0, wasted=0)
    assert len(ray.get(gate.state.remote())["calls"]) >= 20  # many chunks, not one call


#: 4 dialogues x 64 earlier turns of the last speaker = 256 pairs: 4 chunks of 64 (chunk_pairs),
#: over the default interactive cap (one chunk), so bulk whatever it asks.
def medium(tag: str) -> dict:
    return {"model": NLI, "dialogues": [
        {"turns": [{"speaker": 1, "text": f"{tag}: I have {j} dogs and {d} cats."}
                   for j in range(65)]} for d in range(4)]}


#: A two-candidate rerank (2 pairs): within the interactive cap.
RERANK = {"model": NLI, "context": [{"speaker": 1, "text": "I love dogs."},
                                    {"speaker": 2, "text": "Me too."}],
          "candidates": ["I detest dogs.", "Dogs are my favourite."]}


def test_an_interactive_rerank_is_served_before_bulk_chunks_queued_earlier(fair, gate):
    """Two bulk contradiction requests are queued while the first one's first chunk is in the
    engine: one says ``X-Dialscore-Priority: bulk``, the other asks for nothing but costs more than
    the interactive lane admits. A small rerank sent after them is the whole of the very next
    engine call, and every answer says the lane it was served in."""
    before = work("fair", NLI)
    answers: dict = {}

    def post(path: str, body: dict, name: str, headers: dict | None = None) -> threading.Thread:
        def run() -> None:
            answers[name] = httpx.post(f"{fair.url}{path}", json=body, headers=headers,
                                       timeout=HANG_S)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    asked = post("/v1/contradiction", medium("asked"), "asked", {"X-Dialscore-Priority": "bulk"})
    assert ray.get(gate.wait_for.remote(1, 0, HANG_S))["waiting"] == 1  # its first chunk runs
    costly = post("/v1/contradiction", medium("costly"), "costly")
    admitted("fair", NLI, before, 512)
    rerank = post("/v1/rerank", RERANK, "rerank")
    admitted("fair", NLI, before, 514)
    calls = calls_until(gate, "I detest dogs.", 2)  # the call that ran, then the next one
    assert sorted(calls[1]) == sorted(RERANK["candidates"])
    rerank.join(HANG_S)
    assert answers["rerank"].status_code == 200, answers["rerank"].text[:300]
    assert answers["rerank"].headers["x-dialscore-lane"] == "interactive"
    assert asked.is_alive() and costly.is_alive()
    ray.get(gate.allow.remote(100))
    for thread in (asked, costly):
        thread.join(HANG_S)
    for name in ("asked", "costly"):
        assert answers[name].status_code == 200, answers[name].text[:300]
        assert answers[name].headers["x-dialscore-lane"] == "bulk"
    settled("fair", NLI, before, done=514, dropped=0, wasted=0)
