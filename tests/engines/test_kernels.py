"""The engine's CPU kernels (services/dialscore_server/nll/kernels.py): same numbers as the stock model.

``fast_kernels`` routes float32/bfloat16 linear layers through oneDNN and fuses GPT-2's GELU; the
NLLs must equal those of the stock transformers forward to 1e-4 (float32), the model's
``state_dict`` must be unchanged, and a forward with autograd recording must fall back to stock.
"""

from __future__ import annotations

import random

import pytest
import torch

from dialscore_server.checkpoints.loading import load_model
from dialscore_server.nll import kernels
from dialscore_server.nll.encoding import EncodedItem
from dialscore_server.nll.engine import NLLEngine
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


@pytest.mark.parametrize("name", ["dialogpt-medium", "bart-base"])
def test_fast_kernels_equal_stock(stand_in_registry, name):
    stock_lm, fast_lm = _pair(stand_in_registry, name)
    keys = {k: tuple(v.shape) for k, v in fast_lm.model.state_dict().items()}
    stock = NLLEngine(stock_lm.config, loaded=stock_lm, fast_kernels=False)
    fast = NLLEngine(fast_lm.config, loaded=fast_lm)
    assert fast.kernels["onednn_linears"] > 0
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
    kernels.optimize(fast_lm.model)
    ids = torch.tensor([[5, 9, 14, 3, 7, 21]])
    labels = ids.clone()
    want = stock_lm.model(input_ids=ids, labels=labels).loss
    got = fast_lm.model(input_ids=ids, labels=labels).loss  # grad enabled: the stock path
    got.backward()
    assert got.item() == pytest.approx(want.item(), abs=1e-5)
    with torch.inference_mode():
        assert float(fast_lm.model(input_ids=ids, labels=labels).loss) == pytest.approx(
            float(want), abs=1e-4)
