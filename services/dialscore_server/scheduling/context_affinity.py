"""Context-affinity routing: a Ray Serve request router that sends requests whose contexts start
alike to the same replica, so that the replica's context cache (key/value states of the token
prefixes it computed recently) serves them. What a request's context is, is the endpoint's: a
subclass supplies :meth:`ContextAffinityRouter.context_head` (the NLL deployments':
:class:`dialscore_server.nll.affinity.NLLAffinityRouter`).

It plugs in through Serve's public extension point (``ray.serve.request_router``), as
``ray.serve.llm``'s prefix-aware router does: a deployment names the router class in its
``request_router_config`` (:func:`router_config`), and every handle to the deployment (the
gateway's, the reranker's) routes with its own instance of it, in the caller's process.

For each request:

1. :func:`affinity_key` hashes the *head* of the request's context, the first characters of it
   that the subclass's ``context_head`` returns. A chat session whose context grows by a turn
   each request keeps its key once its context is longer than the head, and so do lm-eval's
   requests that share one context. A request with no context has no key and goes to the
   least-loaded replica (power of two choices, as Serve's default router).
2. :func:`owner_of` picks the key's *owner* among the live replicas by rendezvous
   (highest-random-weight) hashing: adding or removing a replica moves only the keys it gains or
   held, and a dead replica's keys spread over the others (it loses only its cache).
3. :func:`owner_is_busy` falls back to the least-loaded of two other replicas when the owner's
   queue exceeds ``max_owner_queue``, or its length cannot be had; the owner then takes the
   request only if both are full. The owner's queue is what this handle's router knows of it:
   Serve's queue-length cache, and at least the requests this router has sent there that are
   still running (:class:`HeldRequests`), because a probe answered before some of them arrived
   can overwrite the cache with a lower count.

The pure parts (key, owner, fallback) are plain functions, tested without Ray.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ray.exceptions import RayError
from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from dialscore_server import compat

#: Default of ``max_owner_queue``: requests the owner may hold (running or queued) and still be
#: given one more. Each engine call of a replica serves one chunk of every request it holds, so a
#: request joining an owner that holds more than this waits for that many chunks of others' work
#: before its own is done: longer than recomputing a context of a few hundred tokens elsewhere.
MAX_OWNER_QUEUE = 8


def affinity_key(head: str | None) -> bytes | None:
    """A stable 16-byte key of a context's `head` (BLAKE2b: the same in every process and across
    restarts, unlike Python's salted ``hash``), or None for no head."""
    return None if head is None else hashlib.blake2b(head.encode("utf-8"), digest_size=16).digest()


def rendezvous_weight(key: bytes, replica: str) -> int:
    """The weight of `replica` (its unique id) for `key`: a 64-bit hash of both."""
    digest = hashlib.blake2b(key + b"\x00" + replica.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_of(key: bytes, replicas: Sequence[str]) -> str:
    """The owner of `key` among `replicas` (unique ids, at least one): the one of highest
    :func:`rendezvous_weight` (ties, vanishingly rare, to the greatest id). The same for the same
    set in any order; removing a replica changes the owner only of the keys it owned."""
    return max(replicas, key=lambda r: (rendezvous_weight(key, r), r))


def owner_is_busy(queue_len: int | None, max_owner_queue: int) -> bool:
    """Whether a request leaves its owner for the least-loaded other replica: the owner holds
    more than `max_owner_queue` requests, or its queue length is unknown (it did not answer)."""
    return queue_len is None or queue_len > max_owner_queue


class HeldRequests:
    """The requests one router sent that a replica accepted and has not finished, by replica:
    a lower bound of each replica's queue that no stale probe answer can lower.

    Serve tells the router of each request twice (``RequestRouter`` hooks), on its event loop:
    :meth:`routed` when a replica accepted it, :meth:`completed` when it finished, failed or was
    rejected there (a rejected request is then sent to another replica, under the same id). The
    two come from different threads, so a request may finish at a replica before it is seen
    routed there: the last :data:`EARLY` such finishes are remembered, by replica and request,
    and cancel that routing.
    """

    #: Finishes remembered before their request is seen routed to the same replica (a rejected
    #: request finishes without being routed there, so this is bounded; a finish this late in a
    #: run this long is lost).
    EARLY = 1024

    def __init__(self) -> None:
        self._held: dict[ReplicaID, set[str]] = {}
        self._early: OrderedDict[tuple[ReplicaID, str], None] = OrderedDict()

    def routed(self, replica_id: ReplicaID, request_id: str) -> None:
        """`replica_id` accepted the request `request_id`."""
        if (replica_id, request_id) in self._early:
            del self._early[replica_id, request_id]  # it finished there already
            return
        self._held.setdefault(replica_id, set()).add(request_id)

    def completed(self, replica_id: ReplicaID, request_id: str) -> None:
        """The request `request_id` sent to `replica_id` finished there (or was rejected)."""
        held = self._held.get(replica_id)
        if held is not None and request_id in held:
            held.discard(request_id)
            if not held:
                del self._held[replica_id]
            return
        self._early[replica_id, request_id] = None
        if len(self._early) > self.EARLY:
            self._early.popitem(last=False)

    def count(self, replica_id: ReplicaID) -> int:
        """The requests `replica_id` holds of this router's."""
        return len(self._held.get(replica_id, ()))


class ContextAffinityRouter(RequestRouter):
    """Routes each request to the owner of its context's key, unless the owner is busy (see the
    module's docstring); requests without a key go to the less loaded of two random replicas.
    A subclass supplies :meth:`context_head`.

    Router kwarg (``request_router_kwargs``): ``max_owner_queue`` (default
    :data:`MAX_OWNER_QUEUE`, at least 0). Without Serve's FIFO mixin: a replica chosen for a
    request is given to that request, never to an older one with another key. Without the
    locality and multiplex mixins: an owner on another node is still the owner."""

    max_owner_queue: int = MAX_OWNER_QUEUE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held = HeldRequests()

    def initialize_state(self, max_owner_queue: int = MAX_OWNER_QUEUE) -> None:
        """Serve calls this with the deployment's ``request_router_kwargs``; a bound below 0 is
        refused (ValueError), an unknown kwarg too (TypeError)."""
        if max_owner_queue < 0:
            raise ValueError(f"max_owner_queue must be at least 0, not {max_owner_queue}")
        self.max_owner_queue = max_owner_queue

    def context_head(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """The head of the context of a deployment call with positional `args` and keyword
        `kwargs` (what makes its key), or None where it has no context."""
        raise NotImplementedError

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None
                              ) -> list[list[RunningReplica]]:
        """Ranks of replicas for `pending_request`, most preferred first: the owner alone, then
        two others (the request goes to the less loaded one that has room), or, where the owner
        is busy, the two others first and then the owner."""
        if pending_request is not None:
            compat.request_backoff(pending_request)  # every replica full: retry after a backoff
        if not candidate_replicas:
            return []
        key = (affinity_key(self.context_head(pending_request.args, pending_request.kwargs))
               if pending_request is not None else None)
        if key is None:
            return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        owner = by_id[owner_of(key, list(by_id))]
        rest = [r for r in candidate_replicas if r is not owner]
        others = random.sample(rest, min(2, len(rest)))
        if not others:
            return [[owner]]
        if owner_is_busy(await self.queue_len(owner), self.max_owner_queue):
            return [others, [owner]]
        return [[owner], others]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID,
                          result: Any) -> None:
        """Serve's hook: `replica_id` accepted `pending_request`; it counts as held there."""
        super().on_request_routed(pending_request, replica_id, result)
        self.held.routed(replica_id, pending_request.metadata.internal_request_id)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        """Serve's hook: the request finished, failed or was rejected; it is no longer held."""
        super().on_request_completed(replica_id, internal_request_id)
        self.held.completed(replica_id, internal_request_id)

    async def queue_len(self, replica: RunningReplica) -> int | None:
        """The requests `replica` holds as this router knows them: its queue-length cache (kept
        by Serve: one more on each request sent, one less on each finished, set by the replica's
        answers to probes and requests), else a probe of the replica (public
        ``RunningReplica.get_queue_len``) whose answer goes into the cache; and never fewer than
        this router's requests running there (:class:`HeldRequests`). None when the length is not
        cached and the replica does not answer within Serve's probe deadline."""
        known = compat.cached_queue_len(self, replica.replica_id)
        if known is None:
            deadline = self.queue_len_response_deadline_s
            try:
                known = await asyncio.wait_for(replica.get_queue_len(deadline_s=deadline),
                                               deadline)
            except (TimeoutError, RayError):
                return None
            self.on_new_queue_len_info(replica.replica_id, known)
        return max(known, self.held.count(replica.replica_id))


def router_config(router: type[ContextAffinityRouter],
                  max_owner_queue: int = MAX_OWNER_QUEUE) -> RequestRouterConfig:
    """The ``request_router_config`` of a deployment routed by `router`, a subclass of
    :class:`ContextAffinityRouter`."""
    return RequestRouterConfig(request_router_class=router,
                               request_router_kwargs={"max_owner_queue": max_owner_queue})
