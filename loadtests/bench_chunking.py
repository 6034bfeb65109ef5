"""What fair chunking costs a bulk client, in-process (no Ray), in one run: the probe workload
scored as one engine call, and as a replica computes it when its requests are cut into chunks by
the former rule (item tokens) and by the current one (computed positions, ``NLLEngine.positions``).

The workload is bench_probe.py's (CEDAR attribution groups, DialoGPT-medium shapes by default),
sent as bench_probe's (e) sends it: requests of --groups-per-request explanation groups. A
replica with every request waiting merges one chunk of each request per engine call
(fair_chunks), so the chunked methods run "rounds": round k is one engine call over chunk k of
every request. The methods alternate and each keeps its fastest of --repeat runs; NLLs agree with
the one-call method to 1e-4 (checked).

    python loadtests/bench_chunking.py --model medium
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
    p.add_argument("--groups", type=int, default=12)
    p.add_argument("--groups-per-request", type=int, default=4)
    p.add_argument("--chunk-tokens", type=int, default=None,
                   help="chunk size (default: the serving default, ServingOptions.chunk_tokens)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args(argv)

    from transformers.utils import logging as hf_logging

    from dialscore_server.checkpoints.loading import set_threads
    from dialscore_server.contract.options import ServingOptions
    from dialscore_server.nll.engine.engine import NLLEngine
    from dialscore_server.nll.serving import chunk_items, item_tokens
    from loadtests.bench_probe import attribution_workload, checkpoint, model_config

    hf_logging.set_verbosity_error()
    set_threads(args.threads)
    chunk = args.chunk_tokens or ServingOptions().chunk_tokens
    config = model_config(checkpoint(args.model, Path(tempfile.gettempdir()) / "dialscore-bench"),
                          "float32", "cpu")
    engine = NLLEngine(config, num_threads=args.threads)
    groups, _, _ = attribution_workload(args.groups, config.format.why_turn)
    per = args.groups_per_request
    requests = [[engine.encode(it) for g in groups[k:k + per] for it in g]
                for k in range(0, len(groups), per)]
    flat = [e for r in requests for e in r]

    def rounds(cost) -> list[list]:
        """Engine calls when every request waits: call k merges chunk k of each request."""
        chunks = [chunk_items(r, chunk, cost) for r in requests]
        return [[e for c in chunks if k < len(c) for e in c[k]]
                for k in range(max(len(c) for c in chunks))]

    methods = {"one engine call": [flat],
               "chunks by item tokens (former)": rounds(item_tokens),
               "chunks by computed positions (current)": rounds(engine.positions)}
    engine.score_encoded(flat[:14])  # warm-up
    best = {name: float("inf") for name in methods}
    computed = {}
    nlls = {}
    for _ in range(args.repeat):
        for name, calls in methods.items():
            start = time.perf_counter()
            outs = [engine.score_encoded(c) for c in calls]
            best[name] = min(best[name], time.perf_counter() - start)
            computed[name] = sum(s.real_tokens for _, s in outs)
            nlls[name] = {id(e): r.nll for c, (res, _) in zip(calls, outs) for e, r in zip(c, res)}

    ref = nlls["one engine call"]
    print(f"{args.model}, float32, {args.threads} threads, token budget {engine.token_budget}; "
          f"{len(requests)} requests of {per} groups ({len(flat)} items, "
          f"{sum(e.cost for e in flat)} item tokens); chunk size {chunk}; fastest of {args.repeat}")
    print(f"{'method':42s} {'calls':>5s} {'computed':>9s} {'s':>8s} {'x one call':>10s} {'max|dNLL|':>9s}")
    for name, calls in methods.items():
        diff = max(abs(nlls[name][k] - ref[k]) for k in ref)
        assert diff < 1e-4, f"{name}: NLLs differ from one call by {diff}"
        print(f"{name:42s} {len(calls):5d} {computed[name]:9d} {best[name]:8.2f} "
              f"{best['one engine call'] / best[name]:10.2f} {diff:9.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
