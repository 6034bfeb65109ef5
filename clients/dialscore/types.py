"""Typed results (and request helpers) of the client, parsed from the server's JSON.

The server's own schemas (``services/*/protocol.py``) forbid unknown fields; these client-side
models *ignore* them instead, so an older client keeps working against a newer server that adds
fields. Fields the server may leave out are optional here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dialscore.model_card import ModelCard


class _Result(BaseModel):
    """Base of every parsed result: extra fields are ignored, nothing is coerced silently."""

    model_config = ConfigDict(extra="ignore", protected_namespaces=(), frozen=True)


# ---------------------------------------------------------------------------- GET /v1/models

class ModelList(_Result):
    models: list[ModelCard]


# ---------------------------------------------------------------------------- POST /v1/nll

class NLLItem(BaseModel):
    """One thing to score (request side): dialogue turns with an optional knowledge sentence, or a
    raw source, and the target. Plain dicts of the same shape are accepted everywhere too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str
    context: tuple[str, ...] | None = None
    knowledge: str | None = None
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"target": self.target}
        if self.context is not None:
            out["context"] = list(self.context)
        if self.knowledge is not None:
            out["knowledge"] = self.knowledge
        if self.source is not None:
            out["source"] = self.source
        return out


class NLLResult(_Result):
    nll: float = Field(description="Mean NLL over the target's tokens, in nats per token.")
    num_tokens: int
    truncated: bool = False
    token_nlls: list[float] | None = None
    tokens: list[str] | None = None


class Usage(_Result):
    source_tokens: int = 0
    target_tokens: int = 0


class NLLResponse(_Result):
    model: str
    source: str | None = None
    revision: str | None = None
    stand_in: bool | None = None
    append_eos: bool | None = None
    results: list[NLLResult]
    usage: Usage | None = None


# ---------------------------------------------------------------------------- POST /v1/nll/dialogues

class NLLDialogue(BaseModel):
    """One dialogue to score turn by turn (request side): its turns' texts, oldest first, an
    optional knowledge sentence, and which turns to score: every turn (default), the turns of
    ``speaker`` (with ``speakers``, one per turn), or the indices ``score_turns``. Scored turn k
    is scored exactly as the /v1/nll item ``{"context": turns[:k], "knowledge": knowledge,
    "target": turns[k]}``. Plain dicts of the same shape, or a plain list of turn texts, are
    accepted everywhere too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    turns: tuple[str, ...]
    knowledge: str | None = None
    speakers: tuple[str | int, ...] | None = None
    speaker: str | int | None = None
    score_turns: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"turns": list(self.turns)}
        for name in ("knowledge", "speaker"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for name in ("speakers", "score_turns"):
            if getattr(self, name) is not None:
                out[name] = list(getattr(self, name))
        return out


class NLLTurnResult(NLLResult):
    """A scored turn: its /v1/nll result (``nll`` in nats per token of the turn's tokens, eos
    included when the format appends one) and its index in the dialogue's turns."""

    turn: int


class NLLDialogueResult(_Result):
    nll: float = Field(description="Token-weighted mean NLL over the scored turns (nats per "
                       "token): exp(nll) is the dialogue's per-token perplexity over them.")
    num_tokens: int = Field(description="Scored tokens over the scored turns.")
    turns: list[NLLTurnResult] = Field(description="The scored turns, in turn order.")


class NLLDialoguesResponse(_Result):
    model: str
    source: str | None = None
    revision: str | None = None
    stand_in: bool | None = None
    append_eos: bool | None = None
    results: list[NLLDialogueResult] = Field(description="One per dialogue, in request order.")
    usage: Usage | None = None


# ---------------------------------------------------------------------------- turns

class Turn(BaseModel):
    """One dialogue turn: who said what. The request side of /v1/contradiction and /v1/rerank, and
    the turn the MuTual and DECODE readers build.

    ``id`` names the turn inside its dialogue (evidence refers to earlier turns by it); never rely
    on its parity to tell speakers apart. The DECODE reader keeps the file's ``turn_id``s, the
    MuTual reader numbers turns 0, 1, 2, ...; ``None`` lets the service number them by position.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    speaker: str | int
    text: str
    id: str | int | None = None

    def to_json(self) -> dict[str, Any]:
        """The service's turn object: ``{"speaker", "text"}``, with ``"id"`` when it is set."""
        out: dict[str, Any] = {"speaker": self.speaker, "text": self.text}
        if self.id is not None:
            out["id"] = self.id
        return out


# ---------------------------------------------------------------------------- contradiction

class Evidence(_Result):
    turn: str | int = Field(description="The id of an earlier turn that the last one contradicts.")
    probability: float


class ContradictionResult(_Result):
    is_contradiction: bool
    probability: float
    evidence: list[Evidence] = []


class ContradictionResponse(_Result):
    model: str | None = None
    source: str | None = None
    revision: str | None = None
    stand_in: bool | None = None
    mode: str | None = None
    threshold: float | None = None
    evidence_threshold: float | None = None
    results: list[ContradictionResult]


# ---------------------------------------------------------------------------- rerank

class RerankResult(_Result):
    index: int = Field(description="Position of the candidate in the request.")
    score: float
    contradiction_probability: float | None = None
    evidence: list[Evidence] = []
    nll: float | None = None


class RerankResponse(_Result):
    model: str | None = Field(None, description="The contradiction classifier used.")
    revision: str | None = Field(None, description="The classifier's resolved revision.")
    stand_in: bool | None = None
    nll_model: str | None = None
    nll_revision: str | None = Field(None, description="The NLL model's resolved revision.")
    speaker: str | int | None = Field(None, description="Who the candidates were attributed to.")
    mode: str | None = None
    results: list[RerankResult] = Field(description="Best first.")


# ---------------------------------------------------------------------------- limits

class PublishedLimits(_Result):
    """The request limits a deployment publishes in ``GET /openapi.json`` (``info["x-limits"]``).

    Each is the most one request may carry; the service answers a request over one with 413
    ``payload_too_large`` naming the field. A limit the deployment does not publish is None.
    """

    max_items: int | None = Field(None, ge=1, description="Most items in one POST /v1/nll "
                                  "(scored turns in one POST /v1/nll/dialogues).")
    max_turns: int | None = Field(None, ge=1, description="Most turns in one context or dialogue.")
    max_text_chars: int | None = Field(
        None, ge=1, description="Longest single text (turn, target...), in characters.")
    max_dialogues: int | None = Field(
        None, ge=1, description="Most dialogues in one POST /v1/contradiction.")
    max_candidates: int | None = Field(
        None, ge=1, description="Most candidates in one rerank request.")
    max_body_bytes: int | None = Field(None, ge=1, description="Largest request body, in bytes.")


# ---------------------------------------------------------------------------- health

class Health(_Result):
    """``GET /healthz`` (process alive) and ``GET /readyz`` (every deployment healthy)."""

    alive: bool
    ready: bool
    detail: Any = None
    error: str | None = Field(None, description="Why the server could not be reached, if it could not.")

