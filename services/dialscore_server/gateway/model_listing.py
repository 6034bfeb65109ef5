"""GET /v1/models in both shapes: dialscore's ``models`` (model cards) beside OpenAI's
``{"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}``.

OpenAI-style clients (the OpenAI SDK's ``client.models.list()``, vLLM and LiteLLM tooling) read
``data``; the dialscore client reads ``models``. Each ``data`` entry also carries vLLM's ``root``
(the checkpoint source) and ``max_model_len`` (the window in tokens) and dialscore's
``family`` so one listing serves both audiences.
``created`` is when this gateway replica started (Unix seconds): the models have no other
creation time the service knows.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from dialscore.model_card import ModelCard

#: What ``owned_by`` says for every model (vLLM says "vllm").
OWNER = "dialscore"


class OpenAIModel(BaseModel):
    id: str = Field(description="The name requests use (`model`).")
    object: Literal["model"] = "model"
    created: int = Field(description="When this gateway replica started (Unix seconds).")
    owned_by: str = OWNER
    root: str | None = Field(None, description="The checkpoint (hub id or path), as vLLM reports.")
    family: str = Field(description="causal, seq2seq or classifier.")
    max_model_len: int | None = Field(None, description="The model's window in tokens, as vLLM "
                                      "reports (the card's max_length).")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIModel] = Field(description="OpenAI's shape.")
    models: list[ModelCard] = Field(description="dialscore's model cards.")


def model_list(cards: list[ModelCard], created: int) -> dict:
    """The JSON body of GET /v1/models for `cards` (not validated on the way out: a card field of
    an unexpected type must not turn the listing into a 500)."""
    return {
        "object": "list",
        "data": [{"id": c.name, "object": "model", "created": created, "owned_by": OWNER,
                  "root": c.source, "family": c.family,
                  "max_model_len": c.max_length} for c in cards],
        "models": [c.model_dump(mode="json") for c in cards],
    }
