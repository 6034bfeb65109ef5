"""The plan of a CEDAR probe run: every pair to compare, and the distinct NLL items they need.

For a dialogue with history H, response R and a valid explanation E (text
``"antecedent connective consequent"``), each corruption E' gives one pair per model and setting:

* **inference**: ``NLL(R | E, H)`` vs ``NLL(R | E', H)``; the item is
  ``{"context": H, "knowledge": E, "target": R}``: the server places the explanation where the
  model's dialogue format says (``knowledge_position``, default before the history).
* **attribution**: ``NLL(E | H, R, why)`` vs ``NLL(E' | H, R, why)``; the item is
  ``{"context": H + [R, why_turn], "target": E}``, ``why_turn`` taken from the model's format in
  ``GET /v1/models`` (default ``"Why?"`` when the server does not report a format).

Every pair's two items are built once per model and setting; identical items (same model,
setting, context, knowledge and target; the valid item is shared by a valid explanation's six
corruptions) are kept once, under a stable id (:func:`item_id`): a SHA-256 of the model's
provenance (:func:`model_fingerprint`: name, source, revision, family, max_length, dtype,
dialogue format), the setting, the context, the knowledge and the target. The id is what a
resumed run (:mod:`dialscore.probes.run`) looks its scores up by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dialscore.model_card import ModelCard
from dialscore.probes.corruptions import (
    ALL_TYPES, CORRUPTIONS, CorruptedPair, CorruptionSet, corrupt_dialogues,
)
from dialscore.probes.data import Dialogue
from dialscore.reporting.resume_store import content_key

__all__ = ["SETTINGS", "PlannedPair", "ProbeItem", "ProbePlan", "format_choices", "item_id",
           "model_fingerprint", "plan_probes"]

SETTINGS: tuple[str, ...] = ("inference", "attribution")
DEFAULT_WHY_TURN = "Why?"
DEFAULT_PLACEMENT = "before_history"


@dataclass(frozen=True)
class ProbeItem:
    """One NLL request item of one model in one setting, with its stable id."""

    id: str
    model: str
    setting: str
    context: tuple[str, ...]
    knowledge: str | None
    target: str

    def payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"context": list(self.context), "target": self.target}
        if self.knowledge is not None:
            out["knowledge"] = self.knowledge
        return out


def format_choices(info: ModelCard) -> dict[str, Any]:
    """Where the explanation goes and what the why turn says, for a model (the report states them)."""
    fmt = info.format
    return {"explanation_placement": fmt.knowledge_position if fmt else DEFAULT_PLACEMENT,
            "why_turn": fmt.why_turn if fmt else DEFAULT_WHY_TURN,
            "reported_by_server": fmt is not None}


def model_fingerprint(info: ModelCard) -> dict[str, Any]:
    """What decides a model's NLLs, as the server reports it (device left out on purpose)."""
    return {"name": info.name, "source": info.source, "revision": info.revision,
            "family": info.family, "max_length": info.max_length, "dtype": info.dtype,
            "format": info.format.model_dump() if info.format is not None else None}


def item_id(fingerprint: dict[str, Any], setting: str, context: Sequence[str],
            knowledge: str | None, target: str) -> str:
    return content_key([fingerprint, setting, list(context), knowledge, target])[:32]


@dataclass
class PlannedPair:
    model: str
    setting: str
    pair: CorruptedPair
    valid_id: str
    corrupted_id: str

    @property
    def pair_id(self) -> str:
        return f"{self.model}|{self.setting}|{self.pair.pair_key}"


@dataclass
class ProbePlan:
    """Everything to score: the pairs, and the distinct items they need (by id, in first-use order)."""

    pairs: list[PlannedPair] = field(default_factory=list)
    items: dict[str, ProbeItem] = field(default_factory=dict)
    corruptions: CorruptionSet = field(default_factory=CorruptionSet)
    n_item_refs: int = 0

    def items_of(self, model: str) -> list[ProbeItem]:
        return [i for i in self.items.values() if i.model == model]


def plan_probes(dialogues: Sequence[Dialogue], models: Sequence[ModelCard],
                settings: Sequence[str] = SETTINGS, seed: int = 0,
                corruptions: Sequence[str] = CORRUPTIONS, sampling: str = ALL_TYPES) -> ProbePlan:
    """Build every pair and its two items, deduplicating identical items. The corrupted pairs
    (:func:`~dialscore.probes.corruptions.corrupt_dialogues` under `sampling`) are made once
    and probed with every model and setting, so all models score the same pairs."""
    bad = [s for s in settings if s not in SETTINGS]
    if bad:
        raise ValueError(f"unknown setting(s) {bad}; expected some of {', '.join(SETTINGS)}")
    by_id = {d.id: d for d in dialogues}
    plan = ProbePlan(corruptions=corrupt_dialogues(dialogues, seed, corruptions, sampling))

    for info in models:
        fp = model_fingerprint(info)
        why = format_choices(info)["why_turn"]
        for setting in settings:
            def item(context: tuple[str, ...], knowledge: str | None, target: str) -> str:
                iid = item_id(fp, setting, context, knowledge, target)
                plan.items.setdefault(iid, ProbeItem(iid, info.name, setting, context, knowledge, target))
                plan.n_item_refs += 1
                return iid

            for p in plan.corruptions.pairs:
                d = by_id[p.dialogue_id]
                history = tuple(d.history)
                if setting == "inference":
                    valid = item(history, p.valid_text, d.response)
                    corrupted = item(history, p.corrupted_text, d.response)
                else:
                    context = history + (d.response, why)
                    valid = item(context, None, p.valid_text)
                    corrupted = item(context, None, p.corrupted_text)
                plan.pairs.append(PlannedPair(info.name, setting, p, valid, corrupted))
    return plan
