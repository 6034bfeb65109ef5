"""Where bulk throughput goes between the engine and the client, in one run: the probe run's
workload scored at each layer of the path, for bulk engine calls cut to --bulk-max-batch
positions (held on every call) and for unbounded ones.

    python -m loadtests.bench_bulk_path --seconds 10
    python -m loadtests.bench_bulk_path --seconds 10 --device cuda --num-cpus 16  # on a GPU
    python -m loadtests.bench_bulk_path --device cuda --no-serve --cuda-graph-positions 0

Every layer's engine captures CUDA graphs of its small plain passes on a GPU
(``--cuda-graph-positions``, default the service's ``cuda_graph_positions``; 0: none).

The workload is bench_lanes's probe run: the shipped CEDAR sample's attribution items (about
120 positions each), in requests of 64 items, 8 in flight, in the bulk lane, over and over. It is
scored, each layer for --seconds:

1. *engine alone*: ``NLLEngine.score_encoded`` called back to back on 1, 8 and 64 items (no
   scheduling at all), on the main thread, which built the engine. The later layers call it
   from an engine thread, as a replica does: a second OpenMP team, which on CPU makes small
   calls slower (docs/benchmarks/fairness.md#lanes);
2. *in-process*: ``NLLServing`` as a replica builds it (``from_options``: the engine thread, the
   lane queue, merged calls), driven by 8 coroutines in this process, no Ray. Every engine call
   is timed on the engine thread: *engine busy* is their share of the time from the first call's
   start to the last call's end, *gap* the median time from one call's end to the next one's
   start (the hand-off to the event loop and back);
3. *Serve handle*: the same deployment in a Serve app on a local Ray (one replica, 2 torch
   threads; ``--device cuda``: 0.4 of the GPU each), from a ``DeploymentHandle`` in this process
   (``score(items, return_tokens=True, lane="bulk")``): Ray's hops, no HTTP;
4. *HTTP*: the client (``AsyncDialscoreClient.nll`` with ``return_tokens``,
   ``X-Dialscore-Priority: bulk``) in a process of its own, driven the same way.

Each layer counts every item answered from its first send to its last answer, each of its 8
workers sending until --seconds have passed; the handle and HTTP layers first send one request
per worker to warm the path. Fair chunking serves the 8 requests in step, so they answer in
bursts: counting from a first answer instead would count a whole burst in no time.

Reported: items per second at each layer, and each as a ratio of the in-process figure. The
layers share the machine in turn, never at once. Loopback only; every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
from collections.abc import Sequence
from typing import Any

from loadtests.common import (
    NLL_MODEL, WORK, Column, attribution_workload, item_json, parser, serve_app, table,
)

APP = "bulk-path"
#: Requests in flight and items per request: the client's defaults for a probe run.
CONCURRENCY, PER_REQUEST = 8, 64
#: The HTTP client's time to start and warm, beyond its measured rounds (a hang guard).
CLIENT_LIMIT_S = 300.0


def serving_options(device: str, bulk_max_batch: int | None, graphs: int) -> dict[str, Any]:
    """A deployment's serving options: one replica of 2 torch threads (``cuda``: 0.4 of the
    GPU), lanes on, bulk calls of at most `bulk_max_batch` positions on every call (None: no
    bound), and no context cache: the workload repeats its items, and every layer must compute
    the same positions (the in-process engine has none either); CUDA graphs of passes of at
    most `graphs` positions (``cuda_graph_positions``)."""
    bound = ({"bulk_max_batch": bulk_max_batch, "bulk_max_batch_hold_s": None}
             if bulk_max_batch else {})
    return {"num_cpus": 1, "num_gpus": 0.4 if device == "cuda" else 0, "num_threads": 2,
            "max_ongoing_requests": 128, "max_queued_requests": 512, "priority_lanes": True,
            "context_cache_bytes": 0, "cuda_graph_positions": graphs, **bound}


def requests_of(items: Sequence[Any], k: int) -> list[Any]:
    """The `k`-th request of the endless workload over `items`: :data:`PER_REQUEST` items."""
    return [items[(k * PER_REQUEST + i) % len(items)] for i in range(PER_REQUEST)]


def engine_alone(engine: Any, items: Sequence[Any], n: int, seconds: float) -> float:
    """Items per second of back-to-back engine calls on `n` items each."""
    encoded = [engine.encode(i) for i in items[:n]]
    engine.score_encoded(encoded)  # warm
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        engine.score_encoded(encoded)  # returns floats: the device has finished
        calls += 1
    return calls * n / (time.perf_counter() - start)


async def drive(score: Any, items: Sequence[Any], seconds: float) -> float:
    """Items per second answered by `score(request)` (which returns the items answered) with
    :data:`CONCURRENCY` requests in flight, each sent once the one before it answers: every
    item answered from the first send to the last answer, each worker sending until `seconds`
    have passed (at least one request each)."""
    done = 0
    stop = time.perf_counter() + seconds

    async def worker(k: int) -> None:
        nonlocal done
        while True:
            answered = await score(requests_of(items, k))
            done += answered  # not `done += await ...`: that reads `done` before awaiting
            k += CONCURRENCY
            if time.perf_counter() >= stop:
                return

    start = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(CONCURRENCY)))
    return done / (time.perf_counter() - start)


class TimedEngine:
    """`engine` with each ``score_encoded`` call's start and end (``time.perf_counter``) appended
    to `calls`; everything else passed through."""

    def __init__(self, engine: Any, calls: list[tuple[float, float]]) -> None:
        self._engine = engine
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def score_encoded(self, encoded: Any, guard: Any = None) -> Any:
        began = time.perf_counter()
        out = self._engine.score_encoded(encoded, guard)
        self._calls.append((began, time.perf_counter()))
        return out


def in_process(engine: Any, items: Sequence[Any], options: dict[str, Any], seconds: float
               ) -> tuple[float, float, float]:
    """Items per second through an in-process ``NLLServing``, the engine's busy share of the
    engine calls' span (time inside ``score_encoded``), and the median gap between calls (ms)."""
    from dialscore_server.contract.options import ServingOptions
    from dialscore_server.nll.serving import NLLServing

    calls: list[tuple[float, float]] = []
    serving = NLLServing.from_options(TimedEngine(engine, calls), ServingOptions(**options),
                                      NLL_MODEL)

    async def score(request: list[Any]) -> int:
        return len((await serving.score(request, lane="bulk")).unwrap().results)

    rate = asyncio.run(drive(score, items, seconds))
    span = calls[-1][1] - calls[0][0]
    busy = sum(end - began for began, end in calls) / span
    gaps = [calls[i + 1][0] - calls[i][1] for i in range(len(calls) - 1)]
    return rate, busy, statistics.median(gaps) * 1e3


def via_handle(name: str, items: Sequence[Any], seconds: float) -> float:
    """Items per second from this process's handle to the deployment served as `name`, after
    one request per worker to warm the path."""
    from ray import serve

    handle = serve.get_deployment_handle(f"nll-{name}", app_name=APP)

    async def score(request: list[Any]) -> int:
        return len((await handle.score.remote(request, True, "bulk")).unwrap().results)

    asyncio.run(drive(score, items, 0.0))
    return asyncio.run(drive(score, items, seconds))


def http_client(url: str, name: str, body: list[dict[str, Any]], seconds: float,
                rate: Any) -> None:
    """In a process of its own, as a researcher's client is: the client's ``nll`` with
    ``return_tokens``, bulk priority, driven as :func:`drive` drives the other layers after one
    request per worker to warm the path; its items per second into `rate`."""
    from dialscore.client import AsyncDialscoreClient

    async def run() -> float:
        async with AsyncDialscoreClient(url, priority="bulk", max_concurrency=CONCURRENCY,
                                        timeout=300) as client:
            async def score(request: list[dict[str, Any]]) -> int:
                return len((await client.nll(name, request, return_tokens=True)).results)

            await drive(score, body, 0.0)
            return await drive(score, body, seconds)

    rate.value = asyncio.run(run())


def via_http(url: str, name: str, items: Sequence[Any], seconds: float) -> float:
    """Items per second a client process gets over HTTP (:func:`http_client`)."""
    ctx = multiprocessing.get_context("spawn")
    rate = ctx.Value("d", 0.0)
    client = ctx.Process(target=http_client,
                         args=(url, name, [item_json(i) for i in items], seconds, rate))
    client.start()
    limit = CLIENT_LIMIT_S + 4 * seconds
    client.join(limit)
    if client.is_alive():
        client.kill()
        raise RuntimeError(f"the HTTP client did not finish within {limit} s")
    return rate.value


def main(argv: list[str] | None = None) -> int:
    from dialscore_server.contract.options import ServingOptions

    ap = parser(__doc__)
    ap.add_argument("--seconds", type=float, default=10, help="each layer's time (default 10)")
    ap.add_argument("--bulk-max-batch", type=int, default=128,
                    help="the bounded deployment's bulk call size in positions (default 128: "
                         "one item per call)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--num-cpus", type=int, default=5, help="Ray's logical CPUs (default 5)")
    ap.add_argument("--cuda-graph-positions", type=int,
                    default=ServingOptions.model_fields["cuda_graph_positions"].default,
                    help="the engines' cuda_graph_positions (default: the service's; 0: off)")
    ap.add_argument("--no-serve", action="store_true",
                    help="the engine and in-process layers only (no Ray, no HTTP)")
    args = ap.parse_args(argv)
    measure(args)
    return 0


def measure(args: argparse.Namespace) -> None:
    from dialscore_server.checkpoints.registry import stand_in_registry
    from dialscore_server.checkpoints.standins import build_stand_ins
    from dialscore_server.nll.engine.engine import NLLEngine

    build_stand_ins(WORK / "stand-ins")
    items = list(attribution_workload(10_000, "Why?").items)
    config = stand_in_registry(WORK / "stand-ins").get(NLL_MODEL).model_copy(
        update={"device": args.device})
    engine = NLLEngine(config, num_threads=2, cuda_graph_positions=args.cuda_graph_positions)
    bounds = {f"bulk calls <= {args.bulk_max_batch} positions": args.bulk_max_batch,
              "no bound": None}
    print(f"{len(items)} attribution items, {CONCURRENCY} requests of {PER_REQUEST} in flight, "
          f"{args.seconds:g} s per layer, {args.device}, "
          f"cuda_graph_positions {args.cuda_graph_positions}")
    alone = [(f"engine alone, {n} items per call", engine_alone(engine, items, n, args.seconds))
             for n in (1, 8, 64)]
    rows: list[list[object]] = [[label, rate, None, None, None] for label, rate in alone]
    local = {}
    for label, bound in bounds.items():
        rate, busy, gap = in_process(
            engine, items, serving_options(args.device, bound, args.cuda_graph_positions),
            args.seconds)
        local[label] = rate
        rows.append([f"in-process, {label}", rate, 1.0, busy, gap])
    engine.close()
    columns = [Column("layer", 44, left=True), Column("items/s", 9, ".1f"),
               Column("x in-proc", 10, ".2f"), Column("engine busy", 12, ".0%"),
               Column("gap ms", 7, ".2f")]
    if args.no_serve:
        print(table(columns, rows))
        return
    names = {label: f"bulk-{k}" for k, label in enumerate(bounds)}
    app = {"stand_ins": str(WORK / "stand-ins"), "request_timeout_s": 300,
           "models": [{"name": NLL_MODEL, "serve_as": names[label],
                       "overrides": {"device": args.device},
                       "serving": serving_options(args.device, bound,
                                                  args.cuda_graph_positions)}
                      for label, bound in bounds.items()]}
    with serve_app(app, name=APP, num_cpus=args.num_cpus) as url:
        for label in bounds:
            rate = via_handle(names[label], items, args.seconds)
            rows.append([f"Serve handle, {label}", rate, rate / local[label], None, None])
            rate = via_http(url, names[label], items, args.seconds)
            rows.append([f"HTTP, {label}", rate, rate / local[label], None, None])
    print(table(columns, rows))


if __name__ == "__main__":
    raise SystemExit(main())
