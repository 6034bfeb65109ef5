"""Served HTTP path vs the in-process engine, on the same probe-shaped workload, in one run.

    python loadtests/bench_serve.py --model small  --requests 48
    python loadtests/bench_serve.py --model medium --requests 8     # DialoGPT-medium shapes (355M)

Workload: requests of 64 items (2-6 context turns + a target), sent by 8 concurrent clients over
loopback HTTP to one model replica; the in-process engine scores the same items (one engine call per
request, same thread count). Prints items/s, tokens/s, p50/p95/p99 latency and the served /
in-process throughput ratio (target: >= 0.85). Both paths run one after the other, never at once.
Traffic goes to 127.0.0.1 only, bounded by --requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def medium_checkpoint(stand_ins: Path, out: Path) -> Path:
    """A random-weight GPT-2 with DialoGPT-medium's shapes (24 layers, 1024 wide, vocab 50257)."""
    import shutil

    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from dialscore_server.checkpoints.standins import MARKER

    if (out / MARKER).is_file():
        return out
    tok = AutoTokenizer.from_pretrained(stand_ins / "gpt2")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=1024, n_embd=1024, n_layer=24,
                                       n_head=16, bos_token_id=tok.eos_token_id,
                                       eos_token_id=tok.eos_token_id))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    shutil.copy(stand_ins / "gpt2" / MARKER, out / MARKER)
    return out


def workload(n_requests: int, items_per_request: int, seed: int) -> list[list[dict]]:
    from dialscore_server.checkpoints.standins import templated_sentences

    rng = random.Random(seed)
    pool = templated_sentences(5000, seed=seed)
    return [[{"context": rng.sample(pool, rng.randint(2, 6)), "target": rng.choice(pool)}
             for _ in range(items_per_request)] for _ in range(n_requests)]


@dataclass
class ClosedLoopRun:
    """What :func:`closed_loop_nll` measured: wall seconds for all requests, each request's NLLs
    (in request order), and per request (in completion order) its latency and the replica's
    timing headers: engine time (``x-compute-time``), batch queue (``x-queue-time``) and
    tokenization (``x-tokenization-time``), in seconds."""

    seconds: float
    nlls: list[list[float]]
    latencies: list[float]
    compute_s: list[float]
    queue_s: list[float] = field(default_factory=list)
    tokenize_s: list[float] = field(default_factory=list)


async def closed_loop_nll(url: str, model: str, requests: list[list[dict]], clients: int,
                          timeout: float = 600) -> ClosedLoopRun:
    """POST every request (a list of items) to /v1/nll from `clients` concurrent closed-loop
    clients over loopback; an HTTP error aborts the run."""
    import httpx

    queue = list(enumerate(requests))
    run = ClosedLoopRun(0.0, [[] for _ in requests], [], [])
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
        async def worker():
            while queue:
                k, items = queue.pop(0)
                t0 = time.perf_counter()
                r = await client.post("/v1/nll", json={"model": model, "items": items})
                run.latencies.append(time.perf_counter() - t0)
                r.raise_for_status()
                for into, header in ((run.compute_s, "x-compute-time"), (run.queue_s, "x-queue-time"),
                                     (run.tokenize_s, "x-tokenization-time")):
                    into.append(float(r.headers.get(header, "nan")) / 1000)  # ms, as TEI
                run.nlls[k] = [x["nll"] for x in r.json()["results"]]
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        run.seconds = time.perf_counter() - t0
    return run


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["small", "medium"], default="small")
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--items", type=int, default=64)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import httpx

    from dialscore_server.gateway.args import AppArgs
    from dialscore_server.gateway.embedded import serve_locally
    from dialscore_server.nll.engine.engine import NLLEngine
    from dialscore_server.nll.protocol import NLLItemIn
    from dialscore_server.checkpoints.standins import build_stand_ins

    work = Path(tempfile.gettempdir()) / "dialscore-bench"
    stand_ins = work / "stand-ins"
    build_stand_ins(stand_ins)
    source = stand_ins / "gpt2" if args.model == "small" else medium_checkpoint(stand_ins, work / "medium")
    app_args = AppArgs.model_validate({
        "stand_ins": str(stand_ins), "request_timeout_s": 600,
        "models": [{"name": "dialogpt-medium", "overrides": {"source": str(source), "max_length": 512},
                    "serving": {"num_cpus": 1, "num_threads": args.threads, "max_ongoing_requests": 64,
                                "max_batch_tokens": 16384}}],
    })
    requests = workload(args.requests, args.items, args.seed)
    n_items = args.requests * args.items

    # In-process: the same items, one engine call per request.
    config = app_args.model_configs()[0][0]
    engine = NLLEngine(config, num_threads=args.threads)
    encoded = [[engine.encode(NLLItemIn.model_validate(i).to_item()) for i in r] for r in requests]
    tokens = sum(e.cost for r in encoded for e in r)
    engine.score_encoded(encoded[0])  # warm-up
    start = time.perf_counter()
    direct = [engine.score_encoded(r)[0] for r in encoded]
    t_direct = time.perf_counter() - start
    del engine

    # Served: one replica, N concurrent clients over loopback HTTP.
    with serve_locally(app_args, num_cpus=4, name="bench") as url:
        httpx.post(f"{url}/v1/nll", json={"model": "dialogpt-medium", "items": requests[0]}, timeout=600)
        http = asyncio.run(closed_loop_nll(url, "dialogpt-medium", requests, args.clients))
    t_served, latencies, served = http.seconds, http.latencies, http.nlls

    worst = max(abs(a - b.nll) for got, want in zip(served, direct) for a, b in zip(got, want))
    rows = {
        "in-process engine": (t_direct, None),
        f"served (HTTP, {args.clients} clients)": (t_served, latencies),
    }
    print(f"model: {args.model} ({source.name}); {args.requests} requests x {args.items} items = "
          f"{n_items} items, {tokens} tokens; {args.threads} torch threads; machine: "
          f"{os.cpu_count()} CPUs")
    print(f"{'path':34s} {'seconds':>8s} {'items/s':>9s} {'tokens/s':>10s} {'p50 s':>7s} {'p95 s':>7s} {'p99 s':>7s}")
    for name, (secs, lat) in rows.items():
        lat_cols = (f"{statistics.median(lat):7.2f} {pct(lat, 95):7.2f} {pct(lat, 99):7.2f}"
                    if lat else f"{'-':>7s} {'-':>7s} {'-':>7s}")
        print(f"{name:34s} {secs:8.2f} {n_items / secs:9.1f} {tokens / secs:10.0f} {lat_cols}")
    print(f"served / in-process throughput: {t_direct / t_served:.2f} (target >= 0.85)")
    print(f"NLL agreement served vs in-process: max |diff| = {worst:.2e} "
          f"({'OK' if worst < 1e-4 else 'MISMATCH'})")
    print(json.dumps({"ratio": t_direct / t_served, "max_diff": worst}))
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
