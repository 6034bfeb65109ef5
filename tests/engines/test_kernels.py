"""The engine's CPU kernels (services/dialscore_server/nll/engine/kernels.py): same numbers as the stock model.

``fast_kernels`` routes float32/bfloat16 linear layers through oneDNN where it measured faster
(services/dialscore_server/nll/engine/kernel_choice.py) and fuses GPT-2's GELU; the NLLs must equal those
of the stock transformers forward to 1e-4 (float32) whichever routes are chosen, the model's
``state_dict`` must be unchanged, and a forward with autograd recording must fall back to stock.
Which route is faster depends on the CPU, so the tests force each choice through the timing
function rather than assert on a timing.
"""

from __future__ import annotations

import random

import pytest
import torch

from dialscore_server.checkpoints.loading import load_model
from dialscore_server.nll.engine import kernel_choice, kernels
from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.checkpoints.standins import reinit_

pytestmark = pytest.mark.skipif(not kernels.onednn_linear_available(),
                                reason="this PyTorch build has no oneDNN linear op")


def _pair(stand_in_registry, name):
    """Two copies of the same re-initialised stand-in: one left stock, one to be patched."""
    out = []
    for _ in range(2):
        lm = load_model(stand_in_registry.get(name))
        reinit_(lm.model, 0.3, seed=4)
        out.append(lm)
    return out


def _items(vocab, n=24, seed=0):
    rng = random.Random(seed)
    src = tuple(rng.randrange(vocab) for _ in range(30))
    return ([EncodedItem(src, tuple(rng.randrange(vocab) for _ in range(rng.randint(1, 9))), False)
             for _ in range(n // 2)]
            + [EncodedItem(tuple(rng.randrange(vocab) for _ in range(rng.randint(1, 40))),
                           tuple(rng.randrange(vocab) for _ in range(rng.randint(1, 9))), False)
               for _ in range(n // 2)])


@pytest.fixture
def onednn_faster(monkeypatch):
    """The measured choice forced to oneDNN for every shape (the AVX-512 host's outcome)."""
    monkeypatch.setattr(kernel_choice, "onednn_is_faster", lambda shape, rows=128: True)


@pytest.mark.parametrize("name", ["dialogpt-medium", "bart-base"])
def test_fast_kernels_equal_stock(stand_in_registry, name, onednn_faster):
    stock_lm, fast_lm = _pair(stand_in_registry, name)
    keys = {k: tuple(v.shape) for k, v in fast_lm.model.state_dict().items()}
    stock = NLLEngine(stock_lm.config, loaded=stock_lm, fast_kernels=False)
    fast = NLLEngine(fast_lm.config, loaded=fast_lm)
    assert fast.kernels["onednn_linears"] > 0 and fast.kernels["stock_linears"] == 0
    assert fast.projection.onednn
    if name == "dialogpt-medium":  # GPT-2's five-op GELU folded into the c_fc product
        assert fast.kernels["gelu_into_linear"] == fast_lm.model.config.n_layer
    assert stock.kernels == {}
    items = _items(stock.model.config.vocab_size)
    for a, b in zip(fast.score_encoded(items)[0], stock.score_encoded(items)[0]):
        assert a.nll == pytest.approx(b.nll, abs=1e-4)
        assert max(abs(x - y) for x, y in zip(a.token_nlls, b.token_nlls)) < 1e-4
    # Same parameter names and shapes: checkpoints and state_dict copies still work.
    assert {k: tuple(v.shape) for k, v in fast_lm.model.state_dict().items()} == keys
    assert kernels.optimize(fast_lm.model)["onednn_linears"] == 0  # idempotent


def test_patched_layers_fall_back_under_autograd(stand_in_registry):
    stock_lm, fast_lm = _pair(stand_in_registry, "dialogpt-medium")
    assert kernels.optimize(fast_lm.model, onednn=True)["onednn_linears"] > 0
    ids = torch.tensor([[5, 9, 14, 3, 7, 21]])
    labels = ids.clone()
    want = stock_lm.model(input_ids=ids, labels=labels).loss
    got = fast_lm.model(input_ids=ids, labels=labels).loss  # grad enabled: the stock path
    got.backward()
    assert got.item() == pytest.approx(want.item(), abs=1e-5)
    with torch.inference_mode():
        assert float(fast_lm.model(input_ids=ids, labels=labels).loss) == pytest.approx(
            float(want), abs=1e-4)


def _fake_timings(monkeypatch, faster):
    """kernel_choice.measure replaced: oneDNN 'faster' exactly for shapes where faster(shape);
    returns the list of shapes measured."""
    calls = []

    def measure(shape, rows=kernel_choice.TIMING_ROWS, repeats=kernel_choice.TIMING_REPEATS):
        calls.append(shape)
        return kernel_choice.Timing(1.0 if faster(shape) else 2.0, 1.5, torch.get_num_threads())

    monkeypatch.setattr(kernel_choice, "measure", measure)
    monkeypatch.setattr(kernel_choice, "_TIMINGS", {})
    return calls


def test_routes_follow_the_measured_choice_and_numbers_do_not_change(stand_in_registry, monkeypatch):
    """GPT-2 has four layer shapes and a head. With oneDNN measured faster only for the fused
    c_fc + GELU and the attention output product, exactly those layers are routed, the others
    and the head stay on PyTorch's route, each shape is timed once however many layers and
    engines share it, and the NLLs equal the stock model's to float tolerance."""
    calls = _fake_timings(monkeypatch, lambda s: s.gelu or s.in_features == s.out_features)
    stock_lm, fast_lm = _pair(stand_in_registry, "dialogpt-medium")
    n_layer, width = fast_lm.model.config.n_layer, fast_lm.model.config.n_embd
    stock = NLLEngine(stock_lm.config, loaded=stock_lm, fast_kernels=False)
    fast = NLLEngine(fast_lm.config, loaded=fast_lm)
    k = fast.kernels
    assert k["onednn_linears"] == 2 * n_layer and k["stock_linears"] == 2 * n_layer
    assert k["gelu_into_linear"] == n_layer and k["fused_gelu"] == 0
    assert not k["onednn_head"] and not fast.projection.onednn
    assert len(calls) == len(set(calls)) == 5 and len(k["routes"]) == 5
    block = fast_lm.model.transformer.h[0]
    assert hasattr(block.mlp.c_fc, "_dialscore_stock_forward")
    assert hasattr(block.attn.c_proj, "_dialscore_stock_forward")
    assert not hasattr(block.attn.c_attn, "_dialscore_stock_forward")
    assert not hasattr(block.mlp.c_proj, "_dialscore_stock_forward")
    assert {(s.in_features, s.out_features, s.gelu) for s in calls} == {
        (width, 3 * width, False), (width, width, False), (width, 4 * width, True),
        (4 * width, width, False), (width, fast_lm.model.config.vocab_size, False)}
    items = _items(stock.model.config.vocab_size)
    for a, b in zip(fast.score_encoded(items)[0], stock.score_encoded(items)[0]):
        assert a.nll == pytest.approx(b.nll, abs=1e-4)
    # Another model of the same shapes in this process: nothing timed again.
    other = _pair(stand_in_registry, "dialogpt-medium")[0]
    again = kernels.optimize(other.model, rows=fast.token_budget)
    assert again["onednn_linears"] == 2 * n_layer and len(calls) == 5


def test_stock_everywhere_when_onednn_is_slower(stand_in_registry, monkeypatch):
    """The AVX2 outcome: nothing routed, GPT-2's GELU still replaced by the one-kernel version."""
    _fake_timings(monkeypatch, lambda s: False)
    lm = _pair(stand_in_registry, "dialogpt-medium")[0]
    k = kernels.optimize(lm.model)
    assert k["onednn_linears"] == 0 and k["stock_linears"] == 4 * lm.model.config.n_layer
    assert k["fused_gelu"] == lm.model.config.n_layer and not k["onednn_head"]
    assert not any(hasattr(m, "_dialscore_stock_forward") for m in lm.model.modules())


def test_real_timing_is_taken_once_per_shape():
    """The real measurement: positive times for both routes, remembered for the process."""
    shape = kernel_choice.Shape(64, 96, "float32", True, True)
    kernel_choice.forget()
    first = kernel_choice.timing(shape)
    assert first is not None and first.onednn_s > 0 and first.stock_s > 0
    assert kernel_choice.timing(shape) is first
    assert kernel_choice.onednn_is_faster(shape) == first.onednn
    assert shape.key() in next(iter(kernel_choice.remembered()))
    described = kernel_choice.described()[next(iter(kernel_choice.remembered()))]
    assert described.endswith("-> oneDNN" if first.onednn else "-> PyTorch")


def test_the_body_is_timed_at_the_engines_pass_size(stand_in_registry, monkeypatch):
    """Which route wins depends on the row count, so the body's shapes are timed at the engine's
    token budget (capped) and the head at about one projection chunk."""
    rows_of: dict = {}

    def measure(shape, rows=kernel_choice.TIMING_ROWS, repeats=kernel_choice.TIMING_REPEATS):
        rows_of[shape] = rows
        return kernel_choice.Timing(1.0, 1.5, torch.get_num_threads())

    monkeypatch.setattr(kernel_choice, "measure", measure)
    monkeypatch.setattr(kernel_choice, "_TIMINGS", {})
    _, lm = _pair(stand_in_registry, "dialogpt-medium")
    engine = NLLEngine(lm.config, loaded=lm, token_budget=512)
    vocab, width = lm.model.get_output_embeddings().weight.shape
    head = kernel_choice.Shape(width, vocab, "float32", False, False)
    assert rows_of.pop(head) == kernel_choice.TIMING_ROWS
    assert rows_of and set(rows_of.values()) == {512} == {engine.token_budget}
