"""The NLL engine's forward passes: batches of encoded items in, log-probabilities of their target
tokens out.

Every pass right-pads its rows and restarts position ids at 0 for every row (continuations start
at their prefix length), so an item's numbers do not depend on what it shares a pass with. Each
pass adds what it computed to the call's :class:`~dialscore_server.scheduling.planner.BatchStats`; which
items share a pass is decided by the engine (:mod:`dialscore_server.nll.engine.engine`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dialscore_server.scheduling.planner import (
    CPU_PASS_LIMITS, KV_BUDGET_FACTOR, BatchStats, PassLimits, SharedPrefixGroup, chunk_passes,
)
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.context_cache import ContextCache
from dialscore_server.nll.engine.cuda_graphs import GraphedTrunk
from dialscore_server.nll.engine.prefix_cache import expanded_prefix_cache, padded_past
from dialscore_server.nll.engine.projection import ScoredPosition

#: log P(targets[k] | hidden[k]) for each selected position k (a VocabularyProjection); with a
#: third argument (top-k counts per position), ScoredPosition records instead of floats.
Projection = Callable[..., list[Any]]


class ForwardPasses:
    """The forward passes of one causal or seq2seq model.

    Args:
        model: the loaded Hugging Face model.
        device: where its weights live (inputs are moved there).
        pad_id: the token id written in padding slots (never attended to by a scored position).
        decoder_prefix: seq2seq: the unscored decoder inputs before the target
            (:attr:`~dialscore_server.nll.engine.encoding.NLLEncoder.decoder_prefix`).
        window: the registry's ``max_length``; continuation position ids stay below it and the
            model's position table.
        project: the vocabulary projection.
        pass_limits: the padding rules that cut continuation passes
            (:class:`~dialscore_server.scheduling.planner.PassLimits`).

    Attribute set by the engine after construction (the capture runs :meth:`trunk`):
        graphs: captured CUDA graphs of :meth:`trunk`
            (:class:`~dialscore_server.nll.engine.cuda_graphs.GraphedTrunk`): a plain causal pass
            replays one where a bucket holds it and the graphs keep states (their
            ``keep_states``) exactly when the pass has a context cache. None: every pass
            launches its kernels one by one.

    Each method returns, per item in the order given, the log-probabilities of its target tokens:
    floats, or, when any item of the pass asks for alternatives (``EncodedItem.top_k > 0``),
    :class:`~dialscore_server.nll.engine.projection.ScoredPosition` records for every item of that
    method call (k = 0 items get records without alternatives).
    """

    def __init__(self, model: Any, device: str, *, pad_id: int, decoder_prefix: tuple[int, ...],
                 window: int, project: Projection, pass_limits: PassLimits = CPU_PASS_LIMITS):
        self.model = model
        self.pass_limits = pass_limits
        self.device = device
        self.pad_id = pad_id
        self.decoder_prefix = decoder_prefix
        self.max_positions = min(
            window, getattr(model.config, "max_position_embeddings", None) or window)
        self.project = project
        self.graphs: GraphedTrunk | None = None

    def trunk(self, ids: Any, keep_states: bool) -> tuple[Any, list[tuple[Any, Any]] | None]:
        """The model's trunk (``base_model``) over `ids` (rows x width, long, on the device):
        (hidden states, every layer's (keys, values) when `keep_states`, else None). Rows are
        right-padded and no padding mask is passed: under causal attention a real position
        attends only to earlier positions, all real, so the mask would change nothing a scored
        position sees, and without it the attention runs the fused causal kernel."""
        out = self.model.base_model(input_ids=ids, attention_mask=None, use_cache=keep_states)
        kv = ([(layer.keys, layer.values) for layer in out.past_key_values.layers]
              if keep_states else None)
        return out.last_hidden_state, kv

    def causal(self, rows: Sequence[EncodedItem], stats: BatchStats,
               cache: ContextCache | None = None) -> list[list[float]]:
        """Decoder-only: one sequence ``source + target`` per row; logits at position j predict
        token j+1. With a context `cache`, the pass keeps its keys/values and stores in the cache
        each row's source (when at least a cache block long), or, for a prompt (a one-token
        source: every later position scored), the whole prompt with its positions' records."""
        import torch

        device = self.device
        width = max(r.cost for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        gather_rows, gather_cols, targets, ks = [], [], [], []
        for b, r in enumerate(rows):
            seq = r.source_ids + r.target_ids
            ids[b, : len(seq)] = torch.tensor(seq)
            s = len(r.source_ids)
            gather_rows += [b] * len(r.target_ids)
            gather_cols += range(s - 1, s - 1 + len(r.target_ids))
            targets += r.target_ids
            ks += [r.top_k] * len(r.target_ids)
        stats.real_tokens += sum(r.cost for r in rows)
        stats.forward_passes += 1
        graphs = self.graphs
        replayed = (graphs(ids) if graphs is not None and graphs.keep_states == (cache is not None)
                    else None)
        if replayed is not None:
            (bucket_rows, bucket_width), (hidden, kv) = replayed
            stats.padded_tokens += bucket_rows * bucket_width
        else:
            stats.padded_tokens += ids.numel()
            hidden, kv = self.trunk(ids.to(device), cache is not None)
        sel = hidden[torch.tensor(gather_rows, device=device), torch.tensor(gather_cols, device=device)]
        flat = self._project(sel, torch.tensor(targets, device=device), ks, any(r.top_k for r in rows))
        logprobs = _split(flat, [len(r.target_ids) for r in rows])
        if cache is not None:
            for b, r in enumerate(rows):
                if len(r.source_ids) == 1:  # a prompt: its positions and their records
                    n = r.cost
                    cache.insert(r.source_ids + r.target_ids,
                                 [(k[b, :, :n], v[b, :, :n]) for k, v in kv], logprobs[b], r.top_k)
                elif len(r.source_ids) >= cache.block:
                    n = len(r.source_ids)
                    cache.insert(r.source_ids, [(k[b, :, :n], v[b, :, :n]) for k, v in kv])
        del kv, hidden
        return logprobs

    def _project(self, hidden, targets, ks: list[int], alternatives: bool) -> list[Any]:
        """The projection, with per-position top-k counts only when the pass asks for any (the
        plain path otherwise, so items without alternatives keep their exact numbers)."""
        return self.project(hidden, targets, ks) if alternatives else self.project(hidden, targets)

    def seq2seq(self, rows: Sequence[EncodedItem], stats: BatchStats, encode_once: bool
                ) -> list[list[float]]:
        """Encoder-decoder: the source is the encoder input; the decoder input is the decoder
        prefix + target[:-1]. With `encode_once` each distinct source of the pass is encoded once
        and its states are shared by all of its targets; without, every row is encoded on its own.
        """
        import torch

        device = self.device
        sources: dict[tuple[int, ...], int] = {}
        if encode_once:
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
        gather_rows, gather_cols, targets, ks = [], [], [], []
        for b, r in enumerate(rows):
            seq = (self.decoder_prefix + r.target_ids)[:-1]
            dec_ids[b, : len(seq)] = torch.tensor(seq)
            dec_mask[b, : len(seq)] = 1
            gather_rows += [b] * len(r.target_ids)
            gather_cols += range(n_prefix - 1, n_prefix - 1 + len(r.target_ids))
            targets += r.target_ids
            ks += [r.top_k] * len(r.target_ids)
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
        flat = self._project(sel, torch.tensor(targets, device=device), ks, any(r.top_k for r in rows))
        return _split(flat, [len(r.target_ids) for r in rows])

    def shared(self, encoded: Sequence[EncodedItem], unit: Sequence[SharedPrefixGroup],
               stats: BatchStats, token_budget: int, guard: CallGuard | None = None,
               cache: ContextCache | None = None) -> list[list[float] | None]:
        """Score the items of `unit` (in group order): each group's prefix once with its key/value
        cache, then every item's continuation against its group's cached prefix.

        With a `guard`, every pass runs in ``guard.forward`` and a continuation pass keeps only the
        items still wanted when it is formed; an item left out of its continuation gets None
        instead of its log-probabilities.

        Prefix pass: the groups' prefixes, right-padded, ``use_cache=True``. Target tokens whose
        predicting position lies inside the prefix (always the first one when the prefix is the
        whole source: the prefix's last hidden state predicts it) are projected from this pass.
        With a context `cache`, each group's prefix starts from the longest cached prefix of it
        that stops before the group's first predicting position (the shortest source of the group
        less one token, and at least one token short of the prefix): those positions' keys/values
        are read from the cache (left-aligned, padded to the longest, masked), the pass computes
        the rest with position ids continuing from there, and afterwards each group's context
        (its prefix up to its shortest source: never a target position) is stored in the cache.
        Continuation passes (:func:`~dialscore_server.scheduling.planner.chunk_passes` under `token_budget`
        and KV_BUDGET_FACTOR × `token_budget`): each item's remaining tokens, right-padded;
        position ids continue from the group's prefix length; the attention mask is the group's
        prefix mask (its padding masked out) followed by the continuation's own; the prefix
        keys/values are gathered per row, layer by layer, as the layer needs them
        (:func:`~dialscore_server.nll.engine.prefix_cache.expanded_prefix_cache`).
        """
        import torch

        device = self.device
        seqs = {i: encoded[i].source_ids + encoded[i].target_ids for g in unit for i in g.items}
        contexts = [_context(encoded, g) for g in unit]
        prompts = [_scored_prompts(encoded, g) for g in unit]
        hits = [cache.lookup(*_cache_query(encoded, g)) if cache is not None else None
                for g in unit]
        past = [h.length if h else 0 for h in hits]
        past_width = max(past)
        width = max(g.length - p for g, p in zip(unit, past))
        ids = torch.full((len(unit), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(unit), past_width + width), dtype=torch.long)
        positions = torch.arange(width).repeat(len(unit), 1)
        for k, (g, p) in enumerate(zip(unit, past)):
            ids[k, : g.length - p] = torch.tensor(seqs[g.items[0]][p: g.length])
            mask[k, :p] = 1
            mask[k, past_width: past_width + g.length - p] = 1
            positions[k] += p
        positions.clamp_(max=self.max_positions - 1)  # padding slots only; real positions fit
        stats.real_tokens += sum(g.length - p for g, p in zip(unit, past))
        stats.padded_tokens += ids.numel()
        stats.cached_tokens += sum(past)
        stats.forward_passes += 1
        stats.shared_groups += len(unit)
        stats.shared_items += sum(len(g.items) for g in unit)
        stats.shared_prefix_tokens += sum(g.length for g in unit)
        mask = mask.to(device)
        guard = guard or CallGuard()
        order = [i for g in unit for i in g.items]
        with guard.forward(order, [(g.length - p) / len(g.items) for g, p in zip(unit, past)
                                   for _ in g.items]):
            if past_width:
                out = self.model.base_model(
                    input_ids=ids.to(device), attention_mask=mask,
                    position_ids=positions.to(device),
                    past_key_values=padded_past(hits, past_width, device), use_cache=True)
            else:
                # Right-padded prefixes: no padding mask needed (see `causal`); the continuation
                # passes below mask the prefix padding, which there lies before real positions.
                out = self.model.base_model(input_ids=ids.to(device), attention_mask=None,
                                            use_cache=True)
        kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]

        # Targets predicted from inside the prefix (read from a scored cache entry before the
        # cached length, projected from this pass after it); the rest continue below.
        want = any(encoded[i].top_k for i in order)
        n_pre: dict[int, int] = {}
        from_cache: dict[int, list[Any]] = {}
        rows, cols, targets, ks, sizes = [], [], [], [], []
        conts: list[tuple[int, int, int]] = []  # (item, group row, prefix length)
        for k, g in enumerate(unit):
            h = past[k]
            for i in g.items:
                e = encoded[i]
                s, m = len(e.source_ids), len(e.target_ids)
                n = max(0, min(g.length - s + 1, m))
                n_pre[i] = n
                cached = max(0, min(n, h - (s - 1)))  # only after a scored hit
                from_cache[i] = _records(hits[k].scores[s - 1: s - 1 + cached], want) if cached else []
                rows += [k] * (n - cached)
                cols += range(s - 1 + cached - h, s - 1 + n - h)
                targets += e.target_ids[cached:n]
                ks += [e.top_k] * (n - cached)
                sizes.append(n - cached)
                if n < m or not prompts[k]:  # a prompt read whole needs no continuation
                    conts.append((i, k, g.length))
        computed: list[list[Any]] = [[] for _ in order]
        if targets:
            hidden = out.last_hidden_state
            flat = self._project(
                hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)],
                torch.tensor(targets, device=device), ks, want)
            computed = _split(flat, sizes)
        pre = {i: from_cache[i] + got for i, got in zip(order, computed)}
        del out
        if cache is not None:
            for k, (g, p, c) in enumerate(zip(unit, past, contexts)):
                first = g.items[0]
                if prompts[k] and g.length > p:  # the group's shared prompt, with its records
                    cache.insert(seqs[first][: g.length], _row_states(kv, k, p, past_width, g.length),
                                 pre[first][: g.length - 1], encoded[first].top_k)
                elif c > p:
                    cache.insert(seqs[first][:c], _row_states(kv, k, p, past_width, c))

        post: dict[int, list[float]] = {}
        conts.sort(key=lambda c: len(seqs[c[0]]) - c[2])
        for planned in chunk_passes(conts, lambda c: len(seqs[c[0]]) - c[2], token_budget,
                                    past_width + width, KV_BUDGET_FACTOR * token_budget,
                                    self.pass_limits):
            live = set(guard.keep([i for i, _, _ in planned]))
            chunk = [c for c in planned if c[0] in live]
            if not chunk:
                continue
            c_width = max(len(seqs[i]) - p for i, _, p in chunk)
            c_ids = torch.full((len(chunk), c_width), self.pad_id, dtype=torch.long)
            c_mask = torch.zeros((len(chunk), c_width), dtype=torch.long)
            c_pos = torch.arange(c_width).repeat(len(chunk), 1)
            rows, cols, targets, sizes, ks = [], [], [], [], []
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
                ks += [e.top_k] * n
                sizes.append(n)
            c_pos.clamp_(max=self.max_positions - 1)  # padding slots only; real positions fit
            stats.real_tokens += int(c_mask.sum())
            stats.padded_tokens += c_ids.numel()
            stats.forward_passes += 1
            group_rows = torch.tensor([k for _, k, _ in chunk], device=device)
            attention = torch.cat([mask.index_select(0, group_rows), c_mask.to(device)], dim=1)
            with guard.forward([i for i, _, _ in chunk], [len(seqs[i]) - p for i, _, p in chunk]):
                hidden = self.model.base_model(
                    input_ids=c_ids.to(device), attention_mask=attention,
                    position_ids=c_pos.to(device),
                    past_key_values=expanded_prefix_cache(kv, group_rows), use_cache=True,
                ).last_hidden_state
            if targets:
                flat = self._project(
                    hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)],
                    torch.tensor(targets, device=device), ks, want)
            else:
                flat = []
            post.update(zip((i for i, _, _ in chunk), _split(flat, sizes)))
        # An item is complete when its continuation ran or all its targets came from the prefix.
        return [pre.get(i, []) + post[i] if i in post
                else pre.get(i, []) if n_pre[i] == len(encoded[i].target_ids) else None
                for i in order]


def cached_prefix(encoded: Sequence[EncodedItem], group: SharedPrefixGroup,
                  cache: ContextCache) -> int:
    """How many of `group`'s prefix positions :meth:`ForwardPasses.shared` would read from
    `cache` now (0: none), without counting a lookup or touching the recency order."""
    return cache.probe(*_cache_query(encoded, group))


def _context(encoded: Sequence[EncodedItem], group: SharedPrefixGroup) -> int:
    """The group's context: its prefix up to its shortest source (never a target position)."""
    return min(group.length, *(len(encoded[i].source_ids) for i in group.items))


def _scored_prompts(encoded: Sequence[EncodedItem], group: SharedPrefixGroup) -> bool:
    """Whether `group` is of prompts (one-token sources) that all ask the same alternatives: such
    a group may read scored positions back from the cache; any other group only positions
    before its first scored one."""
    return (_context(encoded, group) == 1
            and len({encoded[i].top_k for i in group.items}) == 1)


def _cache_query(encoded: Sequence[EncodedItem], group: SharedPrefixGroup
                 ) -> tuple[list[int], int, int, int]:
    """The arguments of `group`'s context cache lookup: its prefix tokens, the longest plain
    prefix it may read (one short of its context), the longest scored one (one short of its
    prefix, for scored prompts only) and its alternatives' k."""
    first = encoded[group.items[0]]
    return ((first.source_ids + first.target_ids)[: group.length],
            _context(encoded, group) - 1,
            group.length - 1 if _scored_prompts(encoded, group) else 0, first.top_k)


def _row_states(kv: Sequence[tuple[Any, Any]], row: int, cached: int, past_width: int, n: int
                ) -> list[tuple[Any, Any]]:
    """Row `row`'s first `n` positions of a prefix pass's layer states, where its first `cached`
    positions sit at the start of the padded past (`past_width` wide) and the rest after it."""
    import torch

    rest = slice(past_width, past_width + n - cached)
    return [(torch.cat([k[row, :, :cached], k[row, :, rest]], 1),
             torch.cat([v[row, :, :cached], v[row, :, rest]], 1)) for k, v in kv]


def _records(scores: Sequence[Any], records: bool) -> list[Any]:
    """Cached position records as a pass returns them: ScoredPosition records when the pass
    asks for alternatives (`records`), floats otherwise."""
    if records:
        return [x if isinstance(x, ScoredPosition) else ScoredPosition(x, None) for x in scores]
    return [x.logprob if isinstance(x, ScoredPosition) else x for x in scores]


def _split(flat: list[float], sizes: Sequence[int]) -> list[list[float]]:
    """`flat` cut into consecutive lists of the given sizes."""
    out, pos = [], 0
    for n in sizes:
        out.append(flat[pos:pos + n])
        pos += n
    return out
