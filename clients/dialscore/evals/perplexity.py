"""Per-turn and per-dialogue perplexity of whole dialogues under a served dialogue model, through
``POST /v1/nll/dialogues`` (`dialscore perplexity`).

Each scored turn k of a dialogue is scored given the turns before it (the /v1/nll item
``{"context": turns[:k], "knowledge": ..., "target": turns[k]}``: the model's dialogue format, its
whole-turn truncation when the history does not fit the window; the scored tokens are the turn's,
eos included when the format appends one). A turn's perplexity is ``exp(nll)``, ``nll`` its mean
NLL in nats per token; a dialogue's is ``exp`` of the token-weighted mean NLL over its scored
turns, and the corpus's ``exp`` of the token-weighted mean over every scored turn of the file.

Input, JSON Lines, one dialogue per line::

    {"id": "d1", "turns": ["Hi!", "Hello, how are you?", "Fine."], "knowledge": "optional"}
    {"turns": [{"speaker": "user", "text": "Hi!"}, {"speaker": "bot", "text": "Hello."}]}

``turns``: at least one, all strings or all ``{"speaker", "text"}`` objects; ``id`` (default: the
line number, from 1) and ``knowledge`` are optional; no other field. With ``speaker`` (a
:func:`score_perplexity` argument, the command's ``--speaker``) only that speaker's turns are
scored, and a dialogue in which they say nothing is skipped (counted in
:attr:`Perplexity.skipped`); the other turns are still the history.

Requests carry whole dialogues, at most ``chunk_turns`` scored turns each (lowered to the
service's published ``max_items``; one longer dialogue travels alone), sent concurrently; a 413
for a request as a whole halves it (:mod:`dialscore.batching`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dialscore.batching import ChunkResults, arun_chunks, asend_halving, cap
from dialscore.errors import APIStatusError

if TYPE_CHECKING:
    from dialscore.client import AsyncDialscoreClient
    from dialscore.types import NLLDialogueResult

__all__ = ["DialogueIn", "DialoguePerplexity", "Perplexity", "TurnPerplexity", "read_dialogues",
           "score_perplexity"]


@dataclass(frozen=True)
class DialogueIn:
    """A dialogue of the input file: its id, turn texts, speakers (None when the turns are plain
    strings) and knowledge."""

    id: str
    turns: tuple[str, ...]
    speakers: tuple[str | int, ...] | None = None
    knowledge: str | None = None


def read_dialogues(path: str | Path) -> list[DialogueIn]:
    """The dialogues of a JSON Lines file (the schema in the module docstring); ValueError naming
    the line for anything else. Blank lines are skipped."""
    out: list[DialogueIn] = []
    ids: set[str] = set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{where}: not JSON: {exc}") from None
            if not isinstance(row, dict):
                raise ValueError(f"{where}: a line is a JSON object")
            extra = set(row) - {"id", "turns", "knowledge"}
            if extra:
                raise ValueError(f"{where}: unknown field(s) {sorted(extra)}")
            turns = row.get("turns")
            if not isinstance(turns, list) or not turns:
                raise ValueError(f"{where}: `turns` is a non-empty list")
            speakers: tuple[str | int, ...] | None = None
            if all(isinstance(t, str) for t in turns):
                texts = tuple(turns)
            elif all(isinstance(t, dict) and set(t) == {"speaker", "text"}
                     and isinstance(t["text"], str) and isinstance(t["speaker"], (str, int))
                     and not isinstance(t["speaker"], bool) for t in turns):
                texts = tuple(t["text"] for t in turns)
                speakers = tuple(t["speaker"] for t in turns)
            else:
                raise ValueError(f"{where}: `turns` are all strings or all {{\"speaker\", \"text\"}} "
                                 "objects")
            knowledge = row.get("knowledge")
            if knowledge is not None and not isinstance(knowledge, str):
                raise ValueError(f"{where}: `knowledge` is a string")
            id_ = row.get("id", str(n))
            if not isinstance(id_, str) or id_ in ids:
                raise ValueError(f"{where}: `id` is a string, unique in the file")
            ids.add(id_)
            out.append(DialogueIn(id_, texts, speakers, knowledge))
    return out


@dataclass(frozen=True)
class TurnPerplexity:
    """A scored turn: its index, mean NLL (nats per token), tokens and whether its history was
    truncated; ``perplexity = exp(nll)``."""

    turn: int
    nll: float
    num_tokens: int
    truncated: bool

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)


@dataclass(frozen=True)
class DialoguePerplexity:
    """A dialogue's scored turns and their token-weighted mean NLL; ``perplexity = exp(nll)``."""

    id: str
    nll: float
    num_tokens: int
    turns: tuple[TurnPerplexity, ...]

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "nll": self.nll, "perplexity": self.perplexity,
                "num_tokens": self.num_tokens,
                "turns": [{"turn": t.turn, "nll": t.nll, "perplexity": t.perplexity,
                           "num_tokens": t.num_tokens, "truncated": t.truncated}
                          for t in self.turns]}


@dataclass
class Perplexity:
    """A file's result: the model, each scored dialogue, the ids of the dialogues skipped (no
    turn of the chosen speaker), and the corpus NLL: token-weighted mean over every scored turn."""

    model: str
    dialogues: list[DialoguePerplexity]
    skipped: list[str] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(d.num_tokens for d in self.dialogues)

    @property
    def nll(self) -> float:
        n = self.num_tokens
        return sum(d.nll * d.num_tokens for d in self.dialogues) / n if n else math.nan

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)

    @property
    def truncated_turns(self) -> int:
        return sum(t.truncated for d in self.dialogues for t in d.turns)


_DIALOGUE = re.compile(r"^dialogues\[(\d+)\]")


def _scored(d: DialogueIn, speaker: str | int | None) -> int:
    """How many turns of `d` are scored (all, or those of `speaker`)."""
    if speaker is None:
        return len(d.turns)
    return sum(type(s) is type(speaker) and s == speaker for s in d.speakers or ())


def _request(d: DialogueIn, speaker: str | int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"turns": list(d.turns)}
    if d.knowledge is not None:
        out["knowledge"] = d.knowledge
    if speaker is not None:
        out["speakers"], out["speaker"] = list(d.speakers or ()), speaker
    return out


def _plan(requests: Sequence[dict[str, Any]], sizes: Sequence[int], turns: int
          ) -> list[tuple[int, list[dict[str, Any]]]]:
    """``(offset, chunk)`` runs of whole dialogues with at most `turns` scored turns each (a
    longer dialogue alone)."""
    chunks: list[tuple[int, list[dict[str, Any]]]] = []
    start, current, count = 0, [], 0
    for i, (r, n) in enumerate(zip(requests, sizes)):
        if current and count + n > turns:
            chunks.append((start, current))
            start, current, count = i, [], 0
        current.append(r)
        count += n
    if current:
        chunks.append((start, current))
    return chunks


async def score_perplexity(client: AsyncDialscoreClient, model: str,
                           dialogues: Sequence[DialogueIn], *, speaker: str | int | None = None,
                           chunk_turns: int = 256) -> Perplexity:
    """Score `dialogues` under `model` with POST /v1/nll/dialogues (see the module docstring);
    every turn, or with `speaker` only that speaker's turns (dialogues with turn objects).
    Errors are the client's; a dialogue error's param names the dialogue's index in
    `dialogues` (``dialogues[7].turns[2]``)."""
    if chunk_turns < 1:
        raise ValueError("chunk_turns must be at least 1")
    if speaker is not None:
        plain = [d.id for d in dialogues if d.speakers is None]
        if plain:
            raise ValueError(f"a speaker was chosen but dialogue(s) {plain[:5]} have no speakers "
                             "(turns as plain strings)")
    where = [i for i, d in enumerate(dialogues) if _scored(d, speaker)]  # kept -> input index
    kept = [dialogues[i] for i in where]
    skipped = [d.id for d in dialogues if not _scored(d, speaker)]
    limits = await client.limits()
    requests = [_request(d, speaker) for d in kept]
    chunks = _plan(requests, [_scored(d, speaker) for d in kept],
                   cap(chunk_turns, limits.max_items if limits else None))
    landed: ChunkResults[NLLDialogueResult] = ChunkResults(len(requests))

    async def send(part: list[dict[str, Any]]) -> list[NLLDialogueResult]:
        return (await client.score_dialogues(model, part)).results

    try:
        await arun_chunks(lambda offset, chunk: asend_halving(send, chunk, "dialogues", offset),
                          chunks, client.max_concurrency, landed.land)
    except APIStatusError as exc:
        if exc.param:  # dialogues[j] of the scored ones -> the j-th kept dialogue's input index
            exc.param = _DIALOGUE.sub(lambda m: f"dialogues[{where[int(m.group(1))]}]", exc.param)
        raise
    return Perplexity(model, [
        DialoguePerplexity(d.id, r.nll, r.num_tokens, tuple(
            TurnPerplexity(t.turn, t.nll, t.num_tokens, t.truncated) for t in r.turns))
        for d, r in zip(kept, landed.results())], skipped)
