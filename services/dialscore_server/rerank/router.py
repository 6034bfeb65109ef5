"""HTTP wiring of POST /v1/rerank (the ecosystem shapes: `tei_router`, `cohere_router`).

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from typing import Any

from fastapi import APIRouter, Response

from dialscore_server.contract.backend import Backend
from dialscore_server.contract.errors import error_responses
from dialscore_server.contract.strict_json import StrictJSONRoute
from dialscore_server.contract.timing_headers import set_reply_timing
from dialscore_server.rerank.engine.reranker import require_candidate_turn
from dialscore_server.rerank.protocol import RerankRequest, RerankResponse, RerankUsage

ERRORS = error_responses("invalid_request", "unknown_model", "payload_too_large", "overloaded",
                         "timeout", "model_error")


async def run_query_rerank(gw: Backend, body, response: Response) -> Any:
    """Rerank for a query-shaped request (TEI, Cohere): resolve `body.model`, then refuse a query
    with no earlier turn of the candidates' speaker (422 naming ``query``), then rerank and write
    the timing headers and ``x-model-revision`` (the classifier's revision) on `response`."""
    detector = gw.resolve(body.model, "classifier", "model")
    context = body.to_context()
    require_candidate_turn(context, "query")
    reply = await gw.call_rerank(context, body.candidates, body.engine_kwargs(), detector, None)
    out = reply.unwrap()
    set_reply_timing(response, reply, tokenized=False)
    # The ecosystem shapes have no field for it: the classifier's revision travels as a header.
    revision = (await gw.card(detector)).revision
    if revision:
        response.headers["x-model-revision"] = revision
    return out


def build_router(gw: Backend) -> APIRouter:
    """The routes, bound to the backend `gw` (nothing here imports the gateway)."""
    router = APIRouter(route_class=StrictJSONRoute)

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
    async def rerank(body: RerankRequest, response: Response) -> RerankResponse:
        body.check_limits(gw.limits)
        detector = gw.resolve(body.model, "classifier", "model")
        if body.nll_model is not None:
            gw.resolve(body.nll_model, "nll", "nll_model")
        body.require_something_to_contradict()
        reply = await gw.call_rerank(body.to_context(), body.candidates, body.engine_kwargs(),
                                     detector, body.nll_model)
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
