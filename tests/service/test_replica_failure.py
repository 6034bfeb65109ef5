"""Kill a model replica (by its actor) in the middle of a probe run, and the detector's in the middle
of a rerank load: Serve replaces it; meanwhile the gateway answers 424 (a request the dead replica
held) or 503 with Retry-After (no replica accepts within `queue_timeout_s`), never hangs; the
client's retries finish the work; every pair is scored exactly once.

Only the deployments `victim` and `victim-nli` of this module's own app (`failure`, under
/failure) are killed, so the session's shared app is unaffected. Replicas are found with
`ray.util.list_named_actors` (Serve names them ``SERVE_REPLICA::<app>#<deployment>#<id>`` in
namespace "serve"): the state API (`ray.util.state.list_actors`) needs the dashboard, which the
test session does not start.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import httpx
import pytest

from dialscore.client import DialscoreClient
from dialscore.probes import SAMPLE_DATA as SAMPLE
from dialscore.probes.run import run_probes
from probe_checks import RETRY, KillAfter, assert_scored_once
from serve_apps import ONE_THREAD, app_args, deploy_app

pytestmark = [pytest.mark.serve, pytest.mark.slow]

APP = "failure"


def replicas(deployment: str) -> list[str]:
    import ray

    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == "serve" and a["name"].startswith(f"SERVE_REPLICA::{APP}#{deployment}#"))


def kill_replica(deployment: str) -> str:
    import ray

    (name,) = replicas(deployment)
    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
    return name


class Replacement(threading.Thread):
    """Started at the kill: seconds until Serve lists a new replica of `deployment` instead of `old`."""

    def __init__(self, deployment: str, old: str, limit_s: float = 90.0):
        super().__init__(daemon=True)
        self.deployment, self.old, self.limit_s = deployment, old, limit_s
        self.seconds: float | None = None

    def run(self) -> None:
        start = time.monotonic()
        while time.monotonic() - start < self.limit_s:
            now = replicas(self.deployment)
            if now and self.old not in now:
                self.seconds = time.monotonic() - start
                return
            time.sleep(0.1)

    def result(self) -> float:
        self.join(self.limit_s + 5)
        assert self.seconds is not None, f"{self.deployment}: no replacement after {self.limit_s:.0f} s"
        return self.seconds


class Prober(threading.Thread):
    """One request at a time, no retries, until a 200 comes back after `min_s` (or `limit_s`)."""

    def __init__(self, url: str, path: str, body: dict, min_s: float = 0.5, limit_s: float = 90.0):
        super().__init__(daemon=True)
        self.url, self.path, self.body, self.min_s, self.limit_s = url, path, body, min_s, limit_s
        self.log: list[tuple[float, float, int, str | None, str | None]] = []

    def run(self) -> None:
        start = time.monotonic()
        with httpx.Client(base_url=self.url, timeout=120) as client:
            while time.monotonic() - start < self.limit_s:
                t = time.monotonic()
                r = client.post(self.path, json=self.body)
                kind = r.json()["error"]["type"] if r.status_code != 200 else None
                self.log.append((t - start, time.monotonic() - t, r.status_code, kind, r.headers.get("retry-after")))
                if r.status_code == 200 and t - start > self.min_s:
                    return
                time.sleep(0.25)

    def check(self, served) -> dict:
        """Every answer a 200, a 424 or a 503 (with Retry-After), each within the queue timeout
        (never near the request deadline); the outage was seen; returns figures."""
        queue_timeout = served.args.queue_timeout_s
        for t, latency, status, kind, retry_after in self.log:
            assert status in (200, 424, 503), self.log
            if status != 200:
                assert kind == {424: "model_error", 503: "overloaded"}[status] and int(retry_after) >= 1
                assert latency <= queue_timeout + 3.0, self.log
        assert self.log and self.log[-1][2] == 200, f"no 200 after the kill: {self.log}"
        outage = self.log[-1][0]
        return {"statuses": dict(Counter(s for _, _, s, _, _ in self.log)), "first_200_after_s": round(outage, 2),
                "max_answer_s": round(max(x[1] for x in self.log), 2)}


@pytest.fixture(scope="module")
def served(stand_ins, sharp_stand_ins, served):
    """This module's own app: the deployments it kills."""
    nli = {"source": str(sharp_stand_ins["nli-contradiction-first"])}
    args = app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "serve_as": "victim", "serving": ONE_THREAD}], classifiers=[
        {"name": "roberta-large-mnli", "serve_as": "victim-nli", "overrides": nli, "serving": ONE_THREAD}])
    with deploy_app(served, APP, args) as app:
        yield app


def test_kill_nll_replica_mid_probe_run_scores_every_pair_once(served, tmp_path):
    events: dict = {}
    # Several seconds of compute on the stand-in (the most items a request may carry), so it is
    # still running when the replica is killed 0.8 s after it was sent.
    heavy = {"model": "victim", "items": [{"context": ["the dog sold a house because it was happy " * 10] * 3,
                                           "target": "a reply with several words " * 4}] * 1024}

    def kill():
        # A long request the replica is computing when it dies: answered 424 at once.
        def held():
            t = time.monotonic()
            r = httpx.post(f"{served.url}/v1/nll", json=heavy, timeout=120)
            events["held"] = (r.status_code, r.headers.get("retry-after"), time.monotonic() - t,
                              time.monotonic() < events.get("kill_started", float("inf")))
        events["held_thread"] = threading.Thread(target=held, daemon=True)
        events["held_thread"].start()
        time.sleep(0.8)
        events["prober"] = Prober(served.url, "/v1/nll", {"model": "victim", "items": [{"context": [], "target": "x"}]})
        events["kill_started"] = time.monotonic()
        events["old"] = kill_replica("nll-victim")
        events["replacement"] = Replacement("nll-victim", events["old"])
        events["replacement"].start()
        events["prober"].start()

    transport = KillAfter(f"/{APP}/v1/nll", after=8, kill=kill)
    with DialscoreClient(served.url, retry=RETRY, max_concurrency=2, transport=transport) as client:
        started = time.monotonic()
        report = run_probes(client, SAMPLE, ["victim"], ["attribution"], seed=0, out_dir=tmp_path,
                            chunk_size=16, progress=False, plots=False, n_boot=100)
        run_s = time.monotonic() - started
    transport.inner.close()
    assert "old" in events, "the kill never happened (the run was too short?)"
    replaced_s = events["replacement"].result()
    events["prober"].join(120)
    events["held_thread"].join(120)
    outage = events["prober"].check(served)
    held_status, held_retry_after, held_s, done_before_kill = events["held"]
    if not done_before_kill:  # (a fast machine may finish it before the kill: nothing to check)
        assert held_status in (424, 503) and int(held_retry_after) >= 1 and held_s < 30, events["held"]
    assert held_status == 424 or outage["statuses"].keys() - {200}, "the outage was never visible"
    assert transport.statuses[424] + transport.statuses[503] >= 1, transport.statuses  # the client retried

    # Exactly once: every planned pair and item, none twice, no torn line.
    n_pairs, n_items = assert_scored_once(tmp_path, served.url, "victim", ["attribution"], report)
    assert httpx.get(f"{served.url}/readyz", timeout=30).status_code == 200
    print(f"\nreplica kill (nll): run {run_s:.1f} s, replacement listed after {replaced_s:.1f} s, client saw "
          f"{dict(transport.statuses)}, held request {held_status} after {held_s:.2f} s, prober {outage}, "
          f"{n_pairs} pairs / {n_items} items scored once, 0 lost")


def test_kill_detector_replica_during_rerank_load_answers_every_request_once(served):
    context = [{"speaker": "A", "text": "I love dogs."}, {"speaker": "B", "text": "Do you have pets?"},
               {"speaker": "A", "text": "I have two dogs."}, {"speaker": "B", "text": "What are their names?"}]
    candidates = ["Rex and Max.", "I hate dogs.", "I have no pets.", "They are Rex and Max.", "Dogs?", "A cat."]
    n_workers, per_worker = 3, 12
    events: dict = {}

    def kill():
        events["prober"] = Prober(served.url, "/v1/rerank", {"model": "victim-nli", "context": context,
                                                             "candidates": candidates[:2], "speaker": "A"})
        events["old"] = kill_replica("nli-victim-nli")
        events["replacement"] = Replacement("nli-victim-nli", events["old"])
        events["replacement"].start()
        events["prober"].start()

    transport = KillAfter(f"/{APP}/v1/rerank", after=6, kill=kill)
    answers: list = []
    failures: list = []

    def worker(k: int):
        with DialscoreClient(served.url, retry=RETRY, max_concurrency=1, transport=transport) as client:
            for i in range(per_worker):
                try:
                    out = client.rerank(context, candidates, model="victim-nli", speaker="A")
                    answers.append(((k, i), sorted(r.index for r in out.results)))
                except Exception as exc:  # noqa: BLE001 - collected and asserted below
                    failures.append(((k, i), repr(exc)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    transport.inner.close()
    assert "old" in events, "the kill never happened"
    replaced_s = events["replacement"].result()
    events["prober"].join(120)
    outage = events["prober"].check(served)
    assert outage["statuses"].keys() - {200} or transport.statuses[424], "the outage was never visible"
    assert not failures, failures
    keys = [k for k, _ in answers]
    assert len(keys) == len(set(keys)) == n_workers * per_worker
    assert all(indices == list(range(len(candidates))) for _, indices in answers)
    assert transport.statuses[424] + transport.statuses[503] >= 1, transport.statuses
    print(f"\nreplica kill (detector): replacement listed after {replaced_s:.1f} s, client saw "
          f"{dict(transport.statuses)}, prober {outage}, {len(keys)} rerank requests answered once, 0 lost")
