"""What every endpoint's protocol module shares: the base model, the text type, and the limits.

Limits are enforced by the gateway before anything is tokenized, each violation a 413
(`payload_too_large`) naming the field; they are configurable per deployment (Serve YAML
`args.limits`) and listed in the README.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class APIModel(BaseModel):
    """Base of every request and response schema: unknown fields are an error, and no type
    coercion ("1" is not an int, 1 is not a string)."""

    model_config = ConfigDict(extra="forbid", strict=True, protected_namespaces=())


def _encodable(text: str) -> str:
    # JSON may carry lone surrogates ("\ud800"); they cannot be encoded as UTF-8 and would
    # fail inside the tokenizer, so they are refused here with the field named.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text contains a lone surrogate (invalid Unicode)") from None
    return text


#: Any user text: valid Unicode, any length (the per-deployment character limit applies).
Text = Annotated[str, AfterValidator(_encodable)]


class Limits(APIModel):
    """Request size limits of one deployment. Each is checked before tokenization."""

    max_body_bytes: int = Field(8_000_000, ge=1, description="Largest request body, in bytes.")
    max_items: int = Field(1024, ge=1, description="Most items in one POST /v1/nll.")
    max_turns: int = Field(256, ge=1, description="Most turns in one context or dialogue.")
    max_text_chars: int = Field(20_000, ge=1, description="Longest single text (turn, target...).")
    max_dialogues: int = Field(1024, ge=1, description="Most dialogues in one POST /v1/contradiction.")
    max_candidates: int = Field(256, ge=1, description="Most candidates in one rerank request.")
