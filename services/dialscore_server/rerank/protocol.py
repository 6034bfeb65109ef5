"""POST /v1/rerank and the TEI-shaped POST /rerank: request and response schemas.

``POST /rerank`` takes what text-embeddings-inference rerank clients send (``query``, ``texts``,
``raw_scores``, ``return_text``, ``truncate``, ``truncation_direction``) and answers a list of
``{"index", "score"[, "text"]}`` sorted best first. The query is the dialogue so far, one turn
per line (see :func:`dialscore_server.rerank.engine.query_context`); candidates are scored by contradiction
only, with the default weights, so the order equals POST /v1/rerank's for the same turns.
``score`` is ``1 - contradiction_probability`` (in [0, 1], higher = more consistent) or, with
``raw_scores: true``, the /v1/rerank score ``-contradiction_probability``. ``truncate`` and
``truncation_direction`` are accepted for compatibility and do not change anything: pairs are
always truncated as the detector documents (oldest context tokens first). Serialize the response
with ``exclude_none=True`` so ``text`` is absent unless asked for, as TEI does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, RootModel, field_validator

from dialscore_server.contradiction.pairing import DEFAULT_THRESHOLD, Turn
from dialscore_server.contradiction.protocol import (
    EvidenceOut, Probability, SpeakerIn, TurnIn, unique_turn_ids,
)
from dialscore_server.rerank.engine import (
    DEFAULT_CONTRADICTION_WEIGHT, DEFAULT_NLL_WEIGHT, QUERY_CANDIDATE_SPEAKER, RerankOutput, RerankResult, RerankWeights,
    query_context,
)
from dialscore_server.contract.limits import Limits, check_texts, too_many
from dialscore_server.contract.schema import APIModel, Text, UnlimitedText, limited

#: A weight of the combined score. Bounded so the score stays a finite number (1e308 x an NLL
#: would overflow to -inf, which JSON cannot carry).
Weight = Annotated[float, Field(ge=0.0, le=1e6, allow_inf_nan=False)]


class RerankWeightsIn(APIModel):
    """score = -(contradiction * contradiction_probability + nll * nll)."""

    contradiction: Weight | None = Field(
        None, description=f"Weight of the contradiction probability (default {DEFAULT_CONTRADICTION_WEIGHT}).")
    nll: Weight | None = Field(
        None, description=f"Weight of the candidate's NLL in nats per token (default {DEFAULT_NLL_WEIGHT} "
        "with `nll_model`, else 0; a positive value needs `nll_model`).")

    def to_engine(self) -> RerankWeights:
        return RerankWeights(contradiction=self.contradiction, nll=self.nll)


class RerankRequest(APIModel):
    model: str | None = Field(
        None, description="The contradiction classifier (default: the deployment's detector).")
    context: Annotated[list[TurnIn], limited("max_turns")] = Field(
        description="The dialogue so far, oldest first (may be empty). Turn ids default to "
        "positions; evidence names them.")
    candidates: Annotated[list[Text], Field(min_length=1), limited("max_candidates")] = Field(
        description="Candidate next replies; results name them by index.")
    speaker: SpeakerIn | None = Field(
        None, description="Who says the candidates. Default: the most recent context speaker "
        "other than the last one (two parties: whoever did not speak last).")
    mode: Literal["structured", "unstructured"] = Field(
        "structured", description="Detector mode (see POST /v1/contradiction).")
    top_n: Annotated[int, Field(ge=1)] | None = Field(
        None, description="Return only the best `top_n` candidates (default: all).")
    nll_model: str | None = Field(
        None, description="A causal or seq2seq model from GET /v1/models: also score each "
        "candidate's NLL given the context and add it to the score.")
    weights: RerankWeightsIn | None = Field(None, description="Weights of the combined score.")
    threshold: Probability = Field(
        DEFAULT_THRESHOLD, description="is_contradiction = contradiction_probability > threshold.")
    evidence_threshold: Probability | None = Field(
        None, description="Evidence = context turns whose pair probability > evidence_threshold "
        "(default: threshold).")

    @field_validator("context")
    @classmethod
    def _unique_ids(cls, turns: list[TurnIn]) -> list[TurnIn]:
        unique_turn_ids(turns, "context")
        return turns

    def to_context(self) -> list[Turn]:
        return [t.to_turn() for t in self.context]

    def engine_kwargs(self) -> dict:
        """Keyword arguments of :meth:`Reranker.arerank` / ``rerank`` (all but `nll_fn`)."""
        return dict(speaker=self.speaker, mode=self.mode, top_n=self.top_n,
                    weights=self.weights.to_engine() if self.weights else None,
                    threshold=self.threshold, evidence_threshold=self.evidence_threshold)

    def texts(self) -> list[tuple[str, str]]:
        return ([(f"context[{j}].text", t.text) for j, t in enumerate(self.context)]
                + [(f"candidates[{k}]", c) for k, c in enumerate(self.candidates)])

    def check_limits(self, limits: Limits) -> None:
        """Raise ``payload_too_large`` (413) naming the field for a request over `limits`."""
        if len(self.candidates) > limits.max_candidates:
            raise too_many("candidates", len(self.candidates), limits.max_candidates, "candidates")
        if len(self.context) > limits.max_turns:
            raise too_many("context", len(self.context), limits.max_turns, "turns")
        check_texts(self.texts(), limits)


class RerankResultOut(APIModel):
    index: int = Field(description="The candidate's position in the request.")
    score: float = Field(description="Combined score, higher is better; results are sorted by it.")
    contradiction_probability: float = Field(
        description="Largest contradiction probability of the candidate against the context.")
    is_contradiction: bool = Field(description="contradiction_probability > threshold.")
    evidence: list[EvidenceOut] = Field(description="Context turns the candidate contradicts.")
    nll: float | None = Field(None, description="Mean NLL of the candidate (nats per token), "
                              "with `nll_model`.")
    text: str | None = Field(None, description="The candidate (present in the TEI route only "
                             "when asked for).")

    @classmethod
    def from_engine(cls, r: RerankResult) -> "RerankResultOut":
        return cls(index=r.index, score=r.score, contradiction_probability=r.contradiction_probability,
                   is_contradiction=r.is_contradiction,
                   evidence=[EvidenceOut.from_engine(e) for e in r.evidence], nll=r.nll)


class AppliedWeights(APIModel):
    contradiction: float
    nll: float


class RerankResponse(APIModel):
    model: str = Field(description="The contradiction classifier used.")
    stand_in: bool = Field(description="True when the classifier is a random-weight stand-in.")
    nll_model: str | None = Field(None, description="The NLL model used, if any.")
    nll_stand_in: bool | None = Field(None, description="True when the NLL model is a stand-in.")
    speaker: int | str = Field(description="The speaker the candidates were attributed to.")
    mode: Literal["structured", "unstructured"]
    weights: AppliedWeights = Field(description="The weights applied.")
    results: list[RerankResultOut] = Field(description="Best first; at most top_n.")

    @classmethod
    def from_engine(cls, out: RerankOutput, *, model: str, stand_in: bool,
                    nll_model: str | None = None, nll_stand_in: bool | None = None) -> "RerankResponse":
        return cls(model=model, stand_in=stand_in, nll_model=nll_model, nll_stand_in=nll_stand_in,
                   speaker=out.speaker, mode=out.mode,
                   weights=AppliedWeights(contradiction=out.weights.contradiction or 0.0,
                                          nll=out.weights.nll or 0.0),
                   results=[RerankResultOut.from_engine(r) for r in out.results])


# ------------------------------------------------------------------------------------ TEI shape
class TEIRerankRequest(APIModel):
    """What text-embeddings-inference's POST /rerank accepts (plus an optional `model`)."""

    query: Annotated[UnlimitedText, limited("max_turns", "max_text_chars")] = Field(
        description="The dialogue so far, one turn per line; the last line is the turn just before "
        "the candidate (blank lines are dropped). Limits apply per line: at most `max_turns` "
        "non-blank lines, each at most `max_text_chars` characters (413 naming `query`).")
    texts: Annotated[list[Text], Field(min_length=1), limited("max_candidates")] = Field(
        description="Candidate replies.")
    raw_scores: bool = Field(False, description="true: score = -contradiction_probability; "
                             "false: 1 - contradiction_probability.")
    return_text: bool = Field(False, description="Include each candidate's text.")
    truncate: bool | None = Field(None, description="Accepted for compatibility; pairs are always "
                                  "truncated as documented.")
    truncation_direction: Literal["Left", "Right", "left", "right"] | None = Field(
        None, description="Accepted for compatibility; has no effect.")
    model: str | None = Field(None, description="The contradiction classifier (default: the "
                              "deployment's detector).")

    def to_context(self) -> list[Turn]:
        return query_context(self.query)

    def engine_kwargs(self) -> dict:
        """Keyword arguments of :meth:`Reranker.arerank` / ``rerank``: the candidates are the
        query's speaker ``"A"``'s; structured mode, default weights and thresholds, no NLL."""
        return dict(speaker=QUERY_CANDIDATE_SPEAKER)

    def check_limits(self, limits: Limits) -> None:
        if len(self.texts) > limits.max_candidates:
            raise too_many("texts", len(self.texts), limits.max_candidates, "texts")
        turns = self.to_context()
        if len(turns) > limits.max_turns:
            raise too_many("query", len(turns), limits.max_turns, "turns (non-blank lines)")
        check_texts([("query", t.text) for t in turns]
                    + [(f"texts[{k}]", c) for k, c in enumerate(self.texts)], limits)

    def response(self, out: RerankOutput) -> "TEIRerankResponse":
        """The TEI-shaped answer for the reranker's output (already sorted best first)."""
        return TEIRerankResponse([
            TEIRerankResult(index=r.index,
                            score=r.score if self.raw_scores else 1.0 - r.contradiction_probability,
                            text=self.texts[r.index] if self.return_text else None)
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
