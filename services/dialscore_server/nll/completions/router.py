"""HTTP wiring of POST /v1/completions (schemas: `protocol`; the work: `serving`, on the NLL
serving, the same batched engine as POST /v1/nll).

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from fastapi import APIRouter, Response

from dialscore_server.contract.errors import SCORING_ERRORS, InputError, error_responses
from dialscore_server.contract.priority import PriorityHeader, requested_lane
from dialscore_server.contract.strict_json import strict_json_route
from dialscore_server.contract.timing_headers import set_reply_timing
from dialscore_server.nll.completions.protocol import (
    MAX_LOGPROBS, CompletionRequest, CompletionResponse,
)
from dialscore_server.nll.serving import NLLBackend


def build_router(gw: NLLBackend) -> APIRouter:
    """The route, bound to the backend `gw`."""
    router = APIRouter(route_class=strict_json_route(gw.limits))

    @router.post("/v1/completions", response_model=CompletionResponse,
                 openapi_extra={"x-cost-limits": ["max_request_tokens", "max_item_tokens"]},
                 summary="Prompt log-probs in OpenAI's/vLLM's completions shape (decoder-only models).",
                 description="`echo`, `logprobs` (at most "
                 f"{MAX_LOGPROBS}), `max_tokens` 0 (prompt only) or 1 (plus the greedy next "
                 "token); no text generation, streaming or sampling. Log-probs are natural logs "
                 "from the NLL engine's float32 log-softmax; the first prompt token's is null. "
                 "Unknown fields are ignored, as vLLM ignores them.",
                 responses=error_responses(*SCORING_ERRORS))
    async def completions(body: CompletionRequest, response: Response,
                          priority: PriorityHeader = None) -> CompletionResponse:
        lane = requested_lane(priority, body.priority)
        body.check()
        body.check_limits(gw.limits)
        model = gw.resolve(body.model, "nll", "model")
        card = await gw.card(model)
        if card.family != "causal":
            raise InputError(f"model {model!r} is {card.family} (encoder-decoder); "
                             "completions need a decoder-only (causal) model", "model")
        reply = await gw.nll(model).complete(body.to_call(), lane)
        done = reply.unwrap()
        set_reply_timing(response, reply, tokenized=True)
        return CompletionResponse.build(model, done.choices)

    return router
