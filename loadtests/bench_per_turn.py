"""Per-turn scoring: every turn of a dialogue given the turns before it, one pass against one
call per turn, for dialogues of rising length; a PNG of the curves.

    python -m loadtests.bench_per_turn --lengths 5,10,20,30,40 --repeat 3

For a synthetic dialogue of L turns (10-25 words each, seeded) the workload is the L items
``NLLItem(context=turns[:k], target=turns[k])``, k = 0 .. L-1, scored in-process (no Ray) by four
methods, interleaved run by run; each method's best of --repeat:

  (a) per turn:            each item its own ``score_encoded`` call, no context cache: each turn
                           sent as a separate request to a replica without the cache (the
                           issue's baseline);
  (b) per turn, cache on:  the same calls, in turn order, on an engine with the service's
                           default context cache bound (cleared before each run): a cache-on
                           replica serving the turns one request at a time;
  (c) one call, no reuse:  every item in one call with ``prefix_reuse=False`` (no shared
                           prefixes, no chained items);
  (d) one pass:            every item in one call, the engine's defaults: each item is a prefix
                           of the next, so the whole dialogue is one pass (chained items).

Reported per length and method: wall and CPU seconds per dialogue (``time.process_time``, one
torch thread by default: on a shared host, CPU time is what load from elsewhere disturbs
least; the figure plots it), positions the model computed
(``BatchStats.real_tokens``, summed over the method's calls) and the ratios to (a); the NLLs of
every method agree with (a) to 1e-4 (exit status 1 otherwise). The model is the gpt2 stand-in's
shapes with DialoGPT's 1,024-position window (``checkpoint("long")``; the stand-in's own 512
positions do not hold a 40-turn dialogue of turns this long); ``--model medium`` is a random
GPT-2 with DialoGPT-medium's shapes, where time follows positions. The figure goes to
docs/figures/per-turn.png (--figure).
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from dialscore_server.checkpoints.loading import load_model
from dialscore_server.checkpoints.standins import templated_sentences
from dialscore_server.nll.engine.encoding import EncodedItem, NLLItem
from dialscore_server.nll.engine.engine import NLLEngine
from loadtests.common import (
    ROOT, Column, Method, Run, chat_turns, checkpoint, interleave,
    max_abs_diff, model_config, parser, quiet_torch, table, write_json,
)

TOLERANCE = 1e-4

def per_turn_items(length: int, seed: int) -> list[NLLItem]:
    """The `length` items of one synthetic dialogue: each turn given the turns before it."""
    rng = random.Random(seed)
    turns = chat_turns(length, rng, templated_sentences(500, seed=seed))
    return [NLLItem(context=tuple(turns[:k]), target=turns[k]) for k in range(length)]


def per_call(engine: NLLEngine, encoded: list[EncodedItem]) -> Run:
    """Each item its own engine call, in order; positions summed over the calls; the CPU
    seconds the process spent (``time.process_time``) as the detail."""
    if engine.context_cache is not None:
        engine.context_cache.clear()
    nlls, computed, cpu = [], 0, time.process_time()
    for e in encoded:
        results, stats = engine.score_encoded([e])
        nlls.append(results[0].nll)
        computed += stats.real_tokens
    return Run(nlls, computed=computed, detail=time.process_time() - cpu)


def one_call(engine: NLLEngine, encoded: list[EncodedItem]) -> Run:
    """Every item in one engine call; its CPU seconds as the detail."""
    cpu = time.process_time()
    results, stats = engine.score_encoded(encoded)
    return Run([r.nll for r in results], computed=stats.real_tokens,
               detail=time.process_time() - cpu)


def plot(rows: list[dict], labels: dict[str, str], out: Path) -> None:
    """Seconds and computed positions per dialogue against its turns, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = [r["turns"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in labels.items():
        left.plot(lengths, [r["cpu_seconds"][key] * 1000 for r in rows], marker="o", label=label)
        right.plot(lengths, [r["positions"][key] for r in rows], marker="o", label=label)
    left.set(xlabel="turns in the dialogue", ylabel="CPU ms to score every turn (1 thread)",
             title="CPU time per dialogue", yscale="log")
    right.set(xlabel="turns in the dialogue", ylabel="positions computed",
              title="computed positions per dialogue", yscale="log")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.suptitle("Every turn given the turns before it (gpt2 stand-in, 1,024-position window)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--lengths", default="5,10,20,30,40", help="dialogue lengths, in turns")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per method (best kept)")
    ap.add_argument("--model", choices=["long", "medium"], default="long",
                    help="the stand-in's shapes with a 1,024-position window (long), or a random "
                         "GPT-2 with DialoGPT-medium's shapes (medium, 1.4 GB; slow: use short "
                         "lengths)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--figure", default=str(ROOT / "docs" / "figures" / "per-turn.png"),
                    help="where to write the PNG ('' for none)")
    ap.add_argument("--json", default=None, help="write the figures as JSON here")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1, so CPU time is the work's)")
    args = ap.parse_args(argv)
    threads = quiet_torch(args.threads)

    path = checkpoint(args.model)
    cfg = model_config(path)
    loaded = load_model(cfg)
    engines = {
        "per_turn": NLLEngine(cfg, loaded=loaded, num_threads=threads),
        "per_turn_cache": NLLEngine(cfg, loaded=loaded, num_threads=threads,
                                    context_cache_bytes=None),
        "no_reuse": NLLEngine(cfg, loaded=loaded, num_threads=threads, prefix_reuse=False),
        "one_pass": NLLEngine(cfg, loaded=loaded, num_threads=threads),
    }
    labels = {"per_turn": "(a) per turn", "per_turn_cache": "(b) per turn, cache on",
              "no_reuse": "(c) one call, no reuse", "one_pass": "(d) one pass (chained)"}
    base = engines["per_turn"]
    what = {"long": "gpt2 stand-in shapes (2 layers, 64 wide)",
            "medium": "random GPT-2, DialoGPT-medium shapes (24 layers, 1024 wide)"}[args.model]
    print(f"model: {what}, window {cfg.max_length}; "
          f"{threads} thread(s); best of {args.repeat}, methods interleaved")

    rows, ok = [], True
    for length in [int(x) for x in args.lengths.split(",")]:
        encoded = [base.encode(it) for it in per_turn_items(length, args.seed + length)]
        truncated = sum(e.truncated for e in encoded)
        longest = max(e.cost for e in encoded)
        for engine in engines.values():  # warm-up
            engine.score_encoded(encoded[:2])
        methods = [
            Method("per_turn", labels["per_turn"], lambda: per_call(engines["per_turn"], encoded),
                   args.repeat),
            Method("per_turn_cache", labels["per_turn_cache"],
                   lambda: per_call(engines["per_turn_cache"], encoded), args.repeat),
            Method("no_reuse", labels["no_reuse"],
                   lambda: one_call(engines["no_reuse"], encoded), args.repeat),
            Method("one_pass", labels["one_pass"],
                   lambda: one_call(engines["one_pass"], encoded), args.repeat),
        ]
        got = interleave(methods)
        ref = got["per_turn"]
        worst = max(max_abs_diff(ref.last.nlls, r.last.nlls) for r in got.values())
        ok &= worst <= TOLERANCE
        rows.append({"turns": length, "longest_item_tokens": longest, "truncated": truncated,
                     "max_abs_diff": worst,
                     "seconds": {k: r.best for k, r in got.items()},
                     "cpu_seconds": {k: min(run.detail for run in r.runs) for k, r in got.items()},
                     "positions": {k: r.last.computed for k, r in got.items()}})
        print(f"\n{length} turns: longest item {longest} tokens, {truncated} truncated; "
              f"NLLs agree to {worst:.1e}")
        cpu = rows[-1]["cpu_seconds"]
        print(table([Column("method", 26, left=True), Column("wall ms", 9, ".1f"),
                     Column("CPU ms", 9, ".1f"), Column("positions", 10, "d"),
                     Column("CPU x (a)", 10, ".3f"), Column("positions x (a)", 16, ".3f")],
                    [[r.label, r.best * 1000, cpu[k] * 1000, r.last.computed,
                      cpu[k] / cpu["per_turn"], r.last.computed / ref.last.computed]
                     for k, r in got.items()], indent="  "))
    if args.figure:
        plot(rows, labels, Path(args.figure))
        print(f"\nfigure: {args.figure}")
    write_json(args.json, {"model": args.model, "threads": threads, "window": cfg.max_length,
                           "rows": rows})
    print(f"NLL agreement: {'OK' if ok else 'MISMATCH'} (tolerance {TOLERANCE:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
