"""The rerank serving's reply times add up its classifier and NLL calls (what the rerank routes'
timing headers report), run in-process over services that answer with known times (no Ray)."""

from __future__ import annotations

import asyncio

from dialscore_server.contract.reply import Reply
from dialscore_server.contradiction.engine.pairing import DetectionJob, DetectionResult, Turn
from dialscore_server.nll.engine.engine import NLLResult
from dialscore_server.nll.serving import Scored
from dialscore_server.rerank.engine.reranker import RerankOptions
from dialscore_server.rerank.serving import RerankCall, RerankServing


class TimedDetector:
    async def detect(self, job: DetectionJob, lane: str = "interactive"
                     ) -> Reply[list[DetectionResult]]:
        return Reply(value=[DetectionResult(False, 0.25, (), 1) for _ in job.dialogues],
                     compute_s=0.25, queue_s=0.125)


class TimedNLL:
    async def score(self, items, return_tokens: bool = False, lane: str = "interactive"
                    ) -> Reply[Scored]:
        return Reply(value=Scored([NLLResult(2.0, [2.0], [7], 1, 3, False) for _ in items]),
                     compute_s=0.5, queue_s=0.0, tokenize_s=0.0625)


def test_rerank_reply_times_add_up_the_detector_and_nll_calls():
    serving = RerankServing({"nli": TimedDetector()}, {"gpt": TimedNLL()})
    context = [Turn("A", "I love dogs.", 0), Turn("B", "Do you?", 1)]

    async def go(nll_model):
        return await serving.rerank(RerankCall(context, ["Yes.", "No."], RerankOptions(speaker="A"),
                                               "nli", nll_model))

    alone = asyncio.run(go(None))
    assert alone.error is None
    assert (alone.compute_s, alone.queue_s, alone.tokenize_s) == (0.25, 0.125, 0.0)
    both = asyncio.run(go("gpt"))
    assert both.error is None and [r.nll for r in both.value.results] == [2.0, 2.0]
    assert (both.compute_s, both.queue_s, both.tokenize_s) == (0.75, 0.125, 0.0625)
