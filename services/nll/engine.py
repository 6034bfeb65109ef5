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
* **Numerics.** Forward passes under ``torch.inference_mode``; logits are projected only at target
  positions and log-softmaxed in float32 whatever the model's dtype.

The engine is a plain Python object: it runs without Ray; the Serve deployment wraps it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.loading import LoadedModel, load_model, set_threads
from services.registry import ModelConfig


class ScoringInputError(ValueError):
    """An item that cannot be scored as given; `param` names the offending field (e.g. `target`)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


class TargetTooLongError(ScoringInputError):
    """The target alone does not fit the model's window (targets are never truncated)."""


class EmptyTargetError(ScoringInputError):
    """The target produced no token to score."""


@dataclass(frozen=True)
class NLLItem:
    """One thing to score: either dialogue turns (`context`, optional `knowledge`) or a raw `source`.

    `context` turns are formatted with the model's :class:`~services.registry.DialogueFormat`;
    a raw `source` is used verbatim. An empty `context` (or empty `source`) is valid.
    """

    target: str
    context: tuple[str, ...] | None = None
    knowledge: str | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        if self.source is not None and (self.context is not None or self.knowledge is not None):
            raise ScoringInputError("give either `source` or `context`/`knowledge`, not both", "source")


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
    """What one `score_encoded` call computed: forward passes, real and padded token counts."""

    items: int = 0
    batches: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    target_tokens: int = 0
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def padding_waste(self) -> float:
        """Share of computed positions that were padding (0 = none)."""
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0


class NLLEngine:
    """Scores (source, target) items for one causal or seq2seq model. See the module docstring.

    Args:
        config: the registry entry.
        loaded: an already loaded model (tests pass re-initialised weights); loaded from
            ``config`` when omitted.
        token_budget: most padded tokens per forward pass (rows × longest row; for seq2seq,
            distinct sources × longest source + rows × longest decoder input). A single item
            larger than the budget still runs, alone.
        num_threads: torch intra-op threads (default: the CPUs this process may use).
        projection_chunk: target positions projected to the vocabulary at once (bounds the
            float32 logits buffer to chunk × vocab).
    """

    def __init__(self, config: ModelConfig, loaded: LoadedModel | None = None, *,
                 token_budget: int = 4096, num_threads: int | None = None,
                 projection_chunk: int = 1024):
        if config.family not in ("causal", "seq2seq"):
            raise ValueError(f"model {config.name!r} is a {config.family}; the NLL engine scores "
                             "causal and seq2seq models")
        if token_budget < 1:
            raise ValueError("token_budget must be positive")
        self.threads = set_threads(num_threads)
        self.config = config
        self.loaded = loaded or load_model(config)
        self.model = self.loaded.model
        self.tokenizer = self.loaded.tokenizer
        self.token_budget = token_budget
        self.projection_chunk = projection_chunk
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
        """Tokenize and truncate one item; raise :class:`ScoringInputError` if it cannot be scored."""
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

        stats = BatchStats(items=len(encoded))
        results: list[NLLResult | None] = [None] * len(encoded)
        with torch.inference_mode():
            for batch in self._plan(encoded):
                rows = [encoded[i] for i in batch]
                if self.config.family == "causal":
                    logprobs = self._forward_causal(rows, stats)
                else:
                    logprobs = self._forward_seq2seq(rows, stats)
                for i, row, lp in zip(batch, rows, logprobs):
                    token_nlls = [-x for x in lp]
                    results[i] = NLLResult(
                        nll=math.fsum(token_nlls) / len(token_nlls), token_nlls=token_nlls,
                        token_ids=list(row.target_ids), num_tokens=len(token_nlls),
                        source_tokens=len(row.source_ids), truncated=row.truncated,
                    )
                stats.batches += 1
                stats.batch_sizes.append(len(batch))
                stats.target_tokens += sum(len(r.target_ids) for r in rows)
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
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            trial = current + [i]
            if current and self._padded_cost([encoded[j] for j in trial]) > self.token_budget:
                batches.append(current)
                trial = [i]
            current = trial
        if current:
            batches.append(current)
        return batches

    def _padded_cost(self, rows: Sequence[EncodedItem]) -> int:
        if self.config.family == "causal":
            return len(rows) * max(r.cost for r in rows)
        sources = {r.source_ids for r in rows}
        dec = len(self.decoder_prefix) - 1
        return (len(sources) * max(len(s) for s in sources)
                + len(rows) * (max(len(r.target_ids) for r in rows) + dec))

    def _project_logprobs(self, hidden, targets) -> list[float]:
        """log P(target) at the given hidden states: vocabulary projection in chunks, float32."""
        import torch

        head = self.model.get_output_embeddings()
        bias = getattr(self.model, "final_logits_bias", None)
        out = []
        for start in range(0, hidden.shape[0], self.projection_chunk):
            h = hidden[start:start + self.projection_chunk]
            logits = head(h).float()
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
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        gather_rows, gather_cols, targets = [], [], []
        for b, r in enumerate(rows):
            seq = r.source_ids + r.target_ids
            ids[b, : len(seq)] = torch.tensor(seq)
            mask[b, : len(seq)] = 1
            s = len(r.source_ids)
            gather_rows += [b] * len(r.target_ids)
            gather_cols += range(s - 1, s - 1 + len(r.target_ids))
            targets += r.target_ids
        stats.real_tokens += sum(r.cost for r in rows)
        stats.padded_tokens += ids.numel()
        hidden = self.model.base_model(
            input_ids=ids.to(device), attention_mask=mask.to(device)
        ).last_hidden_state
        sel = hidden[torch.tensor(gather_rows, device=device), torch.tensor(gather_cols, device=device)]
        flat = self._project_logprobs(sel, torch.tensor(targets, device=device))
        return _split(flat, [len(r.target_ids) for r in rows])

    def _forward_seq2seq(self, rows: Sequence[EncodedItem], stats: BatchStats) -> list[list[float]]:
        import torch

        device = self.loaded.device
        sources: dict[tuple[int, ...], int] = {}
        for r in rows:
            sources.setdefault(r.source_ids, len(sources))
        src_width = max(len(s) for s in sources)
        enc_ids = torch.full((len(sources), src_width), self.pad_id, dtype=torch.long)
        enc_mask = torch.zeros((len(sources), src_width), dtype=torch.long)
        for s, u in sources.items():
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
        stats.real_tokens += sum(len(s) for s in sources) + int(dec_mask.sum())
        stats.padded_tokens += enc_ids.numel() + dec_ids.numel()
        encoder_hidden = self.model.get_encoder()(
            input_ids=enc_ids.to(device), attention_mask=enc_mask.to(device)
        ).last_hidden_state
        index = torch.tensor([sources[r.source_ids] for r in rows], device=device)
        hidden = self.model.get_decoder()(
            input_ids=dec_ids.to(device), attention_mask=dec_mask.to(device),
            encoder_hidden_states=encoder_hidden.index_select(0, index),
            encoder_attention_mask=enc_mask.to(device).index_select(0, index),
        ).last_hidden_state
        sel = hidden[torch.tensor(gather_rows, device=device), torch.tensor(gather_cols, device=device)]
        flat = self._project_logprobs(sel, torch.tensor(targets, device=device))
        return _split(flat, [len(r.target_ids) for r in rows])


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
