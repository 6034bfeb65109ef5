"""HTTP wiring of POST /v1/contradiction (schemas in protocol.py, the work in engine.py).

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from fastapi import APIRouter, Response

from dialscore_server.contract.errors import SCORING_ERRORS, error_responses
from dialscore_server.contract.priority import PriorityHeader, requested_lane
from dialscore_server.contract.strict_json import strict_json_route
from dialscore_server.contract.timing_headers import set_reply_timing
from dialscore_server.contradiction.protocol import ContradictionRequest, ContradictionResponse
from dialscore_server.contradiction.serving import ClassifierBackend


def build_router(gw: ClassifierBackend) -> APIRouter:
    """The routes, bound to the backend `gw` (nothing here imports the gateway)."""
    router = APIRouter(route_class=strict_json_route(gw.limits))

    @router.post("/v1/contradiction", response_model=ContradictionResponse,
                 summary="Does the last turn of each dialogue contradict its speaker's earlier turns?",
                 description="Structured mode pairs the last turn with every earlier turn of the same "
                 "speaker and takes the maximum contradiction probability; evidence names the turns "
                 "(by id) whose pair probability exceeds `evidence_threshold`. Results keep the order "
                 "of `dialogues`.",
                 openapi_extra={"x-cost-limits": ["max_request_pairs", "max_id_chars", "max_evidence"]},
                 responses=error_responses(*SCORING_ERRORS))
    async def contradiction(body: ContradictionRequest, response: Response,
                            priority: PriorityHeader = None) -> ContradictionResponse:
        lane = requested_lane(priority, body.priority)
        body.check_limits(gw.limits)
        model = gw.resolve(body.model, "classifier", "model")
        reply = await gw.classifier(model).detect(body.to_job(), lane)
        results = reply.unwrap()
        card = await gw.card(model)
        set_reply_timing(response, reply, tokenized=False)
        return ContradictionResponse.from_engine(body, results, model=model,
                                                 stand_in=card.stand_in, source=card.source,
                                                 revision=card.revision,
                                                 max_evidence=gw.limits.max_evidence)

    return router
