"""POST /v1/nll/dialogues: request and response schemas (the descriptions become the OpenAPI docs).

A dialogue's scored turn k is exactly the /v1/nll item ``{"context": turns[:k], "knowledge":
knowledge, "target": turns[k]}`` (:meth:`NLLDialoguesRequest.to_items`): the same formatting,
truncation and numbers, by construction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from pydantic import Field

from dialscore_server.contract.errors import InputError
from dialscore_server.contract.limits import (
    Limits, check_ids, check_texts, too_costly, too_many,
)
from dialscore_server.contract.priority import PriorityField
from dialscore_server.contract.schema import APIModel, Text, limited
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.protocol import NLLResultOut, Usage

SpeakerIn = Annotated[int | str, Field(
    description="Who said the turn: any string or integer (1 and \"1\" are different speakers).")]


class NLLDialogueIn(APIModel):
    """One dialogue: its turns' texts in order, an optional knowledge sentence, and which turns to
    score (default: every turn). Each scored turn is conditioned on all the turns before it."""

    turns: Annotated[list[Text], Field(min_length=1), limited("max_turns")] = Field(
        description="The turns' texts, oldest first (at least one). Turn k is scored given turns "
        "0..k-1, formatted with the model's dialogue format; turn 0 is scored given no history "
        "(the bos token alone for decoder-only models). A scored turn must not be empty.")
    knowledge: Text | None = Field(
        None, description="A knowledge sentence for every scored turn, placed where the model's "
        "format says (as /v1/nll's `knowledge`); kept when the history is truncated.")
    speakers: list[SpeakerIn] | None = Field(
        None, description="Who said each turn, one per turn (same length as `turns`). Used only "
        "to select turns with `speaker`; never sent to the model.")
    speaker: SpeakerIn | None = Field(
        None, description="Score only the turns whose `speakers` entry equals this (needs "
        "`speakers`; at least one turn must match). Not with `score_turns`.")
    score_turns: list[int] | None = Field(
        None, min_length=1, description="Score only these turns: distinct 0-based indices into "
        "`turns` (results come in turn order whatever the order given). Not with `speaker`.")

    def check(self, where: str) -> list[int]:
        """The scored turns' indices in turn order; an InputError naming the field (under
        `where`, e.g. ``dialogues[2]``) for a selection that names no turn or a bad one, or for
        an empty scored turn (as /v1/nll refuses an empty target)."""
        chosen = self._chosen(where)
        for k in chosen:
            if not self.turns[k]:
                raise InputError("a scored turn must not be empty (as a /v1/nll target); a turn "
                                 "that is only context may be", f"{where}.turns[{k}]")
        return chosen

    def _chosen(self, where: str) -> list[int]:
        n = len(self.turns)
        if self.speakers is not None and len(self.speakers) != n:
            raise InputError(f"speakers has {len(self.speakers)} entries for {n} turns: give one "
                             "speaker per turn", f"{where}.speakers")
        if self.speaker is not None and self.score_turns is not None:
            raise InputError("give either `speaker` or `score_turns`, not both",
                             f"{where}.score_turns")
        if self.speaker is not None:
            if self.speakers is None:
                raise InputError("`speaker` selects turns by `speakers`: give `speakers` (one per "
                                 "turn)", f"{where}.speaker")
            chosen = [k for k, s in enumerate(self.speakers) if _same_speaker(s, self.speaker)]
            if not chosen:
                raise InputError(f"no turn is said by speaker {self.speaker!r}", f"{where}.speaker")
            return chosen
        if self.score_turns is not None:
            seen: set[int] = set()
            for j, k in enumerate(self.score_turns):
                if not 0 <= k < n:
                    raise InputError(f"turn index {k} is outside the dialogue's {n} turns "
                                     f"(0..{n - 1})", f"{where}.score_turns[{j}]")
                if k in seen:
                    raise InputError(f"turn {k} is listed twice", f"{where}.score_turns[{j}]")
                seen.add(k)
            return sorted(seen)
        return list(range(n))

    def texts(self) -> Iterator[tuple[str, str | None]]:
        """(field path relative to the dialogue, text) pairs, for the character limit."""
        yield from ((f"turns[{k}]", t) for k, t in enumerate(self.turns))
        yield "knowledge", self.knowledge


def _same_speaker(a: int | str, b: int | str) -> bool:
    return type(a) is type(b) and a == b  # 1 and "1" differ (and True is no speaker)


class NLLDialoguesRequest(APIModel):
    model: str = Field(description="A dialogue model from GET /v1/models.")
    priority: int | None = PriorityField
    dialogues: Annotated[list[NLLDialogueIn], Field(min_length=1), limited("max_items")] = Field(
        description="The dialogues; results come back in the same order. Every scored turn "
        "counts as one item against `max_items`.")
    return_tokens: bool = Field(False, description="Also return per-token NLLs and the target "
                                "tokens of every scored turn.")

    def selections(self, limits: Limits) -> list[list[int]]:
        """Check the request against `limits` and its selections, in this order: turns per
        dialogue (413 ``dialogues[i].turns``), characters per text (413
        ``dialogues[i].turns[k]`` / ``.knowledge``), speaker lengths (413 ``max_id_chars``), each
        selection (422 naming ``speakers``, ``speaker`` or ``score_turns[j]``), the scored turns
        in all (413 ``dialogues``, ``max_items``) and their cost in tokens (413 ``dialogues``,
        ``max_request_tokens``). Returns each dialogue's scored turn indices, in turn order."""
        longest = limits.max_text_chars
        for i, d in enumerate(self.dialogues):
            if len(d.turns) > limits.max_turns:
                raise too_many(f"dialogues[{i}].turns", len(d.turns), limits.max_turns, "turns")
            if any(len(t) > longest for t in d.turns) or len(d.knowledge or "") > longest:
                check_texts(((f"dialogues[{i}].{name}", t) for name, t in d.texts()), limits)
            check_ids(((f"dialogues[{i}].speakers[{k}]", s) for k, s in enumerate(d.speakers or ())),
                      limits)
            check_ids([(f"dialogues[{i}].speaker", d.speaker)], limits)
        chosen = [d.check(f"dialogues[{i}]") for i, d in enumerate(self.dialogues)]
        items = sum(len(c) for c in chosen)
        if items > limits.max_items:
            raise too_many("dialogues", items, limits.max_items, "scored turns (items)")
        tokens = self.tokens(chosen, limits)
        if tokens > limits.max_request_tokens:
            raise too_costly("dialogues", tokens, limits.max_request_tokens, "NLL tokens")
        return chosen

    def tokens(self, chosen: list[list[int]], limits: Limits) -> int:
        """Upper bound of the token positions this request costs, known before tokenizing: the
        sum over the scored turns of :func:`~dialscore_server.contract.limits.item_token_bound`
        of the /v1/nll item each becomes (target, the turns before it, knowledge), as if sent to
        /v1/nll. A turn's shared history is counted again for every scored turn: the bound is
        of the per-item work, whatever the engine shares."""
        total = 0
        for d, scored in zip(self.dialogues, chosen):
            sizes = [len(t.encode("utf-8", "surrogatepass")) + 1 for t in d.turns]
            pinned = len(d.knowledge.encode("utf-8", "surrogatepass")) + 1 if d.knowledge else 0
            before = [0]
            for s in sizes:
                before.append(before[-1] + s)
            total += sum(min(sizes[k] + before[k] + pinned, limits.max_item_tokens)
                         for k in scored)
        return total

    def to_items(self, chosen: list[list[int]]) -> list[NLLItem]:
        """Every scored turn as its /v1/nll item, dialogue by dialogue, turns in order: turn k is
        ``NLLItem(context=turns[:k], knowledge=knowledge, target=turns[k])``."""
        return [NLLItem(target=d.turns[k], context=tuple(d.turns[:k]), knowledge=d.knowledge)
                for d, scored in zip(self.dialogues, chosen) for k in scored]


class NLLTurnOut(NLLResultOut):
    """One scored turn: the /v1/nll result of its item, and which turn it is."""

    turn: int = Field(description="The turn's 0-based index in the dialogue's `turns`.")


class NLLDialogueOut(APIModel):
    nll: float = Field(description="Token-weighted mean NLL over the scored turns: the sum of "
                       "their token NLLs over the sum of their `num_tokens` (nats per token), so "
                       "exp(nll) is the dialogue's per-token perplexity over those turns.")
    num_tokens: int = Field(description="Scored tokens over the scored turns.")
    turns: list[NLLTurnOut] = Field(description="The scored turns, in turn order.")


class NLLDialoguesResponse(APIModel):
    model: str
    source: str = Field(description="The checkpoint: hub id or path.")
    revision: str | None = Field(description="Resolved revision, when known.")
    stand_in: bool = Field(description="True when the model is a random-weight stand-in.")
    append_eos: bool = Field(description="Whether eos was appended to (and scored with) each "
                             "turn.")
    results: list[NLLDialogueOut] = Field(description="One per dialogue, in request order.")
    usage: Usage
