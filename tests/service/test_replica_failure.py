"""Kill a model replica (by its actor) in the middle of a probe run, and the detector's in the middle
of a rerank load: Serve replaces it; meanwhile the gateway answers 424 for a request the dead
replica held and 503 with Retry-After while no replica accepts, never hangs; the client's retries
finish the work; every pair is scored exactly once; the replacement serves.

The middle is made, not waited for: this module's app (`failure`, under /failure) serves
start-gated fake engines (gated_engines.py) whose every engine call, and every start-up in a
replica, waits until the test lets it through. The test lets a few engine calls through, kills
the replica while the next one is held (so a request is on the dying replica, by construction),
keeps the replacement from starting until a request has met the outage (so a 503 is seen, by
construction), then lets everything through. No outcome depends on how fast the machine is;
the times printed are information.

Only the deployments `victim` and `victim-nli` of this module's app are killed, so the session's
shared app is unaffected. Replicas are found as Serve's controller lists them
(``serve_apps.running_replicas``): the state API (`ray.util.state.list_actors`) needs the
dashboard, which the test session does not start.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import httpx
import pytest
import ray

from dialscore.client import DialscoreClient
from gated_engines import open_gate
from probe_checks import RETRY, Answer, Answers, assert_retryable, assert_scored_once, probe_run
from serve_apps import ONE_THREAD, app_args, deploy_app, running_replicas
from waiting import InBackground, wait_until

pytestmark = [pytest.mark.serve, pytest.mark.slow]

APP = "failure"
#: A hang guard for every wait, not a speed requirement.
HANG_S = 180.0
#: Engine calls let through before the kill: the run is under way, far from done.
CALLS_BEFORE_KILL = 4
#: Permits enough for any test: the gate is open.
OPEN = 10**6


def replicas(deployment: str) -> list[str]:
    return running_replicas(APP, deployment)


def kill_replica(deployment: str) -> str:
    (name,) = replicas(deployment)
    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
    return name


def probe_until(url: str, body: dict, done: Callable[[httpx.Response], bool]) -> list[Answer]:
    """Requests one at a time, without retries, until one is `done` (a hang guard: HANG_S);
    every answer. Each must be a 200 or a retryable failure that says when (424, 503)."""
    log: list[Answer] = []
    deadline = time.monotonic() + HANG_S
    with httpx.Client(timeout=HANG_S) as http:
        while True:
            r = http.post(url, json=body)
            log.append(Answer(r.status_code, r.headers.get("x-error-type"), r.headers.get("retry-after")))
            assert_retryable(log)
            if done(r):
                return log
            assert time.monotonic() < deadline, f"not done within {HANG_S:.0f} s: {log}"
            time.sleep(0.25)


def is_shed(r: httpx.Response) -> bool:
    return r.status_code == 503 and r.headers.get("x-error-type") == "overloaded"


@pytest.fixture(scope="module")
def failing(stand_ins, sharp_stand_ins, served):
    """This module's own app: the deployments it kills, served by start-gated fake engines (their
    first start-ups are let through here)."""
    args = app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "serve_as": "victim",
         "serving": {**ONE_THREAD, "engine": "gated_engines:StartGatedNLLEngine"}}], classifiers=[
        {"name": "roberta-large-mnli", "serve_as": "victim-nli",
         "serving": {**ONE_THREAD, "engine": "gated_engines:StartGatedDetector"}}])
    first = open_gate()  # kept referenced: a gate nobody holds is gone
    ray.get(first.allow_starts.remote(OPEN))
    with deploy_app(served, APP, args) as app:
        yield app


@pytest.fixture()
def gate(failing):
    """A fresh gate: engine calls wait, start-ups may pass (a replica Serve restarts for reasons
    of its own is not held) until the test closes them; afterwards every one may pass."""
    g = open_gate()
    ray.get(g.allow_starts.remote(OPEN))
    yield g
    ray.get(g.allow.remote(OPEN))
    ray.get(g.allow_starts.remote(OPEN))


def kill_mid_run(gate, deployment: str, running: InBackground, answers: Answers) -> str:
    """Let CALLS_BEFORE_KILL engine calls through, then kill `deployment`'s replica while the
    next call is held (its request is on the replica: answered 424); returns the replica's name."""
    ray.get(gate.allow.remote(CALLS_BEFORE_KILL))
    state = ray.get(gate.wait_for.remote(1, CALLS_BEFORE_KILL, HANG_S))
    assert state["passed"] == CALLS_BEFORE_KILL and state["waiting"] >= 1, state
    assert running.is_alive()
    ray.get(gate.close_starts.remote())  # the replacement waits until the test lets it start
    old = kill_replica(deployment)
    answers.wait_for(424, HANG_S)
    return old


def outage_then_recovery(gate, deployment: str, old: str, url: str, body: dict) -> dict:
    """While the replacement replica waits for its start permit, a request meets the outage (503
    with Retry-After); then the replacement may start, engine calls pass, and it serves (200).
    Returns what the requests met."""
    state = ray.get(gate.wait_starting.remote(1, HANG_S))
    assert state["starting"] == 1, state  # Serve is replacing the replica: none accepts meanwhile
    outage = probe_until(url, body, is_shed)
    started = time.monotonic()
    ray.get(gate.allow_starts.remote(OPEN))
    ray.get(gate.allow.remote(OPEN))
    recovery = probe_until(url, body, lambda r: r.status_code == 200)
    new = wait_until(lambda: [r for r in replicas(deployment) if r != old], "a new replica listed", HANG_S)
    assert len(new) == 1 and old not in replicas(deployment), (old, replicas(deployment))
    return {"outage": dict(Counter(a.status for a in outage)),
            "recovery": dict(Counter(a.status for a in recovery)),
            "first_200_after_start_permit_s": round(time.monotonic() - started, 1)}


def test_kill_nll_replica_mid_probe_run_scores_every_pair_once(failing, gate, tmp_path):
    answers = Answers(f"/{APP}/v1/nll")
    running = probe_run(failing.url, "victim", tmp_path, answers)
    old = kill_mid_run(gate, "nll-victim", running, answers)
    seen = outage_then_recovery(gate, "nll-victim", old, f"{failing.url}/v1/nll",
                                {"model": "victim", "items": [{"context": [], "target": "x"}]})
    report = running.result(HANG_S)
    answers.close_inner()

    # The client met the failure (the held request's 424, maybe 503s) and retried it: exactly
    # once, every planned pair and item, none twice, no torn line.
    assert_retryable(answers.log)
    assert answers.statuses[424] >= 1, answers.statuses
    n_pairs, n_items = assert_scored_once(tmp_path, failing.url, "victim", ["attribution"], report)
    assert httpx.get(f"{failing.url}/readyz", timeout=30).status_code == 200
    print(f"\nreplica kill (nll): run {running.seconds:.1f} s, client saw {dict(answers.statuses)}, "
          f"direct requests {seen}, {n_pairs} pairs / {n_items} items scored once, 0 lost")


def test_kill_detector_replica_during_rerank_load_answers_every_request_once(failing, gate):
    context = [{"speaker": "A", "text": "I love dogs."}, {"speaker": "B", "text": "Do you have pets?"},
               {"speaker": "A", "text": "I have two dogs."}, {"speaker": "B", "text": "What are their names?"}]
    candidates = ["Rex and Max.", "I hate dogs.", "I have no pets.", "They are Rex and Max.", "Dogs?", "A cat."]
    n_workers, per_worker = 3, 12
    answers = Answers(f"/{APP}/v1/rerank")
    results: list = []
    failures: list = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        with DialscoreClient(failing.url, retry=RETRY, max_concurrency=1, transport=answers) as client:
            for i in range(per_worker):
                try:
                    out = client.rerank(context, candidates, model="victim-nli", speaker="A")
                    with lock:
                        results.append(((k, i), sorted(r.index for r in out.results)))
                except Exception as exc:  # noqa: BLE001 - collected and asserted below
                    with lock:
                        failures.append(((k, i), repr(exc)))

    # Each engine call carries at most one request per worker: with CALLS_BEFORE_KILL calls
    # through, most of the 36 requests are still to come when the replica dies.
    workers = [InBackground(lambda k=k: worker(k)) for k in range(n_workers)]
    load = InBackground(lambda: [w.result(2 * HANG_S) for w in workers])
    old = kill_mid_run(gate, "nli-victim-nli", load, answers)
    seen = outage_then_recovery(gate, "nli-victim-nli", old, f"{failing.url}/v1/rerank",
                                {"model": "victim-nli", "context": context, "candidates": candidates[:2],
                                 "speaker": "A"})
    load.result(2 * HANG_S)
    answers.close_inner()

    assert not failures, failures
    keys = [k for k, _ in results]
    assert len(keys) == len(set(keys)) == n_workers * per_worker
    assert all(indices == list(range(len(candidates))) for _, indices in results)
    assert_retryable(answers.log)
    assert answers.statuses[424] >= 1, answers.statuses
    print(f"\nreplica kill (detector): load {load.seconds:.1f} s, client saw {dict(answers.statuses)}, "
          f"direct requests {seen}, {len(keys)} rerank requests answered once, 0 lost")
