"""The JSON bodies of the client's requests, built from what a caller may pass: the typed
values of :mod:`dialscore.types` (``NLLItem``, ``Turn``, ``NLLDialogue``) or plain mappings of
the same shape, which are sent as they are (the service validates them and names a bad field).

Nothing here checks a field's value: a body is the caller's input in the service's shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dialscore.types import NLLDialogue, NLLItem, Turn

__all__ = ["DialogueLike", "ItemLike", "TurnLike", "contradiction_body", "dialogue_json",
           "dialogues_body", "drop_none", "item_json", "nll_body", "nll_dialogue_json",
           "rerank_body", "turn_json"]

#: An NLL item: an :class:`~dialscore.types.NLLItem` or a mapping of the same shape.
ItemLike = NLLItem | Mapping[str, Any]
#: A turn: a :class:`~dialscore.types.Turn` or a mapping of the same shape.
TurnLike = Turn | Mapping[str, Any]
#: A dialogue for ``score_dialogues``: an :class:`~dialscore.types.NLLDialogue`, a mapping of
#: the same shape, or a plain sequence of turn texts (every turn scored).
DialogueLike = NLLDialogue | Mapping[str, Any] | Sequence[str]


def item_json(item: ItemLike) -> dict[str, Any]:
    """An ``items[i]`` of ``POST /v1/nll``; a TypeError for anything but an item or a mapping."""
    if isinstance(item, NLLItem):
        return item.to_json()
    if isinstance(item, Mapping):
        return dict(item)
    raise TypeError(f"an NLL item must be an NLLItem or a mapping, not {type(item).__name__}")


def turn_json(turn: TurnLike) -> dict[str, Any]:
    """A turn of a context or a dialogue; a TypeError for anything but a turn or a mapping."""
    if isinstance(turn, Turn):
        return turn.to_json()
    if isinstance(turn, Mapping):
        return dict(turn)
    raise TypeError(f"a turn must be a Turn or a mapping, not {type(turn).__name__}")


def dialogue_json(dialogue: Mapping[str, Any] | Sequence[TurnLike]) -> dict[str, Any]:
    """A ``dialogues[i]`` of ``POST /v1/contradiction``: a mapping (its ``turns`` shaped as
    turns, its other keys as they are) or a sequence of turns."""
    if isinstance(dialogue, Mapping):
        out = dict(dialogue)
        out["turns"] = [turn_json(t) for t in dialogue.get("turns", [])]
        return out
    return {"turns": [turn_json(t) for t in dialogue]}


def nll_dialogue_json(dialogue: DialogueLike) -> dict[str, Any]:
    """A ``dialogues[i]`` of ``POST /v1/nll/dialogues``; a sequence of texts is its ``turns``,
    one string a TypeError (it is not a list of turns)."""
    if isinstance(dialogue, NLLDialogue):
        return dialogue.to_json()
    if isinstance(dialogue, Mapping):
        return dict(dialogue)
    if isinstance(dialogue, str):
        raise TypeError("a dialogue is a list of turns, not one string")
    if isinstance(dialogue, Sequence):
        return {"turns": list(dialogue)}
    raise TypeError(f"a dialogue must be an NLLDialogue, a mapping or a list of turn texts, not "
                    f"{type(dialogue).__name__}")


def drop_none(body: dict[str, Any]) -> dict[str, Any]:
    """`body` without its None values: a field left unset takes the service's default."""
    return {k: v for k, v in body.items() if v is not None}


def nll_body(model: str, items: Sequence[ItemLike], return_tokens: bool,
             extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
    """``POST /v1/nll``; `extra_body`'s keys are added last, over the others."""
    body = {"model": model, "items": [item_json(i) for i in items], "return_tokens": return_tokens}
    body.update(extra_body or {})
    return body


def dialogues_body(model: str, dialogues: Sequence[DialogueLike], return_tokens: bool,
                   extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
    """``POST /v1/nll/dialogues``; `extra_body`'s keys are added last, over the others."""
    body = {"model": model, "dialogues": [nll_dialogue_json(d) for d in dialogues],
            "return_tokens": return_tokens}
    body.update(extra_body or {})
    return body


def contradiction_body(dialogues: Sequence[Mapping[str, Any] | Sequence[TurnLike]],
                       model: str | None, mode: str | None, threshold: float | None,
                       evidence_threshold: float | None,
                       extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
    """``POST /v1/contradiction``, its None settings left out; `extra_body`'s keys are added
    last, over the others."""
    body = drop_none({"model": model, "mode": mode, "threshold": threshold,
                      "evidence_threshold": evidence_threshold})
    body["dialogues"] = [dialogue_json(d) for d in dialogues]
    body.update(extra_body or {})
    return body


def rerank_body(context: Sequence[TurnLike], candidates: Sequence[str],
                options: Mapping[str, Any], extra_body: Mapping[str, Any] | None
                ) -> dict[str, Any]:
    """``POST /v1/rerank``: `options` (its None values left out, ``weights`` as a dict) beside
    the context and candidates; `extra_body`'s keys are added last, over the others."""
    body = {"context": [turn_json(t) for t in context], "candidates": list(candidates)}
    weights = options.get("weights")
    body.update(drop_none({**options, "weights": dict(weights) if weights is not None else None}))
    body.update(extra_body or {})
    return body
