"""Reduced precision on this machine: matrix-product speed by dtype, and whether bf16/int8 change decisions.

Part 1, speed: a 2048 x 2048 x 2048 product, best of --reps, in float32 through ``torch.matmul``
(MKL on this build) and through oneDNN's linear op (what the engine's CPU kernels use), and in
bfloat16 through ``torch.matmul`` (PyTorch routes CPU bf16 products to oneDNN). float16 on CPU is
timed on a 512^3 product only: PyTorch has no fast CPU kernel for it (the registry refuses float16
on CPU).

Part 1b (``--int8-kernels``): a DialoGPT-medium MLP block (1,024 → 4,096 → 1,024, 1,024 tokens)
in float32 (torch and oneDNN), through ``quantize_dynamic`` on each quantized engine, and through
the engine's own int8 layer (per-row activation scales, services/dialscore_server/checkpoints/quantize.py),
interleaved, best of --reps: the measurement behind the int8 route.

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

    python loadtests/bench_precision.py                       # small-reinit, small-trained, int8
    python loadtests/bench_precision.py --dtypes int8,bfloat16 --int8-kernels
    python loadtests/bench_precision.py --models medium --probe-dialogues 6 --mutual-limit 60
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from loadtests.agreement_stats import wilson_interval  # noqa: E402  (needs ROOT on sys.path)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MUTUAL_DEV = ROOT.parent / "shared" / "data" / "mutual" / "dev.jsonl"
SAFE = 0.99


# ------------------------------------------------------------------------------------- speed
def matmul_speeds(reps: int) -> list[tuple[str, float]]:
    import torch

    from dialscore_server.compat import onednn_linear, onednn_linear_available

    def best(fn):
        fn()
        t = float("inf")
        for _ in range(reps):
            s = time.perf_counter()
            fn()
            t = min(t, time.perf_counter() - s)
        return t

    n = 2048
    flops = 2 * n ** 3
    out = []
    a32, b32 = torch.randn(n, n), torch.randn(n, n)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    with torch.inference_mode():
        # Interleave the three so a burst of load from elsewhere hits them alike.
        runs = defaultdict(list)
        fns = {"float32 torch.matmul (MKL)": lambda: torch.matmul(a32, b32),
               "bfloat16 torch.matmul (oneDNN)": lambda: torch.matmul(a16, b16)}
        if onednn_linear_available():
            z = torch.zeros(n)
            fns["float32 oneDNN linear"] = (
                lambda: onednn_linear(a32, b32, z))
        for _ in range(3):
            for name, fn in fns.items():
                runs[name].append(best(fn))
        for name in fns:
            out.append((name, flops / min(runs[name])))
        m = 512
        h1, h2 = torch.randn(m, m).half(), torch.randn(m, m).half()
        s = time.perf_counter()
        torch.matmul(h1, h2)
        out.append(("float16 torch.matmul (512^3, one run)", 2 * m ** 3 / (time.perf_counter() - s)))
    return out


def int8_kernel_speeds(reps: int) -> list[tuple[str, float]]:
    """FLOP/s of a DialoGPT-medium MLP block at 1,024 tokens by route (see the docstring)."""
    import copy
    import warnings

    import torch

    from dialscore_server.checkpoints.quantize import int8_linear_class
    from dialscore_server.compat import onednn_linear

    m_tok, width = 1024, 1024
    flops = 2 * 2 * m_tok * width * 4 * width
    mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width))
    x = torch.randn(m_tok, width)
    fns = {"float32 F.linear": mlp}
    fns["float32 oneDNN linear"] = lambda x: onednn_linear(
        onednn_linear(x, mlp[0].weight, mlp[0].bias), mlp[1].weight, mlp[1].bias)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        for engine in ("x86", "fbgemm", "onednn", "qnnpack"):
            if engine not in torch.backends.quantized.supported_engines:
                continue
            torch.backends.quantized.engine = engine
            q = quantize_dynamic(copy.deepcopy(mlp), {torch.nn.Linear: per_channel_dynamic_qconfig},
                                 dtype=torch.qint8)
            fns[f"int8 quantize_dynamic ({engine}, per-tensor activations)"] = (
                lambda x, q=q, e=engine: (setattr(torch.backends.quantized, "engine", e), q(x))[1])
        torch.backends.quantized.engine = "onednn"
        cls = int8_linear_class()
        own = torch.nn.Sequential(cls(mlp[0].weight, mlp[0].bias), cls(mlp[1].weight, mlp[1].bias))
        fns["int8 engine layer (onednn, per-row activations)"] = (
            lambda x: (setattr(torch.backends.quantized, "engine", "onednn"), own(x))[1])
    best: dict[str, float] = defaultdict(lambda: float("inf"))
    with torch.inference_mode():
        for fn in fns.values():
            fn(x)
        for _ in range(reps):  # interleaved: a burst of load from elsewhere hits all alike
            for name, fn in fns.items():
                s = time.perf_counter()
                fn(x)
                best[name] = min(best[name], time.perf_counter() - s)
    return [(name, flops / best[name]) for name in fns]


# ------------------------------------------------------------------------------------- models
def checkpoints(names: list[str], work: Path) -> dict[str, Path]:
    import shutil

    from loadtests.bench_probe import checkpoint
    from dialscore_server.checkpoints.standins import MARKER, templated_sentences, train_causal

    out = {}
    for name in names:
        if name == "small-reinit":
            out[name] = checkpoint("small", work)
        elif name == "medium":
            out[name] = checkpoint("medium", work)
        elif name == "small-trained":
            path = work / "small-trained"
            if not (path / MARKER).is_file():
                from dialscore.probes import SAMPLE_DATA
                from dialscore.probes.data import load_dialogues

                texts = templated_sentences(3000, seed=1)
                for d in load_dialogues(SAMPLE_DATA):
                    texts += list(d.history) + [d.response] + [e.text for e in d.explanations if e.valid]
                train_causal(work / "stand-ins" / "gpt2", path, texts, seconds=30, max_steps=400)
                shutil.copy(work / "stand-ins" / "gpt2" / MARKER, path / MARKER)
            out[name] = path
        else:
            raise SystemExit(f"unknown model {name!r}")
    return out


def engine_for(path: Path, dtype: str, threads: int):
    from transformers import AutoConfig

    from dialscore_server.nll.engine.engine import NLLEngine
    from dialscore_server.checkpoints.registry import stand_in_registry

    cfg = stand_in_registry(path.parent / "stand-ins").get("dialogpt-medium")
    cfg = cfg.model_copy(update={"source": str(path), "dtype": dtype, "device": "cpu",
                                 "max_length": AutoConfig.from_pretrained(path).n_positions})
    return NLLEngine(cfg, num_threads=threads)


# ------------------------------------------------------------------------------------- data
def probe_items(why: str, dialogues: int | None):
    """{setting: (items, pairs)} with pairs as (valid item index, corrupted item index)."""
    from dialscore.probes.corruptions import corrupt_dialogues
    from dialscore.probes import SAMPLE_DATA
    from dialscore.probes.data import load_dialogues
    from dialscore_server.nll.engine.encoding import NLLItem

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


def mutual_items(limit: int | None):
    from dialscore.evals.mutual import read_mutual
    from dialscore_server.nll.engine.encoding import NLLItem

    insts = read_mutual(MUTUAL_DEV)[:limit]
    items, gold = [], []
    for inst in insts:
        ctx = tuple(t.text for t in inst.context)
        items += [NLLItem(context=ctx, target=inst.option_turn(j).text) for j in range(4)]
        gold.append(inst.answer)
    return items, gold


# ------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="small-reinit,small-trained")
    p.add_argument("--probe-dialogues", type=int, default=None, help="first N sample dialogues (all)")
    p.add_argument("--mutual-limit", type=int, default=None, help="first N MuTual dev instances (all)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--dtypes", default="int8",
                   help="reduced precisions compared with float32 (comma-separated: int8, bfloat16)")
    p.add_argument("--int8-kernels", action="store_true", help="part 1b: int8 routes, MLP block")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import torch
    from transformers.utils import logging as hf_logging

    from dialscore_server.checkpoints.loading import set_threads

    hf_logging.set_verbosity_error()
    set_threads(args.threads)
    report: dict = {"speed": [], "agreement": []}
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

    dtypes = args.dtypes.split(",")
    names = args.models.split(",")
    work = Path(tempfile.gettempdir()) / "dialscore-bench"
    paths = checkpoints(names, work)
    mutual = mutual_items(args.mutual_limit) if MUTUAL_DEV.is_file() else None
    rows = []
    for name in names:
        scores: dict[str, dict[str, list[float]]] = defaultdict(dict)
        seconds: dict[str, dict[str, float]] = defaultdict(dict)
        probes = None
        for dtype in ["float32"] + dtypes:
            engine = engine_for(paths[name], dtype, args.threads)
            probes = probes or probe_items(engine.fmt.why_turn, args.probe_dialogues)
            tasks = {k: v[0] for k, v in probes.items()}
            if mutual:
                tasks["mutual"] = mutual[0]
            for task, items in tasks.items():
                encoded = [engine.encode(i) for i in items]
                engine.score_encoded(encoded[:8])
                t = time.perf_counter()
                results, _ = engine.score_encoded(encoded)
                seconds[task][dtype] = time.perf_counter() - t
                scores[task][dtype] = [r.nll for r in results]
            del engine
        for dtype in dtypes:
            for task in list(scores):
                a, b = scores[task]["float32"], scores[task][dtype]
                diffs = [abs(x - y) for x, y in zip(a, b)]
                if task == "mutual":
                    items, gold = mutual
                    n = len(gold)
                    pick = lambda s, k: min(range(4), key=lambda j: (s[4 * k + j], j))  # noqa: E731
                    order = lambda s, k: sorted(range(4), key=lambda j: (s[4 * k + j], j))  # noqa: E731
                    acc = lambda d: statistics.fmean(x == g for x, g in zip(d, gold) if g is not None)  # noqa: E731
                    variants = [("MuTual dev: top option", [pick(a, k) for k in range(n)],
                                 [pick(b, k) for k in range(n)], acc),
                                ("rerank: order of 4 candidates", [order(a, k) for k in range(n)],
                                 [order(b, k) for k in range(n)], None)]
                else:
                    pairs = probes[task][1]
                    variants = [(f"CEDAR {task}: valid < corrupted", [a[i] < a[j] for i, j in pairs],
                                 [b[i] < b[j] for i, j in pairs], statistics.fmean)]
                for what, d32, dlo, acc in variants:
                    agree = statistics.fmean(x == y for x, y in zip(d32, dlo))
                    same = sum(x == y for x, y in zip(d32, dlo))
                    row = {"model": name, "dtype": dtype, "task": what, "decisions": len(d32),
                           "agreement": agree, "flips": len(d32) - same,
                           "agreement_ci": list(wilson_interval(same, len(d32))),
                           "fp32_accuracy": acc(d32) if acc else None,
                           "low_accuracy": acc(dlo) if acc else None,
                           "mean_abs_dnll": statistics.fmean(diffs), "max_abs_dnll": max(diffs),
                           "items": len(a), "fp32_s": seconds[task]["float32"],
                           "low_s": seconds[task][dtype], "safe": agree >= SAFE}
                    rows.append(row)
                    report["agreement"].append(row)

    print(f"\nreduced precision vs float32 decisions (engine in-process, one run; safe = agreement "
          f">= {SAFE:.0%}; speed = fp32 s / reduced s on the same items)")
    hdr = (f"  {'model':14s} {'dtype':8s} {'task':36s} {'n':>5s} {'flips':>5s} {'agree':>8s} "
           f"{'Wilson 95%':>15s} "
           f"{'acc32':>6s} {'acc':>6s} {'mean|dNLL|':>10s} {'max|dNLL|':>9s} {'s fp32':>7s} {'s low':>7s} "
           f"{'speed':>6s}  safe")
    print(hdr)
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for r in rows:
        print(f"  {r['model']:14s} {r['dtype']:8s} {r['task']:36s} {r['decisions']:5d} {r['flips']:5d} "
              f"{r['agreement']:8.3%} {'{:.1%}-{:.1%}'.format(*r['agreement_ci']):>15s} "
              f"{fmt(r['fp32_accuracy']):>6s} {fmt(r['low_accuracy']):>6s} "
              f"{r['mean_abs_dnll']:10.4f} {r['max_abs_dnll']:9.4f} {r['fp32_s']:7.2f} {r['low_s']:7.2f} "
              f"{r['fp32_s'] / r['low_s']:6.2f}  {'yes' if r['safe'] else 'NO'}")
    if mutual is None:
        print(f"  (MuTual skipped: {MUTUAL_DEV} is absent)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
