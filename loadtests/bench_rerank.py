"""Rerank latency at rising request rates, and contradiction throughput on DECODE RCT, on stand-ins.

    python loadtests/bench_rerank.py --rates 2,5,10,20 --seconds 10

Rerank: a 6-turn context and 8 candidates per request, sent open-loop (a fixed arrival rate, each
request on its own task) for --seconds at each rate; prints achieved rate and p50/p95/p99 latency.
Contradiction: the 2,011 dialogues of ../shared/data/decode/rct.jsonl in requests of 256, 4 at a
time; prints dialogues/s. Loopback only; every loop is bounded in count and time.
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
RCT = ROOT.parent / "shared" / "data" / "decode" / "rct.jsonl"

CONTEXT = [
    {"speaker": "user", "text": "Hi! Do you have any pets?"},
    {"speaker": "bot", "text": "Yes, I have two dogs and a cat."},
    {"speaker": "user", "text": "What are their names?"},
    {"speaker": "bot", "text": "Rex, Max and Luna. I adopted them last year."},
    {"speaker": "user", "text": "Do you take them to the park?"},
    {"speaker": "bot", "text": "Every morning before work, I love it."},
]
CANDIDATES = ["I do not have any pets.", "Rex loves the park the most.", "I hate dogs.",
              "Luna stays at home, she is a cat.", "I have never been to a park.",
              "We go at seven every day.", "My dogs are called Bella and Coco.", "Yes, it is fun."]


def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="2,5,10,20")
    ap.add_argument("--seconds", type=float, default=10)
    args = ap.parse_args()

    from dialscore_server.gateway.args import AppArgs
    from dialscore_server.gateway.embedded import serve_locally

    stand_ins = Path(tempfile.gettempdir()) / "dialscore-bench" / "stand-ins"
    app_args = AppArgs.model_validate({
        "stand_ins": str(stand_ins), "request_timeout_s": 60,
        "models": [{"name": "dialogpt-medium", "serving": {"num_cpus": 0.4, "num_threads": 1}}],
        "classifiers": [{"name": "roberta-large-mnli",
                         "serving": {"num_cpus": 1, "num_threads": 2, "max_ongoing_requests": 128,
                                     "max_queued_requests": 512}}],
    })
    with serve_locally(app_args, num_cpus=4, name="bench") as url:
        measure(url, args)
    return 0


def measure(url: str, args: argparse.Namespace) -> None:
    import httpx

    from dialscore.evals.decode import read_decode

    body = {"context": CONTEXT, "candidates": CANDIDATES}

    async def at_rate(rate: float):
        latencies, statuses = [], []
        async with httpx.AsyncClient(base_url=url, timeout=60,
                                     limits=httpx.Limits(max_connections=500)) as client:
            async def one():
                t0 = time.perf_counter()
                r = await client.post("/v1/rerank", json=body)
                latencies.append(time.perf_counter() - t0)
                statuses.append(r.status_code)

            tasks, start = [], time.perf_counter()
            n = int(rate * args.seconds)
            for k in range(n):
                delay = start + k / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one()))
            await asyncio.gather(*tasks)
            return n / (time.perf_counter() - start), latencies, statuses

    asyncio.run(at_rate(2))  # warm-up
    print(f"rerank: 6-turn context, 8 candidates, {args.seconds:.0f} s per rate (stand-in NLI, 2 threads)")
    print(f"{'offered/s':>9s} {'done/s':>7s} {'ok':>5s} {'p50 s':>7s} {'p95 s':>7s} {'p99 s':>7s}")
    for rate in [float(r) for r in args.rates.split(",")]:
        done, lat, st = asyncio.run(at_rate(rate))
        print(f"{rate:9.1f} {done:7.1f} {st.count(200):5d} {pct(lat, 50):7.3f} {pct(lat, 95):7.3f} {pct(lat, 99):7.3f}")

    if RCT.is_file():
        dialogues = [d.to_request() for d in read_decode(RCT)]

        async def decode_all():
            sem = asyncio.Semaphore(4)
            async with httpx.AsyncClient(base_url=url, timeout=300) as client:
                async def chunk(k):
                    async with sem:
                        r = await client.post("/v1/contradiction", json={"dialogues": dialogues[k:k + 256]})
                        r.raise_for_status()
                t0 = time.perf_counter()
                await asyncio.gather(*(chunk(k) for k in range(0, len(dialogues), 256)))
                return time.perf_counter() - t0

        secs = asyncio.run(decode_all())
        print(f"contradiction: {len(dialogues)} RCT dialogues in {secs:.1f} s = {len(dialogues) / secs:.0f} dialogues/s")
    else:
        print("contradiction: ../shared/data/decode/rct.jsonl absent; skipped")


if __name__ == "__main__":
    sys.exit(main())
