"""HTTP wiring of POST /v1/nll/dialogues (schemas: `protocol`; expansion and regrouping:
`serving`; the scoring: the NLL serving, the same call as POST /v1/nll).

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from fastapi import APIRouter, Response

from dialscore_server.contract.errors import SCORING_ERRORS, ServiceError, error_responses
from dialscore_server.contract.priority import PriorityHeader, requested_lane
from dialscore_server.contract.strict_json import strict_json_route
from dialscore_server.contract.timing_headers import set_reply_timing
from dialscore_server.nll.dialogues.protocol import NLLDialoguesRequest, NLLDialoguesResponse
from dialscore_server.nll.dialogues.serving import regroup, reroot
from dialscore_server.nll.protocol import Usage
from dialscore_server.nll.serving import NLLBackend


def build_router(gw: NLLBackend) -> APIRouter:
    """The route, bound to the backend `gw`."""
    router = APIRouter(route_class=strict_json_route(gw.limits))

    @router.post("/v1/nll/dialogues", response_model=NLLDialoguesResponse,
                 openapi_extra={"x-cost-limits": ["max_request_tokens", "max_item_tokens",
                                                  "max_id_chars"]},
                 summary="Per-token NLL of every turn of whole dialogues, each given the turns "
                 "before it.",
                 description="Each scored turn k is the /v1/nll item `{context: turns[:k], "
                 "knowledge, target: turns[k]}`, with its numbers, `truncated` flag and errors "
                 "(named by the dialogue field); every turn by default, or the turns of one "
                 "`speaker`, or `score_turns`. Per dialogue, `nll` is the token-weighted mean "
                 "over the scored turns. Each scored turn counts as one item (`max_items`) and as "
                 "its item's tokens (`max_request_tokens`).",
                 responses=error_responses(*SCORING_ERRORS))
    async def nll_dialogues(body: NLLDialoguesRequest, response: Response,
                            priority: PriorityHeader = None) -> NLLDialoguesResponse:
        lane = requested_lane(priority, body.priority)
        chosen = body.selections(gw.limits)
        model = gw.resolve(body.model, "nll", "model")
        reply = await gw.nll(model).score(body.to_items(chosen), body.return_tokens, lane)
        try:
            scored = reply.unwrap()
        except ServiceError as exc:
            raise reroot(exc, chosen) from None
        card = await gw.card(model)
        set_reply_timing(response, reply, tokenized=True)
        return NLLDialoguesResponse(
            model=model, source=card.source or "", revision=card.revision,
            stand_in=card.stand_in, append_eos=card.format.append_eos if card.format else True,
            results=regroup(scored, chosen, body.return_tokens),
            usage=Usage(source_tokens=sum(r.source_tokens for r in scored.results),
                        target_tokens=sum(r.num_tokens for r in scored.results)),
        )

    return router
