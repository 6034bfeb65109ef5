"""Shared fixtures. Stand-ins are built once per session; the hub is never contacted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Without this, a missing checkpoint makes from_pretrained retry against the hub for minutes.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory) -> Path:
    """Root folder of the stand-in checkpoints (one subfolder per kind), built once."""
    from dialscore_server.checkpoints.standins import build_stand_ins

    root = tmp_path_factory.mktemp("stand-ins")
    build_stand_ins(root)
    return root


@pytest.fixture(scope="session")
def stand_in_registry(stand_ins):
    from dialscore_server.checkpoints.registry import stand_in_registry as make

    return make(stand_ins)


def shared_file(relative: str) -> Path:
    """A file under ../shared, or skip the test with the reason when it is absent."""
    path = SHARED / relative
    if not path.is_file():
        pytest.skip(f"../shared/{relative} is absent (benchmark data lives beside the checkout, "
                    "never in it)")
    return path


@pytest.fixture(scope="session")
def sharp_stand_ins(stand_ins, tmp_path_factory) -> dict[str, Path]:
    """Copies of the gpt2, bart and NLI stand-ins re-initialised at std 0.3 (NLLs vary by token), saved
    as checkpoints so the served replicas and in-process engines load the same weights."""
    import shutil

    from transformers import (
        AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer,
    )

    from dialscore_server.checkpoints.standins import MARKER, reinit_

    root = tmp_path_factory.mktemp("sharp")
    out = {}
    for kind, auto in (("gpt2", AutoModelForCausalLM), ("bart", AutoModelForSeq2SeqLM),
                       ("nli-contradiction-first", AutoModelForSequenceClassification)):
        model = reinit_(auto.from_pretrained(stand_ins / kind), std=0.3)
        model.save_pretrained(root / kind)
        AutoTokenizer.from_pretrained(stand_ins / kind).save_pretrained(root / kind)
        shutil.copy(stand_ins / kind / MARKER, root / kind / MARKER)
        out[kind] = root / kind
    return out


class Served:
    """The real Serve application on loopback: its base URL and the arguments it was built from."""

    def __init__(self, url: str, args):
        self.url = url
        self.args = args

    def config(self, name: str):
        """The served ModelConfig of `name` (for building the same engine in-process)."""
        every = self.args.model_configs() + self.args.classifier_configs()
        return {c.name: c for c, _ in every}[name]


@pytest.fixture(scope="session")
def trained_gpt2(stand_ins, tmp_path_factory) -> Path:
    """The gpt2 stand-in trained ~20 s on templated explanation sentences: antecedents, connectives
    and consequents of the shipped sample recombined at random across dialogues, plus templated
    chat. It learns the word order of explanations (what complete corruptions destroy), not which
    explanation is valid for which dialogue."""
    import json
    import random

    from dialscore.probes import SAMPLE_DATA
    from dialscore_server.checkpoints.standins import templated_sentences, train_causal

    parts = [json.loads(line)["explanations"]
             for line in SAMPLE_DATA.open()]
    flat = [e for es in parts for e in es]
    rng = random.Random(1)
    sentences = [f"{rng.choice(flat)['antecedent']} {rng.choice(flat)['connective']} "
                 f"{rng.choice(flat)['consequent']}" for _ in range(3000)]
    return train_causal(stand_ins / "gpt2", tmp_path_factory.mktemp("trained") / "gpt2",
                        sentences + templated_sentences(1000, seed=1), seconds=300, max_steps=400)


def serve_args(stand_ins: Path, sharp: dict[str, Path], trained: Path):
    from dialscore_server.gateway.config import AppArgs

    one_thread = {"num_cpus": 0.2, "num_threads": 1}
    return AppArgs.model_validate({
        "stand_ins": str(stand_ins),
        "request_timeout_s": 60,
        # A request no replica accepts within 3 s (e.g. while a killed replica is replaced) is a 503.
        "queue_timeout_s": 3,
        "models": [
            {"name": "dialogpt-medium", "overrides": {"source": str(sharp["gpt2"])},
             "serving": {**one_thread, "max_ongoing_requests": 64}},
            {"name": "bart-base", "overrides": {"source": str(sharp["bart"])}, "serving": one_thread},
            # A deliberately tiny queue, for the overload test.
            {"name": "dialogpt-medium", "serve_as": "tiny-queue",
             "serving": {**one_thread, "max_ongoing_requests": 1, "max_queued_requests": 1}},
            # For the CEDAR probe end-to-end test: trained and untrained decoder-only stand-ins.
            {"name": "dialogpt-medium", "serve_as": "trained-gpt2", "overrides": {"source": str(trained)},
             "serving": one_thread},
            {"name": "dialogpt-medium", "serve_as": "untrained-gpt2", "serving": one_thread},
            # Only tests/test_replica_failure.py uses it: its replica is killed mid-run.
            {"name": "dialogpt-medium", "serve_as": "victim", "serving": one_thread},
        ],
        "classifiers": [
            {"name": "roberta-large-mnli", "overrides": {"source": str(sharp["nli-contradiction-first"])},
             "serving": one_thread},
            # Only tests/test_replica_failure.py uses it: its replica is killed during a rerank load.
            {"name": "roberta-large-mnli", "serve_as": "victim-nli",
             "overrides": {"source": str(sharp["nli-contradiction-first"])}, "serving": one_thread},
        ],
    })


@pytest.fixture(scope="session")
def served(stand_ins, sharp_stand_ins, trained_gpt2):
    """Start Ray and the Serve app once per session on a free loopback port; wait on /readyz."""
    import time

    import httpx

    from dialscore_server.gateway.embedded import serve_locally

    args = serve_args(stand_ins, sharp_stand_ins, trained_gpt2)
    with serve_locally(args, num_cpus=4) as url:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("the Serve app did not become ready within 120 s")
        yield Served(url, args)
