"""Faster CPU kernels for the engine's forward passes, applied to a loaded model by replacing modules.

* **Linear layers through oneDNN.** Each float32 or bfloat16 CPU linear layer of the model's body
  (GPT-2's ``Conv1D``, ``nn.Linear`` elsewhere) whose shape takes oneDNN's route on this machine
  (:mod:`~dialscore_server.nll.engine.kernel_choice`: chosen once per machine, shared by every
  process) is replaced in its parent module by a :class:`OneDNNLinear` holding the same weight
  and bias Parameters: no copy, same ``state_dict`` keys and tensors. A ``Conv1D`` weight
  (``[in, out]``) is stored column-major, same shape and values, so that the ``[out, in]`` matrix
  oneDNN reads is contiguous. The vocabulary projection's route is chosen the same way
  (``onednn_head`` in :func:`optimize`'s result; the engine projects through :func:`linear`).
* **GPT-2's GELU** (``NewGELUActivation``, five tensor operations, each a pass over the MLP's
  activations) is replaced by transformers' ``GELUTanh`` (the same tanh formula in one kernel), or
  folded into the preceding ``c_fc`` product when that layer goes through oneDNN (the activation
  then becomes ``nn.Identity``).

Results differ from the stock model only by float rounding (products summed in another order):
each replacement is compared with the layer it replaces on random input (:func:`agrees`) before
it is kept. A :class:`OneDNNLinear` computes what the replaced layer computed whenever autograd
is recording (the kernels are meant for ``torch.inference_mode``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers.activations import GELUTanh, NewGELUActivation
from transformers.pytorch_utils import Conv1D

from dialscore_server import compat
from dialscore_server.checkpoints.quantize import KERNELS_APPLIED
from dialscore_server.compat import onednn_linear_available
from dialscore_server.nll.engine import kernel_choice

__all__ = ["CHECK_TOLERANCE", "OneDNNLinear", "agrees", "linear", "onednn_linear_available",
           "optimize"]

#: Largest difference from the replaced layer accepted by the self-check, relative to the output's
#: largest magnitude, per weight dtype (bf16 results round to 8 bits whichever kernel runs).
CHECK_TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2}
#: Weight dtypes routed through oneDNN.
ROUTED_DTYPES = (torch.float32, torch.bfloat16)


class OneDNNLinear(nn.Module):
    """A linear layer computed by oneDNN (:func:`dialscore_server.compat.onednn_linear`),
    followed by the tanh-GELU fused into the product when `gelu`.

    Args:
        weight, bias: the replaced layer's own Parameters (bias may be None), registered here under
            the same names, so the parent's ``state_dict`` is unchanged.
        weight_in_out: `weight` is stored ``[in, out]`` and the stock product is
            ``addmm(bias, x, weight)`` (GPT-2's ``Conv1D``); otherwise ``[out, in]`` and
            ``linear(x, weight, bias)`` (``nn.Linear``).
        gelu: apply ``gelu(approximate="tanh")`` to the product.

    While autograd records, or for an input whose dtype is not the weight's, :meth:`forward` is
    :meth:`stock_forward`.
    """

    def __init__(self, weight: nn.Parameter, bias: nn.Parameter | None, *, weight_in_out: bool,
                 gelu: bool):
        super().__init__()
        self.weight = weight
        self.register_parameter("bias", bias)
        self.weight_in_out = weight_in_out
        self.gelu = gelu
        self.in_features, self.out_features = (
            (weight.shape[0], weight.shape[1]) if weight_in_out else (weight.shape[1], weight.shape[0]))

    @classmethod
    def replacing(cls, layer: nn.Module, *, gelu: bool) -> OneDNNLinear:
        """The replacement of `layer` (a ``Conv1D`` or an ``nn.Linear``), sharing its Parameters.
        A ``Conv1D`` weight is stored column-major first (:func:`_column_major`)."""
        if isinstance(layer, Conv1D):
            _column_major(layer.weight)
            return cls(layer.weight, layer.bias, weight_in_out=True, gelu=gelu)
        return cls(layer.weight, layer.bias, weight_in_out=False, gelu=gelu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype != self.weight.dtype:
            return self.stock_forward(x)
        w = self.weight.t() if self.weight_in_out else self.weight
        y = compat.onednn_linear(x.reshape(-1, x.shape[-1]), w, self.bias, gelu=self.gelu)
        return y.view(*x.shape[:-1], self.out_features)

    def stock_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The replaced layer's computation (then the GELU), through PyTorch's own products."""
        if self.weight_in_out:
            y = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
            y = y.view(*x.shape[:-1], self.out_features)
        else:
            y = nn.functional.linear(x, self.weight, self.bias)
        return nn.functional.gelu(y, approximate="tanh") if self.gelu else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"weight={'[in,out]' if self.weight_in_out else '[out,in]'}"
                f"{', gelu=tanh' if self.gelu else ''}")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           onednn: bool) -> torch.Tensor:
    """``x @ weight.T + bias`` (weight ``[out, in]``): through oneDNN when `onednn` and `x` and
    `weight` are float32 CPU tensors outside autograd (and the op exists), else
    ``torch.nn.functional.linear``."""
    if (onednn and x.device.type == "cpu" and x.dtype == torch.float32
            and weight.dtype == torch.float32 and not torch.is_grad_enabled()
            and onednn_linear_available()):
        y = compat.onednn_linear(x.reshape(-1, x.shape[-1]), weight, bias)
        return y.view(*x.shape[:-1], y.shape[-1])
    return nn.functional.linear(x, weight, bias)


def agrees(candidate: OneDNNLinear, layer: nn.Module) -> bool:
    """`candidate` equals `layer` (then the tanh-GELU when ``candidate.gelu``) on random input, to
    CHECK_TOLERANCE. False too when oneDNN cannot run the product at all on this CPU."""
    gen = torch.Generator().manual_seed(0)
    dtype = candidate.weight.dtype
    x = torch.randn(3, 5, candidate.in_features, generator=gen).to(dtype)
    try:
        with torch.inference_mode():
            got = candidate(x)
    except RuntimeError:
        return False
    with torch.no_grad():
        want = layer(x)
        if candidate.gelu:
            want = nn.functional.gelu(want, approximate="tanh")
    scale = float(want.abs().max()) or 1.0
    tolerance = CHECK_TOLERANCE[str(dtype).removeprefix("torch.")]
    return float((got.float() - want.float()).abs().max()) <= tolerance * scale


def optimize(model: nn.Module, *, onednn: bool | None = None, fuse_gelu: bool = True,
             rows: int = kernel_choice.TIMING_ROWS) -> dict[str, Any]:
    """Apply the kernels above to `model`'s transformer body by replacing modules; returns what
    was done.

    Args:
        onednn: ``None`` (the default): route a float32/bfloat16 CPU linear layer through oneDNN
            where this machine's choice for its shape is oneDNN
            (:func:`kernel_choice.onednn_is_faster`). ``True``: route every such layer, unmeasured.
            ``False``: none.
        fuse_gelu: replace GPT-2's five-op GELU by ``GELUTanh``, folded into ``c_fc``'s product
            where that layer is routed to oneDNN.
        rows: the row count the body's shapes are chosen at (the engine's pass size); the head is
            chosen at :data:`kernel_choice.TIMING_ROWS` (about one projection chunk).

    Returns counts ``onednn_linears`` (layers replaced by a :class:`OneDNNLinear` in this call),
    ``stock_linears`` (float32/bfloat16 CPU linear layers this call left on PyTorch's route: the
    choice, or a failed self-check), ``fused_gelu`` (GELUs replaced by ``GELUTanh``),
    ``gelu_into_linear``; ``onednn_head``: whether the vocabulary projection should run through
    oneDNN (float32, the dtype it is projected in; False when `onednn` is False); ``routes``: the
    timing behind each choice consulted, by :meth:`kernel_choice.Shape.key`.

    The output projection is never replaced. A model with a layer replaced is marked
    :data:`~dialscore_server.checkpoints.quantize.KERNELS_APPLIED`, which int8 quantization
    refuses. Idempotent: a second call replaces nothing and makes the same choices.
    """
    done: dict[str, Any] = {"onednn_linears": 0, "stock_linears": 0, "fused_gelu": 0,
                            "gelu_into_linear": 0, "onednn_head": False}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    use_onednn = onednn is not False and onednn_linear_available()
    consulted: dict[kernel_choice.Shape, int] = {}
    left_stock: set[int] = set()

    def routed(shape: kernel_choice.Shape, at: int = rows) -> bool:
        if onednn is True:
            return True
        consulted[shape] = at
        return kernel_choice.onednn_is_faster(shape, at)

    def replace(parent: nn.Module, name: str, layer: nn.Module, gelu: bool) -> bool:
        candidate = OneDNNLinear.replacing(layer, gelu=gelu)
        if agrees(candidate, layer):
            setattr(parent, name, candidate)
            return True
        _row_major(layer.weight)
        return False

    # GPT-2 style MLPs: c_fc -> act -> c_proj. The act is folded into c_fc when c_fc goes through
    # oneDNN; otherwise the Python-composed GELU is swapped for the one-kernel version.
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not fuse_gelu or type(child) not in (NewGELUActivation, GELUTanh):
                continue
            fc = getattr(parent, "c_fc", None)
            if use_onednn and name == "act" and _routable(fc, head):
                if routed(_shape(fc, gelu=True)) and replace(parent, "c_fc", fc, gelu=True):
                    setattr(parent, name, nn.Identity())
                    done["gelu_into_linear"] += 1
                    done["onednn_linears"] += 1
                    continue
                left_stock.add(id(fc))
                done["stock_linears"] += 1
            if type(child) is NewGELUActivation:
                setattr(parent, name, GELUTanh())
                done["fused_gelu"] += 1

    if use_onednn:
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if id(child) in left_stock or not _routable(child, head):
                    continue
                if routed(_shape(child, gelu=False)) and replace(parent, name, child, gelu=False):
                    done["onednn_linears"] += 1
                else:
                    done["stock_linears"] += 1
        if head is not None and head.weight.device.type == "cpu":
            vocab, width = head.weight.shape
            done["onednn_head"] = routed(kernel_choice.Shape(width, vocab, "float32", False, False),
                                         kernel_choice.TIMING_ROWS)
    done["routes"] = {s.key(): kernel_choice.timing(s, at) for s, at in consulted.items()}
    if done["onednn_linears"]:
        setattr(model, KERNELS_APPLIED, True)
    return done


def _routable(module: Any, head: Any) -> bool:
    """A stock linear layer (exactly ``Conv1D`` or ``nn.Linear``) of a routed dtype on CPU, other
    than the output head."""
    return (type(module) in (Conv1D, nn.Linear) and module is not head
            and module.weight.dtype in ROUTED_DTYPES and module.weight.device.type == "cpu")


def _shape(layer: nn.Module, gelu: bool) -> kernel_choice.Shape:
    w = layer.weight
    in_out = isinstance(layer, Conv1D)
    in_f, out_f = (w.shape[0], w.shape[1]) if in_out else (w.shape[1], w.shape[0])
    return kernel_choice.Shape(in_f, out_f, str(w.dtype).removeprefix("torch."), in_out, gelu)


def _column_major(weight: nn.Parameter) -> None:
    """Store `weight` (``[in, out]``) column-major, so that its transpose is contiguous. Same
    shape, same values; the Parameter object stays the same."""
    if not weight.t().is_contiguous():
        weight.data = weight.data.t().contiguous().t()


def _row_major(weight: nn.Parameter) -> None:
    """Undo :func:`_column_major` (the stock layout)."""
    if not weight.is_contiguous():
        weight.data = weight.data.contiguous()
