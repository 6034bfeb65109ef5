"""Reduced precision on this machine: matrix-product speed by dtype, and whether bf16/int8 change decisions.

Part 1, speed: a 2048 x 2048 x 2048 product, best of --reps, in float32 through ``torch.matmul``
(MKL on this build) and through oneDNN's linear op (what the engine's CPU kernels use), and in
bfloat16 through ``torch.matmul`` (PyTorch routes CPU bf16 products to oneDNN). float16 on CPU is
timed on a 512^3 product only: PyTorch has no fast CPU kernel for it (the registry refuses float16
on CPU).

Part 1b (``--int8-kernels``): a DialoGPT-medium MLP block (1,024 → 4,096 → 1,024, 1,024 tokens)
in float32 (torch and oneDNN), through ``quantize_dynamic`` on each quantized engine, and through
the engine's own int8 layer (per-row activation scales, services/dialscore_server/checkpoints/quantize.py),
interleaved, best of --reps: the measurement behind the int8 route. One function per route below.

Part 2, agreement: the same items scored by the engine in float32 and in each reduced precision of
``--dtypes`` (the registry's ``dtype``: ``bfloat16``, ``int8``), the decisions compared:

* CEDAR probes on clients/dialscore/probes/cedar_sample.jsonl, both settings: for every (valid, corrupted) pair,
  is NLL(valid) < NLL(corrupted)? (attribution: the explanation after history + response + "Why?";
  inference: the response after explanation + history);
* MuTual dev (../shared/data/mutual/dev.jsonl): which of the four options has the lowest NLL
  given the context (ties to the first option in both precisions);
* rerank order: the same four MuTual options as rerank candidates after their context: is the
  whole order by NLL (best to worst) the same?

Models: ``small-reinit`` (the gpt2 stand-in re-initialised N(0, 0.3): NLLs vary strongly by token),
``small-trained`` (the stand-in trained ~30 s on templated sentences and the sample's own turns and
explanations, so it has learned some word order) and, optionally, ``medium`` (random GPT-2 with
DialoGPT-medium shapes, GPT-2's own init: near-uniform predictions, tiny margins, a worst case).
The project documents bf16 as safe for a (model, task) only where agreement is at least 99%;
each row also gives the agreement's Wilson 95% interval (loadtests/agreement_stats.py): a few
hundred decisions cannot tell 98.5% from 99.5%.

    python -m loadtests.bench_precision                       # small-reinit, small-trained, int8
    python -m loadtests.bench_precision --dtypes int8,bfloat16 --int8-kernels
    python -m loadtests.bench_precision --models medium --probe-dialogues 6 --mutual-limit 60
"""

from __future__ import annotations

from dialscore_server import compat

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from dialscore.evals.mutual import read_mutual
from dialscore.probes import SAMPLE_DATA
from dialscore.probes.corruptions import corrupt_dialogues
from dialscore.probes.data import load_dialogues
from dialscore_server.checkpoints.quantize import int8_linear_class
from dialscore_server.checkpoints.standins import MARKER, templated_sentences, train_causal
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.engine.engine import NLLEngine
from loadtests.agreement_stats import wilson_interval
from loadtests.common import (
    SHARED_DATA, WORK, Column, add_threads, best_of, checkpoint, model_config, parser, quiet_torch,
    square_products, table, write_json,
)

MUTUAL_DEV = SHARED_DATA / "mutual" / "dev.jsonl"
SAFE = 0.99
#: A route of part 1b: the MLP block on an input of 1,024 tokens.
Route = Callable[[Any], object]


# ------------------------------------------------------------------------------------- speed
def matmul_speeds(reps: int) -> list[tuple[str, float]]:
    """FLOP/s of the 2048^3 product by route, interleaved (best of 3 x best of `reps`), then of
    a float16 512^3 product (one run)."""
    import torch

    fp32 = square_products("float32")
    routes = {"float32 torch.matmul (MKL)": fp32["torch.matmul"],
              "bfloat16 torch.matmul (oneDNN)": square_products("bfloat16")["torch.matmul"]}
    if "oneDNN linear" in fp32:
        routes["float32 oneDNN linear"] = fp32["oneDNN linear"]
    runs: dict[str, list[float]] = defaultdict(list)
    for _ in range(3):  # interleaved: a burst of load from elsewhere hits them alike
        for name, fn in routes.items():
            fn()
            runs[name].append(best_of(fn, reps))
    out = [(name, 2 * 2048 ** 3 / min(runs[name])) for name in routes]
    m = 512
    h1, h2 = torch.randn(m, m).half(), torch.randn(m, m).half()
    with torch.inference_mode():
        start = time.perf_counter()
        torch.matmul(h1, h2)
        out.append(("float16 torch.matmul (512^3, one run)", 2 * m ** 3 / (time.perf_counter() - start)))
    return out


def float32_linear(mlp: Any) -> dict[str, Route]:
    """PyTorch's own float32 route (the reference of part 1b)."""
    return {"float32 F.linear": mlp}


def float32_onednn(mlp: Any) -> dict[str, Route]:
    """Both layers through oneDNN's float32 linear op."""

    def run(x: Any) -> object:
        hidden = compat.onednn_linear(x, mlp[0].weight, mlp[0].bias)
        return compat.onednn_linear(hidden, mlp[1].weight, mlp[1].bias)

    return {"float32 oneDNN linear": run}


def quantize_dynamic_engines(mlp: Any) -> dict[str, Route]:
    """``torch.ao.quantization.quantize_dynamic`` (per-channel weights, per-tensor activations)
    on every quantized engine this build supports."""
    import copy
    import warnings

    import torch

    routes: dict[str, Route] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        for engine in ("x86", "fbgemm", "onednn", "qnnpack"):
            if engine not in torch.backends.quantized.supported_engines:
                continue
            torch.backends.quantized.engine = engine
            q = quantize_dynamic(copy.deepcopy(mlp), {torch.nn.Linear: per_channel_dynamic_qconfig},
                                 dtype=torch.qint8)

            def run(x: Any, q: Any = q, e: str = engine) -> object:
                torch.backends.quantized.engine = e
                return q(x)

            routes[f"int8 quantize_dynamic ({engine}, per-tensor activations)"] = run
    return routes


def engine_int8_layer(mlp: Any) -> dict[str, Route]:
    """The engine's own int8 layer (per-row activation scales) on oneDNN."""
    import torch

    torch.backends.quantized.engine = "onednn"
    cls = int8_linear_class()
    own = torch.nn.Sequential(cls(mlp[0].weight, mlp[0].bias), cls(mlp[1].weight, mlp[1].bias))

    def run(x: Any) -> object:
        torch.backends.quantized.engine = "onednn"
        return own(x)

    return {"int8 engine layer (onednn, per-row activations)": run}


def int8_kernel_speeds(reps: int) -> list[tuple[str, float]]:
    """FLOP/s of a DialoGPT-medium MLP block at 1,024 tokens by route (see the docstring)."""
    import torch

    m_tok, width = 1024, 1024
    flops = 2 * 2 * m_tok * width * 4 * width
    mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width))
    x = torch.randn(m_tok, width)
    routes = {**float32_linear(mlp), **float32_onednn(mlp), **quantize_dynamic_engines(mlp),
              **engine_int8_layer(mlp)}
    best: dict[str, float] = defaultdict(lambda: float("inf"))
    with torch.inference_mode():
        for fn in routes.values():
            fn(x)
        for _ in range(reps):  # interleaved: a burst of load from elsewhere hits all alike
            for name, fn in routes.items():
                best[name] = min(best[name], best_of(partial(fn, x), 1))
    return [(name, flops / best[name]) for name in routes]


# ------------------------------------------------------------------------------------- models
def checkpoints(names: list[str], work: Path = WORK) -> dict[str, Path]:
    """Each named model's checkpoint (see the module docstring), built on first use."""
    import shutil

    out = {}
    for name in names:
        if name == "small-reinit":
            out[name] = checkpoint("small", work)
        elif name == "medium":
            out[name] = checkpoint("medium", work)
        elif name == "small-trained":
            checkpoint("small", work)  # the stand-ins it starts from
            path = work / "small-trained"
            if not (path / MARKER).is_file():
                texts = templated_sentences(3000, seed=1)
                for d in load_dialogues(SAMPLE_DATA):
                    texts += list(d.history) + [d.response] + [e.text for e in d.explanations if e.valid]
                train_causal(work / "stand-ins" / "gpt2", path, texts, seconds=30, max_steps=400)
                shutil.copy(work / "stand-ins" / "gpt2" / MARKER, path / MARKER)
            out[name] = path
        else:
            raise SystemExit(f"unknown model {name!r}")
    return out


# ------------------------------------------------------------------------------------- data
def probe_items(why: str, dialogues: int | None) -> dict[str, tuple[list[NLLItem], list[tuple[int, int]]]]:
    """{setting: (items, pairs)} with pairs as (valid item index, corrupted item index)."""
    ds = load_dialogues(SAMPLE_DATA)[:dialogues]
    by_id = {d.id: d for d in ds}
    out = {}
    for setting in ("attribution", "inference"):
        index: dict[NLLItem, int] = {}
        pairs = []
        for p in corrupt_dialogues(ds, seed=0).pairs:
            d = by_id[p.dialogue_id]
            if setting == "attribution":
                ctx = tuple(d.history) + (d.response, why)
                a, b = NLLItem(context=ctx, target=p.valid_text), NLLItem(context=ctx, target=p.corrupted_text)
            else:
                a = NLLItem(context=tuple(d.history), knowledge=p.valid_text, target=d.response)
                b = NLLItem(context=tuple(d.history), knowledge=p.corrupted_text, target=d.response)
            pairs.append((index.setdefault(a, len(index)), index.setdefault(b, len(index))))
        out[setting] = (list(index), pairs)
    return out


def mutual_items(limit: int | None) -> tuple[list[NLLItem], list[int | None]]:
    """Each MuTual dev instance's four options after its context, and its answer."""
    insts = read_mutual(MUTUAL_DEV)[:limit]
    items, gold = [], []
    for inst in insts:
        ctx = tuple(t.text for t in inst.context)
        items += [NLLItem(context=ctx, target=inst.option_turn(j).text) for j in range(4)]
        gold.append(inst.answer)
    return items, gold


# ------------------------------------------------------------------------------------- agreement
def decisions(task: str, nlls: Sequence[float], probes: dict[str, Any], gold: list[int | None]
              ) -> list[tuple[str, list[Any], Callable[[list[Any]], float] | None]]:
    """The decisions `nlls` make on `task`: (what, decisions, accuracy against the gold answer
    or None)."""
    if task != "mutual":
        pairs = probes[task][1]
        return [(f"CEDAR {task}: valid < corrupted", [nlls[i] < nlls[j] for i, j in pairs],
                 statistics.fmean)]
    n = len(gold)
    order = [sorted(range(4), key=lambda j: (nlls[4 * k + j], j)) for k in range(n)]

    def accuracy(picks: list[Any]) -> float:
        return statistics.fmean(x == g for x, g in zip(picks, gold) if g is not None)

    return [("MuTual dev: top option", [o[0] for o in order], accuracy),
            ("rerank: order of 4 candidates", order, None)]


def score_tasks(path: Path, dtype: str, threads: int, tasks: dict[str, list[NLLItem]]
                ) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Every task's item NLLs with the engine in `dtype`, and each task's seconds (one call)."""
    engine = NLLEngine(model_config(path, dtype), num_threads=threads)
    nlls, seconds = {}, {}
    for task, items in tasks.items():
        encoded = [engine.encode(i) for i in items]
        engine.score_encoded(encoded[:8])
        start = time.perf_counter()
        results, _ = engine.score_encoded(encoded)
        seconds[task] = time.perf_counter() - start
        nlls[task] = [r.nll for r in results]
    return nlls, seconds


def agreement_rows(name: str, path: Path, args: argparse.Namespace,
                   mutual: tuple[list[NLLItem], list[int | None]] | None) -> list[dict[str, Any]]:
    """One row per (reduced dtype, decision): agreement with float32 on `name`'s checkpoint."""
    why = model_config(path).format.why_turn
    probes = probe_items(why, args.probe_dialogues)
    tasks = {k: v[0] for k, v in probes.items()}
    gold: list[int | None] = []
    if mutual:
        tasks["mutual"], gold = mutual
    ref, ref_s = score_tasks(path, "float32", args.threads, tasks)
    rows = []
    for dtype in args.dtypes.split(","):
        low, low_s = score_tasks(path, dtype, args.threads, tasks)
        for task in tasks:
            diffs = [abs(x - y) for x, y in zip(ref[task], low[task])]
            for (what, d32, acc), (_, dlo, _) in zip(decisions(task, ref[task], probes, gold),
                                                     decisions(task, low[task], probes, gold)):
                same = sum(x == y for x, y in zip(d32, dlo))
                agree = same / len(d32)
                rows.append({"model": name, "dtype": dtype, "task": what, "decisions": len(d32),
                             "agreement": agree, "flips": len(d32) - same,
                             "agreement_ci": list(wilson_interval(same, len(d32))),
                             "fp32_accuracy": acc(d32) if acc else None,
                             "low_accuracy": acc(dlo) if acc else None,
                             "mean_abs_dnll": statistics.fmean(diffs), "max_abs_dnll": max(diffs),
                             "items": len(ref[task]), "fp32_s": ref_s[task], "low_s": low_s[task],
                             "safe": agree >= SAFE})
    return rows


# ------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--models", default="small-reinit,small-trained")
    p.add_argument("--probe-dialogues", type=int, default=None, help="first N sample dialogues (all)")
    p.add_argument("--mutual-limit", type=int, default=None, help="first N MuTual dev instances (all)")
    add_threads(p)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--dtypes", default="int8",
                   help="reduced precisions compared with float32 (comma-separated: int8, bfloat16)")
    p.add_argument("--int8-kernels", action="store_true", help="part 1b: int8 routes, MLP block")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import torch

    quiet_torch(args.threads)
    report: dict[str, Any] = {"speed": [], "agreement": []}
    print(f"machine: {os.cpu_count()} CPUs visible, {args.threads} torch threads, torch {torch.__version__}")
    if not args.no_speed:
        speeds = matmul_speeds(args.reps)
        base = next(v for k, v in speeds if k.startswith("float32 torch"))
        print("\n2048^3 matrix product (best of 3 x best of %d, interleaved)" % args.reps)
        for name, v in speeds:
            print(f"  {name:40s} {v / 1e9:8.1f} GFLOP/s   {v / base:5.2f}x float32 torch.matmul")
            report["speed"].append({"what": name, "flops": v})
    if args.int8_kernels:
        speeds = int8_kernel_speeds(args.reps)
        base = speeds[0][1]
        print(f"\nDialoGPT-medium MLP block, 1,024 tokens (best of {args.reps}, interleaved)")
        for name, v in speeds:
            print(f"  {name:56s} {v / 1e9:8.1f} GFLOP/s   {v / base:5.2f}x float32 F.linear")
            report.setdefault("int8_kernels", []).append({"what": name, "flops": v})

    names = args.models.split(",")
    paths = checkpoints(names)
    mutual = mutual_items(args.mutual_limit) if MUTUAL_DEV.is_file() else None
    rows = [row for name in names for row in agreement_rows(name, paths[name], args, mutual)]
    report["agreement"] = rows
    print(f"\nreduced precision vs float32 decisions (engine in-process, one run; safe = agreement "
          f">= {SAFE:.0%}; speed = fp32 s / reduced s on the same items)")
    columns = [Column("model", 14, left=True), Column("dtype", 8, left=True),
               Column("task", 36, left=True), Column("n", 5, "d"), Column("flips", 5, "d"),
               Column("agree", 8, ".3%"), Column("Wilson 95%", 15), Column("acc32", 6, ".3f"),
               Column("acc", 6, ".3f"), Column("mean|dNLL|", 10, ".4f"),
               Column("max|dNLL|", 9, ".4f"), Column("s fp32", 7, ".2f"), Column("s low", 7, ".2f"),
               Column("speed", 6, ".2f"), Column("safe", 5)]
    print(table(columns, [
        [r["model"], r["dtype"], r["task"], r["decisions"], r["flips"], r["agreement"],
         "{:.1%}-{:.1%}".format(*r["agreement_ci"]), r["fp32_accuracy"], r["low_accuracy"],
         r["mean_abs_dnll"], r["max_abs_dnll"], r["fp32_s"], r["low_s"], r["fp32_s"] / r["low_s"],
         "yes" if r["safe"] else "NO"] for r in rows], indent="  "))
    if mutual is None:
        print(f"  (MuTual skipped: {MUTUAL_DEV} is absent)")
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
