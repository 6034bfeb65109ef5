"""Completions log-probs (POST /v1/completions) on the NLL engine, without model code: prompt token ids
to an :class:`~dialscore_server.nll.encoding.EncodedItem`, engine results to OpenAI's
``logprobs`` object.

Which tokens are scored. A prompt p_0..p_{n-1} (token ids, as given or as the tokenizer makes
them from text with no special tokens added and no dialogue formatting) is one causal item with
source ``(p_0,)`` and targets ``p_1..p_{n-1}``: position j's log-probability is
``log P(p_j | p_<j)``, natural log, from the engine's float32 log-softmax. ``p_0`` has nothing to
condition on and gets ``null``, as in OpenAI's and vLLM's ``echo``. No bos token is added: a
caller who wants ``p_0`` scored puts the bos (GPT-2: ``<|endoftext|>``, id 50256) first.

The greedy next token (``max_tokens: 1``). The item gets one more target slot after the prompt,
filled with a placeholder (the eos id) that is never reported: the position that "predicts" it is
the prompt's last, so its top-1 alternative is the argmax next token ``g`` and its log-probability
``log P(g | p)``. Causal attention keeps the placeholder from changing any prompt position, so
the prompt's numbers are those of ``max_tokens: 0``. The prompt plus this token must fit the
model's window, as OpenAI and vLLM require prompt + max_tokens to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dialscore_server.contract.errors import InputError
from dialscore_server.nll.encoding import EncodedItem
from dialscore_server.nll.engine import NLLResult


def encode_prompt(ids: Sequence[int], *, family: str, window: int, vocab: int, placeholder: int,
                  append_next: bool, top_k: int) -> EncodedItem:
    """The item scoring prompt `ids` (see the module docstring); `top_k` alternatives per scored
    position. Raises :class:`InputError` (param None: the caller names the prompt) for an empty
    prompt, an id outside the vocabulary, a prompt (+ the greedy token) over the window, and
    ``model`` for a model that is not decoder-only."""
    if family != "causal":
        raise InputError(f"completions need a decoder-only (causal) model; this one is {family}",
                         "model")
    if not ids:
        raise InputError("prompt has no tokens")
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise InputError(f"token id {bad} is outside the model's vocabulary (0..{vocab - 1})")
    need = len(ids) + int(append_next)
    if need > window:
        raise InputError(
            f"prompt has {len(ids)} tokens{' + 1 generated' if append_next else ''}; the model's "
            f"window is {window} tokens (prompts are never truncated)")
    targets = tuple(ids[1:]) + ((placeholder,) if append_next else ())
    return EncodedItem((ids[0],), targets, truncated=False, top_k=top_k)


class Decoder(Protocol):
    def decode(self, ids: Sequence[int]) -> str: ...

    def token_strings(self, ids: Sequence[int]) -> list[str]: ...


@dataclass
class CompletionLogprobs:
    """OpenAI's ``choices[i].logprobs``: ``tokens[j]`` is token j decoded alone,
    ``token_logprobs[j]`` its log P given everything before it (None for the prompt's first token
    under echo), ``top_logprobs[j]`` the position's `logprobs` most probable tokens plus the token
    itself, as token string → log-probability (None where token_logprobs is), ``text_offset[j]``
    the sum of the lengths of the token strings before it, counted from the start of the
    returned text."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


@dataclass
class CompletionChoice:
    """One prompt's answer: `text` (echoed prompt and/or the greedy token), `logprobs` (None
    unless asked for), `finish_reason` ("length": the greedy token used up max_tokens 1; also
    for max_tokens 0, as vLLM answers)."""

    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Completed:
    """The value of a completions reply: one choice per prompt, and the engine results (for
    metrics; an empty list where a one-token prompt had nothing to score)."""

    choices: list[CompletionChoice]
    results: list[NLLResult]


def build_choice(prompt: str | Sequence[int], item: EncodedItem, result: NLLResult | None, *,
                 echo: bool, generate: bool, logprobs: int | None, decoder: Decoder
                 ) -> CompletionChoice:
    """OpenAI's choice for one prompt from its item and engine result (None when the prompt had
    a single token and nothing was generated)."""
    prompt_ids = list(item.source_ids) + list(item.target_ids[:len(item.target_ids) - int(generate)])
    scored: list[tuple[int, float | None, dict[int, float] | None]] = []
    if echo:
        scored.append((prompt_ids[0], None, None))
        for j, tok in enumerate(prompt_ids[1:]):
            assert result is not None
            scored.append((tok, -result.token_nlls[j], _alternatives(result, j)))
    if generate:
        assert result is not None and result.alternatives is not None
        last = result.alternatives[-1]
        top = _alternatives(result, len(result.token_ids) - 1)
        scored.append((last.ids[0], last.logprobs[0], top))
    prompt_text = prompt if isinstance(prompt, str) else decoder.decode(prompt_ids)
    completion_text = decoder.decode([last.ids[0]]) if generate else ""
    text = (prompt_text if echo else "") + completion_text
    out = None
    if logprobs is not None:
        ids = [tok for tok, _, _ in scored]
        strings = decoder.token_strings(ids)
        tops: list[dict[str, float] | None] = []
        for (tok, lp, top), s in zip(scored, strings):
            if top is None:
                tops.append(None)
                continue
            alt = list(top.items())[:logprobs]
            names = decoder.token_strings([t for t, _ in alt])
            entry: dict[str, float] = {}
            for name, (_, v) in zip(names, alt):
                entry.setdefault(name, v)  # most probable first: a duplicate string keeps its best
            assert lp is not None
            entry.setdefault(s, lp)  # OpenAI and vLLM always include the token itself
            tops.append(entry)
        offsets, pos = [], 0
        for s in strings:
            offsets.append(pos)
            pos += len(s)
        out = CompletionLogprobs(strings, [lp for _, lp, _ in scored], tops, offsets)
    return CompletionChoice(text=text, logprobs=out, finish_reason="length",
                            prompt_tokens=len(prompt_ids), completion_tokens=int(generate))


def _alternatives(result: NLLResult, j: int) -> dict[int, float]:
    """Position j's alternatives as token id → log-probability, most probable first."""
    assert result.alternatives is not None
    a = result.alternatives[j]
    return dict(zip(a.ids, a.logprobs))
