"""Faster CPU kernels for the engine's forward passes, applied in place to a loaded model.

Two measured bottlenecks of a stock transformers model (loadtests/bench_precision.py and
BENCHMARKS.md have the figures):

* **float32 matrix products.** PyTorch's float32 ``matmul``/``addmm`` go through MKL, which on the
  AVX-512 AMD EPYC the project was first measured on reaches about 230 GFLOP/s on two threads;
  oneDNN, bundled with the same PyTorch wheel, runs the same product there at about 500 GFLOP/s.
  On an AVX2-only EPYC the order reverses (oneDNN 0.65-0.8x of PyTorch's own route). So each
  kind of float32 and bfloat16 linear layer of the model (GPT-2's ``Conv1D``, ``nn.Linear``
  elsewhere) is routed through oneDNN's ``linear`` op (``torch.ops.mkldnn._linear_pointwise``)
  only where :mod:`dialscore_server.nll.engine.kernel_choice` measured it faster on this CPU, for that
  layer's shape, once per process. A routed layer reads the module's own weight (``Conv1D``
  weights are stored column-major so that the [out, in] matrix oneDNN reads is contiguous: no
  copy kept, ``state_dict`` unchanged), with the bias added in the product's epilogue. (bf16
  ``addmm`` already reaches oneDNN in stock PyTorch, but through a slower path: ~390 vs ~500
  GFLOP/s on the AVX-512 host.) The vocabulary projection's route is chosen the same way
  (``onednn_head`` in :func:`optimize`'s result).
* **GPT-2's GELU** (``gelu_new``) is written as five tensor operations, each a pass over the
  4 × width MLP activations (about 20% of a DialoGPT-medium forward pass). It is replaced by the same
  tanh formula in one kernel, fused into the preceding matrix product when oneDNN is used.

Results differ from the stock model only by float rounding (products summed in another order):
``check`` compares each patched layer with its stock forward on random input before keeping it.
The patched forwards fall back to the stock ones whenever autograd is recording (they are meant for
``torch.inference_mode``).
"""

from __future__ import annotations

import types
from typing import Any

from dialscore_server.nll.engine import kernel_choice

#: Largest difference from the stock forward accepted by the self-check, relative to the output's
#: largest magnitude, per weight dtype (bf16 results round to 8 bits whichever kernel runs).
CHECK_TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2}


def onednn_linear_available() -> bool:
    """Whether this PyTorch build has oneDNN's linear op on CPU."""
    import torch

    return bool(torch.backends.mkldnn.is_available()
                and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def linear(x, weight, bias=None, *, onednn: bool = True):
    """``x @ weight.T + bias`` (weight ``[out, in]``), through oneDNN for float32 CPU tensors when
    `onednn` and available, else ``torch.nn.functional.linear``."""
    import torch

    if (onednn and x.device.type == "cpu" and x.dtype == torch.float32
            and weight.dtype == torch.float32 and not torch.is_grad_enabled()
            and onednn_linear_available()):
        shape = x.shape
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, shape[-1]), weight, bias, "none", [], "")
        return y.view(*shape[:-1], y.shape[-1])
    return torch.nn.functional.linear(x, weight, bias)


def _patch_linear(module, *, transposed: bool, gelu: bool) -> None:
    """Route `module`'s forward through oneDNN (optionally with a fused tanh-GELU)."""
    import torch

    stock = module.forward
    attr, algorithm = ("gelu", "tanh") if gelu else ("none", "")

    def forward(self, x):
        if torch.is_grad_enabled() or x.dtype != self.weight.dtype:
            y = stock(x)
            return torch.nn.functional.gelu(y, approximate="tanh") if gelu else y
        shape = x.shape
        w = self.weight.t() if transposed else self.weight
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, shape[-1]), w, self.bias, attr, [],
                                                algorithm)
        return y.view(*shape[:-1], y.shape[-1])

    module.forward = types.MethodType(forward, module)
    module._dialscore_stock_forward = stock


def _relayout(conv) -> None:
    """Store a ``Conv1D`` weight ([in, out]) column-major, so that its transpose, the [out, in]
    matrix oneDNN reads, is contiguous (2-7% faster than a strided view on this CPU). Same shape,
    same values, same memory: the stock forward and ``state_dict`` are unaffected."""
    w = conv.weight
    if w.t().is_contiguous():
        return
    w.data = w.data.t().contiguous().t()


def _unpatch(module) -> None:
    module.forward = module._dialscore_stock_forward
    del module._dialscore_stock_forward


def check(module, in_features: int, gelu: bool) -> bool:
    """The patched forward equals the stock one (+ GELU) on random input, to CHECK_TOLERANCE.

    False too when oneDNN cannot run the product at all on this CPU (bf16 inner products need
    AVX-512 BF16 or AMX; an AVX2-only CPU raises "could not create a primitive descriptor")."""
    import torch

    gen = torch.Generator().manual_seed(0)
    dtype = module.weight.dtype
    x = torch.randn(3, 5, in_features, generator=gen).to(dtype)
    try:
        with torch.inference_mode():
            got = module.forward(x)
    except RuntimeError:
        return False
    with torch.no_grad():
        want = module._dialscore_stock_forward(x)
        if gelu:
            want = torch.nn.functional.gelu(want, approximate="tanh")
    scale = float(want.abs().max()) or 1.0
    tolerance = CHECK_TOLERANCE[str(dtype).removeprefix("torch.")]
    return float((got.float() - want.float()).abs().max()) <= tolerance * scale


def optimize(model, *, onednn: bool | None = None, fuse_gelu: bool = True,
             rows: int = kernel_choice.TIMING_ROWS) -> dict[str, Any]:
    """Apply the kernels above to `model`'s transformer body in place; returns what was changed.

    Args:
        onednn: ``None`` (the default): route a float32/bfloat16 CPU linear layer through oneDNN
            only where :func:`kernel_choice.onednn_is_faster` measured oneDNN faster for its
            shape (at the current torch thread count; measured once per process). ``True``: route
            every such layer (the AVX-512 premise, unmeasured). ``False``: none.
        fuse_gelu: replace GPT-2's five-op GELU by the one-kernel version, folded into ``c_fc``'s
            product where that layer is routed to oneDNN.
        rows: the row count the body's shapes are timed at (the engine's pass size); the head is
            timed at :data:`kernel_choice.TIMING_ROWS` (about one projection chunk).

    Returns counts ``onednn_linears`` (layers routed), ``stock_linears`` (float32/bfloat16 CPU
    layers left on PyTorch's route because it measured faster, or because oneDNN failed the
    self-check), ``fused_gelu``, ``gelu_into_linear``; ``onednn_head``: whether the vocabulary
    projection should run through oneDNN (same rule, for the head's shape in float32, the dtype
    it is projected in; False when `onednn` is False); ``routes``: the timings behind each
    measured choice, by shape.

    The output projection is left alone (the engine projects only target positions, in float32,
    through :func:`linear`). Only float32 and bfloat16 CPU linear layers are routed to oneDNN.
    Idempotent: a second call changes nothing and counts only what it changed.
    """
    import torch
    from transformers.activations import GELUTanh, NewGELUActivation
    from transformers.pytorch_utils import Conv1D

    dtypes = (torch.float32, torch.bfloat16)
    done: dict[str, Any] = {"onednn_linears": 0, "stock_linears": 0, "fused_gelu": 0,
                            "gelu_into_linear": 0, "onednn_head": False}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    use_onednn = onednn is not False and onednn_linear_available()
    measured: set[kernel_choice.Shape] = set()

    timed_at: dict[kernel_choice.Shape, int] = {}

    def wanted(shape: kernel_choice.Shape, at: int = rows) -> bool:
        if onednn is True:
            return True
        measured.add(shape)
        timed_at[shape] = at
        return kernel_choice.onednn_is_faster(shape, at)

    def shape_of(module, gelu: bool) -> kernel_choice.Shape:
        w = module.weight
        in_f, out_f = (w.shape[0], w.shape[1]) if isinstance(module, Conv1D) else (w.shape[1], w.shape[0])
        return kernel_choice.Shape(in_f, out_f, str(w.dtype).removeprefix("torch."),
                                   isinstance(module, Conv1D), gelu)

    # GPT-2 style MLPs: c_fc -> act -> c_proj. The act is folded into c_fc when c_fc goes through
    # oneDNN; otherwise the Python-composed GELU is swapped for the one-kernel version.
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is not NewGELUActivation or not fuse_gelu:
                continue
            fc = getattr(module, "c_fc", None)
            if (use_onednn and isinstance(fc, Conv1D) and fc.weight.dtype in dtypes
                    and fc.weight.device.type == "cpu" and name == "act"
                    and not hasattr(fc, "_dialscore_stock_forward")):
                if wanted(shape_of(fc, gelu=True)):
                    _relayout(fc)
                    _patch_linear(fc, transposed=True, gelu=True)
                    if check(fc, fc.weight.shape[0], gelu=True):
                        setattr(module, name, torch.nn.Identity())
                        done["gelu_into_linear"] += 1
                        done["onednn_linears"] += 1
                        continue
                    _unpatch(fc)
                fc._dialscore_route_decided = True
                done["stock_linears"] += 1
            setattr(module, name, GELUTanh())
            done["fused_gelu"] += 1

    if use_onednn:
        for module in list(model.modules()):
            if (module is head or hasattr(module, "_dialscore_stock_forward")
                    or hasattr(module, "_dialscore_route_decided")):
                continue
            if isinstance(module, Conv1D):
                transposed, in_features = True, module.weight.shape[0]
            elif type(module) is torch.nn.Linear:
                transposed, in_features = False, module.in_features
            else:
                continue
            if module.weight.dtype not in dtypes or module.weight.device.type != "cpu":
                continue
            module._dialscore_route_decided = True  # decided once: a second call leaves it alone
            if not wanted(shape_of(module, gelu=False)):
                done["stock_linears"] += 1
                continue
            if transposed:
                _relayout(module)
            _patch_linear(module, transposed=transposed, gelu=False)
            if check(module, in_features, gelu=False):
                done["onednn_linears"] += 1
            else:
                _unpatch(module)
                done["stock_linears"] += 1
        if head is not None and head.weight.device.type == "cpu":
            vocab, width = head.weight.shape
            done["onednn_head"] = wanted(kernel_choice.Shape(width, vocab, "float32", False, False),
                                         kernel_choice.TIMING_ROWS)
    done["routes"] = {s.key(): kernel_choice.timing(s, timed_at[s]) for s in measured}
    return done
