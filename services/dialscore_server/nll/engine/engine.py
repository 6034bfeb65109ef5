"""The NLL engine: exact, batched per-token negative log-likelihood of a target given a source.

Contract (spec section 1). For a source S and a target T whose scored tokens are t_1..t_m::

    nll = -(1/m) * Σ_i log P(t_i | t_<i, S)          (natural log, nats per token)

* **Which tokens are scored.** The target is tokenized on its own, without special tokens, and,
  when the model's format says ``append_eos``, the tokenizer's eos token is appended and scored as
  the last target token. Source tokens are never scored.
* **Text fields are plain text.** Turns, knowledge, raw sources and targets (and completions text
  prompts) are tokenized with special-token strings read as their characters
  (:mod:`dialscore_server.checkpoints.plain_text`): a target ``"<|endoftext|>"`` is scored as the
  tokens of ``<``, ``|``, ``endoftext``..., as many as its characters make (the near miss
  ``"<|endoftext| >"`` has one token more, its space), never as the eos; a turn ``"</s>"`` is no
  turn boundary. The only special tokens in an item are those the format inserts (separators,
  bos, eos, the decoder prefix) and, in /v1/completions, token-id prompts, taken as given.
* **Whitespace at the edges of a target** is removed where it would touch a special token or end
  the input, so no lone whitespace token (``Ġ``, ``Ċ``...) is scored next to one: trailing
  whitespace always; leading whitespace when the target follows a special token, which is every
  encoder-decoder target (after the decoder prefix) and every decoder-only target whose source
  ends with a special token or is empty (the bos alone), hence every dialogue item of the shipped
  formats. After source text (a decoder-only raw ``source`` ending in text) leading whitespace is
  kept: as in lm-evaluation-harness's ``loglikelihood``, the space at a word boundary belongs to
  the target (source ``"hello"``, target ``" world"``). Inner whitespace is kept, and
  "whitespace" is what :meth:`str.strip` removes. The remaining text is tokenized with the
  family's own first-word convention: ``word`` for GPT-2 and BART, ``Ġword`` for BlenderBot,
  whose tokenizer adds a prefix space. A target that is empty or only whitespace scores the eos
  alone (without ``append_eos`` it raises
  :class:`~dialscore_server.nll.engine.encoding.EmptyTargetError`). ``num_tokens``,
  ``token_ids`` and ``token_nlls`` are those of the stripped target (+ eos), so a target with edge
  whitespace has fewer tokens than its verbatim tokenization, and ``"fine. "`` scores exactly as
  ``"fine."``; a caller that aligns the returned tokens with its own tokenization of the target
  must strip it the same way.
* **Sources.** Dialogue turns and knowledge are laid out with the model's format, each stripped
  of edge whitespace (:mod:`~dialscore_server.nll.engine.layout`); a raw ``source`` is used
  verbatim, as plain text, except for whitespace at both of its ends for an encoder input (whose
  ends meet the format's bos/eos).
* **Decoder-only** (``causal``): one sequence ``source + target``; logits at position j predict
  token j+1. A causal item with an empty source is conditioned on the bos token alone (GPT-2's
  ``<|endoftext|>``), so its first target token is scored too.
* **Encoder-decoder** (``seq2seq``): the source (with the format's bos/eos) is the encoder input; the
  decoder input is ``decoder_start_token_id`` [+ bos, unscored, when ``target_bos``] + target[:-1].
  Each distinct source of a batch is encoded once and reused for all of its targets.
* **Truncation.** Sources that do not fit are shortened from the left as the format's
  ``truncation`` says (whole oldest turns by default, else oldest tokens; see
  :mod:`~dialscore_server.nll.engine.encoding`), the pinned knowledge sentence only when no history is
  left. Targets are never cut: a target that alone does not fit raises :class:`TargetTooLongError`.
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
  scoring to float tolerance (tests/engines/test_prefix_reuse.py).
  :class:`~dialscore_server.scheduling.planner.BatchStats` counts the positions actually computed.
* **Chained items** (decoder-only, with ``prefix_reuse``). An item whose token sequence (source +
  target) is a prefix of another item's in the same call is read from that item's pass (hidden
  state ``j`` depends only on tokens ``0..j``): a dialogue's turns, each given the turns before
  it, cost one pass over the whole dialogue instead of O(turns²) positions; duplicates cost
  nothing. Numbers as each item alone, to float tolerance.
* **Context cache** (decoder-only, ``context_cache_bytes``; the service's default is on): the
  key/value states of recently computed contexts stay on the replica across calls
  (:mod:`~dialscore_server.nll.engine.context_cache`), and each shared-prefix group starts from
  the longest cached prefix of its context that stops before its first scored position, so the
  position predicting a target's first token is always computed, never read. Only source
  positions are stored. Numbers as with the cache off, to float rounding.
* **Numerics.** Forward passes under ``torch.inference_mode``; logits are projected only at target
  positions and log-softmaxed in float32 whatever the model's dtype. For bf16/fp16 models the
  vocabulary projection itself also runs in float32 (upcast final hidden state, float32 copy of the
  output embedding), so logits are not rounded to 8 or 11 mantissa bits.
* **Alternatives.** An item encoded with ``top_k > 0`` (POST /v1/completions' prompts, see
  :mod:`~dialscore_server.nll.completions.serving`) also gets, at every scored position, its ``top_k``
  most probable tokens from the same float32 log-softmax chunk; items without keep the plain
  projection, bit for bit.

The engine is a plain Python object: it runs without Ray; the Serve deployment wraps it. Its
parts: :mod:`~dialscore_server.nll.engine.encoding` (items to token ids), :mod:`dialscore_server.scheduling.planner`
(which items share a pass, shared-prefix groups, chained items), :mod:`~dialscore_server.nll.engine.forward` (the
passes), :mod:`~dialscore_server.nll.engine.prefix_cache` (the shared prefix's key/value cache),
:mod:`~dialscore_server.nll.engine.context_cache` (contexts kept across calls) and
:mod:`~dialscore_server.nll.engine.projection` (float32 vocabulary projection).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dialscore.model_card import ModelCard
from dialscore_server.scheduling.planner import (
    KV_BUDGET_FACTOR, MIN_SHARED_PREFIX, BatchStats, PassLimits, SharedPrefixGroup, chain_hosts,
    pack, pass_limits_for, share_prefixes,
)
from dialscore_server.checkpoints.loading import LoadedModel, load_model, set_threads
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.scheduling import pause_points
from dialscore_server.nll.engine.context_cache import ContextCache
from dialscore_server.nll.engine.cuda_graphs import GraphedTrunk, buckets
from dialscore_server.nll.engine.encoding import EncodedItem, NLLEncoder, NLLItem
from dialscore_server.nll.engine.forward import ForwardPasses, cached_prefix
from dialscore_server.nll.engine.prompts import check_vocabulary, encode_prompt
from dialscore_server.nll.engine.tokenizer_info import TokenizerInfo
from dialscore_server.nll.engine.layout import Pieces
from dialscore_server.nll.engine.projection import (
    Alternatives, ScoredPosition, VocabularyProjection, default_projection_chunk,
)

if TYPE_CHECKING:
    from dialscore_server.contract.options import ServingOptions

#: Default token budget on a GPU. On CPU the default is sized to the model instead: about 2^20
#: activations (tokens × width) per pass, 1,024 to 16,384 tokens, so each layer's activations stay
#: near the caches while a narrow model still gets passes big enough to amortise per-pass
#: overhead (measured by loadtests/bench_budget.py: docs/benchmarks/probe-scoring.md).
GPU_TOKEN_BUDGET = 4096


def default_token_budget(device: str, width: int) -> int:
    """The engine's token budget when none is given (see GPU_TOKEN_BUDGET)."""
    if not str(device).startswith("cpu"):
        return GPU_TOKEN_BUDGET
    return min(16384, max(1024, 2 ** 20 // max(1, width)))


#: The context cache's default share of the replica's memory (:func:`default_context_cache_bytes`).
CONTEXT_CACHE_SHARE = 1 / 16


def default_context_cache_bytes(device: str) -> int:
    """The context cache bound when none is given: CONTEXT_CACHE_SHARE of the memory the
    replica's model lives in (the GPU's memory on a GPU, the machine's physical memory on CPU,
    which the replicas of one machine share: a sixteenth each leaves room for the models and
    their passes with several replicas per machine)."""
    import os

    if not str(device).startswith("cpu"):
        import torch

        total = torch.cuda.get_device_properties(torch.device(device)).total_memory
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(total * CONTEXT_CACHE_SHARE)


@dataclass(frozen=True)
class NLLResult:
    """Per-item result. `nll` is the mean over `num_tokens` target tokens of `token_nlls` (nats).
    `alternatives`: for an item encoded with ``top_k > 0``, each scored position's most probable
    tokens, in target order (None otherwise)."""

    nll: float
    token_nlls: list[float]
    token_ids: list[int]
    num_tokens: int
    source_tokens: int
    truncated: bool
    alternatives: list[Alternatives] | None = None


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
            on CPU, 1024 positions on a GPU
            (:func:`~dialscore_server.nll.engine.projection.default_projection_chunk`).
        prefix_reuse: compute shared work once. Decoder-only: items of one call whose token
            sequences start alike are grouped; each group's shared prefix runs once, its key/value
            cache is expanded across the group's continuations, and only continuation positions
            are computed again (see :func:`~dialscore_server.scheduling.planner.share_prefixes` for when a
            group is formed). Encoder-decoder: each distinct source is encoded once. Off: every
            item computes its whole input (the numbers are the same either way, to float
            tolerance).
        min_shared_prefix: decoder-only prefix groups need at least this many shared tokens;
            also the context cache's block (its shortest prefix served).
        context_cache_bytes: decoder-only models with `prefix_reuse`: keep the key/value states
            of recently computed contexts across calls in a
            :class:`~dialscore_server.nll.engine.context_cache.ContextCache` of at most this
            many bytes, and start every shared-prefix group from the longest cached prefix of its
            context (see :meth:`~dialscore_server.nll.engine.forward.ForwardPasses.shared`); an
            item that shares its context with no other item of the call forms a group of its own
            when the cache holds a prefix of its context, and otherwise runs in a plain pass that
            stores its context (sources of at least `min_shared_prefix` tokens). 0 (the default
            here): no cache, each call on its own. None: :func:`default_context_cache_bytes`
            (what the service uses, ``serving.context_cache_bytes``). Same numbers either way.
        fast_kernels: apply :mod:`dialscore_server.nll.engine.kernels` to the loaded model (its
            linear layers replaced by oneDNN ones where this machine's choice for the layer's
            shape is oneDNN: chosen once per machine and shared by every process on it,
            :mod:`~dialscore_server.nll.engine.kernel_choice`), and GPT-2's five-op GELU as one
            kernel, fused into the preceding product when that goes through oneDNN. Numbers
            change only by float rounding; each replacement is checked against the layer it
            replaces first. The vocabulary projection's route is chosen the same way. Off: the
            stock PyTorch/transformers path.
        cuda_graph_positions: decoder-only models on a CUDA device: capture the trunk's plain
            passes (no key/value states kept) as CUDA graphs, for every (rows, width) bucket of
            at most this many positions (:mod:`dialscore_server.nll.engine.cuda_graphs`), at
            construction, and replay them for passes they hold. Numbers change only by float
            rounding. 0 (the default here): no graphs; ignored on CPU and for seq2seq models.
            The service passes ``serving.cuda_graph_positions``.
        pass_limits: the padding rules that end a pass besides the token budget
            (:class:`~dialscore_server.scheduling.planner.PassLimits`): for plain passes, prefix
            passes and continuation passes. Default (None): by device
            (:func:`~dialscore_server.scheduling.planner.pass_limits_for`: on a GPU a pass may take
            more padding, since another pass costs more there). Same numbers either way, to
            float rounding.
    """

    def __init__(self, config: ModelConfig, loaded: LoadedModel | None = None, *,
                 token_budget: int | None = None, num_threads: int | None = None,
                 projection_chunk: int | None = None, prefix_reuse: bool = True,
                 min_shared_prefix: int = MIN_SHARED_PREFIX, fast_kernels: bool = True,
                 context_cache_bytes: int | None = 0, cuda_graph_positions: int = 0,
                 pass_limits: PassLimits | None = None):
        if config.family not in ("causal", "seq2seq"):
            raise ValueError(f"model {config.name!r} is a {config.family}; the NLL engine scores "
                             "causal and seq2seq models")
        if token_budget is not None and token_budget < 1:
            raise ValueError("token_budget must be positive")
        if min_shared_prefix < 1:
            raise ValueError("min_shared_prefix must be positive")
        if context_cache_bytes is not None and context_cache_bytes < 0:
            raise ValueError("context_cache_bytes must be 0 (off), positive, or None (default)")
        if cuda_graph_positions < 0:
            raise ValueError("cuda_graph_positions must be 0 (off) or positive")
        self.threads = set_threads(num_threads)
        self.config = config
        self.loaded = loaded or load_model(config)
        self.model = self.loaded.model
        if token_budget is None:
            token_budget = default_token_budget(self.loaded.device,
                                                getattr(self.model.config, "hidden_size", 1024))
        self.token_budget = token_budget
        self.pass_limits = pass_limits or pass_limits_for(self.loaded.device)
        self.fast_kernels = fast_kernels
        self.kernels: dict[str, Any] = {}
        if fast_kernels:
            from dialscore_server.nll.engine import kernels

            # Timed at this engine's pass size: which route wins depends on the row count.
            self.kernels = kernels.optimize(self.model, rows=self.token_budget)
        pause_points.install(self.model)  # where a yielding call steps aside, between layers
        self.tokenizer = self.loaded.tokenizer
        self.fmt = config.format
        if projection_chunk is None:
            vocab = self.model.get_output_embeddings().weight.shape[0]
            projection_chunk = default_projection_chunk(self.loaded.device, vocab)
        self.projection = VocabularyProjection(self.model, projection_chunk,
                                               onednn=bool(self.kernels.get("onednn_head")))
        self.prefix_reuse = prefix_reuse
        self.min_shared_prefix = min_shared_prefix
        if context_cache_bytes is None:
            context_cache_bytes = default_context_cache_bytes(self.loaded.device)
        self.context_cache = (
            ContextCache(context_cache_bytes, block=min_shared_prefix)
            if context_cache_bytes and prefix_reuse and config.family == "causal" else None)
        tok = self.tokenizer
        self.encoder = NLLEncoder(
            config, tok,
            self.model.config.decoder_start_token_id if config.family == "seq2seq" else None)
        self.passes = ForwardPasses(
            self.model, self.loaded.device,
            pad_id=tok.pad_token_id if tok.pad_token_id is not None else self.encoder.eos_id,
            decoder_prefix=self.encoder.decoder_prefix, window=config.max_length,
            project=self.projection, pass_limits=self.pass_limits)
        self.graphs = (self._capture(cuda_graph_positions)
                       if cuda_graph_positions and config.family == "causal"
                       and str(self.loaded.device).startswith("cuda") else None)
        self.passes.graphs = self.graphs

    def _capture(self, positions: int) -> GraphedTrunk:
        """:meth:`ForwardPasses.trunk` captured for every bucket of at most `positions` positions
        within the model's window, keeping every layer's keys and values when this engine has a
        context cache."""
        import torch

        passes = self.passes
        with torch.inference_mode():
            return GraphedTrunk(passes.trunk, self.loaded.device, passes.pad_id,
                                buckets(positions, passes.max_positions),
                                keep_states=self.context_cache is not None)

    # ----------------------------------------------------------------------------- lifecycle
    @classmethod
    def from_options(cls, config: ModelConfig, options: ServingOptions) -> NLLEngine:
        """The engine as a deployment serves it (see :class:`~dialscore_server.contract.engine.Engine`)."""
        return cls(config, token_budget=options.token_budget, num_threads=options.num_threads,
                   prefix_reuse=options.prefix_reuse, fast_kernels=options.fast_kernels,
                   context_cache_bytes=options.context_cache_bytes,
                   cuda_graph_positions=options.cuda_graph_positions)

    def card(self) -> ModelCard:
        c, loaded = self.config, self.loaded
        return ModelCard(name=c.name, family=c.family, source=c.source,
                         revision=loaded.resolved_revision, max_length=c.max_length, dtype=c.dtype,
                         device=loaded.device, stand_in=loaded.stand_in, format=c.format)

    def check_health(self) -> None:
        """A real one-token forward pass."""
        self.score_encoded([self.encode(NLLItem(target="ok", source=""))])

    def close(self) -> None:
        """Drop the model, its passes, its captured graphs (their GPU memory; their trunk refers
        to the passes) and its float32 head copy (the caller drops the engine)."""
        self.model = self.projection = self.passes = self.graphs = None  # type: ignore[assignment]
        self.loaded = None  # type: ignore[assignment]

    @property
    def stand_in(self) -> bool:
        return self.loaded.stand_in

    # ----------------------------------------------------------------------------- encoding
    def format_parts(self, item: NLLItem) -> tuple[Pieces, Pieces]:
        """The item's source as (pinned knowledge pieces, truncatable history pieces); see
        :class:`~dialscore_server.nll.engine.encoding.NLLEncoder`."""
        return self.encoder.format_parts(item)

    def encode(self, item: NLLItem) -> EncodedItem:
        """Tokenize and truncate one item; raise
        :class:`~dialscore_server.contract.errors.InputError` if it cannot be scored; see
        :class:`~dialscore_server.nll.engine.encoding.NLLEncoder`."""
        return self.encoder.encode(item)

    def positions(self, item: EncodedItem, after: EncodedItem | None = None) -> int:
        """About how many positions an engine call computes for `item` when it comes right after
        `after` in the call: its whole input (``cost``; seq2seq adds the unscored decoder inputs
        before the target), less the longest of these prefixes, each computed once or not at
        all: its source when the source repeats `after`'s and prefix reuse computes it once
        (decoder-only: a source of at least ``min_shared_prefix`` tokens, which then heads a
        shared-prefix group); decoder-only, when `after`'s whole sequence (source + target, same
        ``top_k``) starts `item`'s, `after`'s tokens (`after` is read from `item`'s pass: a
        dialogue's next turn); and what the context cache holds of it now
        (:meth:`cached_positions`). At least 1. An estimate: items of one call that share a
        source without being adjacent, or share more than their source, are shared too, and a
        cached prefix may be evicted (or another cached) before the call. What the serving sizes
        its chunks and batches by (engine time follows computed positions, not item tokens)."""
        causal = self.config.family == "causal"
        whole = item.cost + (0 if causal else len(self.encoder.decoder_prefix) - 1)
        shared = 0
        if causal and self.prefix_reuse and after is not None and after.top_k == item.top_k:
            before = after.source_ids + after.target_ids
            if before == (item.source_ids + item.target_ids)[: len(before)]:
                shared = len(before)
        if (not shared and self.prefix_reuse and after is not None
                and after.source_ids == item.source_ids
                and (not causal or len(item.source_ids) >= self.min_shared_prefix)):
            shared = len(item.source_ids)
        return max(1, whole - max(shared, self.cached_positions(item)))

    def cached_positions(self, item: EncodedItem) -> int:
        """How many of `item`'s first positions the context cache holds now, as an engine call
        scoring it alone would read them (0: no cache, or a miss): for an item whose source is
        one token (a completions prompt), up to all its positions but the last two, from a
        scored entry with the same ``top_k``; for any other, up to its source's positions but
        the last. Counts no lookup and changes no recency; safe from any thread."""
        cache = self.context_cache
        if cache is None:
            return 0
        seq, s = item.source_ids + item.target_ids, len(item.source_ids)
        if s == 1:
            return cache.probe(seq, 0, len(seq) - 2, item.top_k)
        return cache.probe(seq, s - 1)

    # ----------------------------------------------------------------------------- scoring
    def score(self, items: Sequence[NLLItem]) -> list[NLLResult]:
        """Encode and score `items`; results keep the items' order."""
        return self.score_encoded([self.encode(it) for it in items])[0]

    def score_encoded(self, encoded: Sequence[EncodedItem], guard: CallGuard | None = None
                      ) -> tuple[list[NLLResult | None], BatchStats]:
        """Score already encoded items in token-budget batches; results keep the input order.

        With a `guard` over the items' indices (:mod:`dialscore_server.scheduling.cancellation`),
        whether an item is still wanted is asked before every forward pass: items no longer wanted
        are left out of the passes not yet run and get None, every other item's numbers are the
        same as without, and the guard's clock gets each item's share of the pass time. Without a guard (or one nobody
        can cancel) every item is scored: no None."""
        import torch

        # OpenMP's thread count is a per-thread setting: a caller's thread (a replica's engine
        # thread, scheduling.engine_thread.EngineThread) otherwise inherits OMP_NUM_THREADS (Ray
        # sets it to the replica's num_cpus, 1 for fractional CPUs) and would run MKL/oneDNN on
        # one thread.
        torch.set_num_threads(self.threads)
        stats = BatchStats(items=len(encoded))
        results: list[NLLResult | None] = [None] * len(encoded)
        causal = self.config.family == "causal"
        dec_extra = len(self.encoder.decoder_prefix) - 1 if not causal else 0
        stats.item_tokens = sum(e.cost + dec_extra for e in encoded)
        stats.target_tokens = sum(len(e.target_ids) for e in encoded)
        stats.truncated = sum(e.truncated for e in encoded)
        rows, owners, offsets = self._rows(encoded) if causal and self.prefix_reuse else (
            list(encoded), None, [0] * len(encoded))
        stats.chained_items = len(encoded) - len(rows)
        guard = (guard or CallGuard()).over(owners)
        cache = self.context_cache
        before = replace(cache.stats) if cache is not None else None

        def finish(batch: Sequence[int], logprobs: Sequence[list[float] | None]) -> None:
            for r, lp in zip(batch, logprobs):
                if lp is None:
                    continue
                for i in (owners[r] if owners is not None else (r,)):
                    results[i] = self._result(encoded[i], lp[offsets[i]:
                                                             offsets[i] + len(encoded[i].target_ids)])
            stats.batches += 1
            stats.batch_sizes.append(sum(len(owners[r]) for r in batch) if owners is not None
                                     else len(batch))

        with torch.inference_mode():
            groups: list[SharedPrefixGroup] = []
            alone: list[int] = list(range(len(rows)))
            if causal and self.prefix_reuse:
                groups, alone = share_prefixes([e.source_ids + e.target_ids for e in rows],
                                               self.min_shared_prefix)
                if cache is not None:
                    groups, alone = self._cached_alone(rows, groups, alone, cache)
            for planned in self._plan_shared(groups, [
                    cached_prefix(rows, g, cache) if cache is not None else 0 for g in groups]):
                unit = [g for g in planned if guard.any_wanted(g.items)]
                if unit:
                    batch = [i for g in unit for i in g.items]
                    finish(batch, self.passes.shared(rows, unit, stats, self.token_budget, guard,
                                                     cache))
            subset = [rows[i] for i in alone]
            for planned_rows in self._plan(subset):
                batch = guard.keep([alone[k] for k in planned_rows])
                if not batch:
                    continue
                batch_rows = [rows[i] for i in batch]
                with guard.forward(batch, [r.cost for r in batch_rows]):
                    if causal:
                        logprobs = self.passes.causal(batch_rows, stats, cache)
                    else:
                        logprobs = self.passes.seq2seq(batch_rows, stats,
                                                       encode_once=self.prefix_reuse)
                finish(batch, logprobs)
        if cache is not None and before is not None:
            stats.cache_hits = cache.stats.hits - before.hits
            stats.cache_misses = cache.stats.misses - before.misses
            stats.cache_evictions = cache.stats.evictions - before.evictions
            stats.cache_bytes = cache.stats.bytes
        return results, stats

    def _cached_alone(self, rows: Sequence[EncodedItem], groups: list[SharedPrefixGroup],
                      alone: list[int], cache: ContextCache
                      ) -> tuple[list[SharedPrefixGroup], list[int]]:
        """(groups, alone) with each item alone whose context the cache holds made a group of its
        own, so its prefix pass starts from the cache: a /v1/nll item's group is its source; a
        prompt's (a one-token source, every later position scored, read back from a scored
        entry) is the prompt but its last token. The others stay alone: their plain passes store
        their contexts, and count as misses here."""
        own: dict[int, int] = {}
        misses = 0
        for i in alone:
            r = rows[i]
            seq, s = r.source_ids + r.target_ids, len(r.source_ids)
            if self.cached_positions(r):
                own[i] = len(seq) - 1 if s == 1 else s
            else:
                misses += s >= cache.block or (s == 1 and len(seq) > cache.block)
        cache.count_misses(misses)
        return ([*groups, *(SharedPrefixGroup(n, (i,)) for i, n in own.items())],
                [i for i in alone if i not in own])

    @staticmethod
    def _result(row: EncodedItem, lp: Sequence[Any]) -> NLLResult:
        """`row`'s result from the log-probabilities of its target tokens (floats, or
        ScoredPosition records)."""
        alternatives = None
        if lp and isinstance(lp[0], ScoredPosition):
            if row.top_k:
                alternatives = [p.alternatives for p in lp]
            lp = [p.logprob for p in lp]
        token_nlls = [-x for x in lp]
        return NLLResult(
            nll=math.fsum(token_nlls) / len(token_nlls), token_nlls=token_nlls,
            token_ids=list(row.target_ids), num_tokens=len(token_nlls),
            source_tokens=len(row.source_ids), truncated=row.truncated,
            alternatives=alternatives)

    @staticmethod
    def _rows(encoded: Sequence[EncodedItem]
              ) -> tuple[list[EncodedItem], list[list[int]] | None, list[int]]:
        """The rows a decoder-only call computes: (rows, the items each row stands for or None
        when every item is its own row, each item's offset in its row's target).

        An item whose source + target is a prefix of another item's (same ``top_k``) is read
        from that item's pass (:func:`~dialscore_server.scheduling.planner.chain_hosts`): the
        host's row keeps its tokens but scores from the shortest source of its members on, so
        its target covers every member's target positions; member ``i``'s log-probabilities are
        the row's, from offset ``len(source_i) - len(row source)`` for ``len(target_i)`` tokens.
        A row may score positions none of its members asks for (between two members' targets);
        their projections are discarded."""
        seqs = [e.source_ids + e.target_ids for e in encoded]
        host = chain_hosts(seqs, [e.top_k for e in encoded])
        if all(h == i for i, h in enumerate(host)):
            return list(encoded), None, [0] * len(encoded)
        members: dict[int, list[int]] = {}
        for i, h in enumerate(host):
            members.setdefault(h, []).append(i)
        rows, owners, offsets = [], [], [0] * len(encoded)
        for h, group in members.items():
            start = min(len(encoded[i].source_ids) for i in group)
            e = encoded[h]
            rows.append(e if len(group) == 1 else EncodedItem(
                seqs[h][:start], seqs[h][start:], truncated=False, top_k=e.top_k))
            owners.append(group)
            for i in group:
                offsets[i] = len(encoded[i].source_ids) - start
        return rows, owners, offsets

    def encode_prompt(self, prompt: str | Sequence[int], append_next: bool, top_k: int
                      ) -> EncodedItem:
        """A completions prompt as an item (see :mod:`dialscore_server.nll.engine.prompts`)."""
        ids = self.encoder.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        return encode_prompt(ids, family=self.config.family, window=self.config.max_length,
                             vocab=self.vocab_size,
                             placeholder=self.encoder.eos_id, append_next=append_next, top_k=top_k)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids, decoded together."""
        return self.tokenizer.decode(list(ids))

    # ----------------------------------------------------------------------------- tokenizer routes
    @property
    def vocab_size(self) -> int:
        """Ids 0..vocab_size-1 are the model's vocabulary (its input embedding's rows)."""
        return self.model.get_input_embeddings().weight.shape[0]

    def tokenize(self, text: str) -> list[int]:
        """`text`'s ids exactly as a completions text prompt is tokenized (plain text)."""
        return self.encoder.tokenize(text)

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of `ids` decoded together; an InputError (param None: the caller names the
        field) for an id outside the vocabulary."""
        check_vocabulary(ids, self.vocab_size)
        return self.decode(ids)

    def tokenizer_info(self) -> TokenizerInfo:
        """The tokenizer's special tokens, class and vocabulary size, and the model's window."""
        t = self.tokenizer
        return TokenizerInfo(tokenizer_class=type(t).__name__, eos_token=t.eos_token,
                             bos_token=t.bos_token, pad_token=t.pad_token, unk_token=t.unk_token,
                             eos_token_id=t.eos_token_id,
                             vocab_size=self.vocab_size, max_model_len=self.config.max_length)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Each token id decoded on its own (a token holding part of a multi-byte character
        decodes to U+FFFD)."""
        return [self.tokenizer.decode([i]) for i in ids]

    # ----------------------------------------------------------------------------- planning
    def _plan(self, encoded: Sequence[EncodedItem]) -> list[list[int]]:
        """Group item indices into batches under the token budget, sorted by length so rows of
        similar length share a batch, a causal row that would pad its batch past a pass's overhead
        starting the next (seq2seq: same sources adjacent, to encode them once)."""
        def cost(run: list[int]) -> int:
            return self._padded_cost([encoded[j] for j in run])

        if self.config.family == "causal":
            order = sorted(range(len(encoded)), key=lambda i: encoded[i].cost)
            return pack(order, cost, self.token_budget, length=lambda i: encoded[i].cost,
                        limits=self.pass_limits)
        order = sorted(range(len(encoded)),
                       key=lambda i: (len(encoded[i].source_ids), encoded[i].source_ids,
                                      len(encoded[i].target_ids)))
        return pack(order, cost, self.token_budget)

    def _padded_cost(self, rows: Sequence[EncodedItem]) -> int:
        """Padded positions of one plain pass over `rows` (what the token budget bounds)."""
        if self.config.family == "causal":
            return len(rows) * max(r.cost for r in rows)
        sources = {r.source_ids for r in rows}
        dec = len(self.encoder.decoder_prefix) - 1
        n_encoded = len(sources) if self.prefix_reuse else len(rows)
        return (n_encoded * max(len(s) for s in sources)
                + len(rows) * (max(len(r.target_ids) for r in rows) + dec))

    def _plan_shared(self, groups: Sequence[SharedPrefixGroup], cached: Sequence[int]
                     ) -> list[list[SharedPrefixGroup]]:
        """Batches of prefix groups, `cached[k]` being how many of group k's prefix positions the
        context cache holds (:func:`~dialscore_server.nll.engine.forward.cached_prefix`): their
        prefix pass computes each group's prefix past its cached part, rows × the longest such
        remainder under the token budget, and attends to the cached parts, rows × the longest
        prefix under KV_BUDGET_FACTOR × the budget (the padded past's memory). Their continuations
        then take as many passes as :func:`~dialscore_server.scheduling.planner.chunk_passes`
        cuts them into (each under the budget, similar lengths together). Groups with a cached
        part and groups without are batched apart, so that no uncached group is given a padded
        past of zeros (copied into every layer, attended to under a mask). Each part is sorted
        by remainder, then prefix length, and a group whose remainder would pad the pass past a
        pass's overhead (:func:`~dialscore_server.scheduling.planner.pads_past_a_pass`) starts
        the next, so cached tails a few tokens long fill passes of their own. A cached
        part evicted between this plan and its pass is computed in that pass, which then exceeds
        the budget by at most the KV bound."""
        left = {g: g.length - c for g, c in zip(groups, cached)}

        def cost(run: list[SharedPrefixGroup]) -> int:
            rows = len(run)
            return max(rows * max(left[g] for g in run),
                       -(-rows * max(g.length for g in run) // KV_BUDGET_FACTOR))

        def order(part: list[SharedPrefixGroup]) -> list[SharedPrefixGroup]:
            return sorted(part, key=lambda g: (left[g], g.length, len(g.items)))

        with_cache = [g for g, c in zip(groups, cached) if c]
        without = [g for g, c in zip(groups, cached) if not c]
        return [run for part in (with_cache, without)
                for run in pack(order(part), cost, self.token_budget, length=left.__getitem__,
                                limits=self.pass_limits)]
