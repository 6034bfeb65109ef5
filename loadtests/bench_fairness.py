"""Fair sharing of a classifier replica: small rerank latency alone and beside a large request,
and the share of replica time spent on work nobody waited for.

    python loadtests/bench_fairness.py --rate 4 --seconds 15 --chunk-pairs 256
    python loadtests/bench_fairness.py --rate 4 --seconds 15 --chunk-pairs 4096   # ~ unchunked

One classifier replica (stand-in NLI, 2 threads). Phases, each --seconds long:

1. *alone*: a stream of small /v1/rerank requests (6-turn context, 8 candidates: 24 pairs) sent
   open-loop at --rate per second; p50/p99 latency.
2. *beside large*: the same stream while large /v1/contradiction requests (16,384 pairs each, the
   default max_request_pairs) run back to back on the same replica.
3. *abandoned*: large requests whose client gives up after 1 s (read timeout), back to back,
   beside the stream: the replica's ``wasted_s / busy_s`` (engine time spent on chunks whose
   request was already cancelled) and the pairs dropped unseen.

``--chunk-pairs 4096`` makes chunks as large as a batch may be (the replica's max_batch_pairs), so
a large request is 4 indivisible engine calls: roughly the behaviour before chunking. Loopback
only; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from loadtests.bench_rerank import CANDIDATES, CONTEXT, pct  # noqa: E402

MODEL = "roberta-large-mnli"
LARGE = {"model": MODEL, "dialogues": [
    {"turns": [{"speaker": 1, "text": f"I have {j} dogs and {d} cats."} for j in range(129)]}
    for d in range(128)]}  # 128 x 128 = 16,384 pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=4)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--chunk-pairs", type=int, default=256)
    args = ap.parse_args()

    from dialscore_server.gateway.args import AppArgs
    from dialscore_server.gateway.embedded import serve_locally

    stand_ins = Path(tempfile.gettempdir()) / "dialscore-bench" / "stand-ins"
    app_args = AppArgs.model_validate({
        "stand_ins": str(stand_ins), "request_timeout_s": 120,
        "models": [{"name": "dialogpt-medium", "serving": {"num_cpus": 0.2, "num_threads": 1}}],
        "classifiers": [{"name": MODEL, "serving": {
            "num_cpus": 1, "num_threads": 2, "max_ongoing_requests": 128, "max_queued_requests": 512,
            "chunk_pairs": args.chunk_pairs}}],
    })
    with serve_locally(app_args, num_cpus=4, name="bench") as url:
        measure(url, args)
    return 0


async def stats() -> dict[str, float]:
    from ray import serve

    return await serve.get_deployment_handle(f"nli-{MODEL}", "bench").work_stats.remote()


def measure(url: str, args: argparse.Namespace) -> None:
    import httpx

    small = {"context": CONTEXT, "candidates": CANDIDATES}

    async def stream(client: httpx.AsyncClient, stop: asyncio.Event) -> list[float]:
        latencies: list[float] = []

        async def one():
            t0 = time.perf_counter()
            r = await client.post("/v1/rerank", json=small)
            r.raise_for_status()
            latencies.append(time.perf_counter() - t0)

        tasks, start = [], time.perf_counter()
        for k in range(int(args.rate * args.seconds)):
            delay = start + k / args.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        stop.set()
        return latencies

    async def large_loop(client: httpx.AsyncClient, stop: asyncio.Event, give_up_s: float | None) -> int:
        sent = 0
        while not stop.is_set() and sent < 100:
            sent += 1
            try:
                r = await client.post("/v1/contradiction", json=LARGE,
                                      timeout=httpx.Timeout(300, read=give_up_s))
                r.raise_for_status()
            except httpx.ReadTimeout:
                pass
        return sent

    async def phase(large: bool, give_up_s: float | None = None):
        async with httpx.AsyncClient(base_url=url, timeout=300,
                                     limits=httpx.Limits(max_connections=200)) as client:
            stop = asyncio.Event()
            jobs = [stream(client, stop)]
            if large:
                jobs.append(large_loop(client, stop, give_up_s))
            before = await stats()
            out = await asyncio.gather(*jobs)
            await asyncio.sleep(0)
        # the running chunk, if any, finishes on its own
        deadline = time.monotonic() + 120
        while (await stats())["in_flight_pairs"] and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        after = await stats()
        delta = {k: after[k] - before[k] for k in after}
        return out[0], (out[1] if large else 0), delta

    async def warm():
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            for _ in range(3):
                (await client.post("/v1/rerank", json=small)).raise_for_status()

    asyncio.run(warm())
    print(f"chunk_pairs={args.chunk_pairs}; small: /v1/rerank 6-turn context x 8 candidates, "
          f"{args.rate:g}/s for {args.seconds:g} s; large: /v1/contradiction 16,384 pairs back to back")
    print(f"{'phase':<16s} {'n':>4s} {'p50 s':>7s} {'p99 s':>7s} {'large':>5s} {'busy s':>7s} "
          f"{'wasted s':>8s} {'wasted %':>8s} {'dropped':>8s}")
    for name, large, give_up in [("alone", False, None), ("beside large", True, None),
                                 ("large abandoned", True, 1.0)]:
        lat, n_large, d = asyncio.run(phase(large, give_up))
        share = d["wasted_s"] / d["busy_s"] if d["busy_s"] else 0.0
        print(f"{name:<16s} {len(lat):4d} {pct(lat, 50):7.3f} {pct(lat, 99):7.3f} {n_large:5d} "
              f"{d['busy_s']:7.2f} {d['wasted_s']:8.2f} {100 * share:7.1f}% {int(d['dropped_pairs']):8d}")


if __name__ == "__main__":
    sys.exit(main())
