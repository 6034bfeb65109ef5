"""The engine's CPU kernels (services/dialscore_server/nll/engine/kernels.py): same numbers as the stock model.

``fast_kernels`` replaces float32/bfloat16 linear layers by oneDNN ones where this machine's
choice is oneDNN (services/dialscore_server/nll/engine/kernel_choice.py) and fuses GPT-2's GELU;
the NLLs must equal those of the stock transformers forward to 1e-4 (float32) whichever routes are
chosen, the model's parameters and ``state_dict`` must be unchanged, and a forward with autograd
recording must fall back to stock. Which route is faster depends on the CPU, so the tests inject
the timer (each test with a route file of its own) rather than assert on a timing.
"""

from __future__ import annotations

import random

import pytest
import torch

from dialscore_server.checkpoints.loading import load_model
from dialscore_server.checkpoints.standins import reinit_
from dialscore_server.nll.engine import kernel_choice, kernels
from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.nll.engine.kernels import OneDNNLinear
from dialscore_server.nll.engine.route_store import CACHE_DIR_VARIABLE

pytestmark = pytest.mark.skipif(not kernels.onednn_linear_available(),
                                reason="this PyTorch build has no oneDNN linear op")


def _pair(stand_in_registry, name):
    """Two copies of the same re-initialised stand-in: one left stock, one to get the kernels."""
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


def _replaced(module) -> bool:
    return isinstance(module, OneDNNLinear)


@pytest.fixture
def own_routes(tmp_path, monkeypatch):
    """A route file of the test's own: nothing chosen yet, nothing remembered by this process."""
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path))
    monkeypatch.setattr(kernel_choice, "_READ", {})
    return tmp_path / kernel_choice.ROUTES_FILE


def _fake_timings(monkeypatch, faster):
    """kernel_choice.measure replaced: oneDNN 'faster' exactly for shapes where faster(shape);
    returns the list of (shape, rows) measured."""
    calls = []

    def measure(shape, rows=kernel_choice.TIMING_ROWS, repeats=kernel_choice.TIMING_REPEATS):
        calls.append((shape, rows))
        return kernel_choice.Timing(1.0 if faster(shape) else 2.0, 1.5)

    monkeypatch.setattr(kernel_choice, "measure", measure)
    return calls


@pytest.fixture
def onednn_faster(own_routes, monkeypatch):
    """The choice fixed to oneDNN for every shape."""
    return _fake_timings(monkeypatch, lambda shape: True)


@pytest.mark.parametrize("name", ["dialogpt-medium", "bart-base"])
def test_fast_kernels_equal_stock(stand_in_registry, name, onednn_faster):
    stock_lm, fast_lm = _pair(stand_in_registry, name)
    keys = {k: tuple(v.shape) for k, v in fast_lm.model.state_dict().items()}
    params = {k: id(p) for k, p in fast_lm.model.named_parameters()}
    stock = NLLEngine(stock_lm.config, loaded=stock_lm, fast_kernels=False)
    fast = NLLEngine(fast_lm.config, loaded=fast_lm)
    assert fast.kernels["onednn_linears"] > 0 and fast.kernels["stock_linears"] == 0
    assert fast.projection.onednn
    assert sum(map(_replaced, fast_lm.model.modules())) == fast.kernels["onednn_linears"]
    if name == "dialogpt-medium":  # GPT-2's five-op GELU folded into the c_fc product
        assert fast.kernels["gelu_into_linear"] == fast_lm.model.config.n_layer
        mlp = fast_lm.model.transformer.h[0].mlp
        assert _replaced(mlp.c_fc) and mlp.c_fc.gelu and type(mlp.act) is torch.nn.Identity
    assert stock.kernels == {}
    assert not any(map(_replaced, stock_lm.model.modules()))
    items = _items(stock.model.config.vocab_size)
    for a, b in zip(fast.score_encoded(items)[0], stock.score_encoded(items)[0]):
        assert a.nll == pytest.approx(b.nll, abs=1e-4)
        assert max(abs(x - y) for x, y in zip(a.token_nlls, b.token_nlls)) < 1e-4
    # The same Parameter objects under the same names: checkpoints and state_dict copies work.
    assert {k: tuple(v.shape) for k, v in fast_lm.model.state_dict().items()} == keys
    assert {k: id(p) for k, p in fast_lm.model.named_parameters()} == params
    fast_lm.model.load_state_dict(stock_lm.model.state_dict())
    assert kernels.optimize(fast_lm.model)["onednn_linears"] == 0  # idempotent


def test_replaced_layers_fall_back_under_autograd(stand_in_registry):
    stock_lm, fast_lm = _pair(stand_in_registry, "dialogpt-medium")
    assert kernels.optimize(fast_lm.model, onednn=True)["onednn_linears"] > 0
    assert _replaced(fast_lm.model.transformer.h[0].attn.c_attn)
    ids = torch.tensor([[5, 9, 14, 3, 7, 21]])
    labels = ids.clone()
    want = stock_lm.model(input_ids=ids, labels=labels).loss
    got = fast_lm.model(input_ids=ids, labels=labels).loss  # grad enabled: the stock path
    got.backward()
    assert got.item() == pytest.approx(want.item(), abs=1e-5)
    assert fast_lm.model.transformer.h[0].mlp.c_fc.weight.grad is not None
    with torch.inference_mode():
        assert float(fast_lm.model(input_ids=ids, labels=labels).loss) == pytest.approx(
            float(want), abs=1e-4)


def test_routes_follow_the_choice_and_numbers_do_not_change(stand_in_registry, own_routes,
                                                             monkeypatch):
    """GPT-2 has four layer shapes and a head. With oneDNN chosen only for the fused c_fc + GELU
    and the attention output product, exactly those layers are replaced, the others and the head
    stay on PyTorch's route, each shape is timed once however many layers, engines and processes
    share it, and the NLLs equal the stock model's to float tolerance."""
    calls = _fake_timings(monkeypatch, lambda s: s.gelu or s.in_features == s.out_features)
    stock_lm, fast_lm = _pair(stand_in_registry, "dialogpt-medium")
    n_layer, width = fast_lm.model.config.n_layer, fast_lm.model.config.n_embd
    stock = NLLEngine(stock_lm.config, loaded=stock_lm, fast_kernels=False)
    fast = NLLEngine(fast_lm.config, loaded=fast_lm)
    k = fast.kernels
    assert k["onednn_linears"] == 2 * n_layer and k["stock_linears"] == 2 * n_layer
    assert k["gelu_into_linear"] == n_layer and k["fused_gelu"] == 0
    assert not k["onednn_head"] and not fast.projection.onednn
    shapes = [s for s, _ in calls]
    assert len(shapes) == len(set(shapes)) == 5 and len(k["routes"]) == 5
    block = fast_lm.model.transformer.h[0]
    assert _replaced(block.mlp.c_fc) and _replaced(block.attn.c_proj)
    assert not _replaced(block.attn.c_attn) and not _replaced(block.mlp.c_proj)
    assert {(s.in_features, s.out_features, s.gelu) for s in shapes} == {
        (width, 3 * width, False), (width, width, False), (width, 4 * width, True),
        (4 * width, width, False), (width, fast_lm.model.config.vocab_size, False)}
    items = _items(stock.model.config.vocab_size)
    for a, b in zip(fast.score_encoded(items)[0], stock.score_encoded(items)[0]):
        assert a.nll == pytest.approx(b.nll, abs=1e-4)
    # Another model of the same shapes: nothing timed again, in this process or (nothing
    # remembered in memory) in one that only has the file.
    other = _pair(stand_in_registry, "dialogpt-medium")[0]
    again = kernels.optimize(other.model, rows=fast.token_budget)
    assert again["onednn_linears"] == 2 * n_layer and len(calls) == 5
    kernel_choice.forget()
    third = _pair(stand_in_registry, "dialogpt-medium")[0]
    assert kernels.optimize(third.model, rows=fast.token_budget)["onednn_linears"] == 2 * n_layer
    assert len(calls) == 5 and own_routes.exists()
    # A second call on a replaced model replaces nothing and makes the same choices.
    repeat = kernels.optimize(fast_lm.model, rows=fast.token_budget)
    assert repeat["onednn_linears"] == 0 and repeat["stock_linears"] == 2 * n_layer
    assert sum(map(_replaced, fast_lm.model.modules())) == 2 * n_layer


def test_stock_everywhere_when_onednn_is_slower(stand_in_registry, own_routes, monkeypatch):
    """Nothing routed, GPT-2's GELU still replaced by the one-kernel version, and the Conv1D
    weights keep their stock layout."""
    _fake_timings(monkeypatch, lambda s: False)
    lm = _pair(stand_in_registry, "dialogpt-medium")[0]
    k = kernels.optimize(lm.model)
    assert k["onednn_linears"] == 0 and k["stock_linears"] == 4 * lm.model.config.n_layer
    assert k["fused_gelu"] == lm.model.config.n_layer and not k["onednn_head"]
    assert not any(map(_replaced, lm.model.modules()))
    assert all(p.is_contiguous() for p in lm.model.parameters())


def test_a_replacement_that_fails_its_check_is_not_kept(stand_in_registry, onednn_faster,
                                                        monkeypatch):
    """The self-check guards every replacement: where oneDNN's result differs from the layer's,
    the stock layer stays (its weight back in its stock layout) and GPT-2's GELU stays apart."""
    monkeypatch.setattr(kernels, "agrees", lambda candidate, layer: False)
    lm = _pair(stand_in_registry, "dialogpt-medium")[0]
    k = kernels.optimize(lm.model)
    assert k["onednn_linears"] == 0 and k["stock_linears"] == 4 * lm.model.config.n_layer
    assert not any(map(_replaced, lm.model.modules()))
    assert all(p.is_contiguous() for p in lm.model.parameters())
    assert k["fused_gelu"] == lm.model.config.n_layer


def test_real_timing_is_taken_once_per_shape(own_routes):
    """The real measurement: positive times for both routes, written to the machine's file and
    read back from it."""
    shape = kernel_choice.Shape(64, 96, "float32", True, True)
    first = kernel_choice.timing(shape)
    assert first is not None and first.onednn_s > 0 and first.stock_s > 0
    assert kernel_choice.timing(shape) is first
    assert kernel_choice.onednn_is_faster(shape) == first.onednn
    kernel_choice.forget()
    assert kernel_choice.timing(shape) == first  # read from the file, not timed again
    key = f"{shape.key()} rows={kernel_choice.TIMING_ROWS} threads={torch.get_num_threads()}"
    assert kernel_choice.recorded_routes() == {key: first}
    assert kernel_choice.described()[key].endswith("-> oneDNN" if first.onednn else "-> PyTorch")


def test_the_body_is_timed_at_the_engines_pass_size(stand_in_registry, own_routes, monkeypatch):
    """Which route wins depends on the row count, so the body's shapes are timed at the engine's
    token budget (capped) and the head at about one projection chunk."""
    calls = _fake_timings(monkeypatch, lambda s: True)
    _, lm = _pair(stand_in_registry, "dialogpt-medium")
    engine = NLLEngine(lm.config, loaded=lm, token_budget=512)
    rows_of = dict(calls)
    vocab, width = lm.model.get_output_embeddings().weight.shape
    head = kernel_choice.Shape(width, vocab, "float32", False, False)
    assert rows_of.pop(head) == kernel_choice.TIMING_ROWS
    assert rows_of and set(rows_of.values()) == {512} == {engine.token_budget}
