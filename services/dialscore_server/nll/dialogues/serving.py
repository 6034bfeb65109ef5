"""POST /v1/nll/dialogues on the gateway: a request's scored turns become /v1/nll items
(:meth:`~dialscore_server.nll.dialogues.protocol.NLLDialoguesRequest.to_items`), scored by the same
``NLLService.score`` call as a /v1/nll request (so the replica merges and chunks them as usual,
and an engine that shares a dialogue's prefix between its turns computes it once); the results are
put back per dialogue here, and an error about an item is re-rooted to the dialogue field it
comes from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dialscore_server.contract.errors import ServiceError
from dialscore_server.nll.dialogues.protocol import NLLDialogueOut, NLLTurnOut
from dialscore_server.nll.serving import Scored

_ITEM = re.compile(r"^items\[(\d+)\](?:\.(target|knowledge|context)(?:\[(\d+)\])?)?(.*)$")


def item_param(param: str | None, chosen: Sequence[Sequence[int]]) -> str | None:
    """The field of the dialogues request that the item field `param` (``items[j].target``,
    ``items[j].context[m]``, ``items[j].knowledge``, ``items[j]``) comes from, where `chosen`
    holds each dialogue's scored turn indices in the order their items were made: the target of
    the item of dialogue i's turn k is ``dialogues[i].turns[k]``, its context turn m is
    ``dialogues[i].turns[m]``. Any other param is returned as it is."""
    match = _ITEM.match(param or "")
    if match is None:
        return param
    j = int(match.group(1))
    for i, scored in enumerate(chosen):
        if j < len(scored):
            break
        j -= len(scored)
    else:
        return param
    field, m, rest = match.group(2), match.group(3), match.group(4)
    if field == "target":
        return f"dialogues[{i}].turns[{scored[j]}]{rest}"
    if field == "context" and m is not None:
        return f"dialogues[{i}].turns[{m}]{rest}"
    if field == "knowledge":
        return f"dialogues[{i}].knowledge{rest}"
    return f"dialogues[{i}].turns[{scored[j]}]"  # the item as a whole: its turn


def reroot(error: ServiceError, chosen: Sequence[Sequence[int]]) -> ServiceError:
    """`error` with its param naming the dialogue field (see :func:`item_param`)."""
    error.param = item_param(error.param, chosen)
    return error


def regroup(scored: Scored, chosen: Sequence[Sequence[int]], return_tokens: bool
            ) -> list[NLLDialogueOut]:
    """The item results of :meth:`NLLDialoguesRequest.to_items`'s items (in that order) as one
    :class:`NLLDialogueOut` per dialogue: each scored turn's result, and the dialogue's
    token-weighted mean NLL, ``sum(nll_t * num_tokens_t) / sum(num_tokens_t)`` over its scored
    turns (every scored turn has at least one token)."""
    out: list[NLLDialogueOut] = []
    pos = 0
    for turns in chosen:
        rows = []
        for k in turns:
            r = scored.results[pos]
            rows.append(NLLTurnOut(
                turn=k, nll=r.nll, num_tokens=r.num_tokens, truncated=r.truncated,
                token_nlls=r.token_nlls if return_tokens else None,
                tokens=scored.tokens[pos] if return_tokens and scored.tokens else None))
            pos += 1
        n = sum(r.num_tokens for r in rows)
        total = sum(r.nll * r.num_tokens for r in rows)
        out.append(NLLDialogueOut(nll=total / n if n else 0.0, num_tokens=n, turns=rows))
    return out
