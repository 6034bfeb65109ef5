"""HTTP wiring of GET /tokenizer_info, POST /tokenize and POST /detokenize (schemas: `protocol`;
the work: `serving`, on the NLL replica that holds the model's tokenizer).

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from typing import Annotated

from fastapi import APIRouter, Query

from dialscore_server.contract.errors import error_responses
from dialscore_server.contract.strict_json import strict_json_route
from dialscore_server.nll.serving import NLLBackend
from dialscore_server.nll.tokenizer.protocol import (
    DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse,
    TokenizerInfoResponse,
)
from dialscore_server.nll.engine.tokenizer_info import TokenizerInfo
from dialscore_server.nll.tokenizer.serving import TokenizerCall


def build_router(gw: NLLBackend) -> APIRouter:
    """The three routes, bound to the backend `gw`."""
    router = APIRouter(route_class=strict_json_route(gw.limits))
    errors = error_responses("invalid_request", "unknown_model", "payload_too_large", "timeout",
                             "model_error")

    async def window(model: str) -> int:
        """The model's window: its card's max_length (what /v1/completions checks prompts by)."""
        card = await gw.card(model)
        assert card.max_length is not None  # every dialogue model's card carries its window
        return card.max_length

    @router.get("/tokenizer_info", response_model=TokenizerInfoResponse, responses=errors,
                summary="A dialogue model's tokenizer and window (vLLM's route).",
                description="Special tokens, vocabulary size and `max_model_len`, the model's "
                "window in tokens. `model` may be omitted where one dialogue model is served.")
    async def tokenizer_info(model: Annotated[str | None, Query(
            description="A dialogue model from GET /v1/models.")] = None) -> TokenizerInfoResponse:
        name = gw.resolve(model, "nll", "model")
        info = (await gw.nll(name).tokenizer(TokenizerCall("info"))).unwrap()
        assert isinstance(info, TokenizerInfo)
        return TokenizerInfoResponse.build(name, info)

    @router.post("/tokenize", response_model=TokenizeResponse, responses=errors,
                 summary="A text's token ids, exactly as /v1/completions scores it (vLLM's route).",
                 description="Plain text: no special tokens added, special-token strings read "
                 "as their characters. `max_model_len` is the model's window.")
    async def tokenize(body: TokenizeRequest) -> TokenizeResponse:
        body.check(gw.limits)
        name = gw.resolve(body.model, "nll", "model")
        ids = (await gw.nll(name).tokenizer(body.to_call())).unwrap()
        assert isinstance(ids, list)
        return TokenizeResponse(count=len(ids), max_model_len=await window(name), tokens=ids)

    @router.post("/detokenize", response_model=DetokenizeResponse, responses=errors,
                 summary="The text of token ids (vLLM's route).",
                 description="Ids outside the vocabulary are a 422 naming `tokens`.")
    async def detokenize(body: DetokenizeRequest) -> DetokenizeResponse:
        body.check(gw.limits)
        name = gw.resolve(body.model, "nll", "model")
        text = (await gw.nll(name).tokenizer(body.to_call())).unwrap()
        assert isinstance(text, str)
        return DetokenizeResponse(prompt=text)

    return router
