"""Vocabulary projection for NLL scoring: log P(target token | final hidden state), in float32,
and on request each position's top-k tokens from the same log-softmax (POST /v1/completions).

Only target positions are projected (the forward passes select them first), a chunk of positions
at a time, so the float32 logits buffer stays at chunk × vocabulary. Logits are log-softmaxed in
float32 whatever the model's dtype; for bf16/fp16 models the projection itself also runs in
float32 (upcast hidden state, float32 copy of the output embedding), so logits are not rounded
to 8 or 11 mantissa bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: On CPU, target positions are projected to the vocabulary in chunks of about this many float32
#: logits (32 MiB: 166 positions for GPT-2's 50,257 tokens), so the log-softmax reads the logits
#: while they are still in cache; it matters for passes with many target positions (long
#: targets, large token budgets). Measurements: docs/benchmarks/probe-scoring.md. On a GPU the
#: engine projects GPU_PROJECTION_CHUNK positions at once.
CPU_LOGITS_PER_CHUNK = 2 ** 23
GPU_PROJECTION_CHUNK = 1024


def default_projection_chunk(device: str, vocab_size: int) -> int:
    """Target positions projected to the vocabulary at once when none is given."""
    if not str(device).startswith("cpu"):
        return GPU_PROJECTION_CHUNK
    return max(1, CPU_LOGITS_PER_CHUNK // max(1, vocab_size))


@dataclass(frozen=True)
class Alternatives:
    """The most probable tokens at one scored position, from the same float32 log-softmax row as
    the target's log-probability: ``ids[j]`` has log-probability ``logprobs[j]``, most probable
    first (``ids[0]`` is the greedy, argmax, token; exact ties keep ``torch.topk``'s order)."""

    ids: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass(frozen=True)
class ScoredPosition:
    """One projected position when alternatives were asked for: ``logprob`` = log P(target) (the
    value the plain projection returns), ``alternatives`` the position's top-k, None where k = 0."""

    logprob: float
    alternatives: Alternatives | None


class VocabularyProjection:
    """The output head of one model, as log-probabilities of given target tokens.

    Args:
        model: a Hugging Face LM (``get_output_embeddings()``, optional ``final_logits_bias``).
        chunk: positions projected at once (positive).
        onednn: run the float32 product through oneDNN
            (:func:`dialscore_server.nll.engine.kernels.linear`).

    ``weight_fp32``/``bias_fp32``: the float32 copy of a reduced-precision head, made on first use
    and kept (None for a float32 model, or before the first call).
    """

    def __init__(self, model: Any, chunk: int, onednn: bool):
        if chunk < 1:
            raise ValueError("projection_chunk must be positive")
        self.model = model
        self.chunk = chunk
        self.onednn = onednn
        self.weight_fp32: Any = None
        self.bias_fp32: Any = None

    def __call__(self, hidden, targets, top_k: Sequence[int] | None = None
                 ) -> list[float] | list[ScoredPosition]:
        """log P(targets[k] | hidden[k]) for each position k (natural log, float32 numerics).

        With `top_k` (one count per position), each position comes back as a
        :class:`ScoredPosition`: the same log-probability and, where ``top_k[k] > 0``, the
        ``top_k[k]`` most probable tokens of that position's log-softmax row. The top-k is taken
        chunk by chunk from the float32 log-softmax the target is read from, so the full
        positions × vocabulary matrix never exists beyond one chunk, and a target that is the
        argmax has exactly the first alternative's log-probability. Without `top_k` the
        computation is the plain one, bit for bit."""
        import torch

        from dialscore_server.nll.engine.kernels import linear

        head = self.model.get_output_embeddings()
        bias = getattr(self.model, "final_logits_bias", None)
        out = []
        alternatives: list[Alternatives | None] = []
        weight, head_bias = head.weight, getattr(head, "bias", None)
        if head.weight.dtype != torch.float32:
            # Reduced precision: the body runs in bf16/fp16, but the vocabulary projection runs in
            # float32 from the upcast final hidden state. Rounding logits to bf16 would cost up to
            # ~0.1 nat per token at logits of 20-30 (8 bits of mantissa), more than many probe
            # margins; the float32 copy of the head is made once.
            if self.weight_fp32 is None:
                self.weight_fp32 = head.weight.detach().float()
                hb = getattr(head, "bias", None)
                self.bias_fp32 = hb.detach().float() if hb is not None else None
            weight, head_bias = self.weight_fp32, self.bias_fp32
        for start in range(0, hidden.shape[0], self.chunk):
            h = hidden[start:start + self.chunk].float()
            logits = linear(h, weight, head_bias, onednn=self.onednn)
            if bias is not None:
                logits = logits + bias.float().view(-1)[: logits.shape[-1]]
            lp = torch.log_softmax(logits, dim=-1)
            out.append(lp.gather(1, targets[start:start + self.chunk, None]).squeeze(1))
            if top_k is not None:
                alternatives += _top_k(lp, top_k[start:start + self.chunk])
        values = torch.cat(out).tolist()
        if top_k is None:
            return values
        return [ScoredPosition(v, a) for v, a in zip(values, alternatives)]


def _top_k(lp, counts: Sequence[int]) -> list[Alternatives | None]:
    """Per row of the log-probabilities `lp`, its ``counts[row]`` most probable tokens (None for 0):
    one ``topk`` over the rows that ask, at their largest count, then cut per row. When every row
    asks (a completions prompt's positions), the rows are `lp` itself, not a copy of it."""
    import torch

    rows = [r for r, k in enumerate(counts) if k > 0]
    out: list[Alternatives | None] = [None] * len(counts)
    if not rows:
        return out
    asking = lp if len(rows) == len(counts) else lp.index_select(
        0, torch.tensor(rows, device=lp.device))
    values, ids = asking.topk(max(counts[r] for r in rows), dim=-1)
    for r, v, i in zip(rows, values.tolist(), ids.tolist()):
        k = counts[r]
        out[r] = Alternatives(tuple(i[:k]), tuple(v[:k]))
    return out
