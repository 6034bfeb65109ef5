"""Captured CUDA graphs of a causal model's small plain passes
(services/dialscore_server/nll/engine/cuda_graphs.py).

* The buckets: powers of two within the positions bound, and the smallest one holding a pass.
* The forward path on CPU, through a stand-in for the replay that pads each pass to its bucket
  exactly as a replay does and runs the trunk on it: padded passes give the unpadded numbers (to
  float rounding), with the context cache on (the keys and values it stores come from the padded
  outputs) and off; the computed positions count the bucket.
* On a CUDA device (skipped without one): the engine with real captured graphs against the same
  engine without, every shape captured, the same numbers.

Weights are re-initialised at std 0.3, so that a wrong position or a wrong state changes the
numbers.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from dialscore_server.checkpoints.loading import LoadedModel, load_model
from dialscore_server.checkpoints.standins import reinit_
from dialscore_server.contract.options import ServingOptions
from dialscore_server.nll.engine.cuda_graphs import MIN_WIDTH, bucket_for, buckets
from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.engine import NLLEngine

#: Per-token agreement, relative to the token's NLL, of a padded pass and an unpadded one in
#: float32 (the same layers on other shapes: float rounding only).
TOL = 1e-5


# ----------------------------------------------------------------------------- the buckets
def test_buckets_are_powers_of_two_within_the_bound():
    shapes = buckets(512, 1024)
    assert shapes[0] == (1, 512) and shapes[-1] == (1, MIN_WIDTH)
    assert len(shapes) == len(set(shapes)) == 21
    for rows, width in shapes:
        assert rows * width <= 512 and width >= MIN_WIDTH
        assert rows & (rows - 1) == 0 and width & (width - 1) == 0
    # The window caps the width; a bound below the narrowest bucket captures nothing.
    assert max(w for _, w in buckets(512, 100)) == 64
    assert buckets(MIN_WIDTH - 1, 1024) == [] and buckets(512, MIN_WIDTH - 1) == []


def test_a_pass_takes_the_smallest_bucket_holding_it():
    shapes = buckets(512, 1024)
    assert bucket_for(1, 121, shapes) == (1, 128)
    assert bucket_for(3, 40, shapes) == (4, 64)
    assert bucket_for(1, 1, shapes) == (1, MIN_WIDTH)
    assert bucket_for(2, 256, shapes) == (2, 256)
    assert bucket_for(1, 513, shapes) is None  # wider than any bucket
    assert bucket_for(9, 60, shapes) is None  # 16 x 64 is beyond the bound


# ----------------------------------------------------------------------------- the forward path
class PaddedReplay:
    """The engine's trunk on each pass padded to its bucket, as :class:`GraphedTrunk` replays
    it (pad rows, pad positions after each row), on CPU: the forward path's side of the graph
    contract, without CUDA."""

    def __init__(self, engine: NLLEngine, positions: int):
        self.engine = engine
        self.shapes = buckets(positions, engine.passes.max_positions)
        self.keep_states = engine.context_cache is not None
        self.replays: list[tuple[int, int]] = []

    def bucket(self, rows: int, width: int) -> tuple[int, int] | None:
        return bucket_for(rows, width, self.shapes)

    def __call__(self, ids: torch.Tensor) -> tuple[tuple[int, int], Any] | None:
        shape = self.bucket(*ids.shape)
        if shape is None:
            return None
        self.replays.append(shape)
        padded = torch.full(shape, self.engine.passes.pad_id, dtype=torch.long)
        padded[: ids.shape[0], : ids.shape[1]] = ids
        return shape, self.engine.passes.trunk(padded, self.keep_states)


@pytest.fixture(scope="module")
def dialogpt(stand_in_registry) -> LoadedModel:
    lm = load_model(stand_in_registry.get("dialogpt-medium"))
    reinit_(lm.model, 0.3, seed=5)
    return lm


def calls(vocab: int, seed: int) -> list[list[EncodedItem]]:
    """Calls of 1-3 items, each its own context (no prefix shared within a call), some sent
    again in a later call (cache hits), of 20-140 positions."""
    rng = random.Random(seed)
    contexts = [tuple(rng.randrange(vocab) for _ in range(rng.randint(16, 100))) for _ in range(5)]
    out = []
    for _ in range(8):
        picked = rng.sample(contexts, rng.randint(1, 3))
        out.append([EncodedItem(c, tuple(rng.randrange(vocab) for _ in range(rng.randint(1, 30))),
                                False) for c in picked])
    return out


def assert_close(got, want):
    for a, b in zip(got, want):
        assert a.token_ids == b.token_ids
        assert all(abs(x - y) <= TOL * max(1.0, abs(y)) for x, y in zip(a.token_nlls, b.token_nlls)), (
            a.token_nlls, b.token_nlls)


@pytest.mark.parametrize("cache_bytes", [0, 10**9], ids=["cache off", "cache on"])
def test_padded_replays_give_the_unpadded_numbers(dialogpt, cache_bytes):
    graphed = NLLEngine(dialogpt.config, loaded=dialogpt, context_cache_bytes=cache_bytes)
    plain = NLLEngine(dialogpt.config, loaded=dialogpt, context_cache_bytes=cache_bytes)
    replay = PaddedReplay(graphed, 512)
    graphed.passes.graphs = replay
    padded = []
    for call in calls(graphed.vocab_size, seed=cache_bytes % 7):
        got, stats = graphed.score_encoded(call)
        want, _ = plain.score_encoded(call)
        assert_close(got, want)
        padded.append(stats.padded_tokens)
    assert replay.replays, "no pass went through the graphs"
    # Every replayed pass counts its bucket's positions.
    assert sum(padded) >= sum(r * w for r, w in replay.replays)
    if cache_bytes:
        assert graphed.context_cache.stats.hits > 0  # later calls start from stored states


def test_graphs_keeping_no_states_are_not_used_by_passes_that_keep_them(dialogpt):
    engine = NLLEngine(dialogpt.config, loaded=dialogpt, context_cache_bytes=10**9)
    replay = PaddedReplay(NLLEngine(dialogpt.config, loaded=dialogpt), 512)
    assert not replay.keep_states
    engine.passes.graphs = replay
    engine.score_encoded(calls(engine.vocab_size, seed=2)[0])
    assert replay.replays == []


def test_the_option_and_its_bounds():
    assert ServingOptions().cuda_graph_positions == 512
    with pytest.raises(ValueError, match="cuda_graph_positions"):
        ServingOptions(cuda_graph_positions=-1)


def test_on_cpu_nothing_is_captured(dialogpt):
    assert NLLEngine(dialogpt.config, loaded=dialogpt, cuda_graph_positions=512).graphs is None
    with pytest.raises(ValueError, match="cuda_graph_positions"):
        NLLEngine(dialogpt.config, loaded=dialogpt, cuda_graph_positions=-1)


# ----------------------------------------------------------------------------- on a GPU
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cache_bytes", [0, 10**9], ids=["cache off", "cache on"])
def test_captured_graphs_give_the_eager_numbers_on_cuda(stand_in_registry, cache_bytes):
    lm = load_model(stand_in_registry.get("dialogpt-medium").model_copy(update={"device": "cuda"}))
    reinit_(lm.model, 0.3, seed=5)
    graphed = NLLEngine(lm.config, loaded=lm, context_cache_bytes=cache_bytes,
                        cuda_graph_positions=512)
    plain = NLLEngine(lm.config, loaded=lm, context_cache_bytes=cache_bytes)
    assert graphed.graphs is not None and graphed.graphs.failed == {}
    assert len(graphed.graphs.shapes) == len(buckets(512, graphed.passes.max_positions))
    replayed = 0
    for call in calls(graphed.vocab_size, seed=3):
        got, stats = graphed.score_encoded(call)
        want, plain_stats = plain.score_encoded(call)
        assert_close(got, want)
        replayed += stats.padded_tokens != plain_stats.padded_tokens
    assert replayed, "no pass was replayed"
    held = torch.cuda.memory_allocated()
    graphed.close()
    del graphed
    assert torch.cuda.memory_allocated() < held  # the graphs' outputs went with the engine
