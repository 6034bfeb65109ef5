"""The query-shaped rerank routes (text-embeddings-inference's POST /rerank, Cohere's POST
/v2/rerank): the request they share and its steps, and the errors every rerank route documents
(dialscore's own POST /v1/rerank included). Gateway-free."""

from __future__ import annotations

from typing import Protocol

from fastapi import Response

from dialscore_server.contract.errors import SCORING_ERRORS, error_responses
from dialscore_server.contract.priority import Lane
from dialscore_server.contract.timing_headers import set_reply_timing
from dialscore_server.contradiction.engine.pairing import Turn
from dialscore_server.rerank.engine.reranker import RerankOptions, RerankOutput, require_candidate_turn
from dialscore_server.rerank.serving import RerankBackend, RerankCall

#: The error responses every rerank route documents.
ERRORS = error_responses(*SCORING_ERRORS)


class QueryRequest(Protocol):
    """A query-shaped rerank request: a classifier `model` (None: the default), the query's turns,
    the candidates, and the reranker's options."""

    model: str | None

    @property
    def candidates(self) -> list[str]: ...

    def to_context(self) -> list[Turn]: ...

    def options(self) -> RerankOptions: ...


async def run_query_rerank(gw: RerankBackend, body: QueryRequest, response: Response,
                           lane: Lane = "interactive") -> RerankOutput:
    """Rerank for a query-shaped request: resolve `body.model`, then refuse a query with no
    earlier turn of the candidates' speaker (422 naming ``query``), then rerank and write the
    timing headers, the lane and ``x-model-revision`` (the classifier's revision) on `response`."""
    classifier = gw.resolve(body.model, "classifier", "model")
    context = body.to_context()
    require_candidate_turn(context, "query")
    reply = await gw.reranker().rerank(RerankCall(context, body.candidates, body.options(),
                                                  classifier, lane=lane))
    out = reply.unwrap()
    set_reply_timing(response, reply, tokenized=False)
    # The ecosystem shapes have no field for it: the classifier's revision travels as a header.
    revision = (await gw.card(classifier)).revision
    if revision:
        response.headers["x-model-revision"] = revision
    return out
