"""Engine speed by token budget (padded tokens per forward pass), reuse off and on, in one run.

The workload is bench_probe's (CEDAR attribution groups of clients/dialscore/probes/cedar_sample.jsonl) on the
same checkpoints; every (budget, reuse) engine scores all items, the engines alternate, and each
keeps its fastest of --repeat runs. This is the measurement behind the engine's CPU default
budget (services/dialscore_server/nll/engine/engine.py: default_token_budget).

    python -m loadtests.bench_budget --model medium
    python -m loadtests.bench_budget --model medium --dtype bfloat16 --budgets 1024,4096
"""

from __future__ import annotations

import sys

from dialscore_server.checkpoints.loading import load_model
from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.engine import NLLEngine
from loadtests.common import (
    Column, Method, add_threads, attribution_workload, checkpoint, engine_run, interleave,
    model_config, parser, quiet_torch, table,
)


def engine_at(engine: NLLEngine, encoded: list[EncodedItem], repeat: int) -> Method:
    """`engine` (one token budget, prefix reuse on or off) scoring all items in one call."""
    engine.score_encoded(encoded[:14])  # warm-up
    reuse = "on" if engine.prefix_reuse else "off"
    return Method(f"{engine.token_budget}-{reuse}", reuse, lambda: engine_run(engine, encoded),
                  repeat)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--model", choices=["small", "medium"], default="medium")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--groups", type=int, default=12)
    p.add_argument("--budgets", default="1024,2048,4096")
    p.add_argument("--repeat", type=int, default=2)
    add_threads(p)
    args = p.parse_args(argv)

    quiet_torch(args.threads)
    config = model_config(checkpoint(args.model), args.dtype, "cpu")
    loaded = load_model(config)
    workload = attribution_workload(args.groups, config.format.why_turn)
    engines = [NLLEngine(config, loaded=loaded, token_budget=int(b), prefix_reuse=r,
                         num_threads=args.threads)
               for b in args.budgets.split(",") for r in (False, True)]
    encoded = [engines[0].encode(i) for i in workload.items]
    got = interleave([engine_at(e, encoded, args.repeat) for e in engines])
    print(f"model {args.model} {args.dtype}, {len(encoded)} items, {workload.pairs} pairs, "
          f"{args.threads} threads; fastest of {args.repeat} alternating runs")
    columns = [Column("budget", 7, "d"), Column("reuse", 6), Column("seconds", 8, ".2f"),
               Column("pairs/s", 8, ".2f"), Column("passes", 7, "d"), Column("padding", 8, ".1%"),
               Column("  runs", 0, left=True)]
    print(table(columns, [
        [int(key.split("-")[0]), r.label, r.best, workload.pairs / r.best,
         r.last.detail.forward_passes, r.last.detail.padding_waste,
         "  " + " ".join(f"{x:.2f}" for x in r.seconds)] for key, r in got.items()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
