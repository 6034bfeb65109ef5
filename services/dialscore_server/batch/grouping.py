"""The order a job scores its requests in: by model, then by shared context, so that requests
on one model that share a context are neighbours, land in the same block of one worker and are
merged into the same engine calls, where the engine computes a shared prefix once (a CEDAR sweep's
valid and corrupted explanations of one dialogue share everything but the explanation).

Output lines are written as blocks finish, so their order is neither the input's nor this one;
each carries its ``custom_id`` and input ``line`` (vLLM's ``run_batch`` keeps the input order:
it holds every result until the end, which a resumable job cannot).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dialscore_server.batch.lines import Request


def shared_context(url: str, body: Any) -> str:
    """What requests of `url` share when they share work: /v1/nll the first item's context and
    knowledge, /v1/completions the first prompt, /v1/contradiction the first dialogue's turns,
    /v1/rerank the context; "" when the body has none of these (it is answered all the same)."""
    if not isinstance(body, dict):
        return ""
    if url == "/v1/nll":
        items = body.get("items")
        first = items[0] if isinstance(items, list) and items else None
        key: Any = ([first.get("context"), first.get("knowledge")]
                    if isinstance(first, dict) else None)
    elif url == "/v1/completions":
        prompt = body.get("prompt")
        key = prompt[0] if isinstance(prompt, list) and prompt else prompt
    elif url == "/v1/contradiction":
        dialogues = body.get("dialogues")
        key = dialogues[0] if isinstance(dialogues, list) and dialogues else body.get("turns")
    else:
        key = body.get("context")
    return json.dumps(key, sort_keys=True, ensure_ascii=False, default=str)


def group_key(request: Request) -> tuple[str, str, str]:
    """(model, route, shared context) of a request."""
    model = request.body.get("model") if isinstance(request.body, dict) else None
    return (str(model), request.url, shared_context(request.url, request.body))


def in_scoring_order(requests: Sequence[Request]) -> list[Request]:
    """`requests` grouped by :func:`group_key` (groups in the order of their first request, the
    input order kept within a group)."""
    keys = [group_key(r) for r in requests]
    first: dict[tuple[str, str, str], int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    order = sorted(range(len(requests)), key=lambda i: (first[keys[i]], requests[i].line))
    return [requests[i] for i in order]
