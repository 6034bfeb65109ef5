"""The rerank deployment's reply times add up its detector and NLL calls (what the rerank routes'
timing headers report), run in-process over handles that answer with known times (no Ray)."""

from __future__ import annotations

import asyncio

from fake_api import LocalHandle

from dialscore_server.contradiction.engine.pairing import DetectionJob, DetectionResult, Turn
from dialscore_server.contract.reply import Reply
from dialscore_server.nll.engine.engine import NLLResult
from dialscore_server.nll.serving import Scored
from dialscore_server.rerank.deployment import RerankDeployment


class TimedDetector:
    def detect(self, job: DetectionJob) -> Reply[list[DetectionResult]]:
        return Reply(value=[DetectionResult(False, 0.25, (), 1) for _ in job.dialogues],
                     compute_s=0.25, queue_s=0.125)


class TimedNLL:
    def score(self, items) -> Reply[Scored]:
        return Reply(value=Scored([NLLResult(2.0, [2.0], [7], 1, 3, False) for _ in items]),
                     compute_s=0.5, queue_s=0.0, tokenize_s=0.0625)


def test_rerank_reply_times_add_up_the_detector_and_nll_calls():
    deployment = RerankDeployment.func_or_class({"nli": LocalHandle(TimedDetector())},
                                                {"gpt": LocalHandle(TimedNLL())})
    context = [Turn("A", "I love dogs.", 0), Turn("B", "Do you?", 1)]

    async def go(nll_model):
        return await deployment.rerank(context, ["Yes.", "No."], {"speaker": "A"}, "nli", nll_model)

    alone = asyncio.run(go(None))
    assert alone.error is None
    assert (alone.compute_s, alone.queue_s, alone.tokenize_s) == (0.25, 0.125, 0.0)
    both = asyncio.run(go("gpt"))
    assert both.error is None and [r.nll for r in both.value.results] == [2.0, 2.0]
    assert (both.compute_s, both.queue_s, both.tokenize_s) == (0.75, 0.125, 0.0625)
