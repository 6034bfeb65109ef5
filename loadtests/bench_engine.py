"""Benchmark: the NLL engine against a naive one-item-at-a-time loop with the model's own loss.

Not a test (pytest never collects loadtests/). In one run, on the same probe-shaped items (a
dialogue context of 2-6 turns and a target reply), it times, alternating run by run,

  (a) naive:  for each item, one forward pass with HF ``labels`` (-100 on the source), ``.loss``;
  (b) engine: ``NLLEngine.score_encoded`` on all items (token-budget batches, length-sorted,
      logits projected only at target positions),

checks that both give the same NLL per item (to 1e-4), and prints tokens per second, the speed
ratio and the engine's padding waste. Both sides score the same encoded token ids (the engine's
tokenization and formatting), so the timings compare forward passes only; tokenization is timed
separately.

    python -m loadtests.bench_engine --model small     # the gpt2 stand-in (2 layers, 64 wide)
    python -m loadtests.bench_engine --model medium    # random GPT-2 with DialoGPT-medium's shapes

``medium`` is a random-weight GPT-2 built in memory with DialoGPT-medium's shapes (24 layers,
1024 wide, 16 heads, vocabulary 50257, 1024 positions) around the stand-in's tokenizer; it is
handed to the engine as a ``LoadedModel``. Exit status 1 when the NLLs disagree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dialscore_server.checkpoints.loading import LoadedModel, load_model, resolve_device
from dialscore_server.checkpoints.registry import stand_in_registry
from dialscore_server.checkpoints.standins import build_stand_ins, reinit_
from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.engine import NLLEngine
from loadtests.common import (
    NLL_MODEL, Column, Method, Run, engine_run, interleave, max_abs_diff, medium_gpt2, naive_nlls,
    parser, quiet_torch, table, templated_items, timed,
)

TOLERANCE = 1e-4
DEFAULT_ITEMS = {"small": 400, "medium": 40}


def build_engine(args: argparse.Namespace) -> tuple[NLLEngine, str]:
    """(engine, description) for --model small or medium."""
    import torch

    root = Path(args.stand_ins or Path(tempfile.gettempdir()) / "dialscore-bench-stand-ins")
    build_stand_ins(root, kinds=["gpt2"])
    cfg = stand_in_registry(root).get(NLL_MODEL).model_copy(update={"device": args.device})
    if args.model == "small":
        loaded = load_model(cfg)
        what = "gpt2 stand-in (2 layers, 64 wide, 4 heads)"
    else:
        small = load_model(cfg)  # for its tokenizer
        torch.manual_seed(args.seed)
        start = time.perf_counter()
        device = resolve_device(args.device)
        model = medium_gpt2(small.tokenizer.eos_token_id).to(device)
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


def naive_loop(engine: NLLEngine, encoded: list[EncodedItem], repeat: int) -> Method:
    """(a): one forward pass per item through the engine's model, its own loss."""
    device = engine.loaded.device
    naive_nlls(engine.model, device, encoded[:2])  # warm-up
    return Method("naive", "(a) naive loop, HF labels, 1 item",
                  lambda: Run(naive_nlls(engine.model, device, encoded)), repeat)


def engine_call(engine: NLLEngine, encoded: list[EncodedItem], repeat: int) -> Method:
    """(b): every item in one ``score_encoded`` call."""
    engine.score_encoded(encoded[:2])  # warm-up
    return Method("engine", "(b) NLLEngine.score_encoded", lambda: engine_run(engine, encoded),
                  repeat)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
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

    quiet_torch(args.threads)
    engine, what = build_engine(args)
    device = engine.loaded.device
    items = templated_items(n, args.seed, pool_size=2000, pool_seed=args.seed + 1)
    encoded, t_encode = timed(lambda: [engine.encode(it) for it in items])
    real = sum(e.cost for e in encoded)
    targets = sum(len(e.target_ids) for e in encoded)
    got = interleave([naive_loop(engine, encoded, repeat), engine_call(engine, encoded, repeat)],
                     device)
    naive, fast = got["naive"], got["engine"]
    worst = max_abs_diff(naive.last.nlls, fast.last.nlls)
    ok = worst <= TOLERANCE

    print(f"model   : {args.model}: {what}")
    print(f"device  : {device}, torch {torch.__version__}, {engine.threads} thread(s), "
          f"token budget {args.token_budget}; best of {repeat} timed run(s) per method")
    print(f"items   : {n} probe-shaped items (2-6 context turns + target); {real} tokens "
          f"({targets} scored target tokens, mean item {real / n:.1f} tokens); "
          f"tokenization {t_encode:.2f} s (not in the timings below)")
    print()
    columns = [Column("method", 34, left=True), Column("seconds", 8, ".2f"),
               Column("tokens/s", 10, ".0f"), Column("target tok/s", 13, ".0f"),
               Column("items/s", 9, ".1f"), Column("  all runs (s)", 0, left=True)]
    print(table(columns, [[r.label, r.best, real / r.best, targets / r.best, n / r.best,
                           "  " + " ".join(f"{s:.2f}" for s in r.seconds)] for r in got.values()]))
    print()
    stats = fast.last.detail
    sizes = stats.batch_sizes
    print(f"speed ratio (engine / naive): {naive.best / fast.best:.2f}x")
    print(f"engine batches: {stats.batches} (items per batch: min {min(sizes)}, median "
          f"{statistics.median(sizes):g}, max {max(sizes)}); padding waste "
          f"{stats.padding_waste:.1%} ({stats.padded_tokens - stats.real_tokens} of "
          f"{stats.padded_tokens} computed positions)")
    print(f"NLL agreement: max |naive - engine| = {worst:.2e} over {n} items "
          f"(mean NLL {statistics.fmean(naive.last.nlls):.4f}, sd "
          f"{statistics.pstdev(naive.last.nlls):.4f}) -> {'OK' if ok else 'MISMATCH'} "
          f"(tolerance {TOLERANCE:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
