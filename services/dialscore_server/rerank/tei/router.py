"""HTTP wiring of text-embeddings-inference's POST /rerank (schemas: `protocol`).

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from dialscore_server.contract.priority import PriorityHeader, requested_lane
from dialscore_server.contract.strict_json import strict_json_route
from dialscore_server.rerank.query_shaped import ERRORS, run_query_rerank
from dialscore_server.rerank.serving import RerankBackend
from dialscore_server.rerank.tei.protocol import TEIRerankRequest, TEIRerankResponse, tei_results


def build_router(gw: RerankBackend) -> APIRouter:
    """The route, bound to the backend `gw`."""
    router = APIRouter(route_class=strict_json_route(gw.limits))

    @router.post("/rerank", response_model=TEIRerankResponse, responses=ERRORS,
                 openapi_extra={"x-cost-limits": ["max_request_pairs"]},
                 summary="Rerank in text-embeddings-inference's shape (query = the dialogue so far).",
                 description="`query` holds one turn per line (at least two); each of `texts` (or "
                 "`documents`) is a candidate next turn. Returns [{index, score}] best first; "
                 "score = 1 - contradiction probability. raw_scores and truncation_direction "
                 "\"Right\" are refused (422); unknown fields are ignored, as TEI does.")
    async def tei_rerank(body: TEIRerankRequest, response: Response,
                         priority: PriorityHeader = None) -> JSONResponse:
        lane = requested_lane(priority)
        body.check_limits(gw.limits)
        out = await run_query_rerank(gw, body, response, lane)
        # A returned Response is sent as it is: carry the timing headers over.
        timing = {k: v for k, v in response.headers.items() if k.startswith("x-")}
        return JSONResponse(list(tei_results(body, out)), headers=timing)

    return router
