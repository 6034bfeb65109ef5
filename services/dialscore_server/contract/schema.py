"""What every endpoint's protocol module shares: the base model, the text types and the limit
marks of the OpenAPI schema (the limits themselves: :mod:`dialscore_server.contract.limits`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

from dialscore_server.contract.limits import Limits


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


class LimitedBy:
    """Marks a list or string field as bounded by the deployment limit `name` (a field of
    :class:`Limits`). Validation ignores it (the gateway enforces limits with 413, not pydantic's
    422); the OpenAPI schema carries ``"x-limit": name``, which the gateway replaces with the
    configured value as ``maxItems``/``maxLength`` (see dialscore_server.gateway.openapi)."""

    def __init__(self, *names: str):
        for name in names:
            if name not in Limits.model_fields:
                raise ValueError(f"unknown limit {name!r}")
        # Several names: documented only (no maxItems/maxLength), e.g. the TEI query's lines.
        self.names = names

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = handler(core_schema)
        schema["x-limit"] = self.names[0] if len(self.names) == 1 else list(self.names)
        return schema


#: Any valid Unicode string (no lone surrogates), any length: no character limit.
UnlimitedText = Annotated[str, AfterValidator(_encodable)]


#: Any user text: valid Unicode, at most `max_text_chars` characters (checked by the gateway).
Text = Annotated[UnlimitedText, LimitedBy("max_text_chars")]


def limited(*names: str) -> LimitedBy:
    """Annotation of a list field bounded by the limit `name`, e.g.
    ``Annotated[list[Item], Field(min_length=1), limited("max_items")]``; with several names,
    a field the limits apply to in a way JSON Schema cannot say (documented, not bounded)."""
    return LimitedBy(*names)
