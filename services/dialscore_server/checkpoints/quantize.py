"""int8 weights for a loaded model's transformer body, on CPU (registry ``dtype: int8``).

Every linear layer of the body (GPT-2's ``Conv1D`` included) becomes an :class:`Int8Linear`:

* **weights**: int8, symmetric, one scale per output channel, prepacked once for PyTorch's
  quantized engine (:func:`dialscore_server.compat.quantized_linear_prepack`);
* **activations**: quantized per call to unsigned 7-bit codes
  (:func:`dialscore_server.compat.quantized_linear_dynamic`, ``reduce_range``: AVX2's
  ``vpmaddubsw`` sums two u8×s8 products in int16 and would saturate at 8 bits);
* **one scale per token row.** The quantized op measures one activation range for the whole
  input tensor, so a row's rounding would depend on the other rows of the pass: the same item
  scored alone, in another batch, or with prefix reuse on and off would differ, breaking the
  engine's batch-independence contract. Each row is scaled on its own first, and one anchor row
  (+1, -1, 0...) pins the tensor's range to [-1, 1]; the int32 products are exact, so a row's
  result does not depend on its companions. It costs one pass over the input and one over the
  output.
* **each row over its own [min, max]**: the row's centre ``c = (max + min) / 2`` is subtracted
  before the division by its half-range ``s``, and added back after the product as ``c`` times
  the row sums of the rounded weights. A row after GELU spans about [-0.17, max], so symmetric
  scaling ([-max, max]) would spend half of the 7-bit codes on values that never occur; centring
  halves the step there. It costs one more pass over the output. Still per row, so still
  batch-invariant.

What stays float32: embeddings, layer norms, attention, the output head (vocabulary projection,
:mod:`dialscore_server.nll.engine.projection`) and the log-softmax; only the body's products are rounded.

``torch.ao.quantization``'s ``quantize_dynamic`` wraps the same ops with per-tensor activation
scales (the batch dependence above), so the layers are built directly from the ops. Speed and
agreement with float32 of the routes and of this module: docs/benchmarks/precision.md.
"""

from __future__ import annotations

import warnings
from typing import Any

from dialscore_server import compat

#: The attribute set (to True) on a model whose linear layers a kernel pass has replaced with
#: its own modules (:func:`dialscore_server.nll.engine.kernels.optimize` sets it when it routes a
#: layer through oneDNN). :func:`quantize_int8` refuses such a model: it replaces only
#: ``nn.Linear`` and ``Conv1D``, so it would skip a replaced layer, and a layer with GELU folded in
#: would lose its activation if it were replaced.
KERNELS_APPLIED = "dialscore_kernels_applied"

#: Quantized engine used for the int8 products (a process-wide PyTorch setting; weights are
#: prepacked for it; docs/benchmarks/precision.md compares the engines).
INT8_ENGINE = "onednn"


#: A centred row is scaled to [-EDGE, EDGE], EDGE = 63 quantization steps of the anchored
#: [-1, 1] range (step 2/127), so its two extremes fall on codes, half a step from any rounding
#: boundary. Scaled to [-1, 1] they would sit exactly on ties (±63.5 steps), and float noise of
#: a few ulps in the row's centre (attention run at another batch shape, prefix reuse on or off)
#: would move them a whole step, and prefix reuse on and off would disagree.
_CENTERED_EDGE = 63 * 2.0 / 127


class Int8Linear:
    """Placeholder replaced at import time by the torch module below (torch is imported lazily)."""


def _module_class():
    import torch

    class _Int8Linear(torch.nn.Module):
        """``x @ W.T + b`` with int8 per-channel W and per-row 7-bit activations; float32 in/out.

        Args:
            weight: float32 [out, in]. bias: float32 [out] or None.

        Each activation row is quantized over its own [min, max] (see the module docstring).
        """

        def __init__(self, weight, bias):
            super().__init__()
            w = weight.detach().float()
            scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # quantized tensors: deprecation note
                qw = torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long),
                                                0, torch.qint8)
                self._packed = compat.quantized_linear_prepack(qw)
            self.in_features, self.out_features = w.shape[1], w.shape[0]
            self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
            # Row sums of the *rounded* weights: the centre term then carries the same weight
            # rounding as the rest of the row (W_q (s u + c) ~ W_q x). With the exact sums the
            # weight error would apply to x - c, which after GELU is larger than x (most of a
            # GELU row sits near 0, far from its centre).
            self.register_buffer("row_sums", qw.dequantize().sum(dim=1))

        def forward(self, x):
            shape = x.shape
            x2 = x.reshape(-1, shape[-1]).float()
            rows = x2.shape[0]
            buf = torch.empty(rows + 1, shape[-1], dtype=torch.float32, device=x.device)
            lo, hi = torch.aminmax(x2, dim=1, keepdim=True)
            c = (hi + lo).mul_(0.5)
            s = (hi - lo).mul_(0.5 / _CENTERED_EDGE).clamp_min_(1e-30)
            torch.sub(x2, c, out=buf[:rows]).div_(s)
            buf[rows].zero_()
            buf[rows, 0], buf[rows, 1] = 1.0, -1.0  # anchor: the tensor's range is [-1, 1]
            y = compat.quantized_linear_dynamic(buf, self._packed)[:rows]
            y = y.mul_(s) if self.bias is None else torch.addcmul(self.bias, y, s)
            y.addcmul_(c, self.row_sums)
            return y.view(*shape[:-1], self.out_features)

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, int8"

    return _Int8Linear


def int8_linear_class():
    """The ``torch.nn.Module`` class of int8 layers (built on first use; torch imports lazily)."""
    global Int8Linear
    if not hasattr(Int8Linear, "forward"):
        Int8Linear = _module_class()  # type: ignore[misc]
    return Int8Linear


def quantize_int8(model: Any, engine: str = INT8_ENGINE) -> dict[str, int]:
    """Replace every linear layer of `model`'s transformer body (``model.base_model``) by an
    :class:`Int8Linear`, in place. Returns ``{"int8_linears": n}``.

    The model must be float32 on CPU and not yet marked :data:`KERNELS_APPLIED` (quantize first,
    as :func:`~dialscore_server.checkpoints.loading.load_model` does; ``ValueError`` otherwise). The output
    head (``get_output_embeddings()``, outside the body for every family served here; a tied head
    shares the embedding matrix, which is never quantized) and a classifier's head stay float32.
    """
    import torch
    from transformers.pytorch_utils import Conv1D

    if next(model.parameters()).dtype != torch.float32:
        raise ValueError("int8 quantization starts from a float32 model")
    if getattr(model, KERNELS_APPLIED, False):
        raise ValueError("quantize before applying dialscore_server.nll.engine.kernels, not after")
    if engine not in torch.backends.quantized.supported_engines:
        raise RuntimeError(f"quantized engine {engine!r} is not available in this PyTorch build "
                           f"(has {torch.backends.quantized.supported_engines})")
    torch.backends.quantized.engine = engine
    cls = int8_linear_class()
    body = model.base_model
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    n = 0
    for module in list(body.modules()):
        for name, child in list(module.named_children()):
            if child is head:
                continue
            if type(child) is Conv1D:  # GPT-2: weight stored [in, out]
                new = cls(child.weight.t(), child.bias)
            elif type(child) is torch.nn.Linear:
                new = cls(child.weight, child.bias)
            else:
                continue
            setattr(module, name, new)
            n += 1
    return {"int8_linears": n}
