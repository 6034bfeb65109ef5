"""int8 weights for a loaded model's transformer body, on CPU (registry ``dtype: int8``).

Every linear layer of the body (GPT-2's ``Conv1D`` included) becomes an :class:`Int8Linear`:

* **weights**: int8, symmetric, one scale per output channel, prepacked once for PyTorch's
  quantized engine (``torch.ops.quantized.linear_prepack``; oneDNN/fbgemm u8×s8 kernels, AVX2
  on this CPU);
* **activations**: quantized per call to uint8 by ``torch.ops.quantized.linear_dynamic`` with
  ``reduce_range`` (7-bit: AVX2's ``vpmaddubsw`` sums two u8×s8 products in int16 and would
  saturate at 8 bits, 8x the error measured);
* **one scale per token row.** ``linear_dynamic`` measures one activation range for the whole
  input tensor, so a row's rounding would depend on the other rows of the pass: the same item
  scored alone, in another batch, or with prefix reuse on and off would differ by up to a nat on
  the std-0.3 stand-in, breaking the engine's batch-independence contract. Each row is divided by
  its own largest magnitude first, and one anchor row (+1, -1, 0...) pins the tensor's range to
  [-1, 1]; the int32 products are exact, so a row's result does not depend on its companions,
  and the error is 4x smaller than per-tensor scaling (relative error 0.016 vs 0.060 on rows of
  mixed magnitude). It costs one pass over the input and one over the output (the product
  itself is 1,024-4,096 multiply-adds per element): ~10% of the int8 product's time.
* **each row over its own [min, max]** (``centered``, the default): the row's centre
  ``c = (max + min) / 2`` is subtracted before the division by its half-range ``s``, and added
  back after the product as ``c`` times the row sums of the rounded weights. A row after GELU
  spans about [-0.17, max], so symmetric scaling ([-max, max]) spends half of the 7-bit codes on
  values that never occur; centring halves the step there. Measured on DialoGPT-medium-shaped
  layers fed the model's own activations: the MLP down-projection's relative error 0.028 ->
  0.017, the other three products 0.017 -> 0.0165 (rows already symmetric); it costs one more
  pass over the output. Still per row, so still batch-invariant.

What stays float32: embeddings, layer norms, attention, the output head (vocabulary projection,
:mod:`dialscore_server.nll.engine.projection`) and the log-softmax; only the body's products are rounded.

Measured before choosing (``loadtests/bench_precision.py --int8-kernels``, BENCHMARKS.md), on this
AVX2-only AMD EPYC, 2 threads, a DialoGPT-medium-sized product of 1,024 tokens: quantized
engines ``onednn``, ``fbgemm`` and ``x86`` 1.1-2.2x float32
(their order changed between a quiet and a loaded run); ``qnnpack`` 0.4x; ``torch._int_mm``
(s8×s8) ~1 GFLOP/s and weight-only ``torch._weight_int8pack_mm`` ~3 GFLOP/s on CPU (no fast
path); oneDNN bf16 needs AVX-512 BF16 / AMX and does not run here. ``torch.ao.quantization``'s
``quantize_dynamic`` wraps the same ops with per-tensor activation scales (the batch dependence
above), so the layers are built directly from the ops.
"""

from __future__ import annotations

import warnings
from typing import Any

#: Quantized engine used for the int8 products (a process-wide PyTorch setting; weights are
#: prepacked for it). ``onednn`` measured fastest on a quiet moment (314 vs 275 fbgemm GFLOP/s),
#: fbgemm on a loaded one: within this machine's noise.
INT8_ENGINE = "onednn"


#: A centred row is scaled to [-EDGE, EDGE], EDGE = 63 quantization steps of the anchored
#: [-1, 1] range (step 2/127), so its two extremes fall on codes, half a step from any rounding
#: boundary. Scaled to [-1, 1] they would sit exactly on ties (±63.5 steps), and float noise of
#: a few ulps in the row's centre (attention run at another batch shape, prefix reuse on or off)
#: would move them a whole step: 1.6e-3 nats between reuse on and off on the std-0.3 stand-in.
#: (A symmetric row's extreme is x / x = ±1 exactly, so it always rounds the same way.)
_CENTERED_EDGE = 63 * 2.0 / 127


class Int8Linear:
    """Placeholder replaced at import time by the torch module below (torch is imported lazily)."""


def _module_class():
    import torch

    class _Int8Linear(torch.nn.Module):
        """``x @ W.T + b`` with int8 per-channel W and per-row 7-bit activations; float32 in/out.

        Args:
            weight: float32 [out, in]. bias: float32 [out] or None.
            centered: quantize each row's range [min, max] (centre subtracted) rather than
                [-max|x|, max|x|]; see the module docstring.
        """

        def __init__(self, weight, bias, centered: bool = True):
            super().__init__()
            w = weight.detach().float()
            scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # quantized tensors: deprecation note
                qw = torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long),
                                                0, torch.qint8)
                self._packed = torch.ops.quantized.linear_prepack(qw, None)
            self.in_features, self.out_features = w.shape[1], w.shape[0]
            self.centered = centered
            self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
            # Row sums of the *rounded* weights: the centre term then carries the same weight
            # rounding as the rest of the row (W_q (s u + c) ~ W_q x). With the exact sums the
            # weight error would apply to x - c, which after GELU is larger than x (most of a
            # GELU row sits near 0, far from its centre): measured 1.6x the error.
            self.register_buffer("row_sums", qw.dequantize().sum(dim=1) if centered else None)

        def forward(self, x):
            shape = x.shape
            x2 = x.reshape(-1, shape[-1]).float()
            rows = x2.shape[0]
            buf = torch.empty(rows + 1, shape[-1], dtype=torch.float32, device=x.device)
            if self.centered:
                lo, hi = torch.aminmax(x2, dim=1, keepdim=True)
                c = (hi + lo).mul_(0.5)
                s = (hi - lo).mul_(0.5 / _CENTERED_EDGE).clamp_min_(1e-30)
                torch.sub(x2, c, out=buf[:rows]).div_(s)
            else:
                s = x2.abs().amax(dim=1, keepdim=True).clamp_min_(1e-30)
                torch.div(x2, s, out=buf[:rows])
            buf[rows].zero_()
            buf[rows, 0], buf[rows, 1] = 1.0, -1.0  # anchor: the tensor's range is [-1, 1]
            y = torch.ops.quantized.linear_dynamic(buf, self._packed, True)[:rows]
            y = y.mul_(s) if self.bias is None else torch.addcmul(self.bias, y, s)
            if self.centered:
                y.addcmul_(c, self.row_sums)
            return y.view(*shape[:-1], self.out_features)

        def extra_repr(self) -> str:
            return (f"in_features={self.in_features}, out_features={self.out_features}, int8"
                    f"{', centered' if self.centered else ''}")

    return _Int8Linear


def int8_linear_class():
    """The ``torch.nn.Module`` class of int8 layers (built on first use; torch imports lazily)."""
    global Int8Linear
    if not hasattr(Int8Linear, "forward"):
        Int8Linear = _module_class()  # type: ignore[misc]
    return Int8Linear


def quantize_int8(model: Any, engine: str = INT8_ENGINE, *, centered: bool = True) -> dict[str, int]:
    """Replace every linear layer of `model`'s transformer body (``model.base_model``) by an
    :class:`Int8Linear`, in place. Returns ``{"int8_linears": n}``.

    `centered`: each activation row is quantized over its own [min, max] (the default) rather
    than [-max|x|, max|x|] (the first version; kept to compare, ``loadtests/bench_probe.py``).

    The model must be float32 on CPU and not yet patched by :mod:`dialscore_server.nll.engine.kernels`
    (quantize first; :func:`~dialscore_server.checkpoints.loading.load_model` does). The output
    head (``get_output_embeddings()``, outside the body for every family served here; a tied head
    shares the embedding matrix, which is never quantized) and a classifier's head stay float32.
    """
    import torch
    from transformers.pytorch_utils import Conv1D

    if next(model.parameters()).dtype != torch.float32:
        raise ValueError("int8 quantization starts from a float32 model")
    if any(hasattr(m, "_dialscore_stock_forward") for m in model.modules()):
        # nll.kernels folds GELU into c_fc's patched forward; replacing that layer would drop the
        # activation.
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
                new = cls(child.weight.t(), child.bias, centered)
            elif type(child) is torch.nn.Linear:
                new = cls(child.weight, child.bias, centered)
            else:
                continue
            setattr(module, name, new)
            n += 1
    return {"int8_linears": n}
