"""Which float32/bfloat16 linear route is faster on this CPU: oneDNN's linear op or PyTorch's own.

:mod:`dialscore_server.nll.engine.kernels` routes linear layers through oneDNN because on the AVX-512
host the project was first measured on it ran float32 products about twice as fast as MKL, which
PyTorch's own ``addmm`` uses. On an AVX2-only host the order reverses (BENCHMARKS.md section 6),
so the premise is a property of the CPU, not of the code: :func:`onednn_is_faster` times both
routes on the layer's own shape, once per process, and the kernels keep whichever was faster.

A *shape* is what the model's layers have in common: input and output width, weight dtype,
whether the stock layer stores its weight ``[in, out]`` (GPT-2's ``Conv1D``, multiplied by
``addmm``) or ``[out, in]`` (``nn.Linear``), and whether a tanh-GELU follows (fused into oneDNN's
product; a separate one-kernel GELU on the stock route). A 24-layer model has four such shapes
plus its head, so a process times a handful of products once.

The choice only moves work between two kernels that compute the same product; numbers differ by
float rounding (summation order), as with any oneDNN routing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: Rows of the timed product when the caller names none (the vocabulary projection: ~170
#: positions at a time). The winner depends on the row count (on an AVX2 host oneDNN won the
#: DialoGPT-medium MLP shapes at 128 rows and lost them at 1,024), so the engine times its body's
#: shapes at its own pass size (its token budget, at most MAX_TIMING_ROWS).
TIMING_ROWS = 128
#: The most rows a timing uses (bounds the one-off cost: a few seconds on DialoGPT-medium shapes).
MAX_TIMING_ROWS = 1024
#: Each route is timed this many times, the two alternating (a burst of load from elsewhere hits
#: both alike), after one untimed warm-up call each; the fastest run of each is compared.
TIMING_REPEATS = 3


@dataclass(frozen=True)
class Shape:
    """One kind of linear layer (see the module docstring). `dtype`: ``"float32"``/``"bfloat16"``."""

    in_features: int
    out_features: int
    dtype: str
    weight_in_out: bool
    gelu: bool

    def key(self) -> str:
        """A short readable name, e.g. ``1024x4096 float32 [in,out] +gelu``."""
        return (f"{self.in_features}x{self.out_features} {self.dtype} "
                f"{'[in,out]' if self.weight_in_out else '[out,in]'}{' +gelu' if self.gelu else ''}")


@dataclass(frozen=True)
class Timing:
    """Fastest seconds of each route for one shape (threads: torch's intra-op threads then)."""

    onednn_s: float
    stock_s: float
    threads: int

    @property
    def onednn(self) -> bool:
        """Whether oneDNN's route was the faster (ties go to the stock route)."""
        return self.onednn_s < self.stock_s

    def describe(self) -> str:
        """e.g. ``0.52 / 0.61 ms -> oneDNN`` (oneDNN's fastest, the stock route's, the choice)."""
        return (f"{self.onednn_s * 1e3:.2f} / {self.stock_s * 1e3:.2f} ms -> "
                f"{'oneDNN' if self.onednn else 'PyTorch'}")


#: (shape, rows, threads) -> timing, or None where oneDNN could not run the product.
_TIMINGS: dict[tuple[Shape, int, int], Timing | None] = {}


def measure(shape: Shape, rows: int = TIMING_ROWS, repeats: int = TIMING_REPEATS) -> Timing:
    """Time both routes of `shape` on random data of `rows` rows (no caching; see
    :func:`onednn_is_faster`). Raises RuntimeError when oneDNN cannot run the product (bf16 on a
    CPU without AVX-512 BF16/AMX)."""
    import torch

    dtype = getattr(torch, shape.dtype)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, shape.in_features, generator=gen).to(dtype)
    w = torch.randn(shape.out_features, shape.in_features, generator=gen).to(dtype)  # [out, in]
    b = torch.randn(shape.out_features, generator=gen).to(dtype)
    w_in_out = w.t().contiguous() if shape.weight_in_out else None
    attr, algorithm = ("gelu", "tanh") if shape.gelu else ("none", "")

    def onednn():
        return torch.ops.mkldnn._linear_pointwise(x, w, b, attr, [], algorithm)

    def stock():
        y = torch.addmm(b, x, w_in_out) if w_in_out is not None else torch.nn.functional.linear(x, w, b)
        return torch.nn.functional.gelu(y, approximate="tanh") if shape.gelu else y

    best = {onednn: float("inf"), stock: float("inf")}
    with torch.inference_mode():
        for fn in best:
            fn()
        for _ in range(repeats):
            for fn in best:
                t = time.perf_counter()
                fn()
                best[fn] = min(best[fn], time.perf_counter() - t)
    return Timing(best[onednn], best[stock], torch.get_num_threads())


def onednn_is_faster(shape: Shape, rows: int = TIMING_ROWS) -> bool:
    """Whether oneDNN's linear beats the stock route for `shape` on products of `rows` rows
    (capped at MAX_TIMING_ROWS) at the current thread count.

    Measured on first use and remembered for the process (per shape, rows and thread count);
    False when oneDNN cannot run the product at all."""
    t = timing(shape, rows)
    return t is not None and t.onednn


def timing(shape: Shape, rows: int = TIMING_ROWS) -> Timing | None:
    """The remembered (or now measured) timing of `shape` at `rows` rows (capped at
    MAX_TIMING_ROWS); None when oneDNN cannot run it."""
    import torch

    rows = max(1, min(rows, MAX_TIMING_ROWS))
    key = (shape, rows, torch.get_num_threads())
    if key not in _TIMINGS:
        try:
            _TIMINGS[key] = measure(shape, rows)
        except RuntimeError:
            _TIMINGS[key] = None
    return _TIMINGS[key]


def remembered() -> dict[str, Timing | None]:
    """Every timing taken in this process, by :meth:`Shape.key` (for reports)."""
    return {f"{s.key()} rows={r} threads={n}": t for (s, r, n), t in _TIMINGS.items()}


def described() -> dict[str, str]:
    """:func:`remembered`, each timing as :meth:`Timing.describe` words (for logs and reports;
    "oneDNN cannot run it" where it could not)."""
    return {k: "oneDNN cannot run it" if t is None else t.describe()
            for k, t in remembered().items()}


def forget() -> None:
    """Drop the remembered timings (tests; a process whose CPU share changed)."""
    _TIMINGS.clear()
