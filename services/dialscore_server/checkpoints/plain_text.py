"""User text is text: the token ids of a text in which special-token strings are ordinary characters.

A Hugging Face tokenizer, called as usual, reads a special-token string written in a text as that
special token: the text ``"<|endoftext|>"`` is GPT-2's eos id, ``"</s>"`` is BART's. A user's turn
or target could then forge a turn boundary or an end of sequence, and its NLL would be that of a
control token. Every text a request carries (turns, knowledge, raw sources, targets, completions
text prompts, contradiction turns) is therefore tokenized with the tokenizer's own option for it,
``split_special_tokens=True``: ``"</s>"`` is tokenized as the characters ``<``, ``/s``, ``>``, as
the near miss ``"</s >"`` is. The special tokens the engines themselves insert (separators, bos,
eos, a classifier's pair template) are ids, never text, so they stay real special tokens.

:data:`TOKENIZER_OPTIONS` makes the option the tokenizer's default when it is loaded
(checkpoints/loading.py); :func:`text_ids` and :func:`texts_ids` pass it on every call as well, so
a tokenizer loaded elsewhere (a test's) tokenizes user text the same way. With transformers 5 the
option is a flag of the backend tokenizer that each call sets when it differs; calls that all
pass the same value never change it, so concurrent encodes on one tokenizer agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: ``from_pretrained`` keyword arguments that make plain text the loaded tokenizer's default.
TOKENIZER_OPTIONS: dict[str, Any] = {"split_special_tokens": True}


def text_ids(tokenizer: Any, text: str) -> list[int]:
    """`text`'s token ids: no special token added, none read from the text (empty text: [])."""
    if not text:
        return []
    return tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids


def texts_ids(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """:func:`text_ids` of each of `texts` (non-empty), in one tokenizer call."""
    if not texts:
        return []
    return tokenizer(list(texts), add_special_tokens=False, split_special_tokens=True)["input_ids"]
