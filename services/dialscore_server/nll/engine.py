"""The NLL engine: exact, batched per-token negative log-likelihood of a target given a source.

Contract (spec section 1). For a source S and a target T whose scored tokens are t_1..t_m::

    nll = -(1/m) * Σ_i log P(t_i | t_<i, S)          (natural log, nats per token)

* **Which tokens are scored.** The target is tokenized on its own, without special tokens and
  without a leading space added, and, when the model's format says ``append_eos``, the tokenizer's
  eos token is appended and scored as the last target token. Source tokens are never scored.
* **Decoder-only** (``causal``): one sequence ``source + target``; logits at position j predict
  token j+1. A causal item with an empty source is conditioned on the bos token alone (GPT-2's
  ``<|endoftext|>``), so its first target token is scored too.
* **Encoder-decoder** (``seq2seq``): the source (with the format's bos/eos) is the encoder input; the
  decoder input is ``decoder_start_token_id`` [+ bos, unscored, when ``target_bos``] + target[:-1].
  Each distinct source of a batch is encoded once and reused for all of its targets.
* **Truncation.** Sources that do not fit are cut from the left: oldest history tokens first, the
  pinned knowledge sentence only when no history is left. Targets are never cut: a target that
  alone does not fit raises :class:`TargetTooLongError`.
* **Independence of batch composition.** Right padding, attention masks and position ids that
  restart at 0 for every row make an item's NLL the same alone or in any batch (float tolerance).
* **Shared prefixes** (``prefix_reuse``, on by default). Within one :meth:`NLLEngine.score_encoded`
  call (which in the served path already merges many callers' requests), decoder-only items whose
  token sequences start alike (a probe's valid explanation and its corruptions after the same
  history + response + "why?", a reranker's candidates after one context) are grouped; each group's
  shared prefix runs once with ``use_cache=True`` and its key/value cache is expanded across the
  group's continuations, which are the only positions computed again (position ids continue from
  the prefix length; the attention mask is prefix mask + continuation mask). Encoder-decoder
  models encode each distinct source once. Callers change nothing; the numbers are those of plain
  scoring to float tolerance (tests/test_prefix_reuse.py). :class:`BatchStats` counts the
  positions actually computed.
* **Numerics.** Forward passes under ``torch.inference_mode``; logits are projected only at target
  positions and log-softmaxed in float32 whatever the model's dtype. For bf16/fp16 models the
  vocabulary projection itself also runs in float32 (upcast final hidden state, float32 copy of the
  output embedding), so logits are not rounded to 8 or 11 mantissa bits.

The engine is a plain Python object: it runs without Ray; the Serve deployment wraps it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dialscore.model_card import ModelCard
from dialscore_server.checkpoints.loading import LoadedModel, load_model, set_threads
from dialscore_server.contract.errors import InputError
from dialscore_server.checkpoints.registry import ModelConfig

if TYPE_CHECKING:
    from dialscore_server.contract.options import ServingOptions

#: Decoder-only items are grouped under a shared prefix only when they share at least this many
#: tokens (and the group has at least two items). See :meth:`NLLEngine._share_prefixes`.
MIN_SHARED_PREFIX = 16
#: Longest run of sorted items one prefix group may span (bounds the grouping's quadratic search).
MAX_GROUP_ITEMS = 512
#: A continuation pass attends to its rows' expanded prefix keys/values: rows × (prefix width +
#: continuation width) is kept under this multiple of the token budget (bounds that memory).
KV_BUDGET_FACTOR = 4
#: Continuation rows (sorted by length) start a new pass rather than push a pass's padding above
#: this share, once the pass already holds MIN_PASS_TOKENS real tokens (smaller matrix products
#: lose more to overhead than padding costs). 3% rather than 10%: on the CEDAR attribution
#: workload (CPU, fp32) it cut padding from 9.3% to 4.9% and ran 5% faster on DialoGPT-medium
#: shapes (10 passes instead of 6) and 10% faster on the small stand-in.
MAX_PASS_WASTE = 0.03
MIN_PASS_TOKENS = 256
#: Default token budget on a GPU. On CPU the default is sized to the model instead: about 2^20
#: activations (tokens × width) per pass, 1,024 to 16,384 tokens; a DialoGPT-medium pass of 1,024
#: tokens keeps each layer's activations nearer the caches and ran 17% faster than 4,096 with
#: prefix reuse off, 1% with it on (BENCHMARKS.md, loadtests/bench_budget.py), while a 64-wide
#: stand-in needs big passes to amortise per-pass overhead.
GPU_TOKEN_BUDGET = 4096
#: On CPU, target positions are projected to the vocabulary in chunks of about this many float32
#: logits (32 MiB: 166 positions for GPT-2's 50,257 tokens), so the log-softmax reads the logits
#: while they are still in cache. Measured on DialoGPT-medium's head, 2,811 positions, 2 threads:
#: projection + log-softmax 0.79 s in chunks of ~167 positions, 0.99 s in 512, 1.20 s in 1,024
#: (median of 5). It matters for passes with many target positions (long targets, large token
#: budgets): the CEDAR probe passes of 1,024 tokens project ~300 each and gain nothing
#: measurable. On a GPU the engine projects GPU_PROJECTION_CHUNK positions at once.
CPU_LOGITS_PER_CHUNK = 2 ** 23
GPU_PROJECTION_CHUNK = 1024


def default_projection_chunk(device: str, vocab_size: int) -> int:
    """Target positions projected to the vocabulary at once when none is given."""
    if not str(device).startswith("cpu"):
        return GPU_PROJECTION_CHUNK
    return max(1, CPU_LOGITS_PER_CHUNK // max(1, vocab_size))


def default_token_budget(device: str, width: int) -> int:
    """The engine's token budget when none is given (see GPU_TOKEN_BUDGET)."""
    if not str(device).startswith("cpu"):
        return GPU_TOKEN_BUDGET
    return min(16384, max(1024, 2 ** 20 // max(1, width)))


class TargetTooLongError(InputError):
    """The target alone does not fit the model's window (targets are never truncated)."""


class EmptyTargetError(InputError):
    """The target produced no token to score."""


@dataclass(frozen=True)
class NLLItem:
    """One thing to score: either dialogue turns (`context`, optional `knowledge`) or a raw `source`.

    `context` turns are formatted with the model's :class:`~dialscore_server.checkpoints.registry.DialogueFormat`;
    a raw `source` is used verbatim. An empty `context` (or empty `source`) is valid.
    """

    target: str
    context: tuple[str, ...] | None = None
    knowledge: str | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        if self.source is not None and (self.context is not None or self.knowledge is not None):
            raise InputError("give either `source` or `context`/`knowledge`, not both", "source")


@dataclass(frozen=True)
class EncodedItem:
    """An item after tokenization and truncation: what the forward pass consumes.

    `source_ids` is the full encoder input (seq2seq) or the conditioning prefix (causal);
    `target_ids` are exactly the scored tokens.
    """

    source_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    truncated: bool

    @property
    def cost(self) -> int:
        return len(self.source_ids) + len(self.target_ids)


@dataclass(frozen=True)
class SharedPrefixGroup:
    """Decoder-only items (indices into one call's items) whose token sequences (source + target)
    share their first `length` tokens; that prefix is computed once for the group."""

    length: int
    items: tuple[int, ...]


@dataclass(frozen=True)
class NLLResult:
    """Per-item result. `nll` is the mean over `num_tokens` target tokens of `token_nlls` (nats)."""

    nll: float
    token_nlls: list[float]
    token_ids: list[int]
    num_tokens: int
    source_tokens: int
    truncated: bool


@dataclass
class BatchStats:
    """What one `score_encoded` call computed.

    * ``items``/``batches``/``batch_sizes``: items, and the batches they were scored in (every item is
      in exactly one batch; a shared-prefix batch is one batch of several forward passes).
    * ``forward_passes``: model forward calls (a shared-prefix batch makes one for its prefixes
      and one or more for its continuations; seq2seq counts encoder + decoder as one).
    * ``item_tokens``: the positions a run without any reuse computes, padding excluded: source +
      target per causal item; source + decoder input (start token(s) + target[:-1]) per seq2seq
      item. The work the caller asked for, whatever the engine does.
    * ``real_tokens``: non-padding positions the model actually computed. Without reuse this equals
      ``item_tokens``; shared prefixes and shared encoder sources are computed once, so with reuse
      it is smaller (``reused_tokens`` is the difference).
    * ``padded_tokens``: computed positions including padding; ``padding_waste`` is their
      padding share.
    * ``shared_groups``/``shared_items``/``shared_prefix_tokens``: decoder-only prefix groups
      formed, the items in them, and the prefix tokens computed once for them.
    """

    items: int = 0
    batches: int = 0
    forward_passes: int = 0
    item_tokens: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    target_tokens: int = 0
    shared_groups: int = 0
    shared_items: int = 0
    shared_prefix_tokens: int = 0
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def padding_waste(self) -> float:
        """Share of computed positions that were padding (0 = none)."""
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def reused_tokens(self) -> int:
        """Item tokens that were not recomputed thanks to a shared prefix or encoder source."""
        return max(0, self.item_tokens - self.real_tokens)


class NLLEngine:
    """Scores (source, target) items for one causal or seq2seq model. See the module docstring.

    Args:
        config: the registry entry.
        loaded: an already loaded model (tests pass re-initialised weights); loaded from
            ``config`` when omitted.
        token_budget: most padded tokens per forward pass (rows × longest row; for seq2seq,
            distinct sources × longest source + rows × longest decoder input). A single item
            larger than the budget still runs, alone. Default (None): 4096 on a GPU; on CPU
            2^20 / model width, within 1024-16384 (:func:`default_token_budget`).
        num_threads: torch intra-op threads (default: the CPUs this process may use).
        projection_chunk: target positions projected to the vocabulary at once (bounds the
            float32 logits buffer to chunk × vocab). Default (None): about 2^23 logits per chunk
            on CPU, 1024 positions on a GPU (:func:`default_projection_chunk`).
        prefix_reuse: compute shared work once. Decoder-only: items of one call whose token
            sequences start alike are grouped; each group's shared prefix runs once, its key/value
            cache is expanded across the group's continuations, and only continuation positions
            are computed again (see :meth:`_share_prefixes` for when a group is formed).
            Encoder-decoder: each distinct source is encoded once. Off: every item computes its
            whole input (the numbers are the same either way, to float tolerance).
        min_shared_prefix: decoder-only prefix groups need at least this many shared tokens.
        fast_kernels: apply :mod:`dialscore_server.nll.kernels` to the loaded model in place: float32
            linear layers through oneDNN (about twice MKL's speed on this AMD CPU) and GPT-2's
            five-op GELU as one kernel, fused into the preceding product. Numbers change only by
            float rounding; each patched layer is checked against its stock forward first. The
            vocabulary projection uses oneDNN too. Off: the stock PyTorch/transformers path.
    """

    def __init__(self, config: ModelConfig, loaded: LoadedModel | None = None, *,
                 token_budget: int | None = None, num_threads: int | None = None,
                 projection_chunk: int | None = None, prefix_reuse: bool = True,
                 min_shared_prefix: int = MIN_SHARED_PREFIX, fast_kernels: bool = True):
        if config.family not in ("causal", "seq2seq"):
            raise ValueError(f"model {config.name!r} is a {config.family}; the NLL engine scores "
                             "causal and seq2seq models")
        if token_budget is not None and token_budget < 1:
            raise ValueError("token_budget must be positive")
        if min_shared_prefix < 1:
            raise ValueError("min_shared_prefix must be positive")
        self.threads = set_threads(num_threads)
        self.config = config
        self.loaded = loaded or load_model(config)
        self.model = self.loaded.model
        self.fast_kernels = fast_kernels
        self.kernels: dict[str, Any] = {}
        if fast_kernels:
            from dialscore_server.nll import kernels

            self.kernels = kernels.optimize(self.model)
        self.tokenizer = self.loaded.tokenizer
        if token_budget is None:
            token_budget = default_token_budget(self.loaded.device,
                                                getattr(self.model.config, "hidden_size", 1024))
        self.token_budget = token_budget
        if projection_chunk is None:
            vocab = self.model.get_output_embeddings().weight.shape[0]
            projection_chunk = default_projection_chunk(self.loaded.device, vocab)
        if projection_chunk < 1:
            raise ValueError("projection_chunk must be positive")
        self.projection_chunk = projection_chunk
        self.prefix_reuse = prefix_reuse
        self.min_shared_prefix = min_shared_prefix
        self._head_fp32 = None  # float32 copy of the output projection, for reduced-precision models
        self._head_bias_fp32 = None
        self.fmt = config.format
        tok = self.tokenizer
        self.eos_id: int = tok.eos_token_id
        self.bos_id: int = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        self.pad_id: int = tok.pad_token_id if tok.pad_token_id is not None else self.eos_id
        if config.family == "seq2seq":
            start = self.model.config.decoder_start_token_id
            self.decoder_prefix: tuple[int, ...] = (
                (start, self.bos_id) if self.fmt.target_bos else (start,)
            )
        else:
            self.decoder_prefix = ()

    # ----------------------------------------------------------------------------- lifecycle
    @classmethod
    def from_options(cls, config: ModelConfig, options: ServingOptions) -> NLLEngine:
        """The engine as a deployment serves it (see :class:`~dialscore_server.contract.engine.Engine`)."""
        return cls(config, token_budget=options.token_budget, num_threads=options.num_threads,
                   prefix_reuse=options.prefix_reuse, fast_kernels=options.fast_kernels)

    def card(self) -> ModelCard:
        c, loaded = self.config, self.loaded
        return ModelCard(name=c.name, family=c.family, source=c.source,
                         revision=loaded.resolved_revision, max_length=c.max_length, dtype=c.dtype,
                         device=loaded.device, stand_in=loaded.stand_in, format=c.format)

    def check_health(self) -> None:
        """A real one-token forward pass."""
        self.score_encoded([self.encode(NLLItem(target="ok", source=""))])

    def close(self) -> None:
        """Drop the model and its float32 head copy (the caller drops the engine)."""
        self.model = self._head_fp32 = self._head_bias_fp32 = None
        self.loaded = None  # type: ignore[assignment]

    # ----------------------------------------------------------------------------- formatting
    @property
    def stand_in(self) -> bool:
        return self.loaded.stand_in

    def _resolve(self, text: str) -> str:
        return text.replace("{eos}", self.tokenizer.eos_token or "").replace(
            "{bos}", self.tokenizer.bos_token or ""
        )

    def format_parts(self, item: NLLItem) -> tuple[str, str]:
        """The item's source as (pinned knowledge text, truncatable history text)."""
        if item.source is not None:
            return "", item.source
        history = self._resolve(self.fmt.join_turns(list(item.context or ())))
        if not item.knowledge:
            return "", history
        sep = self._resolve(self.fmt.knowledge_separator)
        if self.fmt.knowledge_position == "before_history":
            return item.knowledge + sep, history
        # After the history: the knowledge is the newest text, so it is kept and history cut.
        return "", history + item.knowledge + sep

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids if text else []

    # ----------------------------------------------------------------------------- encoding
    def encode(self, item: NLLItem) -> EncodedItem:
        """Tokenize and truncate one item; raise :class:`InputError` if it cannot be scored."""
        target = self._ids(item.target)
        if self.fmt.append_eos:
            target.append(self.eos_id)
        if not target:
            raise EmptyTargetError("target is empty: there is no token to score", "target")
        pinned_text, body_text = self.format_parts(item)
        pinned, body = self._ids(pinned_text), self._ids(body_text)
        limit = self.config.max_length
        if self.config.family == "causal":
            if len(target) > limit - 1:
                raise TargetTooLongError(
                    f"target has {len(target)} tokens; model {self.config.name!r} fits at most "
                    f"{limit - 1} target tokens (window {limit}, one token of context); targets are "
                    "never truncated", "target")
            room = limit - len(target)
            src, truncated = _cut_left(pinned, body, room)
            if not src:
                src = [self.bos_id]
            return EncodedItem(tuple(src), tuple(target), truncated)
        # seq2seq: encoder and decoder windows are separate.
        if len(target) + len(self.decoder_prefix) - 1 > limit:
            raise TargetTooLongError(
                f"target has {len(target)} tokens; model {self.config.name!r}'s decoder fits at most "
                f"{limit - len(self.decoder_prefix) + 1}; targets are never truncated", "target")
        head = [self.bos_id] if self.fmt.source_bos else []
        tail = [self.eos_id] if self.fmt.source_eos else []
        content, truncated = _cut_left(pinned, body, limit - len(head) - len(tail))
        src = head + content + tail or [self.eos_id]
        return EncodedItem(tuple(src), tuple(target), truncated)

    # ----------------------------------------------------------------------------- scoring
    def score(self, items: Sequence[NLLItem]) -> list[NLLResult]:
        """Encode and score `items`; results keep the items' order."""
        return self.score_encoded([self.encode(it) for it in items])[0]

    def score_encoded(self, encoded: Sequence[EncodedItem]) -> tuple[list[NLLResult], BatchStats]:
        """Score already encoded items in token-budget batches; results keep the input order."""
        import torch

        # OpenMP's thread count is a per-thread setting: the served path calls this method from
        # asyncio.to_thread workers, which otherwise inherit OMP_NUM_THREADS (Ray sets it to the
        # replica's num_cpus, 1 for fractional CPUs) and would run MKL/oneDNN on one thread.
        torch.set_num_threads(self.threads)
        stats = BatchStats(items=len(encoded))
        results: list[NLLResult | None] = [None] * len(encoded)
        causal = self.config.family == "causal"
        dec_extra = len(self.decoder_prefix) - 1 if not causal else 0
        stats.item_tokens = sum(e.cost + dec_extra for e in encoded)
        stats.target_tokens = sum(len(e.target_ids) for e in encoded)

        def finish(batch: Sequence[int], logprobs: Sequence[list[float]]) -> None:
            for i, lp in zip(batch, logprobs):
                row = encoded[i]
                token_nlls = [-x for x in lp]
                results[i] = NLLResult(
                    nll=math.fsum(token_nlls) / len(token_nlls), token_nlls=token_nlls,
                    token_ids=list(row.target_ids), num_tokens=len(token_nlls),
                    source_tokens=len(row.source_ids), truncated=row.truncated,
                )
            stats.batches += 1
            stats.batch_sizes.append(len(batch))

        with torch.inference_mode():
            groups: list[SharedPrefixGroup] = []
            alone: list[int] = list(range(len(encoded)))
            if causal and self.prefix_reuse:
                groups, alone = self._share_prefixes(encoded)
            for unit in self._plan_shared(encoded, groups):
                batch = [i for g in unit for i in g.items]
                finish(batch, self._forward_shared(encoded, unit, stats))
            subset = [encoded[i] for i in alone]
            for batch in self._plan(subset):
                rows = [subset[k] for k in batch]
                if causal:
                    logprobs = self._forward_causal(rows, stats)
                else:
                    logprobs = self._forward_seq2seq(rows, stats)
                finish([alone[k] for k in batch], logprobs)
        return [r for r in results if r is not None], stats

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Each token id decoded on its own (a token holding part of a multi-byte character
        decodes to U+FFFD)."""
        return [self.tokenizer.decode([i]) for i in ids]

    def _plan(self, encoded: Sequence[EncodedItem]) -> list[list[int]]:
        """Group item indices into batches under the token budget, sorted by length so rows of
        similar length share a batch (seq2seq: same sources adjacent, to encode them once)."""
        if self.config.family == "causal":
            order = sorted(range(len(encoded)), key=lambda i: encoded[i].cost)
        else:
            order = sorted(range(len(encoded)),
                           key=lambda i: (len(encoded[i].source_ids), encoded[i].source_ids,
                                          len(encoded[i].target_ids)))
        return _pack(order, lambda run: self._padded_cost([encoded[j] for j in run]), self.token_budget)

    # ----------------------------------------------------------------------------- shared prefixes
    def _share_prefixes(self, encoded: Sequence[EncodedItem]
                        ) -> tuple[list[SharedPrefixGroup], list[int]]:
        """Group decoder-only items whose token sequences start alike: (groups, items left alone).

        Items are sorted by their full token sequence (source + target), so items with long common
        prefixes are adjacent and a run's common prefix is the minimum of its neighbours' common
        prefixes (a trie walked in order). A dynamic programme then cuts the sorted items into runs
        maximising the tokens not recomputed, ``Σ (items - 1) × prefix``, where a run becomes a
        group only when it has at least two items and a prefix of at least ``min_shared_prefix``
        tokens; everything else is scored the plain way. A group's prefix stops one token short
        of its shortest item, so every item keeps at least one continuation token. The prefix may
        run into targets (a valid explanation and its negation share the antecedent's tokens): the
        positions inside the prefix are computed once and their log-probabilities read from the
        prefix pass.

        When reuse pays: a group of ``k`` items sharing ``p`` tokens saves ``(k - 1) × p`` token
        positions of full transformer compute (DialoGPT-medium: 2 × 302M FLOPs, about 1.5 ms per
        token on this 2-core CPU) and costs one extra forward pass per batch of groups plus, in
        every continuation pass, copying the prefix keys/values into each row (``2 × layers ×
        width`` numbers per prefix token and row: ~0.2 MB, some 20 µs). So any group of two or
        more pays for itself in compute; ``min_shared_prefix`` (16) only keeps tiny shared
        prefixes (a common first word) from splitting items out of the plain, single-pass batches,
        where the saving would not cover the extra pass and the prefix-pass padding.
        """
        n = len(encoded)
        min_p = self.min_shared_prefix
        if n < 2:
            return [], list(range(n))
        seqs = [e.source_ids + e.target_ids for e in encoded]
        order = sorted(range(n), key=seqs.__getitem__)
        adjacent = [_common_prefix(seqs[order[k]], seqs[order[k + 1]]) for k in range(n - 1)]
        best = [0] * (n + 1)           # best[j]: most tokens saved over the first j sorted items
        cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (run start, prefix) ending at j
        for j in range(1, n + 1):
            best[j], cut[j] = best[j - 1], (j - 1, 0)
            shared = math.inf
            shortest = len(seqs[order[j - 1]])
            for i in range(j - 2, max(-1, j - 1 - MAX_GROUP_ITEMS), -1):
                shared = min(shared, adjacent[i])
                shortest = min(shortest, len(seqs[order[i]]))
                p = min(shared, shortest - 1)
                if p < min_p:
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

    def _plan_shared(self, encoded: Sequence[EncodedItem],
                     groups: Sequence[SharedPrefixGroup]) -> list[list[SharedPrefixGroup]]:
        """Batches of prefix groups: their prefixes fill one prefix pass under the token budget
        (groups × longest prefix); their continuations then take as many passes as
        :func:`_chunks` cuts them into (each under the budget, similar lengths together). Groups
        are sorted by prefix length so prefix padding stays small. The batch's prefix cache
        (prefix tokens × layers × 2 × width numbers, at most one budget's worth) lives until its
        continuations are done. Large prefix passes matter: a pass of one ~90-token prefix
        multiplies every weight matrix by only 90 rows, far below the CPU's best rate."""
        ordered = sorted(groups, key=lambda g: (g.length, len(g.items)))
        return _pack(ordered, lambda run: len(run) * max(g.length for g in run), self.token_budget)

    def _forward_shared(self, encoded: Sequence[EncodedItem], unit: Sequence[SharedPrefixGroup],
                        stats: BatchStats) -> list[list[float]]:
        """Score the items of `unit` (in group order): each group's prefix once with its key/value
        cache, then every item's continuation against its group's cached prefix.

        Prefix pass: the groups' prefixes, right-padded, ``use_cache=True``. Target tokens whose
        predicting position lies inside the prefix (always the first one when the prefix is the
        whole source: the prefix's last hidden state predicts it) are projected from this pass.
        Continuation passes: each item's remaining tokens, right-padded; position ids continue
        from the group's prefix length; the attention mask is the group's prefix mask (its padding
        masked out) followed by the continuation's own; the prefix keys/values are gathered per
        row, layer by layer, as the layer needs them (:class:`_ExpandedPrefixLayer`).
        """
        import torch

        device = self.loaded.device
        seqs = {i: encoded[i].source_ids + encoded[i].target_ids for g in unit for i in g.items}
        width = max(g.length for g in unit)
        ids = torch.full((len(unit), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(unit), width), dtype=torch.long)
        for k, g in enumerate(unit):
            ids[k, : g.length] = torch.tensor(seqs[g.items[0]][: g.length])
            mask[k, : g.length] = 1
        stats.real_tokens += sum(g.length for g in unit)
        stats.padded_tokens += ids.numel()
        stats.forward_passes += 1
        stats.shared_groups += len(unit)
        stats.shared_items += sum(len(g.items) for g in unit)
        stats.shared_prefix_tokens += sum(g.length for g in unit)
        mask = mask.to(device)
        # Right-padded prefixes: no padding mask needed (see _forward_causal); the continuation
        # passes below mask the prefix padding, which there lies before real positions.
        out = self.model.base_model(input_ids=ids.to(device), attention_mask=None, use_cache=True)

        # Targets predicted from inside the prefix; the rest continue below.
        order = [i for g in unit for i in g.items]
        n_pre: dict[int, int] = {}
        rows, cols, targets = [], [], []
        conts: list[tuple[int, int, int]] = []  # (item, group row, prefix length)
        for k, g in enumerate(unit):
            for i in g.items:
                e = encoded[i]
                s, m = len(e.source_ids), len(e.target_ids)
                n = max(0, min(g.length - s + 1, m))
                n_pre[i] = n
                rows += [k] * n
                cols += range(s - 1, s - 1 + n)
                targets += e.target_ids[:n]
                conts.append((i, k, g.length))
        pre = {}
        if targets:
            hidden = out.last_hidden_state
            flat = self._project_logprobs(
                hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)],
                torch.tensor(targets, device=device))
            pre = dict(zip(order, _split(flat, [n_pre[i] for i in order])))
        kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        del out

        max_pos = min(self.config.max_length,
                      getattr(self.model.config, "max_position_embeddings", None) or self.config.max_length)
        post: dict[int, list[float]] = {}
        conts.sort(key=lambda c: len(seqs[c[0]]) - c[2])
        for chunk in _chunks(conts, lambda c: len(seqs[c[0]]) - c[2], self.token_budget,
                             width, KV_BUDGET_FACTOR * self.token_budget):
            c_width = max(len(seqs[i]) - p for i, _, p in chunk)
            c_ids = torch.full((len(chunk), c_width), self.pad_id, dtype=torch.long)
            c_mask = torch.zeros((len(chunk), c_width), dtype=torch.long)
            c_pos = torch.arange(c_width).repeat(len(chunk), 1)
            rows, cols, targets, sizes = [], [], [], []
            for b, (i, k, p) in enumerate(chunk):
                tail = seqs[i][p:]
                c_ids[b, : len(tail)] = torch.tensor(tail)
                c_mask[b, : len(tail)] = 1
                c_pos[b] += p
                e = encoded[i]
                s, m = len(e.source_ids), len(e.target_ids)
                n = m - n_pre[i]
                first = max(p, s - 1)  # first predicting position after the prefix
                rows += [b] * n
                cols += range(first - p, first - p + n)
                targets += e.target_ids[n_pre[i]:]
                sizes.append(n)
            c_pos.clamp_(max=max_pos - 1)  # padding slots only; real positions are in the window
            stats.real_tokens += int(c_mask.sum())
            stats.padded_tokens += c_ids.numel()
            stats.forward_passes += 1
            group_rows = torch.tensor([k for _, k, _ in chunk], device=device)
            attention = torch.cat([mask.index_select(0, group_rows), c_mask.to(device)], dim=1)
            hidden = self.model.base_model(
                input_ids=c_ids.to(device), attention_mask=attention, position_ids=c_pos.to(device),
                past_key_values=_expanded_prefix_cache(kv, group_rows), use_cache=True,
            ).last_hidden_state
            if targets:
                flat = self._project_logprobs(
                    hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)],
                    torch.tensor(targets, device=device))
            else:
                flat = []
            post.update(zip((i for i, _, _ in chunk), _split(flat, sizes)))
        return [pre.get(i, []) + post.get(i, []) for i in order]

    def _padded_cost(self, rows: Sequence[EncodedItem]) -> int:
        if self.config.family == "causal":
            return len(rows) * max(r.cost for r in rows)
        sources = {r.source_ids for r in rows}
        dec = len(self.decoder_prefix) - 1
        n_encoded = len(sources) if self.prefix_reuse else len(rows)
        return (n_encoded * max(len(s) for s in sources)
                + len(rows) * (max(len(r.target_ids) for r in rows) + dec))

    def _project_logprobs(self, hidden, targets) -> list[float]:
        """log P(target) at the given hidden states: vocabulary projection in chunks, float32."""
        import torch

        from dialscore_server.nll.kernels import linear

        head = self.model.get_output_embeddings()
        bias = getattr(self.model, "final_logits_bias", None)
        out = []
        weight, head_bias = head.weight, getattr(head, "bias", None)
        if head.weight.dtype != torch.float32:
            # Reduced precision: the body runs in bf16/fp16, but the vocabulary projection runs in
            # float32 from the upcast final hidden state. Rounding logits to bf16 would cost up to
            # ~0.1 nat per token at logits of 20-30 (8 bits of mantissa), more than many probe
            # margins; the float32 copy of the head is made once.
            if self._head_fp32 is None:
                self._head_fp32 = head.weight.detach().float()
                hb = getattr(head, "bias", None)
                self._head_bias_fp32 = hb.detach().float() if hb is not None else None
            weight, head_bias = self._head_fp32, self._head_bias_fp32
        for start in range(0, hidden.shape[0], self.projection_chunk):
            h = hidden[start:start + self.projection_chunk].float()
            logits = linear(h, weight, head_bias, onednn=self.fast_kernels)
            if bias is not None:
                logits = logits + bias.float().view(-1)[: logits.shape[-1]]
            lp = torch.log_softmax(logits, dim=-1)
            out.append(lp.gather(1, targets[start:start + self.projection_chunk, None]).squeeze(1))
        return torch.cat(out).tolist()

    def _forward_causal(self, rows: Sequence[EncodedItem], stats: BatchStats) -> list[list[float]]:
        import torch

        device = self.loaded.device
        width = max(r.cost for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        gather_rows, gather_cols, targets = [], [], []
        for b, r in enumerate(rows):
            seq = r.source_ids + r.target_ids
            ids[b, : len(seq)] = torch.tensor(seq)
            s = len(r.source_ids)
            gather_rows += [b] * len(r.target_ids)
            gather_cols += range(s - 1, s - 1 + len(r.target_ids))
            targets += r.target_ids
        stats.real_tokens += sum(r.cost for r in rows)
        stats.padded_tokens += ids.numel()
        stats.forward_passes += 1
        # Right padding under causal attention: a real position attends only to earlier positions,
        # all real, so the padding mask changes nothing a scored position sees; without it the
        # attention runs the fused causal kernel instead of a masked one.
        hidden = self.model.base_model(
            input_ids=ids.to(device), attention_mask=None, use_cache=False
        ).last_hidden_state
        sel = hidden[torch.tensor(gather_rows, device=device), torch.tensor(gather_cols, device=device)]
        flat = self._project_logprobs(sel, torch.tensor(targets, device=device))
        return _split(flat, [len(r.target_ids) for r in rows])

    def _forward_seq2seq(self, rows: Sequence[EncodedItem], stats: BatchStats) -> list[list[float]]:
        import torch

        device = self.loaded.device
        # With prefix reuse each distinct source is encoded once (its encoder states are shared by
        # all of its targets); without, every row is encoded on its own.
        sources: dict[tuple[int, ...], int] = {}
        if self.prefix_reuse:
            for r in rows:
                sources.setdefault(r.source_ids, len(sources))
            enc_rows = list(sources)
            index_of = [sources[r.source_ids] for r in rows]
        else:
            enc_rows = [r.source_ids for r in rows]
            index_of = list(range(len(rows)))
        src_width = max(len(s) for s in enc_rows)
        enc_ids = torch.full((len(enc_rows), src_width), self.pad_id, dtype=torch.long)
        enc_mask = torch.zeros((len(enc_rows), src_width), dtype=torch.long)
        for u, s in enumerate(enc_rows):
            enc_ids[u, : len(s)] = torch.tensor(s)
            enc_mask[u, : len(s)] = 1
        n_prefix = len(self.decoder_prefix)
        dec_width = max(len(r.target_ids) for r in rows) + n_prefix - 1
        dec_ids = torch.full((len(rows), dec_width), self.pad_id, dtype=torch.long)
        dec_mask = torch.zeros((len(rows), dec_width), dtype=torch.long)
        gather_rows, gather_cols, targets = [], [], []
        for b, r in enumerate(rows):
            seq = (self.decoder_prefix + r.target_ids)[:-1]
            dec_ids[b, : len(seq)] = torch.tensor(seq)
            dec_mask[b, : len(seq)] = 1
            gather_rows += [b] * len(r.target_ids)
            gather_cols += range(n_prefix - 1, n_prefix - 1 + len(r.target_ids))
            targets += r.target_ids
        stats.real_tokens += sum(len(s) for s in enc_rows) + int(dec_mask.sum())
        stats.padded_tokens += enc_ids.numel() + dec_ids.numel()
        stats.forward_passes += 1
        encoder_hidden = self.model.get_encoder()(
            input_ids=enc_ids.to(device), attention_mask=enc_mask.to(device)
        ).last_hidden_state
        index = torch.tensor(index_of, device=device)
        hidden = self.model.get_decoder()(
            input_ids=dec_ids.to(device), attention_mask=dec_mask.to(device),
            encoder_hidden_states=encoder_hidden.index_select(0, index),
            encoder_attention_mask=enc_mask.to(device).index_select(0, index), use_cache=False,
        ).last_hidden_state
        sel = hidden[torch.tensor(gather_rows, device=device), torch.tensor(gather_cols, device=device)]
        flat = self._project_logprobs(sel, torch.tensor(targets, device=device))
        return _split(flat, [len(r.target_ids) for r in rows])


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
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


def _pack(ordered: Sequence, cost, budget: int) -> list[list]:
    """Cut `ordered` into consecutive runs, each as long as ``cost(run) <= budget`` allows; a first
    element that alone exceeds the budget still forms its own run."""
    runs: list[list] = []
    current: list = []
    for x in ordered:
        trial = current + [x]
        if current and cost(trial) > budget:
            runs.append(current)
            trial = [x]
        current = trial
    if current:
        runs.append(current)
    return runs


def _chunks(rows: Sequence, length, budget: int, prefix_width: int, kv_budget: int) -> list[list]:
    """Cut length-sorted continuation rows into passes: rows × longest ≤ budget, rows × (prefix
    width + longest) ≤ kv_budget, and padding ≤ MAX_PASS_WASTE once a pass holds MIN_PASS_TOKENS
    real tokens (a single row always forms a pass)."""
    out: list[list] = []
    current: list = []
    longest = real = 0
    for r in rows:
        w = max(longest, length(r))
        n = len(current) + 1
        wasteful = real >= MIN_PASS_TOKENS and 1 - (real + length(r)) / (n * w) > MAX_PASS_WASTE
        if current and (n * w > budget or n * (prefix_width + w) > kv_budget or wasteful):
            out.append(current)
            current, w, real = [], length(r), 0
        current.append(r)
        real += length(r)
        longest = w
    if current:
        out.append(current)
    return out


_EXPANDED_LAYER = None


def _expanded_prefix_cache(kv: Sequence[tuple[Any, Any]], index):
    """A transformers ``Cache`` whose layer ``l`` holds the prefix keys/values ``kv[l]`` (groups ×
    heads × prefix × head dim) and hands row ``b`` the group ``index[b]``'s prefix: the expansion
    happens inside each layer's ``update``, fused with the concatenation of the new keys/values,
    so only one layer's expanded prefix exists at a time. The cache itself never grows (one
    continuation pass per cache object)."""
    global _EXPANDED_LAYER
    from transformers.cache_utils import Cache, DynamicLayer

    if _EXPANDED_LAYER is None:
        class _ExpandedPrefixLayer(DynamicLayer):
            def __init__(self, keys, values, index):
                super().__init__()
                self.keys, self.values, self.index = keys, values, index
                self.dtype, self.device = keys.dtype, keys.device
                self.is_initialized = True

            def update(self, key_states, value_states, *args, **kwargs):
                import torch

                keys = torch.cat([self.keys.index_select(0, self.index), key_states], dim=-2)
                values = torch.cat([self.values.index_select(0, self.index), value_states], dim=-2)
                return keys, values

        _EXPANDED_LAYER = _ExpandedPrefixLayer
    return Cache(layers=[_EXPANDED_LAYER(k, v, index) for k, v in kv])


def _cut_left(pinned: list[int], body: list[int], room: int) -> tuple[list[int], bool]:
    """Keep the last `room` tokens of pinned + body, cutting the body's oldest tokens first."""
    room = max(room, 0)
    if len(pinned) + len(body) <= room:
        return pinned + body, False
    if len(pinned) <= room:
        return pinned + body[len(body) - (room - len(pinned)):], True
    return pinned[len(pinned) - room:], True


def _split(flat: list[float], sizes: Sequence[int]) -> list[list[float]]:
    out, pos = [], 0
    for n in sizes:
        out.append(flat[pos:pos + n])
        pos += n
    return out
