"""Engine speed by token budget (padded tokens per forward pass), reuse off and on, in one run.

The workload is bench_probe.py's (CEDAR attribution groups of clients/dialscore/probes/cedar_sample.jsonl) on the
same checkpoints; every (budget, reuse) engine scores all items, the engines alternate, and each
keeps its fastest of --repeat runs. This is the measurement behind the engine's CPU default
budget (services/dialscore_server/nll/engine/engine.py: default_token_budget).

    python loadtests/bench_budget.py --model medium
    python loadtests/bench_budget.py --model medium --dtype bfloat16 --budgets 1024,4096
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["small", "medium"], default="medium")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--groups", type=int, default=12)
    p.add_argument("--budgets", default="1024,2048,4096")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args(argv)

    from transformers.utils import logging as hf_logging

    from loadtests.bench_probe import attribution_workload, checkpoint, model_config
    from dialscore_server.checkpoints.loading import load_model, set_threads
    from dialscore_server.nll.engine.engine import NLLEngine

    hf_logging.set_verbosity_error()
    set_threads(args.threads)
    source = checkpoint(args.model, Path(tempfile.gettempdir()) / "dialscore-bench")
    config = model_config(source, args.dtype, "cpu")
    loaded = load_model(config)
    groups, n_pairs, _ = attribution_workload(args.groups, config.format.why_turn)
    items = [it for g in groups for it in g]
    engines = {(b, r): NLLEngine(config, loaded=loaded, token_budget=b, prefix_reuse=r,
                                 num_threads=args.threads)
               for b in map(int, args.budgets.split(",")) for r in (False, True)}
    encoded = [next(iter(engines.values())).encode(i) for i in items]
    for e in engines.values():
        e.score_encoded(encoded[:14])
    runs: dict = {k: [] for k in engines}
    stats = {}
    for _ in range(args.repeat):
        for k, e in engines.items():
            t = time.perf_counter()
            _, stats[k] = e.score_encoded(encoded)
            runs[k].append(time.perf_counter() - t)
    print(f"model {args.model} {args.dtype}, {len(items)} items, {n_pairs} pairs, "
          f"{args.threads} threads; fastest of {args.repeat} alternating runs")
    print(f"{'budget':>7s} {'reuse':>6s} {'seconds':>8s} {'pairs/s':>8s} {'passes':>7s} {'padding':>8s}   runs")
    for (b, r), v in runs.items():
        st = stats[(b, r)]
        print(f"{b:7d} {'on' if r else 'off':>6s} {min(v):8.2f} {n_pairs / min(v):8.2f} "
              f"{st.forward_passes:7d} {st.padding_waste:8.1%}   " + " ".join(f"{x:.2f}" for x in v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
