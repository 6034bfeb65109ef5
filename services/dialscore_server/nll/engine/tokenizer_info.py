"""What an NLL engine reports of its tokenizer (GET /tokenizer_info's content, before any wire
shape)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenizerInfo:
    """A model's tokenizer: its special tokens as strings (None where it has none), the eos id,
    its class name, the vocabulary size (ids 0..vocab_size-1 are accepted) and the model's window
    in tokens (`max_model_len`)."""

    tokenizer_class: str
    eos_token: str | None
    bos_token: str | None
    pad_token: str | None
    unk_token: str | None
    eos_token_id: int | None
    vocab_size: int
    max_model_len: int
