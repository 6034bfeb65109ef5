"""POST /v1/nll: request and response schemas (the descriptions become the OpenAPI docs)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from dialscore_server.contract.priority import PriorityField
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.contract.limits import (
    Limits, check_texts, item_token_bound, too_costly, too_many,
)
from dialscore_server.contract.schema import APIModel, Text, limited


class NLLItemIn(APIModel):
    """Either dialogue turns (`context`, optional `knowledge`) or a raw `source`, and a `target`.

    Every text is plain text: a special-token string written in it (``</s>``, ``<|endoftext|>``)
    is tokenized and scored as its characters, never as the special token (docs/nll.md)."""

    context: Annotated[list[Text], limited("max_turns")] | None = Field(
        None, description="Dialogue turns, oldest first; formatted with the model's dialogue format. "
        "May be empty.")
    knowledge: Text | None = Field(
        None, description="A knowledge or explanation sentence, placed where the model's format says "
        "(default: before the history). Kept when the history is truncated.")
    source: Text | None = Field(
        None, description="Raw source text used verbatim instead of `context` (no formatting; "
        "plain text: it cannot insert special tokens).")
    target: Annotated[Text, Field(min_length=1)] = Field(
        description="The text whose tokens are scored. Never truncated. Plain text: a "
        "special-token string in it is scored as its characters.")

    @model_validator(mode="after")
    def _one_source(self) -> "NLLItemIn":
        if self.source is not None and (self.context is not None or self.knowledge is not None):
            raise ValueError("give either `source` or `context` (with optional `knowledge`), not both")
        if self.source is None and self.context is None:
            raise ValueError("give `context` (a list of turns, possibly empty) or `source`")
        return self

    def to_item(self) -> NLLItem:
        return NLLItem(
            target=self.target,
            context=tuple(self.context) if self.context is not None else None,
            knowledge=self.knowledge, source=self.source,
        )

    def texts(self) -> list[tuple[str, str]]:
        """(field path relative to the item, text) pairs, for the character limit."""
        out = [("target", self.target)]
        out += [(f"context[{i}]", t) for i, t in enumerate(self.context or [])]
        out += [(name, v) for name, v in (("knowledge", self.knowledge), ("source", self.source)) if v]
        return out

    def text_values(self) -> list[str]:
        """The texts of :meth:`texts`, in the same order, without their field paths (the limit
        checks name a field only when one fails, so the paths are built only then)."""
        return [self.target, *(self.context or ()),
                *(v for v in (self.knowledge, self.source) if v)]


class NLLRequest(APIModel):
    model: str = Field(description="A model name from GET /v1/models.")
    priority: int | None = PriorityField
    items: Annotated[list[NLLItemIn], Field(min_length=1), limited("max_items")] = Field(
        description="What to score; results come back in the same order.")
    return_tokens: bool = Field(False, description="Also return per-token NLLs and the target tokens.")

    def check_limits(self, limits: Limits) -> None:
        """Raise ``payload_too_large`` (413) naming the field: items per request, turns per
        context, characters per text, then the cost in tokens (``max_request_tokens``, param
        ``items``)."""
        if len(self.items) > limits.max_items:
            raise too_many("items", len(self.items), limits.max_items, "items")
        longest = limits.max_text_chars
        for i, item in enumerate(self.items):
            if item.context is not None and len(item.context) > limits.max_turns:
                raise too_many(f"items[{i}].context", len(item.context), limits.max_turns, "turns")
            if any(len(text) > longest for text in item.text_values()):
                check_texts(((f"items[{i}].{name}", text) for name, text in item.texts()), limits)
        tokens = self.tokens(limits)
        if tokens > limits.max_request_tokens:
            raise too_costly("items", tokens, limits.max_request_tokens, "NLL tokens")

    def tokens(self, limits: Limits) -> int:
        """Upper bound of the token positions this request costs, known before tokenizing (see
        :func:`~dialscore_server.contract.limits.item_token_bound`)."""
        return sum(item_token_bound(item.text_values(), limits) for item in self.items)


class NLLResultOut(APIModel):
    nll: float = Field(description="Mean NLL over the target's tokens, in nats per token.")
    num_tokens: int = Field(description="Scored target tokens (the eos token included when appended).")
    truncated: bool = Field(
        description="True when the source was shortened from the left to fit the window: whole "
        "oldest turns dropped (the model format's `truncation: turns`, the default) and/or oldest "
        "tokens cut (`truncation: tokens`, raw `source` items, or a newest turn that alone does not "
        "fit). The target is never cut.")
    token_nlls: list[float] | None = Field(None, description="NLL of each target token, in order.")
    tokens: list[str] | None = Field(None, description="Each target token decoded on its own.")


class Usage(APIModel):
    source_tokens: int = Field(description="Source tokens fed to the model (after truncation).")
    target_tokens: int = Field(description="Target tokens scored.")


class NLLResponse(APIModel):
    model: str
    source: str = Field(description="The checkpoint: hub id or path.")
    revision: str | None = Field(description="Resolved revision, when known.")
    stand_in: bool = Field(description="True when the model is a random-weight stand-in.")
    append_eos: bool = Field(description="Whether eos was appended to (and scored with) each target.")
    results: list[NLLResultOut]
    usage: Usage
