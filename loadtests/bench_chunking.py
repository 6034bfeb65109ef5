"""What fair chunking costs a bulk client, in-process (no Ray), in one run: the probe workload
scored as one engine call, and as a replica computes it when its requests are cut into chunks by
the former rule (item tokens) and by the current one (computed positions, ``NLLEngine.positions``).

The workload is bench_probe's (CEDAR attribution groups, DialoGPT-medium shapes by default),
sent as bench_probe's (e) sends it: requests of --groups-per-request explanation groups. A
replica with every request waiting merges one chunk of each request per engine call, so the
chunked methods run "rounds": round k is one engine call over chunk k of every request. The
methods (one function each below) alternate and each keeps its fastest of --repeat runs; NLLs
agree with the one-call method to 1e-4 (checked).

    python -m loadtests.bench_chunking --model medium
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from dialscore_server.contract.options import ServingOptions
from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.nll.serving import Positions, chunk_items, item_tokens
from loadtests.common import (
    Column, Method, Run, add_threads, attribution_workload, checkpoint, interleave,
    max_abs_diff, model_config, parser, quiet_torch, table,
)

TOLERANCE = 1e-4


def _calls(key: str, label: str, engine: NLLEngine, calls: list[list[EncodedItem]],
           flat: Sequence[EncodedItem], repeat: int) -> Method:
    """`calls` run one after the other; NLLs put back in `flat`'s order."""
    where = {id(e): k for k, e in enumerate(flat)}

    def run() -> Run:
        nlls = [0.0] * len(flat)
        computed = 0
        for call in calls:
            results, stats = engine.score_encoded(call)
            computed += stats.real_tokens
            for e, r in zip(call, results):
                nlls[where[id(e)]] = r.nll
        return Run(nlls, computed=computed, detail=len(calls))

    return Method(key, label, run, repeat)


def rounds(requests: list[list[EncodedItem]], chunk: int, cost: Positions) -> list[list[EncodedItem]]:
    """Engine calls when every request waits: call k merges chunk k of each request."""
    chunks = [[run for run, _ in chunk_items(r, chunk, cost)] for r in requests]
    return [[e for c in chunks if k < len(c) for e in c[k]]
            for k in range(max(len(c) for c in chunks))]


def one_call(engine: NLLEngine, requests: list[list[EncodedItem]], repeat: int) -> Method:
    """Every item of every request in one engine call (the reference)."""
    flat = [e for r in requests for e in r]
    return _calls("one", "one engine call", engine, [flat], flat, repeat)


def chunks_by_item_tokens(engine: NLLEngine, requests: list[list[EncodedItem]], chunk: int,
                          repeat: int) -> Method:
    """Chunks of `chunk` item tokens (the former rule), merged in rounds."""
    flat = [e for r in requests for e in r]
    return _calls("tokens", "chunks by item tokens (former)", engine,
                  rounds(requests, chunk, item_tokens), flat, repeat)


def chunks_by_positions(engine: NLLEngine, requests: list[list[EncodedItem]], chunk: int,
                        repeat: int) -> Method:
    """Chunks of `chunk` computed positions (the current rule), merged in rounds."""
    flat = [e for r in requests for e in r]
    return _calls("positions", "chunks by computed positions (current)", engine,
                  rounds(requests, chunk, engine.positions), flat, repeat)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--model", choices=["small", "medium"], default="medium")
    p.add_argument("--groups", type=int, default=12)
    p.add_argument("--groups-per-request", type=int, default=4)
    p.add_argument("--chunk-tokens", type=int, default=None,
                   help="chunk size (default: the serving default, ServingOptions.chunk_tokens)")
    p.add_argument("--repeat", type=int, default=3)
    add_threads(p)
    args = p.parse_args(argv)

    quiet_torch(args.threads)
    chunk = args.chunk_tokens or ServingOptions().chunk_tokens
    config = model_config(checkpoint(args.model))
    engine = NLLEngine(config, num_threads=args.threads)
    groups = attribution_workload(args.groups, config.format.why_turn).groups
    per = args.groups_per_request
    requests = [[engine.encode(it) for g in groups[k:k + per] for it in g]
                for k in range(0, len(groups), per)]
    flat = [e for r in requests for e in r]
    engine.score_encoded(flat[:14])  # warm-up
    got = interleave([one_call(engine, requests, args.repeat),
                      chunks_by_item_tokens(engine, requests, chunk, args.repeat),
                      chunks_by_positions(engine, requests, chunk, args.repeat)])

    ref = got["one"]
    print(f"{args.model}, float32, {args.threads} threads, token budget {engine.token_budget}; "
          f"{len(requests)} requests of {per} groups ({len(flat)} items, "
          f"{sum(e.cost for e in flat)} item tokens); chunk size {chunk}; fastest of {args.repeat}")
    rows = []
    for r in got.values():
        diff = max_abs_diff(r.last.nlls, ref.last.nlls)
        assert diff < TOLERANCE, f"{r.label}: NLLs differ from one call by {diff}"
        rows.append([r.label, r.last.detail, r.last.computed, r.best, ref.best / r.best, diff])
    print(table([Column("method", 42, left=True), Column("calls", 5, "d"),
                 Column("computed", 9, "d"), Column("s", 8, ".2f"), Column("x one call", 10, ".2f"),
                 Column("max|dNLL|", 9, ".1e")], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
