"""The context cache of one NLL replica: key/value states of recently computed token prefixes,
kept across engine calls, so a context sent again (the next bot turn's rerank, lm-eval's next
answer option) is not computed again.

Contract:

* **What an entry holds.** The keys/values of every layer for the first ``n`` tokens of one
  context (``[heads, n, head_dim]`` per layer, in the model's dtype), computed by the engine's
  shared-prefix pass. Only source positions are stored: never a request's target positions, so
  an entry is context, whoever sent it.
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
  recently used entries until it fits; an entry larger than the bound alone is not stored. An
  entry whose tokens are a prefix of a new entry's is removed when the new one is stored (the
  new one serves everything it served: a chat session's growing context keeps one entry, not
  one per turn). Siblings (two continuations of one context) each hold their own copy of the
  shared part: unlike SGLang's radix tree, no node is shared between entries.
* **Index.** Every entry registers the hashes of its prefixes at multiples of ``block`` tokens;
  a lookup bisects over the query's block prefixes (present prefixes are contiguous from the
  first block), then extends the match token by token against the candidate entries, so hash
  collisions cannot return a wrong prefix.

Not thread-safe: the replica's engine thread alone calls :meth:`lookup` and :meth:`insert`;
:attr:`stats` holds plain counters that a metrics reader may copy at any time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dialscore_server.scheduling.planner import MIN_SHARED_PREFIX, common_prefix

#: Layer keys/values of a prefix: one (keys, values) pair per layer, each ``[heads, n, head_dim]``.
LayerStates = list[tuple[Any, Any]]


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


@dataclass(frozen=True)
class CachedPrefix:
    """A lookup's answer: the first `length` tokens' layer states (views of an entry; read only)."""

    length: int
    states: LayerStates


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    states: LayerStates
    nbytes: int


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

    def __len__(self) -> int:
        return len(self._entries)

    # ----------------------------------------------------------------------------- lookup
    def lookup(self, tokens: Sequence[int], limit: int) -> CachedPrefix | None:
        """The longest cached prefix of `tokens` no longer than `limit` (at least :attr:`block`
        tokens), or None. A hit makes its entry the most recently used; every call counts as one
        hit or one miss."""
        tokens = tuple(tokens)
        limit = min(limit, len(tokens))
        candidates = self._deepest_block(tokens, limit // self.block)
        best: tuple[int, int] | None = None  # (length, entry id)
        for eid in candidates:
            n = min(limit, common_prefix(self._entries[eid].tokens, tokens))
            if n >= self.block and (best is None or n > best[0]):
                best = (n, eid)
        if best is None:
            self.stats.misses += 1
            return None
        n, eid = best
        self._entries.move_to_end(eid)
        self.stats.hits += 1
        self.stats.hit_tokens += n
        return CachedPrefix(n, [(k[:, :n], v[:, :n]) for k, v in self._entries[eid].states])

    def probe(self, tokens: Sequence[int], limit: int) -> int:
        """The length :meth:`lookup` would return for `tokens` and `limit` (0 for a miss), without
        counting it or touching the recency order."""
        tokens = tuple(tokens)
        limit = min(limit, len(tokens))
        n = max((min(limit, common_prefix(self._entries[eid].tokens, tokens))
                 for eid in self._deepest_block(tokens, limit // self.block)), default=0)
        return n if n >= self.block else 0

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
    def insert(self, tokens: Sequence[int], states: LayerStates) -> bool:
        """Store `states` (one ``(keys, values)`` per layer, ``[heads, len(tokens), head_dim]``)
        as the context `tokens`; copies them, so the caller's pass buffers can be freed. Entries
        `tokens` extends are removed, then least recently used ones until the bound holds.
        Returns whether it was stored (not when shorter than a block, larger than the bound, or
        already held whole by an entry, which is then made the most recently used)."""
        tokens = tuple(tokens)
        if len(tokens) < self.block:
            return False
        held = self.lookup_exact(tokens)
        if held is not None:
            self._entries.move_to_end(held)
            return False
        nbytes = _nbytes(states)
        if nbytes > self.max_bytes:
            return False
        for eid in self._covered_by(tokens):
            self._remove(eid)
        while self._entries and self.stats.bytes + nbytes > self.max_bytes:
            self._remove(next(iter(self._entries)))
            self.stats.evictions += 1
        eid, self._next_id = self._next_id, self._next_id + 1
        copies = [(k.contiguous().clone(), v.contiguous().clone()) for k, v in states]
        self._entries[eid] = _Entry(tokens, copies, nbytes)
        for b in range(1, len(tokens) // self.block + 1):
            self._by_prefix.setdefault(hash(tokens[: b * self.block]), {})[eid] = None
        self.stats.bytes += nbytes
        self.stats.entries = len(self._entries)
        return True

    def lookup_exact(self, tokens: tuple[int, ...]) -> int | None:
        """The id of an entry holding at least all of `tokens`, if any (no stats counted)."""
        for eid in self._deepest_block(tokens, len(tokens) // self.block):
            if common_prefix(self._entries[eid].tokens, tokens) == len(tokens):
                return eid
        return None

    def _covered_by(self, tokens: tuple[int, ...]) -> list[int]:
        """Entries whose tokens are a prefix of `tokens` (the new entry serves all they serve)."""
        out: dict[int, None] = {}
        # An entry of n tokens is registered under its last block prefix, of n // block blocks.
        for b in range(1, len(tokens) // self.block + 1):
            for eid in self._by_prefix.get(hash(tokens[: b * self.block]), {}):
                held = self._entries[eid].tokens
                if len(held) <= len(tokens) and tokens[: len(held)] == held:
                    out[eid] = None
        return list(out)

    def _remove(self, eid: int) -> None:
        entry = self._entries.pop(eid)
        for b in range(1, len(entry.tokens) // self.block + 1):
            key = hash(entry.tokens[: b * self.block])
            ids = self._by_prefix.get(key)
            if ids is not None:
                ids.pop(eid, None)
                if not ids:
                    del self._by_prefix[key]
        self.stats.bytes -= entry.nbytes
        self.stats.entries = len(self._entries)

    def clear(self) -> None:
        """Drop every entry (counted as neither eviction nor miss)."""
        for eid in list(self._entries):
            self._remove(eid)
