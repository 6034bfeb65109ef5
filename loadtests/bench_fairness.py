"""Fair sharing of a model replica: small-request latency alone and beside a large request, and
the share of replica time spent on work nobody waited for.

    python loadtests/bench_fairness.py --rate 4 --seconds 15 --chunk-pairs 256
    python loadtests/bench_fairness.py --rate 4 --seconds 15 --chunk-pairs 4096   # ~ unchunked
    python loadtests/bench_fairness.py --endpoint nll --rate 4 --seconds 15 --chunk-tokens 2048
    python loadtests/bench_fairness.py --endpoint nll --rate 4 --seconds 15 --chunk-tokens 16384

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
NLL_MODEL = "dialogpt-medium"
SMALL_NLL = {"model": NLL_MODEL, "items": [{"context": [t["text"] for t in CONTEXT], "target": c}
                                           for c in CANDIDATES]}
LARGE_NLL = {"model": NLL_MODEL, "items": [  # 1024 items (max_items), 4 per 5-turn context
    {"context": [f"turn {t} : do you like dogs number {d} ?" for t in range(5)],
     "target": f"i never had a dog , i have {k} cats ."}
    for d in range(256) for k in range(4)]}
LARGE = {"model": MODEL, "dialogues": [
    {"turns": [{"speaker": 1, "text": f"I have {j} dogs and {d} cats."} for j in range(129)]}
    for d in range(128)]}  # 128 x 128 = 16,384 pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=4)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--chunk-pairs", type=int, default=256)
    ap.add_argument("--endpoint", choices=("contradiction", "nll"), default="contradiction")
    ap.add_argument("--chunk-tokens", type=int, default=2048)
    args = ap.parse_args()
    nll = args.endpoint == "nll"

    from dialscore_server.gateway.args import AppArgs
    from dialscore_server.gateway.embedded import serve_locally

    stand_ins = Path(tempfile.gettempdir()) / "dialscore-bench" / "stand-ins"
    app_args = AppArgs.model_validate({
        "stand_ins": str(stand_ins), "request_timeout_s": 120,
        "models": [{"name": NLL_MODEL, "serving": {
            "num_cpus": 1 if nll else 0.2, "num_threads": 2 if nll else 1,
            "max_ongoing_requests": 128, "max_queued_requests": 512,
            "max_batch_tokens": 16384, "chunk_tokens": args.chunk_tokens}}],
        "classifiers": [{"name": MODEL, "serving": {
            "num_cpus": 0.2 if nll else 1, "num_threads": 1 if nll else 2,
            "max_ongoing_requests": 128, "max_queued_requests": 512,
            "chunk_pairs": args.chunk_pairs}}],
    })
    with serve_locally(app_args, num_cpus=4, name="bench") as url:
        measure(url, args)
    return 0


async def stats(nll: bool) -> dict[str, float]:
    from ray import serve

    name = f"nll-{NLL_MODEL}" if nll else f"nli-{MODEL}"
    got = await serve.get_deployment_handle(name, "bench").work_stats.remote()
    return {k: v for k, v in got.items() if k != "unit"}


def measure(url: str, args: argparse.Namespace) -> None:
    import httpx

    nll = args.endpoint == "nll"
    small_path, small = (("/v1/nll", SMALL_NLL) if nll
                         else ("/v1/rerank", {"context": CONTEXT, "candidates": CANDIDATES}))
    large_path, large_body = ("/v1/nll", LARGE_NLL) if nll else ("/v1/contradiction", LARGE)

    async def stream(client: httpx.AsyncClient, stop: asyncio.Event) -> list[float]:
        latencies: list[float] = []

        async def one():
            t0 = time.perf_counter()
            r = await client.post(small_path, json=small)
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
                r = await client.post(large_path, json=large_body,
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
            before = await stats(nll)
            out = await asyncio.gather(*jobs)
            await asyncio.sleep(0)
        # the running chunk, if any, finishes on its own
        deadline = time.monotonic() + 120
        while (await stats(nll))["in_flight"] and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        after = await stats(nll)
        delta = {k: after[k] - before[k] for k in after}
        return out[0], (out[1] if large else 0), delta

    async def warm():
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            for _ in range(3):
                (await client.post(small_path, json=small)).raise_for_status()

    asyncio.run(warm())
    if nll:
        print(f"chunk_tokens={args.chunk_tokens}; small: /v1/nll 8 items after a 6-turn context, "
              f"{args.rate:g}/s for {args.seconds:g} s; large: /v1/nll 1,024 items back to back")
    else:
        print(f"chunk_pairs={args.chunk_pairs}; small: /v1/rerank 6-turn context x 8 candidates, "
              f"{args.rate:g}/s for {args.seconds:g} s; large: /v1/contradiction 16,384 pairs back "
              "to back")
    print(f"{'phase':<16s} {'n':>4s} {'p50 s':>7s} {'p99 s':>7s} {'large':>5s} {'busy s':>7s} "
          f"{'wasted s':>8s} {'wasted %':>8s} {'orphan %':>8s} {'dropped':>8s}  "
          f"(dropped in {'tokens' if nll else 'pairs'})")
    for name, large, give_up in [("alone", False, None), ("beside large", True, None),
                                 ("large abandoned", True, 1.0)]:
        lat, n_large, d = asyncio.run(phase(large, give_up))
        share = d["wasted_s"] / d["busy_s"] if d["busy_s"] else 0.0
        orphan = d["orphan_s"] / d["busy_s"] if d["busy_s"] else 0.0
        print(f"{name:<16s} {len(lat):4d} {pct(lat, 50):7.3f} {pct(lat, 99):7.3f} {n_large:5d} "
              f"{d['busy_s']:7.2f} {d['wasted_s']:8.2f} {100 * share:7.1f}% {100 * orphan:7.1f}% "
              f"{int(d['dropped']):8d}")


if __name__ == "__main__":
    sys.exit(main())
