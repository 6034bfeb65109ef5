"""Rerank latency at rising request rates, and contradiction throughput on DECODE RCT, on stand-ins.

    python -m loadtests.bench_rerank --rates 2,5,10,20 --seconds 10

Rerank: a 6-turn context and 8 candidates per request, sent open-loop (a fixed arrival rate, each
request on its own task) for --seconds at each rate; prints achieved rate and p50/p95/p99 latency.
Contradiction: the 2,011 dialogues of ../shared/data/decode/rct.jsonl in requests of 256, 4 at a
time; prints dialogues/s. Loopback only; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import httpx

from dialscore.evals.decode import read_decode
from loadtests.common import (
    NLL_MODEL, SHARED_DATA, WORK, Column, RERANK_CANDIDATES, RERANK_CONTEXT, open_loop, parser,
    percentile, serve_app, table,
)

RCT = SHARED_DATA / "decode" / "rct.jsonl"
CLASSIFIER = "roberta-large-mnli"


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--rates", default="2,5,10,20")
    ap.add_argument("--seconds", type=float, default=10)
    args = ap.parse_args(argv)

    app_args = {
        "stand_ins": str(WORK / "stand-ins"), "request_timeout_s": 60,
        "models": [{"name": NLL_MODEL, "serving": {"num_cpus": 0.4, "num_threads": 1}}],
        "classifiers": [{"name": CLASSIFIER,
                         "serving": {"num_cpus": 1, "num_threads": 2, "max_ongoing_requests": 128,
                                     "max_queued_requests": 512}}],
    }
    with serve_app(app_args) as url:
        measure(url, args)
    return 0


async def rerank_at(url: str, rate: float, seconds: float) -> tuple[float, list[float], list[int]]:
    """Open-loop rerank requests at `rate` for `seconds`: (achieved rate, latencies, statuses)."""
    body = {"context": RERANK_CONTEXT, "candidates": RERANK_CANDIDATES}
    latencies: list[float] = []
    statuses: list[int] = []
    async with httpx.AsyncClient(base_url=url, timeout=60,
                                 limits=httpx.Limits(max_connections=500)) as client:
        async def one() -> None:
            start = time.perf_counter()
            r = await client.post("/v1/rerank", json=body)
            latencies.append(time.perf_counter() - start)
            statuses.append(r.status_code)

        done = await open_loop(rate, seconds, one)
    return done, latencies, statuses


async def contradiction_seconds(url: str, dialogues: list[dict]) -> float:
    """Seconds to detect contradictions in every dialogue, requests of 256, 4 at a time."""
    sem = asyncio.Semaphore(4)
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        async def chunk(k: int) -> None:
            async with sem:
                r = await client.post("/v1/contradiction", json={"dialogues": dialogues[k:k + 256]})
                r.raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(chunk(k) for k in range(0, len(dialogues), 256)))
        return time.perf_counter() - start


def measure(url: str, args: argparse.Namespace) -> None:
    asyncio.run(rerank_at(url, 2, args.seconds))  # warm-up
    print(f"rerank: 6-turn context, 8 candidates, {args.seconds:.0f} s per rate (stand-in NLI, 2 threads)")
    rows = []
    for rate in [float(r) for r in args.rates.split(",")]:
        done, lat, st = asyncio.run(rerank_at(url, rate, args.seconds))
        rows.append([rate, done, st.count(200), percentile(lat, 50), percentile(lat, 95),
                     percentile(lat, 99)])
    print(table([Column("offered/s", 9, ".1f"), Column("done/s", 7, ".1f"), Column("ok", 5, "d"),
                 Column("p50 s", 7, ".3f"), Column("p95 s", 7, ".3f"), Column("p99 s", 7, ".3f")],
                rows))

    if RCT.is_file():
        dialogues = [d.to_request() for d in read_decode(RCT)]
        secs = asyncio.run(contradiction_seconds(url, dialogues))
        print(f"contradiction: {len(dialogues)} RCT dialogues in {secs:.1f} s = "
              f"{len(dialogues) / secs:.0f} dialogues/s")
    else:
        print("contradiction: ../shared/data/decode/rct.jsonl absent; skipped")


if __name__ == "__main__":
    sys.exit(main())
