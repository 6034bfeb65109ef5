"""Shared fixtures. Stand-ins are built once per session; the hub is never contacted."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import image_build

# Without this, a missing checkpoint makes from_pretrained retry against the hub for minutes.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Serve's routers give a replica 0.1 s (doubling on retries, to 1 s) to say how many requests it
# holds, and pass over one that does not answer in time: on a busy machine a request would then go
# to whichever replica answered, and a test of where requests go would depend on the machine's
# speed. Every router of the test session (this process's handles, the gateway's, started by the
# Ray this process starts) waits as long as a hang guard instead: Ray Serve's documented knobs,
# read when ray.serve is imported. test_affinity_served.py checks that they took effect.
SERVE_PROBE_DEADLINE_S = 60.0
# The session's local Ray starts again while a busy machine outlasts Ray's fixed 30 s wait for its
# raylet (gateway/local_ray.py): more tries than a user's default, as many as a hang guard holds.
os.environ.setdefault("DIALSCORE_RAY_START_TRIES", "8")
for knob in ("RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S",
             "RAY_SERVE_MAX_QUEUE_LENGTH_RESPONSE_DEADLINE_S"):
    os.environ.setdefault(knob, str(SERVE_PROBE_DEADLINE_S))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The container image's test (tests/deploy/test_image.py) runs last, and its image starts
    building now, in the background (tests/image_build.py): the build overlaps the rest of the
    run. After every other hook, so that tests deselected (``-m 'not slow'``, ``-k``) start
    nothing."""
    last = [item for item in items if item.path.name == "test_image.py"]
    if last:
        items[:] = [item for item in items if item.path.name != "test_image.py"] + last
        image_build.start()


def pytest_sessionfinish() -> None:
    """A background image build still running when the run ends (stopped early) ends with it."""
    if image_build.started is not None:
        image_build.started.stop()


@pytest.fixture(scope="session", autouse=True)
def machine_cache_dir(tmp_path_factory) -> Iterator[Path | None]:
    """A fresh ``DIALSCORE_CACHE_DIR`` for the session (the per-machine kernel routes), set before
    any engine or Ray worker starts, so tests neither read nor write the user's cache."""
    try:
        from dialscore_server.nll.engine.route_store import CACHE_DIR_VARIABLE
    except ModuleNotFoundError:  # the client-only run (tests/client): no engine, no kernel routes
        yield None
        return
    path = tmp_path_factory.mktemp("machine-cache")
    previous = os.environ.get(CACHE_DIR_VARIABLE)
    os.environ[CACHE_DIR_VARIABLE] = str(path)
    yield path
    if previous is None:
        os.environ.pop(CACHE_DIR_VARIABLE, None)
    else:
        os.environ[CACHE_DIR_VARIABLE] = previous


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


@pytest.fixture(scope="session")
def trained_gpt2(stand_ins, tmp_path_factory) -> Path:
    """The gpt2 stand-in trained 400 steps (about 20 s here; `seconds` is only a hang guard) on
    templated explanation sentences: antecedents, connectives
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
                        sentences + templated_sentences(1000, seed=1), seconds=3600, max_steps=400)


@pytest.fixture(scope="session")
def word_order_gpt2(stand_ins, tmp_path_factory) -> Path:
    """The gpt2 stand-in trained 200 steps on templated sentences (seed 21): it has learned word
    order. Training stops on steps (`seconds` is only a hang guard), so the weights do not depend
    on how fast or busy the machine is."""
    from dialscore_server.checkpoints.standins import templated_sentences, train_causal

    return train_causal(stand_ins / "gpt2", tmp_path_factory.mktemp("word-order") / "gpt2",
                        templated_sentences(3000, seed=21), seconds=3600, max_steps=200, seed=0)
