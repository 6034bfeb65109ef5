"""POST /v1/completions on the NLL serving, without model code: the call a router makes
(:class:`CompletionCall`), its prompts as NLL items, and OpenAI's answer (``choices[i]``,
``logprobs``) from the engine's results. Which prompt tokens are scored:
:mod:`dialscore_server.nll.engine.prompts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dialscore_server.contract.errors import InputError
from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.engine import NLLResult


class Decoder(Protocol):
    def decode(self, ids: Sequence[int]) -> str: ...

    def token_strings(self, ids: Sequence[int]) -> list[str]: ...


class PromptEncoder(Protocol):
    def encode_prompt(self, prompt: str | Sequence[int], append_next: bool, top_k: int
                      ) -> EncodedItem: ...


@dataclass(frozen=True)
class CompletionCall:
    """One POST /v1/completions for the NLL serving: the `prompts` (texts or token ids), the
    field path naming each in errors (`params`, e.g. ``prompt[2]``), whether to `echo` the prompt,
    whether to `generate` the greedy next token (``max_tokens: 1``), and `logprobs` (None, or how
    many alternatives per position)."""

    prompts: list[str | list[int]]
    params: list[str]
    echo: bool
    generate: bool
    logprobs: int | None

    def encode(self, engine: PromptEncoder) -> list[EncodedItem]:
        """Every prompt as an item; an InputError names the prompt's field (or ``model``)."""
        top_k = max(self.logprobs or 0, 1)  # the greedy token and echo's top_logprobs need >= 1
        out = []
        for prompt, param in zip(self.prompts, self.params):
            try:
                out.append(engine.encode_prompt(prompt, self.generate, top_k))
            except InputError as exc:
                raise (exc if exc.param == "model" else exc.within(param)) from None
        return out


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
    """The value of a completions reply: one choice per prompt, in order."""

    choices: list[CompletionChoice]


def build_choice(prompt: str | Sequence[int], item: EncodedItem, result: NLLResult | None, *,
                 call: CompletionCall, decoder: Decoder) -> CompletionChoice:
    """OpenAI's choice for one prompt of `call` from its item and engine result (None when the
    prompt had a single token and nothing was generated)."""
    echo, generate, logprobs = call.echo, call.generate, call.logprobs
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
