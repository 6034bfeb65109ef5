"""HTTP wiring of Cohere's POST /v2/rerank (schemas: `protocol`).

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from fastapi import APIRouter, Response

from dialscore_server.contract.priority import PriorityHeader, requested_lane
from dialscore_server.contract.strict_json import strict_json_route
from dialscore_server.rerank.query_shaped import ERRORS, run_query_rerank
from dialscore_server.rerank.serving import RerankBackend
from dialscore_server.rerank.cohere.protocol import CohereRerankRequest, CohereRerankResponse


def build_router(gw: RerankBackend) -> APIRouter:
    """The route, bound to the backend `gw`."""
    router = APIRouter(route_class=strict_json_route(gw.limits))

    @router.post("/v2/rerank", response_model=CohereRerankResponse, responses=ERRORS,
                 openapi_extra={"x-cost-limits": ["max_request_pairs"]},
                 summary="Rerank in Cohere's v2 shape (query = the dialogue so far).",
                 description="`query` holds one turn per line (at least two); each document is a "
                 "candidate next turn. relevance_score = 1 - contradiction probability, results "
                 "highest first. Unknown fields are ignored, as Cohere's newer SDKs send some.")
    async def cohere_rerank(body: CohereRerankRequest, response: Response,
                            priority: PriorityHeader = None) -> CohereRerankResponse:
        lane = requested_lane(priority)
        body.check_limits(gw.limits)
        out = await run_query_rerank(gw, body, response, lane)
        return body.response(out)

    return router
