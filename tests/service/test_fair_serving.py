"""Fair and bounded serving on the real app: a large contradiction request is computed in chunks
that share the classifier replica with other requests, and its remaining chunks are dropped when
nobody waits for it any more (client gone, deadline passed)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from ray import serve

from serve_apps import ONE_THREAD, app_args, deploy_app

pytestmark = pytest.mark.serve

MODEL = "roberta-large-mnli"
#: 128 dialogues x 128 earlier turns of the last speaker = 16384 pairs (max_request_pairs): 128
#: chunks of one dialogue each (a dialogue is never split; default chunk_pairs 64); about 7 s on
#: the tiny stand-in classifier, 2 CPU cores.
LARGE = {"model": MODEL, "dialogues": [
    {"turns": [{"speaker": 1, "text": f"I have {j} dogs and {d} cats."} for j in range(129)]}
    for d in range(128)]}
PAIRS = 128 * 128
SMALL = {"model": MODEL, "dialogues": [{"turns": [
    {"speaker": 1, "text": "I love dogs."}, {"speaker": 2, "text": "Me too."},
    {"speaker": 1, "text": "I hate dogs."}]}]}


def stats(app: str = "dialscore", deployment: str = f"nli-{MODEL}") -> dict[str, float]:
    return serve.get_deployment_handle(deployment, app).work_stats.remote().result()


def wait_settled(app: str = "dialscore", deployment: str = f"nli-{MODEL}", timeout: float = 120) -> dict:
    """The replica's stats once nothing is in flight (the running chunk, if any, has finished)."""
    end = time.monotonic() + timeout
    while True:
        s = stats(app, deployment)
        if s["in_flight"] == 0 or time.monotonic() > end:
            return s
        time.sleep(0.2)


def test_a_small_request_is_not_stuck_behind_a_large_one(served):
    """Sent after a 16384-pair request on the same replica, a 1-pair request finishes first."""
    finished: dict[str, float] = {}

    def post(name: str, body: dict) -> None:
        r = httpx.post(f"{served.url}/v1/contradiction", json=body, timeout=300)
        assert r.status_code == 200, r.text[:300]
        finished[name] = time.monotonic()

    before = wait_settled()
    large = threading.Thread(target=post, args=("large", LARGE))
    large.start()
    time.sleep(1.0)  # the large request is admitted and computing
    assert "large" not in finished
    post("small", SMALL)
    large.join()
    assert finished["small"] < finished["large"]
    after = wait_settled()
    assert after["done"] - before["done"] == PAIRS + 1
    assert after["chunks"] - before["chunks"] >= 129  # 128 chunks + the small request


def test_a_disconnected_clients_remaining_work_is_dropped(served):
    """The client gives up after 1 s: the replica drops the chunks it had not computed yet and
    the metrics say so; at most the chunk that was running is computed for nobody."""
    before = wait_settled()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{served.url}/v1/contradiction", json=LARGE, timeout=httpx.Timeout(30, read=1.0))
    after = wait_settled()
    done = after["done"] - before["done"]
    dropped = after["dropped"] - before["dropped"]
    wasted = after["wasted"] - before["wasted"]
    assert done + dropped + wasted == PAIRS
    assert dropped >= PAIRS // 2, (done, dropped, wasted)
    assert wasted <= 128  # one chunk at most (here one dialogue of 128 pairs)
    assert after["in_flight"] == 0


@pytest.mark.slow
def test_work_is_dropped_when_the_deadline_passes(served, stand_ins):
    """With a 2 s request deadline, the gateway answers 408 and the replica drops the rest."""
    args = app_args(stand_ins, models=[{"name": "dialogpt-medium", "serving": ONE_THREAD}],
                    classifiers=[{"name": MODEL, "serving": ONE_THREAD}],
                    request_timeout_s=2.0, queue_timeout_s=1.0)
    with deploy_app(served, "deadline", args) as app:
        r = httpx.post(f"{app.url}/v1/contradiction", json=LARGE, timeout=60)
        assert r.status_code == 408, r.text[:300]
        s = wait_settled("deadline")
        assert s["dropped"] >= PAIRS // 2, s
        assert s["done"] + s["dropped"] + s["wasted"] == PAIRS


NLL_MODEL = "dialogpt-medium"
#: 1024 items (max_items) of distinct 4-turn contexts, within max_request_tokens (counted from
#: bytes): many chunks of chunk_tokens (2048).
LARGE_NLL = {"model": NLL_MODEL, "items": [
    {"context": [f"i have {t} dogs and {d} cats ." for t in range(4)],
     "target": f"i never had a dog , i have {d} cats ."} for d in range(1024)]}
SMALL_NLL = {"model": NLL_MODEL, "items": [{"context": ["do you like dogs ?"], "target": "yes ."}]}


def test_a_small_nll_request_is_not_stuck_behind_a_large_one(served):
    """NLL replicas share too: sent after a probe-sized /v1/nll request on the same replica, a
    one-item request finishes first, and every token of both is computed once."""
    deployment = f"nll-{NLL_MODEL}"
    finished: dict[str, float] = {}
    usage: dict[str, int] = {}

    def post(name: str, body: dict) -> None:
        r = httpx.post(f"{served.url}/v1/nll", json=body, timeout=300)
        assert r.status_code == 200, r.text[:300]
        finished[name] = time.monotonic()
        usage[name] = r.json()["usage"]["source_tokens"] + r.json()["usage"]["target_tokens"]

    before = wait_settled(deployment=deployment)
    large = threading.Thread(target=post, args=("large", LARGE_NLL))
    large.start()
    deadline = time.monotonic() + 60
    while stats(deployment=deployment)["in_flight"] == before["in_flight"]:
        assert large.is_alive() and time.monotonic() < deadline, "the large request never started"
        time.sleep(0.05)  # the large request is admitted and computing
    post("small", SMALL_NLL)
    large.join()
    assert finished["small"] < finished["large"]
    after = wait_settled(deployment=deployment)
    assert after["unit"] == "tokens"
    assert after["done"] - before["done"] == usage["large"] + usage["small"]
    assert after["chunks"] - before["chunks"] >= 20
