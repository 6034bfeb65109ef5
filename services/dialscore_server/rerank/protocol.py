"""POST /v1/rerank: request and response schemas (dialscore's own shape).

The ecosystem shapes of the same reranker live beside it: text-embeddings-inference's
POST /rerank in :mod:`dialscore_server.rerank.tei.protocol`, Cohere's POST /v2/rerank in
:mod:`dialscore_server.rerank.cohere.protocol`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, field_validator

from dialscore_server.contract.priority import PriorityField
from dialscore_server.contradiction.engine.pairing import DEFAULT_THRESHOLD, Turn
from dialscore_server.contradiction.protocol import (
    EvidenceOut, Probability, SpeakerIn, TurnIn, capped_evidence, structured_pairs,
    turn_ids_and_speakers, unique_turn_ids,
)
from dialscore_server.rerank.engine.reranker import (
    DEFAULT_CONTRADICTION_WEIGHT, DEFAULT_NLL_WEIGHT, RerankOptions, RerankOutput, RerankResult,
    RerankWeights,
    candidate_speaker,
)
from dialscore_server.contract.errors import InputError
from dialscore_server.contract.limits import (
    Limits, check_ids, check_texts, item_token_bound, too_costly, too_many,
)
from dialscore_server.contract.schema import APIModel, Text, limited

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
    priority: int | None = PriorityField
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

    def options(self) -> RerankOptions:
        """The reranker's settings for this request."""
        return RerankOptions(speaker=self.speaker, mode=self.mode, top_n=self.top_n,
                             weights=self.weights.to_engine() if self.weights else None,
                             threshold=self.threshold, evidence_threshold=self.evidence_threshold)

    def texts(self) -> list[tuple[str, str]]:
        return ([(f"context[{j}].text", t.text) for j, t in enumerate(self.context)]
                + [(f"candidates[{k}]", c) for k, c in enumerate(self.candidates)])

    def pairs(self) -> int:
        """NLI pairs this request costs: candidates x earlier turns of the candidate speaker
        (structured), or one per candidate when there is a context (unstructured)."""
        return rerank_pairs(self.to_context(), len(self.candidates), self.speaker, self.mode)

    def require_something_to_contradict(self) -> None:
        """Refuse (422 naming ``speaker``) a request whose candidates have nothing to contradict
        and no NLL model to order them: structured mode with no earlier context turn of the
        candidate speaker (see :func:`~dialscore_server.rerank.engine.reranker.candidate_speaker`), or
        unstructured mode with an empty context. Every candidate would score contradiction
        probability 0.0, a silent tie. With `nll_model` named the request is served and the
        order is the NLL term's alone (contradiction_probability 0.0 for every candidate)."""
        if self.nll_model is not None or self.pairs() > 0:
            return
        who = candidate_speaker(self.to_context(), self.speaker)
        if self.mode == "unstructured":
            why = "the context is empty"
        else:
            why = f"no context turn is the candidates' speaker's ({who!r})"
        raise InputError(
            f"{why}: there is nothing a candidate could contradict, so every candidate would tie. "
            "Give the candidates' speaker (`speaker`) who spoke earlier in `context`, or name an "
            "`nll_model` to order the candidates by NLL alone.", "speaker")

    def nll_tokens(self, limits: Limits) -> int:
        """Upper bound of the NLL token positions (0 without `nll_model`): each candidate is one
        NLL item over the whole context."""
        if self.nll_model is None:
            return 0
        context = [t.text for t in self.context]
        return sum(item_token_bound(context + [c], limits) for c in self.candidates)

    def check_limits(self, limits: Limits) -> None:
        """Raise ``payload_too_large`` (413) naming the field for a request over `limits`: sizes,
        id lengths, then its cost (NLI pairs, NLL tokens), param ``candidates``."""
        if len(self.candidates) > limits.max_candidates:
            raise too_many("candidates", len(self.candidates), limits.max_candidates, "candidates")
        if len(self.context) > limits.max_turns:
            raise too_many("context", len(self.context), limits.max_turns, "turns")
        check_texts(self.texts(), limits)
        check_ids(turn_ids_and_speakers(self.context, "context") + [("speaker", self.speaker)], limits)
        pairs = self.pairs()
        if pairs > limits.max_request_pairs:
            raise too_costly("candidates", pairs, limits.max_request_pairs, "NLI pairs")
        tokens = self.nll_tokens(limits)
        if tokens > limits.max_request_tokens:
            raise too_costly("candidates", tokens, limits.max_request_tokens, "NLL tokens")


class RerankResultOut(APIModel):
    index: int = Field(description="The candidate's position in the request.")
    score: float = Field(description="Combined score, higher is better; results are sorted by it.")
    contradiction_probability: float = Field(
        description="Largest contradiction probability of the candidate against the context.")
    is_contradiction: bool = Field(description="contradiction_probability > threshold.")
    evidence: list[EvidenceOut] = Field(
        description="Context turns the candidate contradicts (pair probability > evidence_threshold), "
        "at most `max_evidence` of them, the most probable, in dialogue order.")
    nll: float | None = Field(None, description="Mean NLL of the candidate (nats per token), "
                              "with `nll_model`.")
    text: str | None = Field(None, description="The candidate (present in the TEI route only "
                             "when asked for).")

    @classmethod
    def from_engine(cls, r: RerankResult, max_evidence: int | None = None) -> "RerankResultOut":
        return cls(index=r.index, score=r.score, contradiction_probability=r.contradiction_probability,
                   is_contradiction=r.is_contradiction,
                   evidence=[EvidenceOut.from_engine(e) for e in capped_evidence(r.evidence, max_evidence)],
                   nll=r.nll)


class AppliedWeights(APIModel):
    contradiction: float
    nll: float


class RerankUsage(APIModel):
    """Units of work of one request (vLLM's rerank reports tokens; the detector's token counts are
    not carried back, so these are the request's own units)."""

    candidates: int = Field(description="Candidates scored (before `top_n`).")
    context_turns: int = Field(description="Turns of the context.")


class RerankResponse(APIModel):
    id: str = Field(description="A fresh id per response (`rerank-` + 32 hex digits, as vLLM's).")
    usage: RerankUsage
    model: str = Field(description="The contradiction classifier used.")
    revision: str | None = Field(None, description="The classifier's resolved revision (a local "
                                 "checkpoint's is `sha256:` + a hash of its files).")
    stand_in: bool = Field(description="True when the classifier is a random-weight stand-in.")
    nll_model: str | None = Field(None, description="The NLL model used, if any.")
    nll_revision: str | None = Field(None, description="The NLL model's resolved revision.")
    nll_stand_in: bool | None = Field(None, description="True when the NLL model is a stand-in.")
    speaker: int | str = Field(description="The speaker the candidates were attributed to.")
    mode: Literal["structured", "unstructured"]
    weights: AppliedWeights = Field(description="The weights applied.")
    results: list[RerankResultOut] = Field(description="Best first; at most top_n.")

    @classmethod
    def from_engine(cls, out: RerankOutput, *, model: str, stand_in: bool, usage: RerankUsage,
                    revision: str | None = None, nll_model: str | None = None,
                    nll_stand_in: bool | None = None, nll_revision: str | None = None,
                    max_evidence: int | None = None) -> "RerankResponse":
        return cls(id=f"rerank-{uuid.uuid4().hex}", usage=usage, model=model, revision=revision,
                   stand_in=stand_in, nll_model=nll_model, nll_revision=nll_revision,
                   nll_stand_in=nll_stand_in,
                   speaker=out.speaker, mode=out.mode,
                   weights=AppliedWeights(contradiction=out.weights.contradiction or 0.0,
                                          nll=out.weights.nll or 0.0),
                   results=[RerankResultOut.from_engine(r, max_evidence) for r in out.results])


def rerank_pairs(context: Sequence[Turn], candidates: int, speaker: object, mode: str) -> int:
    """NLI pairs of a rerank: each candidate is the last turn of context + candidate, said by
    the candidate speaker (see rerank.engine.candidate_speaker)."""
    if mode == "unstructured":
        return candidates if context else 0
    who = candidate_speaker(context, speaker)  # type: ignore[arg-type]
    return candidates * structured_pairs([t.speaker for t in context], who)


def check_query_rerank(turns: Sequence[Turn], candidates: Sequence[str], field: str,
                       speaker: object, limits: Limits) -> None:
    """The limits of a query-shaped rerank (TEI's /rerank, Cohere's /v2/rerank): candidate count,
    turns (non-blank lines of ``query``), characters, then the NLI pairs the request costs; raise
    ``payload_too_large`` (413) naming ``field`` (the candidates' field) or ``query``."""
    if len(candidates) > limits.max_candidates:
        raise too_many(field, len(candidates), limits.max_candidates, field)
    if len(turns) > limits.max_turns:
        raise too_many("query", len(turns), limits.max_turns, "turns (non-blank lines)")
    check_texts([("query", t.text) for t in turns]
                + [(f"{field}[{k}]", c) for k, c in enumerate(candidates)], limits)
    pairs = rerank_pairs(turns, len(candidates), speaker, "structured")
    if pairs > limits.max_request_pairs:
        raise too_costly(field, pairs, limits.max_request_pairs, "NLI pairs")
