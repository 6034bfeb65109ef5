"""Cohere's POST /v2/rerank: request and response schemas.

The request is Cohere's v2 rerank body (``model``, ``query``, ``documents``, ``top_n``,
``max_tokens_per_doc``); the answer is Cohere's ``{"id", "results": [{"index",
"relevance_score"}], "meta": {"api_version", "billed_units"}}``, results sorted by
``relevance_score`` (highest first; ties keep the documents' order).

* ``query`` is the dialogue so far, one turn per line, exactly as on TEI's POST /rerank (see
  :func:`dialscore_server.rerank.engine.reranker.query_context`); each document is a candidate next turn
  by the speaker of the query's second-to-last line. At least two non-blank lines, else 422
  naming ``query`` (the candidates' speaker has no earlier turn to contradict).
* ``relevance_score = 1 - contradiction_probability``: the largest probability, over the
  candidate speaker's earlier turns, that the document contradicts one of them (DECODE detector,
  structured mode, default weights). So the order equals POST /v1/rerank's for the same turns.
* ``model`` names the contradiction classifier (GET /v1/models, ``kind: "classifier"``); Cohere
  requires it, here it may be omitted for the deployment's default detector.
* ``max_tokens_per_doc`` is accepted and validated (>= 1) but does not cut documents: each
  (earlier turn, document) pair is truncated to the detector's own length, oldest tokens first.
* ``meta.billed_units.search_units`` is 1 per request, as Cohere bills a query with up to 100
  documents; ``meta.tokens`` is not reported.
* Unknown fields (``relevant_spans``, ``priority``, ...) are ignored, as Cohere's newer SDKs send
  them; every dialscore-shaped route refuses unknown fields.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import ConfigDict, Field

from dialscore_server.contradiction.engine.pairing import Turn
from dialscore_server.contract.limits import Limits
from dialscore_server.contract.schema import APIModel, Text, UnlimitedText, limited
from dialscore_server.rerank.engine.reranker import (
    QUERY_CANDIDATE_SPEAKER, RerankOptions, RerankOutput, query_context,
)
from dialscore_server.rerank.protocol import check_query_rerank


class CohereRerankRequest(APIModel):
    """Cohere's v2 rerank request (documents as strings)."""

    model_config = ConfigDict(extra="ignore", strict=True, protected_namespaces=())

    model: str | None = Field(None, description="The contradiction classifier (default: the "
                              "deployment's detector).")
    query: Annotated[UnlimitedText, limited("max_turns", "max_text_chars")] = Field(
        description="The dialogue so far, one turn per line (at least two non-blank lines); limits "
        "apply per line as on POST /rerank.")
    documents: Annotated[list[Text], Field(min_length=1), limited("max_candidates")] = Field(
        description="Candidate next turns; results name them by index.")
    top_n: Annotated[int, Field(ge=1)] | None = Field(
        None, description="Return only the best `top_n` documents (default: all).")
    max_tokens_per_doc: Annotated[int, Field(ge=1)] | None = Field(
        None, description="Accepted for compatibility; pairs are truncated to the detector's length.")

    @property
    def candidates(self) -> list[str]:
        return self.documents

    def to_context(self) -> list[Turn]:
        return query_context(self.query)

    def options(self) -> RerankOptions:
        """The reranker's settings: documents are speaker ``"A"``'s."""
        return RerankOptions(speaker=QUERY_CANDIDATE_SPEAKER, top_n=self.top_n)

    def check_limits(self, limits: Limits) -> None:
        """Raise ``payload_too_large`` (413) naming the field for a request over `limits` (NLI
        pairs included)."""
        check_query_rerank(self.to_context(), self.documents, "documents", QUERY_CANDIDATE_SPEAKER,
                           limits)

    def response(self, out: RerankOutput) -> "CohereRerankResponse":
        return CohereRerankResponse(
            id=str(uuid.uuid4()),
            results=[CohereRerankResult(index=r.index, relevance_score=1.0 - r.contradiction_probability)
                     for r in out.results],
            meta=CohereMeta(api_version=CohereApiVersion(version="2"),
                            billed_units=CohereBilledUnits(search_units=1)))


class CohereRerankResult(APIModel):
    index: int = Field(description="The document's position in the request.")
    relevance_score: float = Field(description="1 - contradiction probability, in [0, 1].")


class CohereApiVersion(APIModel):
    version: str


class CohereBilledUnits(APIModel):
    search_units: int = Field(description="1 per request.")


class CohereMeta(APIModel):
    api_version: CohereApiVersion
    billed_units: CohereBilledUnits


class CohereRerankResponse(APIModel):
    id: str = Field(description="A fresh UUID per response.")
    results: list[CohereRerankResult] = Field(description="Highest relevance_score first; at most top_n.")
    meta: CohereMeta
