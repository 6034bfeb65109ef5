"""Fair sharing of a model replica: small-request latency alone and beside a large request, and
the share of replica time spent on work nobody waited for.

    python -m loadtests.bench_fairness --rate 4 --seconds 15 --chunk-pairs 256
    python -m loadtests.bench_fairness --rate 4 --seconds 15 --chunk-pairs 4096   # ~ unchunked
    python -m loadtests.bench_fairness --endpoint nll --rate 4 --seconds 15 --chunk-tokens 2048
    python -m loadtests.bench_fairness --endpoint nll --rate 4 --seconds 15 --chunk-tokens 16384

``--endpoint contradiction`` (the default) measures the classifier replica as below.
``--endpoint nll`` measures a dialogue-model replica (stand-in DialoGPT, 2 threads): the small
stream is /v1/nll requests of 8 candidates after one 6-turn context (a rerank's NLL term), the
large request a probe-sized /v1/nll of 1,024 items (max_items; 4 targets per 5-turn context) and ``--chunk-tokens``
its chunk size (16384 = max_batch_tokens: whole engine calls, roughly the behaviour before
chunking).

One classifier replica (stand-in NLI, 2 threads). Phases, each --seconds long:

1. *alone*: a stream of small /v1/rerank requests (6-turn context, 8 candidates: 24 pairs) sent
   open-loop at --rate per second; p50/p99 latency.
2. *beside large*: the same stream while large /v1/contradiction requests (16,384 pairs each, the
   default max_request_pairs) run back to back on the same replica.
3. *abandoned*: large requests whose client gives up after 1 s (read timeout), back to back,
   beside the stream: the replica's ``wasted_s / busy_s`` (engine time spent on chunks whose
   request was cancelled before their answer, including the part computed while the client still
   waited), ``orphan_s / busy_s`` (the part computed after the cancel, for nobody: the goal is 0)
   and the work dropped unseen.

The replica's figures are its ``dialscore_work_*`` counters, read from Ray's metrics agent
before each phase and once the phase's work has settled (nothing in flight, no change for a
report interval).

``--chunk-pairs 4096`` makes chunks as large as a batch may be (the replica's max_batch_pairs), so
a large request is 4 indivisible engine calls: roughly the behaviour before chunking. Loopback
only; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import httpx

from loadtests.common import (
    NLL_MODEL, WORK, Column, RERANK_CANDIDATES, RERANK_CONTEXT, ReplicaWork, open_loop, parser,
    percentile, replica_work, serve_app, settled_work, table,
)

APP = "bench"
CLASSIFIER = "roberta-large-mnli"
SMALL_NLL = {"model": NLL_MODEL, "items": [{"context": [t["text"] for t in RERANK_CONTEXT], "target": c}
                                           for c in RERANK_CANDIDATES]}
LARGE_NLL = {"model": NLL_MODEL, "items": [  # 1024 items (max_items), 4 per 5-turn context
    {"context": [f"turn {t} : do you like dogs number {d} ?" for t in range(5)],
     "target": f"i never had a dog , i have {k} cats ."}
    for d in range(256) for k in range(4)]}
LARGE = {"model": CLASSIFIER, "dialogues": [
    {"turns": [{"speaker": 1, "text": f"I have {j} dogs and {d} cats."} for j in range(129)]}
    for d in range(128)]}  # 128 x 128 = 16,384 pairs


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--rate", type=float, default=4)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--chunk-pairs", type=int, default=256)
    ap.add_argument("--endpoint", choices=("contradiction", "nll"), default="contradiction")
    ap.add_argument("--chunk-tokens", type=int, default=2048)
    args = ap.parse_args(argv)
    nll = args.endpoint == "nll"
    app_args = {
        "stand_ins": str(WORK / "stand-ins"), "request_timeout_s": 120,
        "models": [{"name": NLL_MODEL, "serving": {
            "num_cpus": 1 if nll else 0.2, "num_threads": 2 if nll else 1,
            "max_ongoing_requests": 128, "max_queued_requests": 512,
            "max_batch_tokens": 16384, "chunk_tokens": args.chunk_tokens}}],
        "classifiers": [{"name": CLASSIFIER, "serving": {
            "num_cpus": 0.2 if nll else 1, "num_threads": 1 if nll else 2,
            "max_ongoing_requests": 128, "max_queued_requests": 512,
            "chunk_pairs": args.chunk_pairs}}],
    }
    with serve_app(app_args, name=APP) as url:
        measure(url, args)
    return 0


class Phase:
    """One phase against the app at `url`: the small stream, and optionally large requests back
    to back (each abandoned after `give_up_s` when set) until the stream ends."""

    def __init__(self, url: str, args: argparse.Namespace):
        nll = args.endpoint == "nll"
        self.url, self.rate, self.seconds = url, args.rate, args.seconds
        self.model = NLL_MODEL if nll else CLASSIFIER
        self.small_path: str
        self.small: dict[str, Any]
        self.small_path, self.small = (("/v1/nll", SMALL_NLL) if nll else
                                       ("/v1/rerank", {"context": RERANK_CONTEXT,
                                                       "candidates": RERANK_CANDIDATES}))
        self.large_path, self.large = ("/v1/nll", LARGE_NLL) if nll else ("/v1/contradiction", LARGE)

    async def stream(self, client: httpx.AsyncClient, stop: asyncio.Event) -> list[float]:
        """Small requests open-loop at the rate for the phase; their latencies."""
        latencies: list[float] = []

        async def one() -> None:
            start = time.perf_counter()
            r = await client.post(self.small_path, json=self.small)
            r.raise_for_status()
            latencies.append(time.perf_counter() - start)

        await open_loop(self.rate, self.seconds, one)
        stop.set()
        return latencies

    async def large_loop(self, client: httpx.AsyncClient, stop: asyncio.Event,
                         give_up_s: float | None) -> int:
        """Large requests back to back until `stop` (at most 100); how many were sent."""
        sent = 0
        while not stop.is_set() and sent < 100:
            sent += 1
            try:
                r = await client.post(self.large_path, json=self.large,
                                      timeout=httpx.Timeout(300, read=give_up_s))
                r.raise_for_status()
            except httpx.ReadTimeout:
                pass
        return sent

    async def traffic(self, large: bool, give_up_s: float | None) -> tuple[list[float], int]:
        async with httpx.AsyncClient(base_url=self.url, timeout=300,
                                     limits=httpx.Limits(max_connections=200)) as client:
            stop = asyncio.Event()
            jobs: list[Any] = [self.stream(client, stop)]
            if large:
                jobs.append(self.large_loop(client, stop, give_up_s))
            out = await asyncio.gather(*jobs)
        return out[0], (out[1] if large else 0)

    def run(self, large: bool, give_up_s: float | None = None
            ) -> tuple[list[float], int, ReplicaWork]:
        """(small latencies, large requests sent, the replica's work during the phase); the
        running chunk, if any, finishes on its own before the work is read."""
        before = replica_work(APP, self.model)
        latencies, n_large = asyncio.run(self.traffic(large, give_up_s))
        return latencies, n_large, settled_work(APP, self.model).since(before)


def measure(url: str, args: argparse.Namespace) -> None:
    nll = args.endpoint == "nll"
    phase = Phase(url, args)

    async def warm() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            for _ in range(3):
                (await client.post(phase.small_path, json=phase.small)).raise_for_status()

    asyncio.run(warm())
    settled_work(APP, phase.model)
    if nll:
        print(f"chunk_tokens={args.chunk_tokens}; small: /v1/nll 8 items after a 6-turn context, "
              f"{args.rate:g}/s for {args.seconds:g} s; large: /v1/nll 1,024 items back to back")
    else:
        print(f"chunk_pairs={args.chunk_pairs}; small: /v1/rerank 6-turn context x 8 candidates, "
              f"{args.rate:g}/s for {args.seconds:g} s; large: /v1/contradiction 16,384 pairs back "
              "to back")
    columns = [Column("phase", 16, left=True), Column("n", 4, "d"), Column("p50 s", 7, ".3f"),
               Column("p99 s", 7, ".3f"), Column("large", 5, "d"), Column("busy s", 7, ".2f"),
               Column("wasted s", 8, ".2f"), Column("wasted %", 8, ".1%"),
               Column("orphan %", 8, ".1%"), Column("dropped", 8, ".0f")]
    rows = []
    for name, large, give_up in [("alone", False, None), ("beside large", True, None),
                                 ("large abandoned", True, 1.0)]:
        lat, n_large, d = phase.run(large, give_up)
        rows.append([name, len(lat), percentile(lat, 50), percentile(lat, 99), n_large, d.busy_s,
                     d.wasted_s, d.wasted_s / d.busy_s if d.busy_s else 0.0,
                     d.orphan_s / d.busy_s if d.busy_s else 0.0, d.dropped])
    print(table(columns, rows, tail=f"  (dropped in {'tokens' if nll else 'pairs'})"))


if __name__ == "__main__":
    sys.exit(main())
