"""Priority lanes: interactive /v1/rerank latency alone, and beside a bulk probe run, with the
lanes off and on (one run, one app).

    python -m loadtests.bench_lanes --rate 3 --seconds 20
    python -m loadtests.bench_lanes --rate 3 --seconds 20 --num-cpus 16 --device cuda  # on a GPU

One app serves the stand-in NLI classifier and the stand-in DialoGPT three times: as
``dialogpt-lanes-off`` (``priority_lanes: false``: one first-come-first-served queue), as
``dialogpt-lanes-on`` (the default lanes) and as ``dialogpt-lanes-small-bulk`` (lanes, and bulk
engine calls of at most --bulk-max-batch positions), each one replica with 2 threads
(``--device cuda``: each on a quarter of one GPU). Phases, each --seconds long; the interactive
stream is /v1/rerank requests (6-turn context, 8 candidates, with ``nll_model``: its NLL term
shares the dialogue model's replica with the probe run) sent open-loop at --rate per second, no
priority header (interactive):

1. *alone*: the stream alone, ``nll_model`` each deployment in turn;
2. *beside probe, lanes off*: the same stream while a probe run scores the shipped CEDAR sample's
   attribution items on the lanes-off deployment as the client's probe runs do
   (``AsyncDialscoreClient.nll_many``, 64 items per request, ``max_concurrency`` --concurrency,
   default 8 = the client's default, ``X-Dialscore-Priority: bulk``), over and over until the
   stream ends. The probe run is a process of its own, as a researcher's client is: its work
   (reading 64 items' per-token answers) never delays the stream's event loop, and so never
   the stream's timings. ``--bulk-nice N`` runs it at that nice value, standing in for a client
   on another host (it then takes CPU only when the service does not);
3. *beside probe, lanes on* / *small bulk*: the same against the other two deployments.

Reported: the stream's p50/p99 latency and the probe run's items per second, per phase, and the
ratios of p99 to the *alone* p99 of the same deployment. Loopback only; every loop is bounded
in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import time
from typing import Any

import httpx

from dialscore.client import AsyncDialscoreClient
from loadtests.common import (
    NLL_MODEL, RERANK_CANDIDATES, RERANK_CONTEXT, WORK, Column,
    attribution_workload, item_json, open_loop, parser, percentile, serve_app, table,
)

APP = "lanes"
CLASSIFIER = "roberta-large-mnli"
OFF, ON, SMALL = "dialogpt-lanes-off", "dialogpt-lanes-on", "dialogpt-lanes-small-bulk"


def nll_entry(name: str, lanes: bool, device: str, bulk_max_batch: int | None = None
              ) -> dict[str, Any]:
    """The stand-in DialoGPT served as `name` on `device` (``cuda``: a quarter of the GPU)."""
    return {"name": NLL_MODEL, "serve_as": name, "overrides": {"device": device},
            "serving": {"num_cpus": 0.6, "num_gpus": 0.25 if device == "cuda" else 0,
                        "num_threads": 2, "max_ongoing_requests": 128,
                        "max_queued_requests": 512, "priority_lanes": lanes,
                        "bulk_max_batch": bulk_max_batch}}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--rate", type=float, default=3)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--concurrency", type=int, default=8,
                    help="the probe run's requests in flight (default 8: the client's default)")
    ap.add_argument("--bulk-max-batch", type=int, default=512,
                    help="bulk_max_batch of the third deployment (default 512: a quarter of a "
                         "chunk, to which its bulk requests are cut)")
    ap.add_argument("--bulk-nice", type=int, default=0,
                    help="the probe run's process's nice value (default 0; 19 stands in for a "
                         "client on another host)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the replicas' models run (default cpu; cuda: each deployment "
                         "takes a quarter of one GPU, the classifier too)")
    ap.add_argument("--num-cpus", type=int, default=4,
                    help="Ray's logical CPUs (default 4; the processes may use every core)")
    args = ap.parse_args(argv)
    app_args = {
        "stand_ins": str(WORK / "stand-ins"), "request_timeout_s": 300,
        "models": [nll_entry(OFF, False, args.device), nll_entry(ON, True, args.device),
                   nll_entry(SMALL, True, args.device, args.bulk_max_batch)],
        "classifiers": [{"name": CLASSIFIER, "overrides": {"device": args.device}, "serving": {
            "num_cpus": 0.3, "num_gpus": 0.25 if args.device == "cuda" else 0, "num_threads": 1,
            "max_ongoing_requests": 128, "max_queued_requests": 512}}],
    }
    with serve_app(app_args, name=APP, num_cpus=args.num_cpus) as url:
        measure(url, args)
    return 0


def rerank_body(model: str) -> dict[str, Any]:
    return {"context": RERANK_CONTEXT, "candidates": RERANK_CANDIDATES, "nll_model": model}


async def stream(client: httpx.AsyncClient, model: str, rate: float, seconds: float
                 ) -> list[float]:
    """Interactive reranks open-loop at `rate` for `seconds`; their latencies."""
    latencies: list[float] = []
    body = rerank_body(model)

    async def one() -> None:
        start = time.perf_counter()
        r = await client.post("/v1/rerank", json=body)
        r.raise_for_status()
        assert r.headers["x-dialscore-lane"] == "interactive", r.headers
        latencies.append(time.perf_counter() - start)

    await open_loop(rate, seconds, one)
    return latencies


def probe_run(url: str, model: str, items: list[dict[str, Any]], concurrency: int,
              nice: int, stop: Any, scored: Any) -> None:
    """In a process of its own: the probe's requests (nll_many, 64 items each, bulk) over and
    over until `stop` is set (at most 50 passes), the items scored so far in `scored`."""
    if nice:
        os.nice(nice)

    async def run() -> None:
        async with AsyncDialscoreClient(url, priority="bulk", max_concurrency=concurrency,
                                        timeout=300) as client:
            for _ in range(50):
                if stop.is_set():
                    break
                done = await client.nll_many(model, items, chunk_size=64, return_tokens=True)
                with scored.get_lock():
                    scored.value += len(done)

    asyncio.run(run())


def phase(url: str, model: str, probe: bool, args: argparse.Namespace,
          items: list[dict[str, Any]]) -> tuple[list[float], float]:
    """(the stream's latencies, the probe run's items per second)."""
    context = multiprocessing.get_context("spawn")
    stop, scored = context.Event(), context.Value("q", 0)
    bulk = (context.Process(target=probe_run, args=(url, model, items, args.concurrency,
                                                    args.bulk_nice, stop, scored))
            if probe else None)
    start = time.perf_counter()
    if bulk is not None:
        bulk.start()

    async def interactive() -> list[float]:
        async with httpx.AsyncClient(base_url=url, timeout=300,
                                     limits=httpx.Limits(max_connections=100)) as client:
            if bulk is not None:
                await asyncio.sleep(2.0)  # the probe run's requests reach the replica first
            return await stream(client, model, args.rate, args.seconds)

    try:
        latencies = asyncio.run(interactive())
    finally:
        stop.set()
        if bulk is not None:
            bulk.join(600)  # a hang guard: it stops after its current pass
            if bulk.is_alive():
                bulk.terminate()
    if bulk is not None and bulk.exitcode != 0:
        raise RuntimeError(f"the probe run's process exited with {bulk.exitcode}")
    return latencies, scored.value / (time.perf_counter() - start)


def measure(url: str, args: argparse.Namespace) -> None:
    items = [item_json(i) for i in attribution_workload(10_000, "Why?").items]  # the whole sample

    async def warm() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=300) as client:
            for model in (OFF, ON, SMALL):
                for _ in range(3):
                    (await client.post("/v1/rerank", json=rerank_body(model))).raise_for_status()
                (await client.post("/v1/nll", json={"model": model, "items": items[:64]})
                 ).raise_for_status()

    asyncio.run(warm())
    print(f"interactive: /v1/rerank 6-turn context x 8 candidates with nll_model, {args.rate:g}/s "
          f"for {args.seconds:g} s; bulk: a probe run of {len(items)} attribution items "
          f"(nll_many, 64 per request, concurrency {args.concurrency}, X-Dialscore-Priority: bulk, "
          f"its own process at nice {args.bulk_nice})")
    rows = []
    alone: dict[str, float | None] = {}
    for name, model, probe in [("alone, lanes off", OFF, False), ("alone, lanes on", ON, False),
                               ("alone, small bulk calls", SMALL, False),
                               ("beside probe, lanes off", OFF, True),
                               ("beside probe, lanes on", ON, True),
                               ("beside probe, small bulk", SMALL, True)]:
        lat, rate = phase(url, model, probe, args, items)
        p50, p99 = percentile(lat, 50), percentile(lat, 99)
        if not probe:
            alone[model] = p99
        base = alone.get(model)
        rows.append([name, len(lat), p50, p99, p99 / base if p99 and base else None,
                     rate if probe else None])
    columns = [Column("phase", 25, left=True), Column("n", 4, "d"), Column("p50 s", 7, ".3f"),
               Column("p99 s", 7, ".3f"), Column("p99/alone", 9, ".2f"),
               Column("probe items/s", 13, ".1f")]
    print(table(columns, rows))


if __name__ == "__main__":
    sys.exit(main())
