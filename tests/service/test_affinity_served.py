"""Context-affinity routing on a real Serve app: an NLL model served by two replicas of a fake
engine whose every NLL is the process id of the replica that computed it
(gated_engines.PidGatedNLLEngine), so each answer says which replica served it.

* Through the gateway (its handle routes with the deployment's router): every request of a chat
  session whose context grows by a turn each time lands on one replica, and sessions of different
  contexts use both. Serve's default router would spread each session's requests over both
  replicas (a session keeps one replica by chance with probability 1/8 over its 4 requests).
* From this process's own handle: with the gate closed, the owner of a context holds every
  request sent to it; once it holds more than the bound, the next request of that context goes to
  the other replica. Each request is assigned before the next is sent, so the counts, not the
  machine's speed, decide where each goes: the router counts the requests it has running at a
  replica (a queue-length probe sent as the handle started and answered late cannot lower that
  count), and every router waits for a replica's queue length as long as a hang guard
  (tests/conftest.py), so a slow answer does not pass a replica over.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
import ray

from gated_engines import open_gate
from serve_apps import ONE_THREAD, app_args, deploy_app

pytestmark = [pytest.mark.serve, pytest.mark.slow]

MODEL = "affine-gpt"
APP = "affinity"
#: The app's affinity_max_owner_queue.
BOUND = 2
#: A hang guard, not a speed requirement.
HANG_S = 120.0
#: Sessions of the gateway test: all on one replica by chance with probability 2 / 2**SESSIONS.
SESSIONS = 16
TURNS = 4


def opening(session: int) -> list[str]:
    """A session's first turns, distinct from their first line on and longer than the key's head
    (HEAD_CHARS), so that every request of the session has the same key."""
    from dialscore_server.nll.affinity import HEAD_CHARS

    turns = [f"Session {session}: I have been thinking about getting a dog for a while now, but "
             "my flat is rather small and has no garden.",
             "A small flat is fine for many breeds; how much time do you spend at home each day?",
             "I work from home three days a week, and I walk a lot at weekends, mostly in the hills."]
    assert len("\n".join(turns)) > HEAD_CHARS
    return turns


#: The least a router may wait for a replica's queue length here (tests/conftest.py sets it).
PROBE_DEADLINE_S = 10.0


@pytest.fixture(scope="module")
def affine(served, stand_ins):
    from dialscore_server.scheduling.context_affinity import ContextAffinityRouter

    # Serve's default (0.1 s) would let a busy machine decide where a request goes: a replica that
    # does not answer its probe in time is passed over.
    waits = (ContextAffinityRouter.queue_len_response_deadline_s,
             ContextAffinityRouter.max_queue_len_response_deadline_s)
    assert min(waits) >= PROBE_DEADLINE_S, f"queue-length probe deadlines {waits}: conftest.py's " \
        "RAY_SERVE_*QUEUE_LENGTH_RESPONSE_DEADLINE_S did not reach ray.serve"
    args = app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "serve_as": MODEL,
         "serving": {**ONE_THREAD, "num_replicas": 2, "engine": "gated_engines:PidGatedNLLEngine",
                     "affinity_max_owner_queue": BOUND}}])
    with deploy_app(served, APP, args) as app:
        yield app


def test_a_session_keeps_its_replica_and_sessions_use_both(affine):
    gate = open_gate()
    ray.get(gate.allow.remote(10_000))
    owners: dict[int, float] = {}
    with httpx.Client(timeout=HANG_S) as client:
        for session in range(SESSIONS):
            served_by = []
            for turn in range(TURNS):
                context = opening(session) + [f"and turn {t} of it" for t in range(turn)]
                body = {"model": MODEL, "items": [{"context": context, "target": f"reply {turn}"}]}
                reply = client.post(f"{affine.url}/v1/nll", json=body)
                assert reply.status_code == 200, reply.text
                served_by.append(reply.json()["results"][0]["nll"])
            assert len(set(served_by)) == 1, f"session {session} was served by {served_by}"
            owners[session] = served_by[0]
    assert len(set(owners.values())) == 2, owners


def test_a_busy_owner_hands_the_next_request_to_the_other_replica(affine):
    from ray import serve

    from dialscore_server import compat
    from dialscore_server.nll.engine.encoding import NLLItem

    gate = open_gate()  # closed: the owner's first request holds its engine, the rest queue
    handle = serve.get_deployment_handle(f"nll-{MODEL}", app_name=APP)
    items = [NLLItem(target="yes .", context=tuple(opening(1000)))]
    responses = []
    for _ in range(BOUND + 3):
        response = handle.score.remote(items, False, "interactive")
        asyncio.run(asyncio.wait_for(compat.replica_accepted(response), HANG_S))
        responses.append(response)
    ray.get(gate.allow.remote(10_000))
    served_by = [r.result(timeout_s=HANG_S).unwrap().results[0].nll for r in responses]
    owner, other = served_by[0], served_by[-1]
    assert served_by == [owner] * (BOUND + 1) + [other] * 2 and other != owner, served_by
