"""Batch planning shared by the engines: which rows go into which forward pass, on lengths and
token tuples only (no torch, no model).

* :func:`pack` cuts a sorted sequence into the longest runs a token budget allows (the NLL
  engine's batches and prefix passes, the NLI classifier's batches).
* :func:`chunk_passes` cuts length-sorted continuation rows of a shared-prefix batch into passes
  under the token budget, the key/value budget and the padding rules of :class:`PassLimits`
  (what a pass costs beyond its positions, on CPU or on a GPU: :func:`pass_limits_for`).
* :func:`share_prefixes` groups token sequences that start alike, so that each group's common
  prefix is computed once (:class:`SharedPrefixGroup`).
* :func:`chain_hosts` finds, for each token sequence, a longer one that starts with it, whose
  causal pass computes every position of the shorter one (a dialogue's turns scored in one pass).
* :class:`BatchStats` is what one engine call reports about the work it did; it satisfies
  :class:`~dialscore_server.contract.reply.BatchReport`, which the metrics read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

#: Decoder-only items are grouped under a shared prefix only when they share at least this many
#: tokens (and the group has at least two items). See :func:`share_prefixes`.
MIN_SHARED_PREFIX = 16
#: Longest run of sorted items one prefix group may span (bounds the grouping's quadratic search).
MAX_GROUP_ITEMS = 512
#: A continuation pass attends to its rows' expanded prefix keys/values: rows × (prefix width +
#: continuation width) is kept under this multiple of the token budget (bounds that memory).
KV_BUDGET_FACTOR = 4
#: Continuation rows (sorted by length) start a new pass rather than push a pass's padding above
#: this share, once the pass already holds MIN_PASS_TOKENS real tokens (smaller matrix products
#: lose more to overhead than padding costs). Measured effect: docs/benchmarks/probe-scoring.md.
MAX_PASS_WASTE = 0.03
MIN_PASS_TOKENS = 256
#: What one more forward pass costs beyond its positions, in positions: a length-sorted row that
#: would add more padding than this to the pass being formed starts a new pass instead, however
#: few real tokens the pass holds (:func:`pads_past_a_pass`). Measured effect:
#: docs/benchmarks/lm-eval.md#pass-limits.
PASS_OVERHEAD_TOKENS = 32


@dataclass(frozen=True)
class PassLimits:
    """The padding rules that end a pass besides the budgets: a length-sorted row that would add
    more than `overhead_tokens` padding slots to the pass being formed starts the next one
    (:func:`pads_past_a_pass`; a pass's own cost beyond its positions, in positions), and so does
    one that would push its padding above `max_waste` of its positions once it holds
    MIN_PASS_TOKENS real tokens (continuation passes, :func:`chunk_passes`)."""

    overhead_tokens: int = PASS_OVERHEAD_TOKENS
    max_waste: float = MAX_PASS_WASTE


#: On CPU a pass costs little beyond its positions' arithmetic.
CPU_PASS_LIMITS = PassLimits()
#: On a CUDA device a pass's kernel launches cost as much as hundreds of positions' arithmetic, so
#: fewer, more padded passes pay. Measured effect: docs/benchmarks/lm-eval.md#pass-limits.
GPU_PASS_LIMITS = PassLimits(overhead_tokens=1024, max_waste=0.25)


def pass_limits_for(device: str) -> PassLimits:
    """The pass limits for a model on `device` (``cpu``, ``cuda``, ``cuda:1``...)."""
    return CPU_PASS_LIMITS if str(device).startswith("cpu") else GPU_PASS_LIMITS


@dataclass(frozen=True)
class SharedPrefixGroup:
    """Items (indices into one call's items) whose token sequences share their first `length`
    tokens; that prefix is computed once for the group."""

    length: int
    items: tuple[int, ...]


@dataclass
class BatchStats:
    """What one engine call computed (the NLL engine's ``score_encoded``, the NLI classifier's
    ``classify_encoded``).

    * ``items``/``batches``/``batch_sizes``: items (NLL items, NLI pairs), and the batches they
      were computed in (every item is in exactly one batch; a shared-prefix batch is one batch of
      several forward passes).
    * ``forward_passes``: model forward calls (a shared-prefix batch makes one for its prefixes
      and one or more for its continuations; seq2seq counts encoder + decoder as one).
    * ``item_tokens``: the positions a run without any reuse computes, padding excluded: source +
      target per causal item; source + decoder input (start token(s) + target[:-1]) per seq2seq
      item; the whole row (special tokens included) per NLI pair. The work the caller asked for,
      whatever the engine does.
    * ``real_tokens``: non-padding positions the model actually computed. Without reuse this equals
      ``item_tokens``; shared prefixes, shared encoder sources and identical NLI pairs are computed
      once, so with reuse it is smaller (``reused_tokens`` is the difference).
    * ``padded_tokens``: computed positions including padding; ``padding_waste`` is their
      padding share.
    * ``target_tokens``: scored target tokens (NLL; 0 from the classifier, which scores none).
    * ``truncated``: items cut to fit the model's window.
    * ``unique_pairs``: distinct rows the NLI classifier computed (identical pairs are classified
      once); 0 from the NLL engine, which does not deduplicate items.
    * ``shared_groups``/``shared_items``/``shared_prefix_tokens``: decoder-only prefix groups
      formed, the items in them, and the prefix tokens computed once for them (NLL only).
    * ``chained_items``: decoder-only items read from a longer item's pass because their token
      sequence is a prefix of its own (:func:`chain_hosts`; NLL only).
    * ``cached_tokens``: prefix positions read from the replica's context cache instead of
      computed (:mod:`~dialscore_server.nll.engine.context_cache`); ``cache_hits`` and
      ``cache_misses``: its lookups in this call that found a prefix or none;
      ``cache_evictions``: entries it evicted in this call; ``cache_bytes``: what it holds after
      the call (0 without a cache).
    """

    items: int = 0
    batches: int = 0
    forward_passes: int = 0
    item_tokens: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    target_tokens: int = 0
    truncated: int = 0
    unique_pairs: int = 0
    shared_groups: int = 0
    shared_items: int = 0
    shared_prefix_tokens: int = 0
    chained_items: int = 0
    cached_tokens: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_evictions: int = 0
    cache_bytes: int = 0
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def padding_waste(self) -> float:
        """Share of computed positions that were padding (0 = none)."""
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def reused_tokens(self) -> int:
        """Item tokens that were not recomputed thanks to a shared prefix, a shared encoder source
        or an identical pair."""
        return max(0, self.item_tokens - self.real_tokens)


def pads_past_a_pass(rows: int, longest: int, length: int,
                     overhead: int = PASS_OVERHEAD_TOKENS) -> bool:
    """Whether a row of `length` positions joining a pass of `rows` rows padded to `longest` pads
    them by more than `overhead` slots in all (a pass of its own would cost less)."""
    return rows * (length - longest) > overhead


def pack(ordered: Sequence[T], cost: Callable[[list[T]], int], budget: int,
         length: Callable[[T], int] | None = None,
         limits: PassLimits = CPU_PASS_LIMITS) -> list[list[T]]:
    """Cut `ordered` into consecutive runs, each as long as ``cost(run) <= budget`` allows; a first
    element that alone exceeds the budget still forms its own run. With `length` (the positions
    an element takes in its pass, `ordered` ascending in it), a run also ends where the next
    element would pad it past a pass's overhead (:func:`pads_past_a_pass` at
    ``limits.overhead_tokens``).

    Greedy: a run grows until the next element would push its cost over the budget. `cost` is
    called on every trial run, so it should be cheap (the callers' costs are rows × longest row).
    """
    runs: list[list[T]] = []
    current: list[T] = []
    longest = 0
    for x in ordered:
        trial = current + [x]
        n = length(x) if length is not None else 0
        if current and (cost(trial) > budget
                        or pads_past_a_pass(len(current), longest, n, limits.overhead_tokens)):
            runs.append(current)
            trial, longest = [x], 0
        current = trial
        longest = max(longest, n)
    if current:
        runs.append(current)
    return runs


def chunk_passes(rows: Sequence[T], length: Callable[[T], int], budget: int, prefix_width: int,
                 kv_budget: int, limits: PassLimits = CPU_PASS_LIMITS) -> list[list[T]]:
    """Cut length-sorted continuation rows into passes: rows × longest ≤ `budget`, rows × (prefix
    width + longest) ≤ `kv_budget`, no row padding the rows before it past a pass's overhead
    (:func:`pads_past_a_pass` at ``limits.overhead_tokens``), and padding ≤ ``limits.max_waste``
    once a pass holds MIN_PASS_TOKENS real tokens (a single row always forms a pass)."""
    out: list[list[T]] = []
    current: list[T] = []
    longest = real = 0
    for r in rows:
        w = max(longest, length(r))
        n = len(current) + 1
        wasteful = (real >= MIN_PASS_TOKENS and 1 - (real + length(r)) / (n * w) > limits.max_waste
                    or pads_past_a_pass(n - 1, longest, length(r), limits.overhead_tokens))
        if current and (n * w > budget or n * (prefix_width + w) > kv_budget or wasteful):
            out.append(current)
            current, w, real = [], length(r), 0
        current.append(r)
        real += length(r)
        longest = w
    if current:
        out.append(current)
    return out


def common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Length of the common prefix of two token tuples (bisection on C-level slice compares)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def share_prefixes(seqs: Sequence[tuple[int, ...]], min_shared_prefix: int = MIN_SHARED_PREFIX,
                   max_group_items: int = MAX_GROUP_ITEMS
                   ) -> tuple[list[SharedPrefixGroup], list[int]]:
    """Group token sequences that start alike: (groups, indices left alone, ascending).

    Every index of `seqs` is in exactly one group or among those left alone. Sequences are sorted,
    so those with long common prefixes are adjacent and a run's common prefix is the minimum of
    its neighbours' common prefixes (a trie walked in order). A dynamic programme then cuts the
    sorted sequences into runs maximising the tokens not recomputed, ``Σ (items - 1) × prefix``,
    where a run becomes a group only when it has at least two items and a prefix of at least
    `min_shared_prefix` tokens, and spans at most `max_group_items` items; everything else is
    left alone. A group's prefix stops one token short of its shortest sequence, so every item
    keeps at least one continuation token. For the NLL engine a sequence is source + target, so a
    prefix may run into targets (a valid explanation and its negation share the antecedent's
    tokens): the positions inside the prefix are computed once and their log-probabilities read
    from the prefix pass.

    When reuse pays: a group of ``k`` items sharing ``p`` tokens saves ``(k - 1) × p`` token
    positions of full transformer compute (DialoGPT-medium: 2 × 302M FLOPs per token) and costs
    one extra forward pass per batch of groups plus, in every continuation pass, copying the prefix
    keys/values into each row (``2 × layers × width`` numbers per prefix token and row). So any
    group of two or more pays for itself in compute; `min_shared_prefix` (16) only keeps tiny
    shared prefixes (a common first word) from splitting items out of the plain, single-pass
    batches, where the saving would not cover the extra pass and the prefix-pass padding.
    """
    if min_shared_prefix < 1:
        raise ValueError("min_shared_prefix must be positive")
    n = len(seqs)
    if n < 2:
        return [], list(range(n))
    order = sorted(range(n), key=seqs.__getitem__)
    adjacent = [common_prefix(seqs[order[k]], seqs[order[k + 1]]) for k in range(n - 1)]
    best = [0] * (n + 1)           # best[j]: most tokens saved over the first j sorted items
    cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (run start, prefix) ending at j
    for j in range(1, n + 1):
        best[j], cut[j] = best[j - 1], (j - 1, 0)
        shared = math.inf
        shortest = len(seqs[order[j - 1]])
        for i in range(j - 2, max(-1, j - 1 - max_group_items), -1):
            shared = min(shared, adjacent[i])
            shortest = min(shortest, len(seqs[order[i]]))
            p = min(shared, shortest - 1)
            if p < min_shared_prefix:
                break  # p only shrinks as the run grows to the left
            gain = best[i] + (j - i - 1) * p
            if gain > best[j]:
                best[j], cut[j] = gain, (i, p)
    groups: list[SharedPrefixGroup] = []
    alone: list[int] = []
    j = n
    while j > 0:
        i, p = cut[j]
        if p:
            groups.append(SharedPrefixGroup(p, tuple(order[i:j])))
        else:
            alone.append(order[j - 1])
        j = i if p else j - 1
    groups.reverse()
    return groups, sorted(alone)


def chain_hosts(seqs: Sequence[tuple[int, ...]], kinds: Sequence[object]) -> list[int]:
    """For each sequence, the index of a sequence of the same kind that starts with it and is
    not itself the start of a longer one found this way (itself when there is none): its host.

    Under causal attention the hidden state at position ``j`` depends only on tokens ``0..j``,
    so a pass over a host computes every position of every sequence it hosts: a dialogue's turn
    ``k`` (source + target) is turn ``k + 1``'s source, and all of its turns can be read from the
    pass of the last one. Equal sequences host each other's duplicates. Sequences are sorted, so
    that a sequence's successor starts with it whenever any sequence does (everything between
    two sequences that start alike starts alike too); chains are followed from the end.
    `kinds` keep apart sequences that must not share a pass (different alternatives asked).
    """
    n = len(seqs)
    order = sorted(range(n), key=lambda i: (repr(kinds[i]), seqs[i]))
    host = list(range(n))
    for pos in range(n - 2, -1, -1):
        a, b = order[pos], order[pos + 1]
        if kinds[a] == kinds[b] and seqs[b][: len(seqs[a])] == seqs[a]:
            host[a] = host[b]
    return host
