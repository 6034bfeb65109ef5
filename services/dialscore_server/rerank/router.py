"""HTTP wiring of POST /v1/rerank (the ecosystem shapes: `tei/router.py`, `cohere/router.py`).

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from fastapi import APIRouter, Response

from dialscore_server.contract.priority import PriorityHeader, requested_lane
from dialscore_server.contract.strict_json import strict_json_route
from dialscore_server.contract.timing_headers import set_reply_timing
from dialscore_server.rerank.query_shaped import ERRORS
from dialscore_server.rerank.protocol import RerankRequest, RerankResponse, RerankUsage
from dialscore_server.rerank.serving import RerankBackend, RerankCall

def build_router(gw: RerankBackend) -> APIRouter:
    """The routes, bound to the backend `gw` (nothing here imports the gateway)."""
    router = APIRouter(route_class=strict_json_route(gw.limits))

    @router.post("/v1/rerank", response_model=RerankResponse, responses=ERRORS,
                 openapi_extra={"x-cost-limits": ["max_request_pairs", "max_request_tokens",
                                                  "max_item_tokens", "max_id_chars", "max_evidence"]},
                 summary="Order candidate replies, least contradictory first.",
                 description="score = -(w_contradiction * contradiction_probability + w_nll * nll); "
                 "higher is better. Results are sorted by score (ties keep input order), then cut "
                 "to `top_n`. When the candidates have nothing to contradict (structured: no earlier "
                 "context turn of the candidates' speaker; unstructured: an empty context), the "
                 "request is a 422 naming `speaker`, or, with `nll_model` named, ordered by the NLL "
                 "term alone.")
    async def rerank(body: RerankRequest, response: Response, priority: PriorityHeader = None
                     ) -> RerankResponse:
        lane = requested_lane(priority, body.priority)
        body.check_limits(gw.limits)
        detector = gw.resolve(body.model, "classifier", "model")
        if body.nll_model is not None:
            gw.resolve(body.nll_model, "nll", "nll_model")
        body.require_something_to_contradict()
        reply = await gw.reranker().rerank(RerankCall(body.to_context(), body.candidates,
                                                      body.options(), detector, body.nll_model,
                                                      lane))
        out = reply.unwrap()
        set_reply_timing(response, reply, tokenized=body.nll_model is not None)
        card = await gw.card(detector)
        nll_card = await gw.card(body.nll_model) if body.nll_model else None
        usage = RerankUsage(candidates=len(body.candidates), context_turns=len(body.context))
        return RerankResponse.from_engine(out, model=detector, stand_in=card.stand_in, usage=usage,
                                          revision=card.revision, nll_model=body.nll_model,
                                          nll_stand_in=nll_card.stand_in if nll_card else None,
                                          nll_revision=nll_card.revision if nll_card else None,
                                          max_evidence=gw.limits.max_evidence)

    return router
