"""Request limits: what one request may ask of a deployment, and the checks every route runs.

Limits are configurable per deployment (Serve YAML ``args.limits``), published in its
``/openapi.json`` and listed in the README. Each is checked before anything is tokenized; a
violation is a 413 ``payload_too_large`` whose ``param`` names the field.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from dialscore_server.contract.errors import ServiceError


class Limits(BaseModel):
    """Request size limits of one deployment. Each is checked before tokenization."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_body_bytes: int = Field(8_000_000, ge=1, description="Largest request body, in bytes.")
    max_items: int = Field(1024, ge=1, description="Most items in one POST /v1/nll.")
    max_turns: int = Field(256, ge=1, description="Most turns in one context or dialogue.")
    max_text_chars: int = Field(20_000, ge=1, description="Longest single text (turn, target...).")
    max_dialogues: int = Field(1024, ge=1, description="Most dialogues in one POST /v1/contradiction.")
    max_candidates: int = Field(256, ge=1, description="Most candidates in one rerank request.")


def too_many(param: str, n: int, limit: int, what: str) -> ServiceError:
    """The 413 for a list of `n` `what` at `param` over `limit`."""
    return ServiceError("payload_too_large", f"{param}: {n} {what}; the limit is {limit}", param=param)


def check_texts(texts: Iterable[tuple[str, str | None]], limits: Limits) -> None:
    """Raise the 413 for the first (param, text) longer than ``max_text_chars`` characters."""
    for param, text in texts:
        if text is not None and len(text) > limits.max_text_chars:
            raise too_many(param, len(text), limits.max_text_chars, "characters")
