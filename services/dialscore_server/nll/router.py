"""HTTP wiring of POST /v1/nll (schemas in protocol.py, the work in serving.py).

The route reaches the model through the :class:`NLLBackend` it is built with; nothing here
imports the gateway.

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from fastapi import APIRouter, Response

from dialscore_server.contract.errors import SCORING_ERRORS, error_responses
from dialscore_server.contract.priority import PriorityHeader, requested_lane
from dialscore_server.contract.strict_json import strict_json_route
from dialscore_server.contract.timing_headers import set_reply_timing
from dialscore_server.nll.protocol import NLLRequest, NLLResponse, NLLResultOut, Usage
from dialscore_server.nll.serving import NLLBackend


def build_router(gw: NLLBackend) -> APIRouter:
    """The routes, bound to the backend `gw`."""
    router = APIRouter(route_class=strict_json_route(gw.limits))

    @router.post("/v1/nll", response_model=NLLResponse,
                 openapi_extra={"x-cost-limits": ["max_request_tokens", "max_item_tokens"]},
                 summary="Per-token NLL of each target given its context.",
                 description="`nll` is the mean over the target's tokens (nats per token); the "
                 "eos token is appended and scored when the model's format says so (`append_eos`). "
                 "Results keep the order of `items`.",
                 responses=error_responses(*SCORING_ERRORS))
    async def nll(body: NLLRequest, response: Response, priority: PriorityHeader = None
                  ) -> NLLResponse:
        lane = requested_lane(priority, body.priority)
        body.check_limits(gw.limits)
        model = gw.resolve(body.model, "nll", "model")
        reply = await gw.nll(model).score([it.to_item() for it in body.items], body.return_tokens,
                                          lane)
        scored = reply.unwrap()
        card = await gw.card(model)
        set_reply_timing(response, reply, tokenized=True)
        results = [
            NLLResultOut(
                nll=r.nll, num_tokens=r.num_tokens, truncated=r.truncated,
                token_nlls=r.token_nlls if body.return_tokens else None,
                tokens=scored.tokens[i] if body.return_tokens and scored.tokens else None,
            )
            for i, r in enumerate(scored.results)
        ]
        return NLLResponse(
            model=model, source=card.source or "", revision=card.revision,
            stand_in=card.stand_in, append_eos=card.format.append_eos if card.format else True,
            results=results,
            usage=Usage(source_tokens=sum(r.source_tokens for r in scored.results),
                        target_tokens=sum(r.num_tokens for r in scored.results)),
        )

    return router
