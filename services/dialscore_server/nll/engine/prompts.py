"""A completions prompt as an NLL item: which of its tokens are scored (POST /v1/completions).

A prompt p_0..p_{n-1} (token ids, as given or as the tokenizer makes them from text with no
special tokens added and no dialogue formatting) is one causal item with source ``(p_0,)`` and
targets ``p_1..p_{n-1}``: position j's log-probability is ``log P(p_j | p_<j)``, natural log, from
the engine's float32 log-softmax. ``p_0`` has nothing to condition on and gets ``null``, as in
OpenAI's and vLLM's ``echo``. No bos token is added: a caller who wants ``p_0`` scored puts the
bos (GPT-2: ``<|endoftext|>``, id 50256) first.

The greedy next token (``max_tokens: 1``). The item gets one more target slot after the prompt,
filled with a placeholder (the eos id) that is never reported: the position that "predicts" it is
the prompt's last, so its top-1 alternative is the argmax next token ``g`` and its
log-probability ``log P(g | p)``. Causal attention keeps the placeholder from changing any prompt
position, so the prompt's numbers are those of ``max_tokens: 0``. The prompt plus this token must
fit the model's window, as OpenAI and vLLM require prompt + max_tokens to.
"""

from __future__ import annotations

from collections.abc import Sequence

from dialscore_server.contract.errors import InputError
from dialscore_server.nll.engine.encoding import EncodedItem


def check_vocabulary(ids: Sequence[int], vocab: int) -> None:
    """An :class:`InputError` (param None: the caller names the field) for the first of `ids`
    outside the vocabulary 0..`vocab`-1."""
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise InputError(f"token id {bad} is outside the model's vocabulary (0..{vocab - 1})")


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
    check_vocabulary(ids, vocab)
    need = len(ids) + int(append_next)
    if need > window:
        raise InputError(
            f"prompt has {len(ids)} tokens{' + 1 generated' if append_next else ''}; the model's "
            f"window is {window} tokens (prompts are never truncated)")
    targets = tuple(ids[1:]) + ((placeholder,) if append_next else ())
    return EncodedItem((ids[0],), targets, truncated=False, top_k=top_k)
