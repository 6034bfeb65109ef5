"""The context cache of one NLL replica: key/value states of recently computed token prefixes,
kept across engine calls, so a context sent again (the next bot turn's rerank, lm-eval's next
answer option) is not computed again.

Contract:

* **What an entry holds.** The keys/values of every layer for the first ``n`` tokens of one
  context (``[heads, n, head_dim]`` per layer, in the model's dtype). For a /v1/nll item only
  source positions are stored, never its target positions, so an entry is context, whoever sent
  it. A completions prompt is scored at every position after its first token (echo), so it has
  no unscored context: its entry (a *scored entry*) holds the prompt's positions and, beside
  them, each position's scored record (the log-probability of the next prompt token, with the
  top-k alternatives the prompt asked for), so a later prompt that starts alike (lm-eval's next
  answer option after the same context) reads both back instead of computing them.
* **Lookup** (:meth:`ContextCache.lookup`): the longest prefix of a token sequence that some entry
  holds, up to a limit the caller gives; an entry serves every sequence that starts with any of
  its prefixes (keys/values of position ``j`` depend only on tokens ``0..j`` under causal
  attention). Prefixes shorter than :attr:`ContextCache.block` tokens are not served (a common
  first word is not worth a lookup or a second pass).
* **Exactness** is the caller's: the engine never takes a cached prefix that reaches a position
  whose hidden state it must project (the position that predicts a target token is always
  computed in the pass, never read from the cache), so numbers with the cache on equal those
  with it off to float rounding of the same layer on a different pass shape.
* **Bound.** At most ``max_bytes`` of tensors are held; an insert first evicts the least
  recently used *leaves* (entries no other entry extends) until it fits; an entry larger than the
  bound alone is not stored.
* **Shared prefixes** (as SGLang's radix tree shares its nodes). A new entry that shares at
  least a block of tokens with a held one (its *parent*: the one sharing the most) stores only
  the positions after the shared part, and reads the shared part through its parent; so a chat
  session's growing context stores each turn's new positions once, and siblings (lm-eval's four
  answer options after one context) hold the context once between them. A parent is not evicted
  while an entry extends it; a hit on an entry makes it and its ancestors the most recently used.
  An entry's bytes are its own positions' (and its records'), so the bound counts every held
  tensor once.
* **Index.** Every entry registers the hashes of its prefixes at multiples of ``block`` tokens;
  a lookup bisects over the query's block prefixes (present prefixes are contiguous from the
  first block), then extends the match token by token against the candidate entries, so hash
  collisions cannot return a wrong prefix.

Threads: the replica's engine thread alone changes the cache (:meth:`lookup`, :meth:`insert`,
:meth:`clear`); admission threads :meth:`probe` it to size a request's chunks (the serving's
``NLLEngine.positions``). Each public method holds the cache's lock while it runs, so a probe
never reads an index an insert or an eviction is changing; a :class:`CachedPrefix` returned holds
its own references to the tensors it views. :attr:`stats` holds plain counters that a metrics
reader may copy at any time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, TypeVar

from dialscore_server.scheduling.planner import MIN_SHARED_PREFIX, common_prefix

#: Layer keys/values of a prefix: one (keys, values) pair per layer, each ``[heads, n, head_dim]``.
LayerStates = list[tuple[Any, Any]]

F = TypeVar("F", bound=Callable[..., Any])


def _locked(method: F) -> F:
    """`method` of :class:`ContextCache`, run while holding the cache's lock."""

    @wraps(method)
    def run(self: ContextCache, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


@dataclass
class CacheStats:
    """Running totals of one cache: lookups that found a prefix (`hits`) or none (`misses`),
    tokens served from it (`hit_tokens`), entries evicted to make room (`evictions`), and what it
    holds now (`bytes`, `entries`)."""

    hits: int = 0
    misses: int = 0
    hit_tokens: int = 0
    evictions: int = 0
    bytes: int = 0
    entries: int = 0


#: What a scored entry's records cost in memory, per position, counted against the bound (a float
#: or a small record with one or a few alternatives, and the list slot that holds it).
SCORE_BYTES = 160


@dataclass(frozen=True)
class CachedPrefix:
    """A lookup's answer: the first `length` tokens' layer states as `segments` (consecutive runs
    of positions, oldest first, together exactly `length`: views of entries, read only) and, from
    a scored entry, `scores[j]` = position j's record (predicting token j + 1) for every j <
    `length` (None otherwise)."""

    length: int
    segments: list[LayerStates]
    scores: Sequence[Any] | None = None

    @property
    def states(self) -> LayerStates:
        """The segments joined: one ``(keys, values)`` per layer, ``[heads, length, head_dim]``
        (a copy when there is more than one segment)."""
        if len(self.segments) == 1:
            return self.segments[0]
        import torch

        return [(torch.cat([seg[layer][0] for seg in self.segments], 1),
                 torch.cat([seg[layer][1] for seg in self.segments], 1))
                for layer in range(len(self.segments[0]))]


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    states: LayerStates  # positions base..len(tokens) only; the first `base` are the parent's
    nbytes: int
    scores: tuple[Any, ...] | None = None  # position j predicting token j + 1, j < len - 1
    top_k: int = 0  # the alternatives each record holds
    parent: int | None = None  # the entry holding positions 0..base (None: base is 0)
    base: int = 0
    children: set[int] = field(default_factory=set)


def _nbytes(states: LayerStates) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in states)


class ContextCache:
    """Least-recently-used store of context key/value states, bounded in bytes (see module).

    Args:
        max_bytes: most bytes of tensors held (> 0).
        block: the index's granularity, and the shortest prefix served, in tokens.
    """

    def __init__(self, max_bytes: int, block: int = MIN_SHARED_PREFIX):
        if max_bytes < 1 or block < 1:
            raise ValueError("max_bytes and block must be positive")
        self.max_bytes = max_bytes
        self.block = block
        self.stats = CacheStats()
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # least recently used first
        self._by_prefix: dict[int, dict[int, None]] = {}  # block-prefix hash -> entry ids
        self._next_id = 0
        self._lock = threading.RLock()

    @_locked
    def __len__(self) -> int:
        return len(self._entries)

    @_locked
    def clear(self) -> None:
        """Drop every entry (not counted as evictions; the other counters are kept)."""
        self._entries.clear()
        self._by_prefix.clear()
        self.stats.bytes = self.stats.entries = 0

    # ----------------------------------------------------------------------------- lookup
    @_locked
    def lookup(self, tokens: Sequence[int], limit: int, scored_limit: int = 0, top_k: int = 0
               ) -> CachedPrefix | None:
        """The longest cached prefix of `tokens` no longer than `limit` (at least :attr:`block`
        tokens), or None. From a scored entry whose records hold `top_k` alternatives, the prefix
        may reach `scored_limit` instead, stopping one token short of the match (so every record
        returned predicts a token `tokens` shares). A hit makes its entry the most recently used;
        every call counts as one hit or one miss."""
        tokens = tuple(tokens)
        best = self._best(tokens, limit, scored_limit, top_k)
        if best is None:
            self.stats.misses += 1
            return None
        n, eid = best
        entry = self._entries[eid]
        for held in reversed(self._chain(eid)):  # ancestors first, the entry last
            self._entries.move_to_end(held)
        self.stats.hits += 1
        self.stats.hit_tokens += n
        return CachedPrefix(n, self._segments(eid, n), entry.scores[:n] if n > limit else None)

    def _chain(self, eid: int) -> list[int]:
        """`eid` and its ancestors, the entry first."""
        chain = [eid]
        while (parent := self._entries[chain[-1]].parent) is not None:
            chain.append(parent)
        return chain

    def _segments(self, eid: int, n: int) -> list[LayerStates]:
        """Views of the first `n` positions of entry `eid`'s tokens, as consecutive runs held by
        it and its ancestors, oldest first."""
        out: list[LayerStates] = []
        for held in self._chain(eid):
            entry = self._entries[held]
            if n > entry.base:
                out.append([(k[:, : n - entry.base], v[:, : n - entry.base])
                            for k, v in entry.states])
                n = entry.base
        out.reverse()
        return out

    def _best(self, tokens: tuple[int, ...], limit: int, scored_limit: int, top_k: int
              ) -> tuple[int, int] | None:
        """(length, entry id) of :meth:`lookup`'s answer, or None."""
        reach = min(max(limit, scored_limit), len(tokens))
        best: tuple[int, int] | None = None
        for eid in self._deepest_block(tokens, reach // self.block):
            entry = self._entries[eid]
            match = common_prefix(entry.tokens, tokens)
            n = min(limit, match)
            if entry.scores is not None and entry.top_k == top_k:
                n = max(n, min(scored_limit, match - 1))
            if n >= self.block and (best is None or n > best[0]):
                best = (n, eid)
        return best

    @_locked
    def probe(self, tokens: Sequence[int], limit: int, scored_limit: int = 0, top_k: int = 0
              ) -> int:
        """The length :meth:`lookup` would return for the same arguments (0 for a miss), without
        counting it or touching the recency order."""
        best = self._best(tuple(tokens), limit, scored_limit, top_k)
        return best[0] if best else 0

    @_locked
    def count_misses(self, n: int) -> None:
        """Count `n` lookups that the caller settled with :meth:`probe` as misses."""
        self.stats.misses += n

    def _deepest_block(self, tokens: tuple[int, ...], blocks: int) -> list[int]:
        """Entry ids registered under `tokens`' longest block prefix (of at most `blocks` blocks)
        that any entry has; none when not even the first block is cached."""
        lo, hi = 0, blocks  # prefix of lo blocks present (0: trivially); look for the deepest
        found: dict[int, None] = {}
        while lo < hi:
            mid = (lo + hi + 1) // 2
            ids = self._by_prefix.get(hash(tokens[: mid * self.block]))
            if ids:
                lo, found = mid, ids
            else:
                hi = mid - 1
        return list(found) if lo else []

    # ----------------------------------------------------------------------------- insert
    @_locked
    def insert(self, tokens: Sequence[int], states: LayerStates,
               scores: Sequence[Any] | None = None, top_k: int = 0) -> bool:
        """Store `states` (one ``(keys, values)`` per layer, ``[heads, len(tokens), head_dim]``)
        as the context `tokens`, with, for a scored entry, `scores` (one record per position but
        the last: ``len(tokens) - 1``) holding `top_k` alternatives each. The positions after the
        part shared with the entry sharing most (at least a block; none: all of them) are copied,
        so the caller's pass buffers can be freed; least recently used leaves other than that
        parent's line are evicted until the bound holds. Returns whether it was stored (not when
        shorter than a block, already held whole by an entry, which is then made the most recently
        used, or when its own positions would not fit beside its ancestors)."""
        import torch

        tokens = tuple(tokens)
        if len(tokens) < self.block:
            return False
        if scores is not None and len(scores) != len(tokens) - 1:
            raise ValueError("a scored entry has one record per position but the last")
        held = self.lookup_exact(tokens, scores is not None, top_k)
        if held is not None:
            self._entries.move_to_end(held)
            return False
        parent, base = self._parent_of(tokens)
        own = [(k[:, base:], v[:, base:]) for k, v in states]
        nbytes = _nbytes(own) + (SCORE_BYTES * len(scores) if scores is not None else 0)
        if self.stats.bytes + nbytes > self.max_bytes:
            line = self._chain(parent) if parent is not None else []
            if sum(self._entries[e].nbytes for e in line) + nbytes > self.max_bytes:
                return False
        while self.stats.bytes + nbytes > self.max_bytes:
            self._remove(next(e for e, entry in self._entries.items()
                              if not entry.children and e != parent))
            self.stats.evictions += 1
        eid, self._next_id = self._next_id, self._next_id + 1
        # One copy each, contiguous (a view's .contiguous() then .clone() would copy twice).
        copies = [(k.clone(memory_format=torch.contiguous_format),
                   v.clone(memory_format=torch.contiguous_format)) for k, v in own]
        self._entries[eid] = _Entry(tokens, copies, nbytes,
                                    tuple(scores) if scores is not None else None, top_k,
                                    parent, base)
        if parent is not None:
            self._entries[parent].children.add(eid)
        for b in range(1, len(tokens) // self.block + 1):
            self._by_prefix.setdefault(hash(tokens[: b * self.block]), {})[eid] = None
        self.stats.bytes += nbytes
        self.stats.entries = len(self._entries)
        return True

    def _parent_of(self, tokens: tuple[int, ...]) -> tuple[int | None, int]:
        """(the entry sharing the longest prefix with `tokens`, at least a block, and how many
        tokens it shares), or (None, 0)."""
        best: tuple[int | None, int] = (None, 0)
        for eid in self._deepest_block(tokens, len(tokens) // self.block):
            n = common_prefix(self._entries[eid].tokens, tokens)
            if n >= self.block and n > best[1]:
                best = (eid, n)
        return best

    @_locked
    def lookup_exact(self, tokens: tuple[int, ...], scored: bool = False, top_k: int = 0
                     ) -> int | None:
        """The id of an entry holding at least all of `tokens` (with `scored`, a scored entry
        with `top_k` alternatives), if any (no stats counted)."""
        for eid in self._deepest_block(tokens, len(tokens) // self.block):
            entry = self._entries[eid]
            if scored and (entry.scores is None or entry.top_k != top_k):
                continue
            if common_prefix(entry.tokens, tokens) == len(tokens):
                return eid
        return None

    def _remove(self, eid: int) -> None:
        """Drop leaf `eid` (no entry extends it)."""
        entry = self._entries.pop(eid)
        assert not entry.children, "only a leaf is removed"
        if entry.parent is not None:
            self._entries[entry.parent].children.discard(eid)
        for b in range(1, len(entry.tokens) // self.block + 1):
            key = hash(entry.tokens[: b * self.block])
            ids = self._by_prefix.get(key)
            if ids is not None:
                ids.pop(eid, None)
                if not ids:
                    del self._by_prefix[key]
        self.stats.bytes -= entry.nbytes
        self.stats.entries = len(self._entries)
