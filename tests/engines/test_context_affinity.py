"""Context-affinity routing without Ray's cluster: the affinity key of a request's context head,
the rendezvous choice of its owner, the fallback decision, and the router's ranking of replicas
(dialscore_server.scheduling.context_affinity) over stand-in replicas."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace
from typing import NamedTuple

import pytest
from ray.serve.request_router import PendingRequest, ReplicaID

from dialscore_server.contract.options import ServingOptions
from dialscore_server.nll.completions.serving import CompletionCall
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.affinity import (
    HEAD_CHARS, HEAD_TOKEN_IDS, NLLAffinityRouter, context_head, routing_options)
from dialscore_server.scheduling.context_affinity import (
    MAX_OWNER_QUEUE, HeldRequests, affinity_key, owner_of, owner_is_busy)

#: A session's opening turns, longer together than HEAD_CHARS.
OPENING = ("Hello! I have been thinking about getting a dog for a while now, but my flat is small.",
           "A small flat is fine for many breeds; how much time do you spend at home each day?",
           "I work from home three days a week, and I walk a lot at weekends, mostly in the hills nearby.")


def score_args(*items: NLLItem) -> tuple[list, dict]:
    """The arguments NLLHandle passes to ``score``."""
    return [list(items), False, "interactive"], {}


def key(args: list, kwargs: dict) -> bytes | None:
    """The affinity key of an NLL deployment call."""
    return affinity_key(context_head(args, kwargs))


def key_of(item: NLLItem) -> bytes | None:
    return key(*score_args(item))


def completion(*prompts: str | list[int]) -> CompletionCall:
    return CompletionCall(prompts=list(prompts), params=[f"prompt[{i}]" for i in range(len(prompts))],
                          echo=False, generate=False, logprobs=None)


# ---------------------------------------------------------------------------------- the key
def test_the_key_ignores_the_target_and_items_after_the_first():
    a = NLLItem(target="a labrador", context=OPENING)
    b = NLLItem(target="a cat", context=OPENING)
    other = NLLItem(target="x", context=("something else entirely",))
    assert key_of(a) == key_of(b) is not None
    assert key(*score_args(a, other)) == key_of(a)


def test_a_growing_context_keeps_its_key_once_its_head_is_full():
    assert len("\n".join(OPENING)) > HEAD_CHARS
    first = key_of(NLLItem(target="t", context=OPENING))
    grown = key_of(NLLItem(target="t", context=OPENING + ("Then a whippet!", "Or a terrier?")))
    assert first == grown


def test_different_heads_different_keys():
    base = NLLItem(target="t", context=OPENING)
    keys = {key_of(base),
            key_of(NLLItem(target="t", context=("Hi!",) + OPENING)),
            key_of(NLLItem(target="t", context=OPENING, knowledge="Dogs need walks.")),
            key_of(NLLItem(target="t", context=(OPENING[0] + " " + OPENING[1],) + OPENING[2:])),
            key_of(NLLItem(target="t", source="\n".join(OPENING).upper()))}
    assert len(keys) == 5


def test_knowledge_comes_first_and_a_source_is_its_own_head():
    item = NLLItem(target="t", context=("turn one", "turn two"), knowledge="K")
    assert context_head(*score_args(item)) == "K\nturn one\nturn two"
    assert context_head(*score_args(NLLItem(target="t", source="raw text " * 100))) == \
        ("raw text " * 100)[:HEAD_CHARS]


def test_no_context_no_key():
    assert key_of(NLLItem(target="t")) is None
    assert key_of(NLLItem(target="t", context=())) is None
    assert key_of(NLLItem(target="t", source="")) is None
    assert key([[], False, "interactive"], {}) is None
    assert key([], {}) is None  # card()
    assert key([SimpleNamespace(texts=["a"])], {}) is None  # tokenizer(call)


def test_the_key_is_stable_across_processes():
    """BLAKE2b of the head, not Python's salted hash: a known value."""
    assert key_of(NLLItem(target="t", context=("hello",))).hex() == \
        "46fb7408d4f285228f4af516ea25851b"


def test_completions_key_on_their_first_prompt():
    prompt = "\n".join(OPENING)
    assert key([completion(prompt + " A dog.", "unrelated"), "interactive"], {}) == \
        key([completion(prompt + " A cat."), "interactive"], {}) is not None
    ids = list(range(100))
    assert key([completion(ids)], {}) == key([completion(ids[:HEAD_TOKEN_IDS] + [7])], {})
    assert key([completion(ids)], {}) != key([completion(ids[1:])], {})
    assert key([completion("")], {}) is None
    assert key([], {"call": completion(prompt)}) == key([completion(prompt)], {})


# ------------------------------------------------------------------------------- rendezvous
REPLICAS = [f"replica-{i}" for i in range(4)]
KEYS = [key_of(NLLItem(target="t", context=(f"session {n}",))) for n in range(4000)]


def test_the_owner_is_the_same_whatever_the_order():
    for key in KEYS[:200]:
        assert owner_of(key, REPLICAS) == owner_of(key, REPLICAS[::-1])


def test_keys_spread_evenly():
    counts = Counter(owner_of(key, REPLICAS) for key in KEYS)
    assert set(counts) == set(REPLICAS)
    assert all(abs(c - 1000) < 120 for c in counts.values()), counts  # about 4 sigma


def test_removing_a_replica_moves_only_its_keys_and_spreads_them():
    before = {key: owner_of(key, REPLICAS) for key in KEYS}
    gone = REPLICAS[1]
    after = {key: owner_of(key, [r for r in REPLICAS if r != gone]) for key in KEYS}
    moved = [key for key in KEYS if before[key] != after[key]]
    assert all(before[key] == gone for key in moved)
    assert len(moved) == sum(1 for owner in before.values() if owner == gone)
    heirs = Counter(after[key] for key in moved)
    assert set(heirs) == set(REPLICAS) - {gone}
    assert all(abs(c - len(moved) / 3) < len(moved) / 6 for c in heirs.values()), heirs


def test_adding_a_replica_moves_keys_only_to_it():
    before = {key: owner_of(key, REPLICAS) for key in KEYS}
    grown = REPLICAS + ["replica-new"]
    moved = [key for key in KEYS if owner_of(key, grown) != before[key]]
    assert all(owner_of(key, grown) == "replica-new" for key in moved)
    assert abs(len(moved) - len(KEYS) / 5) < 120


# --------------------------------------------------------------------------------- fallback
def test_the_owner_is_busy_beyond_the_bound_or_when_silent():
    assert not owner_is_busy(0, 0)
    assert not owner_is_busy(8, 8)
    assert owner_is_busy(9, 8)
    assert owner_is_busy(1, 0)
    assert owner_is_busy(None, 8)


def test_the_option_and_the_router_share_the_default_bound():
    assert ServingOptions().affinity_max_owner_queue == MAX_OWNER_QUEUE
    assert ServingOptions().affinity_routing


# ------------------------------------------------------------------------------- the router
class StandInReplica:
    """What the router reads of a ``RunningReplica``: its id, its capacity, its queue probe."""

    def __init__(self, unique_id: str, queue_len: int | None = 0):
        self.replica_id = ReplicaID(unique_id, DEPLOYMENT)
        self.max_ongoing_requests = 64
        self.queue_len = queue_len  # None: the probe never answers
        self.probes = 0

    async def get_queue_len(self, *, deadline_s: float) -> int:
        self.probes += 1
        if self.queue_len is None:
            await asyncio.sleep(3600)
        return self.queue_len


class Deployment(NamedTuple):
    """What the router reads of a ``DeploymentID`` (hashable, as replica ids hash it)."""

    name: str
    app_name: str


DEPLOYMENT = Deployment("nll-test", "test")


def route(replicas: list[StandInReplica], args: list, max_owner_queue: int = 2,
          cached: dict[str, int] | None = None, held: dict[str, int] | None = None,
          ) -> tuple[list[list[str]], PendingRequest]:
    """The ranks (unique ids) the router gives a request with `args`, once it sent `held`
    requests to the replicas that are still running there (Serve's hooks, which also count
    them in the cache), and a probe then answered the lengths `cached` (into its cache)."""
    async def run():
        router = NLLAffinityRouter(deployment_id=DEPLOYMENT, handle_source=SimpleNamespace(value="test"),
                                       use_replica_queue_len_cache=True)
        router.initialize_state(max_owner_queue=max_owner_queue)
        router.queue_len_response_deadline_s = 0.05
        for r in replicas:
            for n in range((held or {}).get(r.replica_id.unique_id, 0)):
                router.on_send_request(r.replica_id)
                request_id = f"{r.replica_id.unique_id}{n}"
                sent = PendingRequest(args=args, kwargs={},
                                      metadata=SimpleNamespace(internal_request_id=request_id))
                router.on_request_routed(sent, r.replica_id, None)
            if cached and r.replica_id.unique_id in cached:
                router.on_new_queue_len_info(r.replica_id, cached[r.replica_id.unique_id])
        pending = PendingRequest(args=args, kwargs={}, metadata=None)
        ranks = await router.choose_replicas(replicas, pending)
        return [[r.replica_id.unique_id for r in rank] for rank in ranks], pending

    return asyncio.run(run())


ARGS = score_args(NLLItem(target="t", context=OPENING))[0]
IDS = ["a", "b", "c"]
OWNER = owner_of(key(ARGS, {}), IDS)
OTHERS = set(IDS) - {OWNER}


def test_the_owner_first_then_two_others():
    ranks, pending = route([StandInReplica(i) for i in IDS], ARGS, cached={OWNER: 2})
    assert ranks[0] == [OWNER] and set(ranks[1]) == OTHERS and len(ranks) == 2
    assert pending.routing_context.should_backoff  # every replica full: Serve backs off


def test_a_busy_owner_comes_after_the_others():
    ranks, _ = route([StandInReplica(i) for i in IDS], ARGS, cached={OWNER: 3})
    assert set(ranks[0]) == OTHERS and ranks[1:] == [[OWNER]]


def test_a_stale_probe_answer_does_not_hide_the_requests_this_router_sent():
    # A probe sent before the owner took 3 requests answers 0 after they were sent.
    ranks, _ = route([StandInReplica(i) for i in IDS], ARGS, held={OWNER: 3}, cached={OWNER: 0})
    assert set(ranks[0]) == OTHERS and ranks[1:] == [[OWNER]]
    ranks, _ = route([StandInReplica(i) for i in IDS], ARGS, held={OWNER: 2}, cached={OWNER: 0})
    assert ranks[0] == [OWNER]  # not beyond the bound


def test_held_requests_count_until_they_finish_in_either_order():
    held = HeldRequests()
    a, b = ReplicaID("a", DEPLOYMENT), ReplicaID("b", DEPLOYMENT)
    held.routed(a, "1")
    held.routed(a, "2")
    held.routed(b, "3")
    assert (held.count(a), held.count(b)) == (2, 1)
    held.completed(a, "1")
    assert (held.count(a), held.count(b)) == (1, 1)
    held.completed(b, "4")  # finished before Serve reported it routed
    held.routed(b, "4")
    assert held.count(b) == 1
    held.completed(a, "5")  # rejected by a, then accepted by b under the same id
    held.routed(b, "5")
    assert (held.count(a), held.count(b)) == (1, 2)
    held.completed(b, "5")
    held.completed(a, "2")
    held.completed(b, "3")
    assert (held.count(a), held.count(b)) == (0, 0)


def test_early_finishes_are_remembered_within_a_bound():
    held = HeldRequests()
    a = ReplicaID("a", DEPLOYMENT)
    for n in range(HeldRequests.EARLY + 10):  # rejected requests: finished, never routed
        held.completed(a, f"r{n}")
    assert len(held._early) == HeldRequests.EARLY
    held.routed(a, "r0")  # forgotten: counted, as a request finishing that late is rare
    held.routed(a, f"r{HeldRequests.EARLY + 9}")  # remembered: not counted
    b = ReplicaID("b", DEPLOYMENT)
    held.routed(b, f"r{HeldRequests.EARLY + 8}")  # remembered as finished at a, not at b
    assert held.count(a) == 1 and held.count(b) == 1


def test_an_unknown_queue_is_probed_and_a_silent_owner_is_busy():
    replicas = [StandInReplica(i, queue_len=5) for i in IDS]
    ranks, _ = route(replicas, ARGS, max_owner_queue=5)
    assert ranks[0] == [OWNER]
    assert [r.probes for r in replicas if r.replica_id.unique_id == OWNER] == [1]
    ranks, _ = route([StandInReplica(i, queue_len=None if i == OWNER else 0) for i in IDS], ARGS)
    assert ranks[-1] == [OWNER]


def test_no_context_goes_to_the_less_loaded_of_two():
    ranks, _ = route([StandInReplica(i) for i in IDS], score_args(NLLItem(target="t"))[0])
    assert len(ranks) == 1 and len(ranks[0]) == 2 and set(ranks[0]) <= set(IDS)


def test_a_lone_replica_takes_everything():
    assert route([StandInReplica("a")], ARGS, cached={"a": 50})[0] == [["a"]]


@pytest.mark.parametrize("bound", [-1])
def test_a_negative_bound_is_refused(bound):
    router = NLLAffinityRouter(deployment_id=DEPLOYMENT, handle_source=SimpleNamespace(value="test"))
    with pytest.raises(ValueError, match="max_owner_queue"):
        router.initialize_state(max_owner_queue=bound)


def test_nll_deployments_route_with_the_nll_router_only_when_asked():
    """serving.affinity_routing installs NLLAffinityRouter, with the owner's bound, in the NLL
    deployment's options; off, Serve's default router (no request_router_config)."""
    config = routing_options(ServingOptions(affinity_max_owner_queue=3))["request_router_config"]
    # Serve keeps the class as its import path, which every caller's handle imports.
    assert config.request_router_class == \
        f"{NLLAffinityRouter.__module__}.{NLLAffinityRouter.__qualname__}"
    assert NLLAffinityRouter.__module__ == "dialscore_server.nll.affinity"
    assert config.request_router_kwargs == {"max_owner_queue": 3}
    assert routing_options(ServingOptions(affinity_routing=False)) == {}
