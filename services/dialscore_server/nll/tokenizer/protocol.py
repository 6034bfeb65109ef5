"""GET /tokenizer_info, POST /tokenize and POST /detokenize (vLLM's shapes, which
lm-evaluation-harness's remote tokenizer reads): request and response schemas.

The ids are the engine's own: ``/tokenize`` of a text is exactly what POST /v1/completions scores
for that text as a prompt (plain text, no special token added: see
:mod:`dialscore_server.nll.tokenizer.serving`). Every answer carries the model's window,
``max_model_len``, in tokens: the longest prompt /v1/completions accepts (+ 1 with
``max_tokens: 1``); longer prompts are refused (422 naming ``prompt``), never truncated.

Departures from vLLM: ``model`` may be omitted only where the deployment serves one dialogue
model (else 422 naming ``model``); ``add_special_tokens`` defaults to false and true is refused
(vLLM's default is true), since completions text prompts get no special tokens; chat
``messages`` are not tokenized. Unknown fields are ignored, as vLLM ignores them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from dialscore_server.contract.errors import InputError
from dialscore_server.contract.limits import Limits, too_many
from dialscore_server.contract.schema import APIModel, Text, limited
from dialscore_server.nll.engine.tokenizer_info import TokenizerInfo
from dialscore_server.nll.tokenizer.serving import TokenizerCall

ModelField = Field(None, description="A dialogue model from GET /v1/models; may be omitted "
                   "where the deployment serves only one.")


class TokenizeRequest(APIModel):
    """vLLM's ``POST /tokenize`` for a text prompt."""

    model_config = ConfigDict(extra="ignore", strict=True, protected_namespaces=())

    model: str | None = ModelField
    prompt: Text = Field(description="The text, tokenized as a /v1/completions text prompt: "
                         "verbatim, no special tokens added, special-token strings read as "
                         "their characters.")
    add_special_tokens: bool = Field(
        False, description="Only false (vLLM's default is true): completions text prompts get "
        "no special tokens; put a bos id in front yourself if you want one.")

    def check(self, limits: Limits) -> None:
        """Raise 422 for ``add_special_tokens: true``, 413 for a text over ``max_text_chars``."""
        if self.add_special_tokens:
            raise InputError("add_special_tokens must be false: /v1/completions tokenizes text "
                             "prompts without special tokens", "add_special_tokens")
        if len(self.prompt) > limits.max_text_chars:
            raise too_many("prompt", len(self.prompt), limits.max_text_chars, "characters")

    def to_call(self) -> TokenizerCall:
        return TokenizerCall("tokenize", text=self.prompt)


class TokenizeResponse(APIModel):
    count: int = Field(description="How many tokens.")
    max_model_len: int = Field(description="The model's window in tokens: the longest prompt "
                               "/v1/completions accepts (one less with max_tokens 1).")
    tokens: list[int] = Field(description="The token ids, exactly as /v1/completions scores the "
                              "text.")


class DetokenizeRequest(APIModel):
    """vLLM's ``POST /detokenize``."""

    model_config = ConfigDict(extra="ignore", strict=True, protected_namespaces=())

    model: str | None = ModelField
    tokens: Annotated[list[int], limited("max_item_tokens")] = Field(
        description="Token ids of the model's vocabulary (0..vocab_size-1; others are a 422 "
        "naming `tokens`), at most `max_item_tokens`.")

    def check(self, limits: Limits) -> None:
        """Raise 413 for more ids than ``max_item_tokens``."""
        if len(self.tokens) > limits.max_item_tokens:
            raise too_many("tokens", len(self.tokens), limits.max_item_tokens, "tokens")

    def to_call(self) -> TokenizerCall:
        return TokenizerCall("detokenize", ids=tuple(self.tokens))


class DetokenizeResponse(APIModel):
    prompt: str = Field(description="The ids decoded together (special tokens written out).")


class TokenizerInfoResponse(APIModel):
    model: str = Field(description="The model whose tokenizer this is.")
    tokenizer_class: str = Field(description="The tokenizer's class name.")
    eos_token: str | None = Field(description="End-of-sequence token, as a string.")
    bos_token: str | None = Field(description="Beginning-of-sequence token, as a string.")
    pad_token: str | None = Field(description="Padding token, as a string.")
    unk_token: str | None = Field(description="Unknown token, as a string.")
    eos_token_id: int | None = Field(description="The eos token's id (what to pass as "
                                     "lm-eval's `custom_prefix_token_id`: /tokenize of the "
                                     "eos string gives its characters, plain text).")
    vocab_size: int = Field(description="Ids 0..vocab_size-1 are valid.")
    max_model_len: int = Field(description="The model's window in tokens (the model card's "
                               "max_length).")
    model_max_length: int = Field(description="The same window, under the name a Hugging Face "
                                  "tokenizer config uses.")

    @classmethod
    def build(cls, model: str, info: TokenizerInfo) -> "TokenizerInfoResponse":
        return cls(model=model, tokenizer_class=info.tokenizer_class, eos_token=info.eos_token,
                   bos_token=info.bos_token, pad_token=info.pad_token, unk_token=info.unk_token,
                   eos_token_id=info.eos_token_id,
                   vocab_size=info.vocab_size, max_model_len=info.max_model_len,
                   model_max_length=info.max_model_len)
