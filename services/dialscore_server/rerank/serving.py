"""The rerank endpoint's work, without Ray: one rerank composes a classifier and, optionally, a
dialogue model, both reached as typed services (in-process servings, or typed Serve handles in the
rerank deployment).

For each request it sends one detection job (all candidates' pairs, batched with other requests'
inside the classifier's serving) and, when an NLL model is named, one NLL request, and combines
them with :class:`~dialscore_server.rerank.engine.reranker.Reranker`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from dialscore_server.contract.backend import Backend
from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.priority import Lane, served_lane
from dialscore_server.contract.reply import Reply
from dialscore_server.contradiction.engine.pairing import DetectionJob, DetectionResult, Turn
from dialscore_server.contradiction.serving import ClassifierService
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.serving import NLLService
from dialscore_server.rerank.engine.reranker import RerankOptions, RerankOutput, Reranker


@dataclass(frozen=True)
class RerankCall:
    """One rerank: `candidates` after `context`, with `options`, on the classifier `model` and,
    when named, the dialogue model `nll_model` (both already resolved), asking each for the
    priority `lane`."""

    context: list[Turn]
    candidates: list[str]
    options: RerankOptions
    model: str
    nll_model: str | None = None
    lane: Lane = "interactive"


class RerankService(Protocol):
    """The reranker as the rerank routes call it: in-process (:class:`RerankServing`) or over Ray
    Serve (:class:`~dialscore_server.rerank.deployment.RerankHandle`)."""

    async def rerank(self, call: RerankCall) -> Reply[RerankOutput]:
        """The candidates of `call`, best first (see
        :mod:`dialscore_server.rerank.engine.reranker`); bad input is the reply's InputError. The
        reply's times add up the classifier's and the NLL model's; its lane is ``bulk`` when
        either served it in bulk."""
        ...


class RerankBackend(Backend, Protocol):
    """The ingress as the rerank routes (POST /v1/rerank, /rerank, /v2/rerank) see it."""

    def reranker(self) -> RerankService:
        ...


class RerankServing:
    """Reranks over the classifiers and dialogue models it is given, by name."""

    def __init__(self, classifiers: Mapping[str, ClassifierService],
                 nll: Mapping[str, NLLService]):
        self.classifiers = classifiers
        self.nll = nll

    async def rerank(self, call: RerankCall) -> Reply[RerankOutput]:
        """See :meth:`RerankService.rerank`."""
        classifier = self.classifiers[call.model]
        times = Reply()  # the classifier's and the NLL model's times, added up

        def add_times(reply: Reply) -> None:
            times.compute_s += reply.compute_s
            times.queue_s += reply.queue_s
            times.tokenize_s += reply.tokenize_s
            times.lane = served_lane(times.lane, reply.lane)

        async def detect(job: DetectionJob) -> list[DetectionResult]:
            reply = await classifier.detect(job, call.lane)
            add_times(reply)
            return reply.unwrap()

        async def nll(context_texts: list[str], candidates: list[str]) -> list[float]:
            assert call.nll_model is not None
            items = [NLLItem(target=c, context=tuple(context_texts)) for c in candidates]
            reply = await self.nll[call.nll_model].score(items, lane=call.lane)
            add_times(reply)
            if reply.error is not None:
                # The NLL serving names `items[k].target`; for the caller that is `candidates[k]`.
                err = reply.error
                err.param = (err.param or "").replace("items[", "candidates[").replace("].target", "]") \
                    or "candidates"
                raise err
            return [r.nll for r in reply.unwrap().results]

        try:
            out = await Reranker(detect).arerank(call.context, call.candidates,
                                                 nll_fn=nll if call.nll_model else None,
                                                 **call.options.kwargs())
        except ServiceError as exc:
            # Bad input (InputError), or a classifier/NLL call that failed (timeout, overloaded,
            # model_error): carried back as it is.
            return Reply(error=exc, lane=times.lane)
        return Reply(value=out, compute_s=times.compute_s, queue_s=times.queue_s,
                     tokenize_s=times.tokenize_s, lane=times.lane)
