"""`train detector`: the stand-in RoBERTa fine-tuned on a generated persona-fact contradiction set
learns it (held-out accuracy far above the majority class), and the written checkpoint is then
served by the real app (registry config, real detector engine, gateway, HTTP client; no Ray) and
evaluated end to end with the client's DECODE runner."""

from __future__ import annotations

import asyncio
import json

import pytest

from dialscore.client import AsyncDialscoreClient
from dialscore.evals.decode import write_decode
from dialscore.evals.runners.decode import arun_decode
from dialscore_server.checkpoints.registry import stand_in_registry
from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.serving import ContradictionServing
from dialscore_server.contract.limits import Limits
from dialscore_server.gateway.app import create_app
from dialscore_server.directory import ModelDirectory
from dialscore_server.training.detector import ID2LABEL, TRAINING_MARKER, train_detector
from dialscore_server.training.examples import detector_examples
from dialscore_server.training.synthetic import contradiction_set
from fake_api import app_transport


def test_examples_follow_the_service_pairing():
    d = contradiction_set(2, seed=0)[0]  # a contradiction: turn 0 is the evidence
    pairs = detector_examples([d], "pairs")
    assert [(e.premise, e.contradiction) for e in pairs] == [(d.turns[0].text, True),
                                                             (d.turns[2].text, False)]
    (whole,) = detector_examples([d], "unstructured")
    assert whole.premise.splitlines()[0] == f"0: {d.turns[0].text}" and whole.contradiction
    with pytest.raises(ValueError, match="setting"):
        detector_examples([d], "both")


@pytest.mark.slow
def test_trained_stand_in_learns_and_is_served_end_to_end(stand_ins, tmp_path):
    train = detector_examples(contradiction_set(400, seed=1), "pairs")
    held = detector_examples(contradiction_set(200, seed=2), "pairs")
    majority = max(sum(e.contradiction for e in held), sum(not e.contradiction for e in held)) / len(held)
    assert majority == 0.75  # a fact and a filler turn per dialogue: 1 in 4 pairs contradicts
    out = tmp_path / "decode-standin"
    result = train_detector(stand_ins / "nli-contradiction-first", train, out, setting="pairs",
                            heldout=held, epochs=5, learning_rate=2e-3, batch_size=32, seed=0)
    assert result.heldout_accuracy >= 0.9, result
    config = json.loads((out / "config.json").read_text())
    assert {int(k): v for k, v in config["id2label"].items()} == ID2LABEL
    assert json.loads((out / TRAINING_MARKER).read_text())["setting"] == "pairs"

    # Served as is: the registry's classifier entry re-pointed at the folder.
    base = stand_in_registry(stand_ins, ["roberta-large-mnli"]).get("roberta-large-mnli")
    model_config = base.model_copy(update={"name": "decode-standin", "source": str(out)})
    detector = ContradictionDetector(model_config)
    assert detector.card().contradiction_index == 1
    backend = ModelDirectory({}, {"decode-standin": ContradictionServing(detector,
                                                                         max_batch_pairs=4096)},
                             limits=Limits())
    data = write_decode(tmp_path / "heldout.jsonl", contradiction_set(60, seed=3))

    async def run():
        async with AsyncDialscoreClient("http://app", transport=app_transport(create_app(backend))) as c:
            return await arun_decode(c, data, tmp_path / "eval", modes=["structured"],
                                     diagnostics=[], detector_kind="decode-trained",
                                     progress=False)
    run = asyncio.run(run())
    m = run.metrics["original"]["structured"]
    assert m.n == 60 and m.accuracy >= 0.85, m
    assert m.evidence_f1_paper >= 0.8, m
    assert "DECODE-trained" in run.table and "93.19" in run.table
