"""How the engine's cost grows: time and peak memory against items, context length, candidates per
shared context (prefix reuse on and off), and concurrent callers, with a PNG per curve.

Curves (engine in-process, no Ray; random token ids, so the numbers do not depend on a tokenizer):

* **items**: N independent items (source 48 + target 16 tokens, no shared prefixes) in one
  ``score_encoded`` call, N = 1 ... --max-items. Theory: linear in N once passes are full
  (a fixed cost per call below that).
* **context**: 8 items with a 16-token target after an L-token source, L = 16 ... the window.
  Theory: linear in L for the matrix products, plus attention's L² term (small at these widths).
* **candidates**: k targets of 16 tokens after one shared 256-token context (capped to the
  window), k = 1 ... --max-candidates, prefix reuse on and off. Theory: reuse on costs about
  L + k·m positions, off k·(L + m).
* **callers**: C threads each scoring its own 16 items at once against one engine (the engine
  serialises calls: what a replica without batching does), C = 1 ... --max-callers; time until
  all are answered. Theory: linear in C (work grows with C; nothing is gained or lost by waiting).

Peak memory: the process's resident high-water mark (``VmHWM``) over each point, reset before
it through ``/proc/self/clear_refs`` (Linux), minus the resident size before the point (after
``malloc_trim``, so memory freed by earlier points does not hide this one's; PyTorch's CPU
allocator is glibc malloc). It is the memory the point's buffers took: activations, the
expanded prefix cache, logits chunks.

Every point is the best of --reps runs; each curve's times are also shown per unit of work
(seconds per item / per token / per candidate), which should stay flat or fall where the
theory says linear or better. On a shared machine, compare points within one run.

    python -m loadtests.cost_curves                       # gpt2 stand-in (64 wide), scaled down
    python -m loadtests.cost_curves --model medium --max-items 4096 --max-candidates 256 \\
        --max-callers 64                                  # DialoGPT-medium shapes, full ranges
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.engine import NLLEngine
from loadtests.common import (
    ROOT, add_threads, checkpoint, model_config, parser, quiet_torch, write_json,
)

FIGURES = ROOT / "docs" / "figures"


def _kib(field: str) -> int:
    """A ``/proc/self/status`` field, in KiB (0 when absent)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def measure(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """(best seconds of `reps` runs, peak resident growth in MiB over them)."""
    import gc

    gc.collect()
    try:  # hand memory freed by earlier points back to the OS, so the growth is this point's
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    except OSError:
        pass
    base = _kib("VmRSS")
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best, max(0, _kib("VmHWM") - base) / 1024


def powers(lo: int, hi: int) -> list[int]:
    """lo, then x2 (x4 when hi / lo > 64) up to below hi, then hi."""
    out, v = [], lo
    while v < hi:
        out.append(v)
        v *= 4 if hi // lo > 64 else 2
    return out + [hi]


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--model", choices=["small", "medium"], default="small")
    p.add_argument("--dtype", choices=["float32", "int8"], default="float32")
    add_threads(p)
    p.add_argument("--max-items", type=int, default=1024)
    p.add_argument("--max-candidates", type=int, default=256)
    p.add_argument("--max-candidates-off", type=int, default=None,
                   help="the candidates curve with reuse off stops here (default: --max-candidates); "
                        "it costs k·(L+m) positions by construction, and is the slow half on a wide model")
    p.add_argument("--max-callers", type=int, default=16)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--curves", default="items,context,candidates,callers",
                   help="comma-separated curves to measure (default: all four)")
    p.add_argument("--out", default=str(FIGURES), help="folder for cost_*.png and cost_curves.json")
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    quiet_torch(args.threads)
    config = model_config(checkpoint(args.model), args.dtype, "cpu")
    engines = {reuse: NLLEngine(config, num_threads=args.threads, prefix_reuse=reuse)
               for reuse in (True, False)}
    eng = engines[False]
    vocab = min(eng.tokenizer.vocab_size, eng.model.config.vocab_size)
    window = config.max_length
    rng = random.Random(0)

    def ids(k: int) -> tuple[int, ...]:
        return tuple(rng.randrange(vocab) for _ in range(k))

    warm = [EncodedItem(ids(48), ids(16), False) for _ in range(8)]
    for e in engines.values():  # first-call allocations (packed weights) outside every point
        e.score_encoded(warm)
    curves: dict[str, dict] = {}

    def curve(name, xs, make, engine_of=lambda x, variant: eng, variants=("",), unit=None,
              upto=lambda variant: None):
        """Measure `make(x)` for every x of `xs` (up to ``upto(variant)`` when that is not None)."""
        data = {"x": xs, "variants": {}}
        for variant in variants:
            ts, ms = [], []
            last = upto(variant)
            mine = [x for x in xs if last is None or x <= last]
            for x in mine:
                items = make(x)
                e = engine_of(x, variant)
                t, mem = measure(lambda: e.score_encoded(items), args.reps)
                ts.append(t)
                ms.append(mem)
                print(f"  {name:10s} {variant:9s} x={x:5d}  {t:8.4f} s  {t / unit(x) * 1e3:8.3f} ms/unit"
                      f"  peak +{mem:7.1f} MiB", flush=True)
            data["variants"][variant or "engine"] = {"x": mine, "seconds": ts, "peak_mib": ms}
        curves[name] = data

    print(f"{args.model} {args.dtype}, {args.threads} threads, window {window}, best of {args.reps}")
    wanted = set(args.curves.split(","))
    if "items" in wanted:
        n_items = powers(1, args.max_items)
        curve("items", n_items, lambda n: [EncodedItem(ids(48), ids(16), False) for _ in range(n)],
              unit=lambda n: n)
    if "context" in wanted:
        lengths = powers(16, window - 16)
        curve("context", lengths, lambda L: [EncodedItem(ids(L), ids(16), False) for _ in range(8)],
              unit=lambda L: 8 * (L + 16))
    ctx = min(256, window - 16)
    if "candidates" in wanted:
        shared = ids(ctx)
        cands = powers(1, args.max_candidates)
        curve("candidates", cands, lambda k: [EncodedItem(shared, ids(16), False) for _ in range(k)],
              engine_of=lambda k, v: engines[v == "reuse on"], variants=("reuse on", "reuse off"),
              unit=lambda k: k, upto=lambda v: args.max_candidates_off if v == "reuse off" else None)

    # Concurrent callers: C threads call the engine at once; a lock serialises engine calls, as a
    # replica's single engine does.
    lock = threading.Lock()
    callers = powers(1, args.max_callers) if "callers" in wanted else []
    data: dict[str, Any] = {"x": callers,
                            "variants": {"engine": {"x": callers, "seconds": [], "peak_mib": []}}}
    for c in callers:
        batches = [[EncodedItem(ids(48), ids(16), False) for _ in range(16)] for _ in range(c)]

        def run_all():
            def one(b):
                with lock:
                    eng.score_encoded(b)
            threads = [threading.Thread(target=one, args=(b,)) for b in batches]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        t, mem = measure(run_all, args.reps)
        data["variants"]["engine"]["seconds"].append(t)
        data["variants"]["engine"]["peak_mib"].append(mem)
        print(f"  callers    {'':9s} x={c:5d}  {t:8.4f} s  {t / c * 1e3:8.3f} ms/caller  peak +{mem:7.1f} MiB",
              flush=True)
    if callers:
        curves["callers"] = data

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    labels = {"items": "items per call", "context": "context tokens (8 items, 16-token targets)",
              "candidates": f"candidates after one {ctx}-token context",
              "callers": "concurrent callers (16 items each)"}
    for name, d in curves.items():
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
        for variant, v in d["variants"].items():
            ax.loglog(v["x"], v["seconds"], "o-", label=variant)
            ax2.semilogx(v["x"], v["peak_mib"], "o-", label=variant)
        first = list(d["variants"].values())[0]
        xs, ts = first["x"], first["seconds"]
        ax.loglog(xs, [ts[-1] * x / xs[-1] for x in xs], "k:", label="linear (through last)")
        ax.set_xlabel(labels[name])
        ax.set_ylabel("seconds (best of %d)" % args.reps)
        ax2.set_xlabel(labels[name])
        ax2.set_ylabel("peak RSS growth, MiB")
        ax.legend(fontsize=7)
        fig.suptitle(f"cost vs {name}: {args.model} stand-in, {args.dtype}, {args.threads} threads",
                     fontsize=9)
        fig.tight_layout()
        fig.savefig(out / f"cost_{name}.png", dpi=90)
        plt.close(fig)
    write_json(out / "cost_curves.json", {"args": vars(args), "curves": curves})
    print(f"figures: {out}/cost_{{{','.join(curves)}}}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
