"""What an NLL request's context is, for context-affinity routing: the head of its context that
makes its key (:func:`context_head`), the router of the NLL deployments that uses it
(:class:`NLLAffinityRouter`), and the deployment options that install that router
(:func:`routing_options`). How a key picks a replica is the scheduling layer's
(:mod:`dialscore_server.scheduling.context_affinity`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dialscore_server.contract.options import ServingOptions
from dialscore_server.nll.completions.serving import CompletionCall
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.scheduling.context_affinity import ContextAffinityRouter, router_config

__all__ = ["HEAD_CHARS", "HEAD_TOKEN_IDS", "TURN_SEPARATOR", "NLLAffinityRouter", "context_head",
           "routing_options"]

#: Characters of a context's head that make its key. Long enough to tell sessions apart (about 50
#: to 60 tokens of text: more than a shared greeting or a one-line instruction), short enough that
#: a session's context reaches it within a turn or two: until then its key changes as it grows, but
#: a context that short costs little to recompute, so the cache has little to lose there.
HEAD_CHARS = 256
#: Token ids of a token-id prompt's head that make its key: about :data:`HEAD_CHARS` characters.
HEAD_TOKEN_IDS = 64
#: Separates a context's knowledge sentence and turns in the text whose head is hashed (turns
#: rarely contain it, so ``("a b",)`` and ``("a", "b")`` get different keys).
TURN_SEPARATOR = "\n"


def context_head(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """The head of the context of an NLL deployment call with positional `args` and keyword
    `kwargs`, or None where it has no context.

    ``score(items, ...)``: the first item's knowledge sentence and turns, in that order, joined
    by :data:`TURN_SEPARATOR`, or its raw `source`; ``complete(call, ...)``: the call's first
    prompt (token ids written as ``"ids:1,2,..."``, at most :data:`HEAD_TOKEN_IDS` of them). The
    result is cut to :data:`HEAD_CHARS` characters. The target is never part of it: requests that
    score different continuations of one context share the head. A call to another method
    (``card``, ``tokenizer``), an empty item list, an item with no context, knowledge or source,
    or an empty prompt: None.
    """
    first = args[0] if args else (kwargs.get("items") or kwargs.get("call"))
    text = ""
    if isinstance(first, CompletionCall):
        prompt = first.prompts[0] if first.prompts else ""
        if isinstance(prompt, str):
            text = prompt
        elif prompt:
            text = "ids:" + ",".join(str(i) for i in prompt[:HEAD_TOKEN_IDS])
    elif isinstance(first, Sequence) and first and isinstance(first[0], NLLItem):
        item = first[0]
        if item.source is not None:
            text = item.source
        else:
            parts = ([item.knowledge] if item.knowledge else []) + list(item.context or ())
            text = TURN_SEPARATOR.join(parts)
    return text[:HEAD_CHARS] or None


class NLLAffinityRouter(ContextAffinityRouter):
    """The context-affinity router of the NLL deployments: a request's key is its
    :func:`context_head`."""

    def context_head(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        return context_head(args, kwargs)


def routing_options(opts: ServingOptions) -> dict[str, Any]:
    """Serve deployment options that route an NLL deployment's requests: :class:`NLLAffinityRouter`
    where `opts.affinity_routing` is on, else none (Serve's default router)."""
    if not opts.affinity_routing:
        return {}
    return {"request_router_config": router_config(NLLAffinityRouter, opts.affinity_max_owner_queue)}
