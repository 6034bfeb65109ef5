"""Which float32/bfloat16 linear route a layer shape takes: oneDNN's linear op or PyTorch's own.

Which of the two is faster is a property of the CPU, the torch build, the thread count and the
product's shape, not of the code (docs/benchmarks/kernels.md has both orders, on different
CPUs and row counts). :func:`onednn_is_faster` therefore times both routes on the shape, and the result is
**chosen once per machine and shared by every process on it**: the timings live in
``kernel-routes.json`` under :func:`~dialscore_server.nll.engine.route_store.cache_dir`
(``$DIALSCORE_CACHE_DIR``, default ``~/.cache/dialscore``), keyed by :func:`machine` (CPU model,
a hash of its feature flags, torch version) and by shape, row count and torch thread count. The
first process that needs a choice times it under the file's lock; every other process, at any
later start, reads it. So every replica of a model on one machine takes the same routes and
computes the same numbers for the same request, whatever the load at its own start.

Limit: replicas on *different* machines choose separately. Two machines of different CPU models,
or of one model timed under different load, may take different routes for a shape; their NLLs
then differ by float rounding (products summed in another order; the kernels' self-check bounds
the difference per layer), never by more. To make a cluster's machines of one kind agree, give
them the same file (copy it, or set ``DIALSCORE_CACHE_DIR`` to a folder they share whose
filesystem honours ``flock``), or turn ``serving.fast_kernels`` off. Delete the file to time the
shapes again. Where the file cannot be written (a read-only home), no layer is routed through
oneDNN, so the process still takes the routes every other such process takes.

A *shape* is what the model's layers have in common: input and output width, weight dtype,
whether the stock layer stores its weight ``[in, out]`` (GPT-2's ``Conv1D``, multiplied by
``addmm``) or ``[out, in]`` (``nn.Linear``), and whether a tanh-GELU follows (fused into oneDNN's
product; a separate one-kernel GELU on the stock route). A 24-layer model has four such shapes
plus its head.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from dialscore_server import compat
from dialscore_server.nll.engine.route_store import RouteStore, cache_dir

logger = logging.getLogger(__name__)

#: Rows of the timed product when the caller names none (the vocabulary projection: about one
#: projection chunk). The engine times its body's shapes at its own pass size (its token budget,
#: at most MAX_TIMING_ROWS): the winner can depend on the row count.
TIMING_ROWS = 128
#: The most rows a timing uses (bounds the one-off cost per shape).
MAX_TIMING_ROWS = 1024
#: Each route is timed this many times, the two alternating (a burst of load from elsewhere hits
#: both alike), after one untimed warm-up call each; the fastest run of each is compared.
TIMING_REPEATS = 3
#: The file, under :func:`~dialscore_server.nll.engine.route_store.cache_dir`.
ROUTES_FILE = "kernel-routes.json"


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
    """Fastest seconds of each route for one shape at one row count and thread count."""

    onednn_s: float
    stock_s: float

    @property
    def onednn(self) -> bool:
        """Whether oneDNN's route was the faster (ties go to the stock route)."""
        return self.onednn_s < self.stock_s

    def describe(self) -> str:
        """e.g. ``0.52 / 0.61 ms -> oneDNN`` (oneDNN's fastest, the stock route's, the choice)."""
        return (f"{self.onednn_s * 1e3:.2f} / {self.stock_s * 1e3:.2f} ms -> "
                f"{'oneDNN' if self.onednn else 'PyTorch'}")


def measure(shape: Shape, rows: int = TIMING_ROWS, repeats: int = TIMING_REPEATS) -> Timing:
    """Time both routes of `shape` on random data of `rows` rows, in this process, now (no store;
    see :func:`timing`). Raises RuntimeError when oneDNN cannot run the product (bfloat16 on a
    CPU without native bfloat16 instructions)."""
    import torch

    dtype = getattr(torch, shape.dtype)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, shape.in_features, generator=gen).to(dtype)
    w = torch.randn(shape.out_features, shape.in_features, generator=gen).to(dtype)  # [out, in]
    b = torch.randn(shape.out_features, generator=gen).to(dtype)
    w_in_out = w.t().contiguous() if shape.weight_in_out else None

    def onednn():
        return compat.onednn_linear(x, w, b, gelu=shape.gelu)

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
    return Timing(best[onednn], best[stock])


@functools.lru_cache(maxsize=1)
def machine() -> str:
    """What a choice depends on besides the shape and threads: the CPU model, a hash of its
    feature flags and the torch version, e.g. ``AMD EPYC 7B13 flags=3f2a9c1d0b7e torch=2.13.0+cpu``.
    The CPU is read from ``/proc/cpuinfo`` (Linux), else from :mod:`platform`; read once per
    process."""
    import torch

    model, flags = "", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "model name" and not model:
                    model = value.strip()
                elif name == "flags" and not flags:
                    flags = " ".join(sorted(value.split()))
                if model and flags:
                    break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return f"{model} flags={digest} torch={torch.__version__}"


def routes_path() -> Path:
    """The per-machine route file: ``cache_dir() / ROUTES_FILE``."""
    return cache_dir() / ROUTES_FILE


#: (file, machine, entry) -> timing, or None where the shape is not routed (oneDNN cannot run it,
#: or the file could not be written): what this process has already read or chosen.
_READ: dict[tuple[str, str, str], Timing | None] = {}


def _entry(shape: Shape, rows: int, threads: int) -> str:
    return f"{shape.key()} rows={rows} threads={threads}"


def timing(shape: Shape, rows: int = TIMING_ROWS) -> Timing | None:
    """This machine's timing of `shape` at `rows` rows (capped at MAX_TIMING_ROWS) and torch's
    current thread count: read from :func:`routes_path`, or, when no process on this machine has
    chosen it yet, measured now (:func:`measure`) and written there for every later asker.

    None when oneDNN cannot run the product, or when the file cannot be written (logged): the
    shape then stays on PyTorch's route."""
    import torch

    rows = max(1, min(rows, MAX_TIMING_ROWS))
    path, here, entry = routes_path(), machine(), _entry(shape, rows, torch.get_num_threads())
    key = (str(path), here, entry)
    if key not in _READ:
        try:
            record = RouteStore(path).get_or_create(here, entry, lambda: _measured(shape, rows))
        except OSError as e:
            logger.warning("kernel route of %s not shared (%s): PyTorch's route kept", entry, e)
            record = {"onednn_runs": False}
        _READ[key] = _from_record(record)
    return _READ[key]


def onednn_is_faster(shape: Shape, rows: int = TIMING_ROWS) -> bool:
    """Whether this machine's choice for `shape` at `rows` rows is oneDNN (:func:`timing`)."""
    t = timing(shape, rows)
    return t is not None and t.onednn


def recorded_routes() -> dict[str, Timing | None]:
    """Every choice recorded for this machine in :func:`routes_path` by any process, keyed
    ``"<shape> rows=<n> threads=<n>"`` (None: oneDNN cannot run it). For reports and benchmarks;
    reads the file, times nothing."""
    entries = RouteStore(routes_path()).read().get(machine(), {})
    return {k: _from_record(v) for k, v in entries.items()}


def described() -> dict[str, str]:
    """:func:`recorded_routes` as words (:meth:`Timing.describe`, or ``oneDNN cannot run it``)."""
    return {k: "oneDNN cannot run it" if t is None else t.describe()
            for k, t in recorded_routes().items()}


def forget() -> None:
    """Drop what this process has read (the file is untouched; tests)."""
    _READ.clear()


def _measured(shape: Shape, rows: int) -> dict:
    try:
        t = measure(shape, rows)
    except RuntimeError:
        return {"onednn_runs": False}
    return {"onednn_s": t.onednn_s, "stock_s": t.stock_s, "onednn": t.onednn}


def _from_record(record: dict) -> Timing | None:
    if record.get("onednn_runs") is False:
        return None
    return Timing(float(record["onednn_s"]), float(record["stock_s"]))
