"""Served HTTP path vs the in-process engine, on the same probe-shaped workload, in one run.

    python -m loadtests.bench_serve --model small  --requests 48
    python -m loadtests.bench_serve --model medium --requests 8     # DialoGPT-medium shapes (355M)

Workload: requests of 64 items (2-6 context turns + a target), sent by 8 concurrent clients over
loopback HTTP to one model replica; the in-process engine scores the same items (one engine call per
request, same thread count). Prints items/s, tokens/s, p50/p95/p99 latency and the served /
in-process throughput ratio (target: >= 0.85). Both paths run one after the other, never at once
(one function each below). Traffic goes to 127.0.0.1 only, bounded by --requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys

from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.checkpoints.standins import build_stand_ins
from dialscore_server.gateway.args import AppArgs
from dialscore_server.nll.engine.engine import NLLEngine
from loadtests.common import (
    NLL_MODEL, WORK, Column, Method, Result, Run, add_threads, checkpoint, closed_loop_nll,
    interleave, item_json, max_abs_diff, parser, percentile, serve_app, table, templated_items,
)


def in_process(config: ModelConfig, requests: list[list[dict]], threads: int) -> Result:
    """The engine in this process, one ``score_encoded`` call per request, timed once."""
    from dialscore_server.nll.protocol import NLLItemIn

    engine = NLLEngine(config, num_threads=threads)
    encoded = [[engine.encode(NLLItemIn.model_validate(i).to_item()) for i in r] for r in requests]
    engine.score_encoded(encoded[0])  # warm-up
    tokens = sum(e.cost for r in encoded for e in r)

    def run() -> Run:
        return Run([x.nll for r in encoded for x in engine.score_encoded(r)[0]], computed=tokens)

    return interleave([Method("local", "in-process engine", run)])["local"]


def served(app_args: AppArgs, requests: list[list[dict]], clients: int) -> Result:
    """One replica behind the gateway on loopback, `clients` concurrent closed-loop clients,
    timed once from the first request to the last answer."""
    import httpx

    bodies = [{"model": NLL_MODEL, "items": r} for r in requests]
    with serve_app(app_args) as url:
        httpx.post(f"{url}/v1/nll", json=bodies[0], timeout=600)  # warm-up

        def run() -> Run:
            got = asyncio.run(closed_loop_nll(url, bodies, clients))
            return Run([x for r in got.nlls for x in r], seconds=got.seconds, detail=got)

        return interleave([Method("http", f"served (HTTP, {clients} clients)", run)])["http"]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--model", choices=["small", "medium"], default="small")
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--items", type=int, default=64)
    ap.add_argument("--clients", type=int, default=8)
    add_threads(ap)
    ap.add_argument("--seed", type=int, default=0)
    args: argparse.Namespace = ap.parse_args(argv)

    stand_ins = WORK / "stand-ins"
    build_stand_ins(stand_ins)
    source = stand_ins / "gpt2" if args.model == "small" else checkpoint("medium")
    app_args = AppArgs.model_validate({
        "stand_ins": str(stand_ins), "request_timeout_s": 600,
        "models": [{"name": NLL_MODEL, "overrides": {"source": str(source), "max_length": 512},
                    "serving": {"num_cpus": 1, "num_threads": args.threads, "max_ongoing_requests": 64,
                                "max_batch_tokens": 16384}}],
    })
    items = templated_items(args.requests * args.items, args.seed, pool_size=5000,
                            pool_seed=args.seed)
    requests = [[item_json(it) for it in items[k:k + args.items]]
                for k in range(0, len(items), args.items)]
    n_items = len(items)

    local = in_process(app_args.model_configs()[0][0], requests, args.threads)
    http = served(app_args, requests, args.clients)
    tokens = local.last.computed or 0
    worst = max_abs_diff(http.last.nlls, local.last.nlls)
    print(f"model: {args.model} ({source.name}); {args.requests} requests x {args.items} items = "
          f"{n_items} items, {tokens} tokens; {args.threads} torch threads; machine: "
          f"{os.cpu_count()} CPUs")
    latencies = http.last.detail.latencies
    columns = [Column("path", 34, left=True), Column("seconds", 8, ".2f"), Column("items/s", 9, ".1f"),
               Column("tokens/s", 10, ".0f"), Column("p50 s", 7, ".2f"), Column("p95 s", 7, ".2f"),
               Column("p99 s", 7, ".2f")]
    print(table(columns, [
        [local.label, local.best, n_items / local.best, tokens / local.best, None, None, None],
        [http.label, http.best, n_items / http.best, tokens / http.best,
         statistics.median(latencies), percentile(latencies, 95), percentile(latencies, 99)]]))
    print(f"served / in-process throughput: {local.best / http.best:.2f} (target >= 0.85)")
    print(f"NLL agreement served vs in-process: max |diff| = {worst:.2e} "
          f"({'OK' if worst < 1e-4 else 'MISMATCH'})")
    print(json.dumps({"ratio": local.best / http.best, "max_diff": worst}))
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
