"""The rerank deployment: composes the contradiction and NLL deployments through their handles.

It holds no model. For each request it sends one detection job (all candidates' pairs, batched
with other requests' inside the detector) and, when an NLL model is named, one NLL request, and
combines them with :class:`~dialscore_server.rerank.engine.reranker.Reranker`.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from dialscore_server.contradiction.engine.pairing import DetectionJob, DetectionResult, Turn
from dialscore_server.contract.deadline import answer, from_ray
from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.reply import Reply
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.rerank.engine.reranker import Reranker, RerankOutput


@serve.deployment(name="rerank", max_ongoing_requests=128, ray_actor_options={"num_cpus": 0.1})
class RerankDeployment:
    """Holds no model; composes the detector and NLL deployments. Method: `rerank`."""

    def __init__(self, detectors: dict[str, DeploymentHandle], nll: dict[str, DeploymentHandle],
                 request_timeout_s: float = 60.0, queue_timeout_s: float | None = None):
        self.detectors = detectors
        self.nll = nll
        # The detector/NLL calls get the gateway's deadlines: a dead detector is a prompt 503.
        self.timeout = request_timeout_s
        self.queue_timeout = queue_timeout_s

    async def rerank(self, context: list[Turn], candidates: list[str], kwargs: dict[str, Any],
                     model: str, nll_model: str | None = None) -> Reply[RerankOutput]:
        """Rerank `candidates`; `model` and `nll_model` were checked by the gateway. The reply's
        times add up the detector's and the NLL call's (see contract.timing_headers)."""
        detector = self.detectors[model]
        times = Reply()  # the detector's and the NLL call's times, added up

        def add_times(reply: Reply) -> None:
            times.compute_s += reply.compute_s
            times.queue_s += reply.queue_s
            times.tokenize_s += reply.tokenize_s

        async def detect(job: DetectionJob) -> list[DetectionResult]:
            reply = await answer(detector.detect.remote(job), self.timeout, self.queue_timeout)
            add_times(reply)
            return reply.unwrap()

        async def nll(context_texts: list[str], cands: list[str]) -> list[float]:
            items = [NLLItem(target=c, context=tuple(context_texts)) for c in cands]
            reply = await answer(self.nll[nll_model].score.remote(items), self.timeout, self.queue_timeout)
            add_times(reply)
            if reply.error is not None:
                # The NLL engine names `items[k].target`; for the caller that is `candidates[k]`.
                err = reply.error
                err.param = (err.param or "").replace("items[", "candidates[").replace("].target", "]") \
                    or "candidates"
                raise err
            return [r.nll for r in reply.unwrap().results]

        try:
            out = await Reranker(detect).arerank(context, candidates, nll_fn=nll if nll_model else None,
                                                 **kwargs)
        except ServiceError as exc:
            # Bad input (InputError), an upstream's own error, or a detector/NLL replica that did
            # not accept the call in time (503): carried back as it is.
            return Reply(error=exc)
        except Exception as exc:  # noqa: BLE001 - deadlines and Ray errors of the detector/NLL handles
            # Ray's errors map as when the gateway calls a model itself: a full detector queue is
            # a 503 and a dead detector replica a 424 (not "the rerank deployment failed").
            return Reply(error=from_ray(exc))
        return Reply(value=out, compute_s=times.compute_s, queue_s=times.queue_s,
                     tokenize_s=times.tokenize_s)
