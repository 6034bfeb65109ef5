"""Benchmark: the NLL engine against a naive one-item-at-a-time loop with the model's own loss.

Not a test (pytest never collects loadtests/). In one run, on the same probe-shaped items (a
dialogue context of 2-6 turns and a target reply), it times

  (a) naive:  for each item, one forward pass with HF ``labels`` (-100 on the source), ``.loss``;
  (b) engine: ``NLLEngine.score_encoded`` on all items (token-budget batches, length-sorted,
      logits projected only at target positions),

checks that both give the same NLL per item (to 1e-4), and prints tokens per second, the speed
ratio and the engine's padding waste. Both sides score the same encoded token ids (the engine's
tokenization and formatting), so the timings compare forward passes only; tokenization is timed
separately.

    python loadtests/bench_engine.py --model small            # the gpt2 stand-in (2 layers, 64 wide)
    python loadtests/bench_engine.py --model medium           # random GPT-2 with DialoGPT-medium's shapes

``medium`` is a random-weight GPT-2 built in memory with DialoGPT-medium's shapes (24 layers,
1024 wide, 16 heads, vocabulary 50257, 1024 positions) around the stand-in's tokenizer; it is
handed to the engine as a ``LoadedModel``. Exit status 1 when the NLLs disagree.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TOLERANCE = 1e-4
DEFAULT_ITEMS = {"small": 400, "medium": 40}


def probe_items(n: int, seed: int):
    """`n` CEDAR-probe-shaped items: 2-6 templated dialogue turns and a templated target."""
    from dialscore_server.nll.engine.encoding import NLLItem
    from dialscore_server.checkpoints.standins import templated_sentences

    rng = random.Random(seed)
    pool = templated_sentences(2000, seed=seed + 1)
    return [NLLItem(context=tuple(rng.sample(pool, rng.randint(2, 6))), target=rng.choice(pool))
            for _ in range(n)]


def build_engine(args):
    """(engine, description) for --model small or medium."""
    import torch

    from dialscore_server.checkpoints.loading import LoadedModel, load_model, resolve_device
    from dialscore_server.nll.engine.engine import NLLEngine
    from dialscore_server.checkpoints.registry import stand_in_registry
    from dialscore_server.checkpoints.standins import build_stand_ins, reinit_

    root = Path(args.stand_ins or Path(tempfile.gettempdir()) / "dialscore-bench-stand-ins")
    build_stand_ins(root, kinds=["gpt2"])
    cfg = stand_in_registry(root).get("dialogpt-medium").model_copy(update={"device": args.device})
    if args.model == "small":
        loaded = load_model(cfg)
        what = "gpt2 stand-in (2 layers, 64 wide, 4 heads)"
    else:
        from transformers import GPT2Config, GPT2LMHeadModel

        small = load_model(cfg)  # for its tokenizer
        eos = small.tokenizer.eos_token_id
        torch.manual_seed(args.seed)
        start = time.perf_counter()
        model = GPT2LMHeadModel(GPT2Config(
            vocab_size=50257, n_positions=1024, n_embd=1024, n_layer=24, n_head=16,
            bos_token_id=eos, eos_token_id=eos,
        ))
        device = resolve_device(args.device)
        model.to(device).eval()
        cfg = cfg.model_copy(update={"max_length": 1024,
                                     "description": "random GPT-2 with DialoGPT-medium's shapes"})
        loaded = LoadedModel(cfg, model, small.tokenizer, device, True, None)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        what = (f"random GPT-2, DialoGPT-medium shapes (24 layers, 1024 wide, 16 heads, vocab 50257; "
                f"{params:.0f}M params, built in {time.perf_counter() - start:.1f} s)")
    if args.reinit:
        reinit_(loaded.model, args.reinit, seed=args.seed)
        what += f", weights re-initialised N(0, {args.reinit})"
    engine = NLLEngine(cfg, loaded=loaded, token_budget=args.token_budget, num_threads=args.threads)
    return engine, what


def naive_nlls(model, device, encoded) -> list[float]:
    """One item per forward pass; the NLL is the model's own loss with -100 on source positions."""
    import torch

    out = []
    with torch.inference_mode():
        for e in encoded:
            ids = torch.tensor([list(e.source_ids + e.target_ids)], device=device)
            labels = torch.tensor([[-100] * len(e.source_ids) + list(e.target_ids)], device=device)
            out.append(model(input_ids=ids, labels=labels).loss.item())
    return out


def timed(fn, device: str):
    """(fn(), seconds), with CUDA synchronised before and after on a GPU."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    value = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return value, time.perf_counter() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["small", "medium"], default="small")
    p.add_argument("--items", type=int, default=None,
                   help=f"items to score (default: {DEFAULT_ITEMS['small']} small, "
                        f"{DEFAULT_ITEMS['medium']} medium)")
    p.add_argument("--token-budget", type=int, default=4096, help="engine's padded tokens per pass")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all CPUs)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, auto")
    p.add_argument("--reinit", type=float, default=None,
                   help="re-initialise weights N(0, STD) so NLLs vary by token (default: 0.3 for "
                        "small; none for medium, which keeps GPT-2's own random init)")
    p.add_argument("--stand-ins", default=None, help="stand-in folder (built when missing)")
    p.add_argument("--repeat", type=int, default=None,
                   help="time each method this many times, alternating, and keep the fastest "
                        "(default: 5 small, 1 medium; the CPUs here are shared)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    repeat = args.repeat or (5 if args.model == "small" else 1)
    n = args.items or DEFAULT_ITEMS[args.model]
    if args.reinit is None and args.model == "small":
        args.reinit = 0.3

    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    engine, what = build_engine(args)
    device = engine.loaded.device
    items = probe_items(n, args.seed)
    encoded, t_encode = timed(lambda: [engine.encode(it) for it in items], "cpu")
    real = sum(e.cost for e in encoded)
    targets = sum(len(e.target_ids) for e in encoded)

    # Warm up both paths (first-call allocations, kernel selection) outside the timings.
    naive_nlls(engine.model, device, encoded[:2])
    engine.score_encoded(encoded[:2])

    runs_naive, runs_engine = [], []
    for _ in range(repeat):  # alternate, so a burst of load from elsewhere hits both alike
        naive, t = timed(lambda: naive_nlls(engine.model, device, encoded), device)
        runs_naive.append(t)
        (results, stats), t = timed(lambda: engine.score_encoded(encoded), device)
        runs_engine.append(t)
    t_naive, t_engine = min(runs_naive), min(runs_engine)
    diffs = [abs(a - r.nll) for a, r in zip(naive, results)]
    worst = max(diffs)
    ok = worst <= TOLERANCE

    print(f"model   : {args.model}: {what}")
    print(f"device  : {device}, torch {torch.__version__}, {engine.threads} thread(s), "
          f"token budget {args.token_budget}; best of {repeat} timed run(s) per method")
    print(f"items   : {n} probe-shaped items (2-6 context turns + target); {real} tokens "
          f"({targets} scored target tokens, mean item {real / n:.1f} tokens); "
          f"tokenization {t_encode:.2f} s (not in the timings below)")
    print()
    print(f"{'method':34s} {'seconds':>8s} {'tokens/s':>10s} {'target tok/s':>13s} {'items/s':>9s}"
          "   all runs (s)")
    for name, runs in (("(a) naive loop, HF labels, 1 item", runs_naive),
                       ("(b) NLLEngine.score_encoded", runs_engine)):
        t = min(runs)
        print(f"{name:34s} {t:8.2f} {real / t:10.0f} {targets / t:13.0f} {n / t:9.1f}   "
              + " ".join(f"{r:.2f}" for r in runs))
    print()
    sizes = stats.batch_sizes
    print(f"speed ratio (engine / naive): {t_naive / t_engine:.2f}x")
    print(f"engine batches: {stats.batches} (items per batch: min {min(sizes)}, median "
          f"{statistics.median(sizes):g}, max {max(sizes)}); padding waste "
          f"{stats.padding_waste:.1%} ({stats.padded_tokens - stats.real_tokens} of "
          f"{stats.padded_tokens} computed positions)")
    print(f"NLL agreement: max |naive - engine| = {worst:.2e} over {n} items "
          f"(mean NLL {statistics.fmean(naive):.4f}, sd {statistics.pstdev(naive):.4f}) "
          f"-> {'OK' if ok else 'MISMATCH'} (tolerance {TOLERANCE:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
