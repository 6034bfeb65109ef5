"""text-embeddings-inference's POST /rerank: request and response schemas.

The route takes what TEI rerank clients send (``query``, ``texts``, ``raw_scores``,
``return_text``, ``truncate``, ``truncation_direction``; ``documents`` is accepted as another name
for ``texts``, as Cohere-style clients call them) and answers a list of
``{"index", "score"[, "text"]}`` sorted best first. The query is the dialogue so far, one turn
per line (see :func:`dialscore_server.rerank.engine.reranker.query_context`); a query of fewer than two
non-blank lines is a 422 naming ``query`` (nothing to contradict). Candidates are scored by
contradiction only, with the default weights, so the order equals POST /v1/rerank's for the same
turns. ``score`` is ``1 - contradiction_probability`` (in [0, 1], higher = more consistent).

Where this differs from TEI (documented in docs/ecosystem.md):

* ``raw_scores: true`` asks TEI for the classifier's logits; the detector exposes probabilities
  only, so it is refused (422 naming ``raw_scores``) rather than answered with something else.
* Truncation: the detector always truncates a pair from the left (oldest context tokens first),
  so ``truncation_direction: "Left"`` is honoured as is and ``"Right"`` is refused (422);
  ``truncate: false`` does not turn over-long pairs into a 413 as TEI does (they are truncated).
* Unknown fields are ignored, as TEI (serde without ``deny_unknown_fields``) ignores them, so
  clients written for newer TEI versions keep working; every other dialscore route refuses them.

Serialize the response with ``exclude_none=True`` so ``text`` is absent unless asked for, as TEI
does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, RootModel, model_validator

from dialscore_server.contradiction.engine.pairing import Turn
from dialscore_server.contract.errors import InputError
from dialscore_server.contract.limits import Limits
from dialscore_server.contract.schema import APIModel, Text, UnlimitedText, limited
from dialscore_server.rerank.engine.reranker import (
    QUERY_CANDIDATE_SPEAKER, RerankOptions, RerankOutput, query_context,
)
from dialscore_server.rerank.protocol import check_query_rerank


class TEIRerankRequest(APIModel):
    """What text-embeddings-inference's POST /rerank accepts (plus an optional `model`)."""

    model_config = ConfigDict(extra="ignore", strict=True, protected_namespaces=())

    query: Annotated[UnlimitedText, limited("max_turns", "max_text_chars")] = Field(
        description="The dialogue so far, one turn per line; the last line is the turn just before "
        "the candidate (blank lines are dropped). At least two non-blank lines (else 422: the "
        "candidates' speaker has no earlier turn to contradict). Limits apply per line: at most "
        "`max_turns` non-blank lines, each at most `max_text_chars` characters (413 naming `query`).")
    texts: Annotated[list[Text], Field(min_length=1), limited("max_candidates")] = Field(
        description="Candidate replies. `documents` (Cohere's name) is accepted instead of "
        "`texts` and read as it (errors then name `texts`); giving both is a 422.")
    raw_scores: bool = Field(False, description="TEI returns logits for true; the detector exposes "
                             "probabilities only, so true is refused (422).")
    return_text: bool = Field(False, description="Include each candidate's text.")
    truncate: bool | None = Field(None, description="Pairs are always truncated to the detector's "
                                  "length (oldest context tokens first); false does not make "
                                  "over-long input an error.")
    truncation_direction: Literal["Left", "Right", "left", "right"] | None = Field(
        None, description="\"Left\" (what the detector does) is accepted; \"Right\" is refused (422).")
    model: str | None = Field(None, description="The contradiction classifier (default: the "
                              "deployment's detector).")

    @model_validator(mode="before")
    @classmethod
    def _documents_are_texts(cls, data: Any) -> Any:
        if isinstance(data, dict) and "documents" in data:
            if "texts" in data:
                raise ValueError("give the candidates as `texts` or as `documents`, not both")
            data = {**data, "texts": data["documents"]}
            del data["documents"]
        return data

    def check_options(self) -> None:
        """Raise :class:`InputError` (422 naming the field) for what the route does not serve."""
        if self.raw_scores:
            raise InputError("raw_scores: true asks for the classifier's logits, which the "
                             "contradiction detector does not expose; omit it (scores are "
                             "1 - contradiction probability)", "raw_scores")
        if self.truncation_direction in ("Right", "right"):
            raise InputError("truncation_direction \"Right\" is not supported: the detector keeps the "
                             "most recent turns and drops the oldest context tokens (\"Left\")",
                             "truncation_direction")

    @property
    def candidates(self) -> list[str]:
        return self.texts

    def to_context(self) -> list[Turn]:
        return query_context(self.query)

    def options(self) -> RerankOptions:
        """The reranker's settings: the candidates are the query's speaker ``"A"``'s;
        structured mode, default weights and thresholds, no NLL."""
        return RerankOptions(speaker=QUERY_CANDIDATE_SPEAKER)

    def check_limits(self, limits: Limits) -> None:
        """The options (:meth:`check_options`), then the limits, NLI pairs included (413 naming
        the field)."""
        self.check_options()
        check_query_rerank(self.to_context(), self.texts, "texts", QUERY_CANDIDATE_SPEAKER, limits)

    def response(self, out: RerankOutput) -> "TEIRerankResponse":
        """The TEI-shaped answer for the reranker's output (already sorted best first)."""
        return TEIRerankResponse([
            TEIRerankResult(index=r.index, score=1.0 - r.contradiction_probability,
                            text=self.candidates[r.index] if self.return_text else None)
            for r in out.results
        ])


class TEIRerankResult(APIModel):
    index: int
    score: float
    text: str | None = None


class TEIRerankResponse(RootModel[list[TEIRerankResult]]):
    """A JSON list of ``{"index", "score"[, "text"]}``, best first."""


def tei_results(request: TEIRerankRequest, out: RerankOutput) -> Sequence[dict]:
    """The TEI response as plain JSON-ready dicts (``text`` only when asked for)."""
    return request.response(out).model_dump(exclude_none=True)
