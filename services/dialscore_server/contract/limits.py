"""Request limits: what one request may ask of a deployment, and the checks every route runs.

Limits are configurable per deployment (Serve YAML ``args.limits``), published in its
``/openapi.json`` and listed in docs/api.md. Each is checked before anything is tokenized; a
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
    max_items: int = Field(1024, ge=1, description="Most items in one POST /v1/nll (prompts "
                           "in one POST /v1/completions, scored turns in one POST "
                           "/v1/nll/dialogues).")
    max_turns: int = Field(256, ge=1, description="Most turns in one context or dialogue.")
    max_text_chars: int = Field(20_000, ge=1, description="Longest single text (turn, target...).")
    max_dialogues: int = Field(1024, ge=1, description="Most dialogues in one POST /v1/contradiction.")
    max_candidates: int = Field(256, ge=1, description="Most candidates in one rerank request.")
    # Work, not size: what one request makes the models compute, counted before it is queued.
    max_request_pairs: int = Field(
        16_384, ge=1, description="Most NLI pairs one /v1/contradiction, /v1/rerank or /rerank "
        "request makes the classifier compute (counted from the turns' speakers, no model needed; "
        "a rerank is candidates x earlier turns of the candidate speaker).")
    max_request_tokens: int = Field(
        262_144, ge=1, description="Most NLL token positions one /v1/nll request (or a rerank's "
        "`nll_model` scoring) may cost, each item counted as min(its UTF-8 bytes + one per turn, "
        "`max_item_tokens`): an upper bound of its tokens for byte-level tokenizers, known before "
        "tokenizing. A /v1/nll/dialogues scored turn counts as its /v1/nll item (the turn, the "
        "turns before it and the knowledge). A /v1/completions prompt counts the same way (a text) or as its token ids "
        "(+ 1 for the generated token).")
    max_item_tokens: int = Field(
        1_024, ge=1, description="Token positions one NLL item is counted as at most (the model "
        "window: sources are cut to fit it); also the most token ids one /v1/completions prompt "
        "may have.")
    max_id_chars: int = Field(
        256, ge=1, description="Longest turn id or speaker given as a string (they are echoed "
        "back in responses).")
    max_evidence: int = Field(
        16, ge=1, description="Most evidence turns per result (the most probable ones, in dialogue "
        "order); bounds the response whatever the context length.")
    max_json_values: int = Field(
        400_000, ge=1, description="Most JSON values (arrays, objects, strings, numbers...) in a "
        "request body, counted while reading it, before it is parsed.")


def too_many(param: str, n: int, limit: int, what: str) -> ServiceError:
    """The 413 for a list of `n` `what` at `param` over `limit`."""
    return ServiceError("payload_too_large", f"{param}: {n} {what}; the limit is {limit}", param=param)


def too_costly(param: str, cost: int, limit: int, what: str) -> ServiceError:
    """The 413 for a request at `param` that would cost `cost` `what` (pairs, tokens) over `limit`."""
    return ServiceError("payload_too_large", f"{param}: this request costs {cost} {what}; the "
                        f"limit is {limit} per request (split it into smaller requests)", param=param)


def check_ids(ids: Iterable[tuple[str, object]], limits: Limits) -> None:
    """Raise the 413 for the first (param, id or speaker) string longer than ``max_id_chars``."""
    for param, value in ids:
        if isinstance(value, str) and len(value) > limits.max_id_chars:
            raise too_many(param, len(value), limits.max_id_chars, "characters")


def item_token_bound(texts: Iterable[str], limits: Limits) -> int:
    """An upper bound of one NLL item's token positions, computed without the tokenizer: its
    UTF-8 bytes (a byte-level BPE token covers at least one byte) plus one separator per text,
    capped at ``max_item_tokens`` (the engine cuts longer sources to the model window)."""
    total = 0
    for t in texts:
        total += len(t.encode("utf-8", "surrogatepass")) + 1
        if total >= limits.max_item_tokens:
            return limits.max_item_tokens
    return total


def check_texts(texts: Iterable[tuple[str, str | None]], limits: Limits) -> None:
    """Raise the 413 for the first (param, text) longer than ``max_text_chars`` characters."""
    for param, text in texts:
        if text is not None and len(text) > limits.max_text_chars:
            raise too_many(param, len(text), limits.max_text_chars, "characters")
