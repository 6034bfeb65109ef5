"""Priority lanes: interactive /v1/rerank latency alone, and beside a bulk probe run, with the
lanes off and on (one run, one app).

    python -m loadtests.bench_lanes --rate 3 --seconds 20
    python -m loadtests.bench_lanes --rate 3 --seconds 20 --num-cpus 16 --device cuda  # on a GPU
    python -m loadtests.bench_lanes --only pool,yield,yield-always  # three of the deployments
    python -m loadtests.bench_lanes --only pool --rounds 5  # every phase 5 times, interleaved
    python -m loadtests.bench_lanes --only yield,ingress --rounds 3  # the bulk ingress
    python -m loadtests.bench_lanes --only ingress,ingress-whole --rounds 3  # pause points

One app serves the stand-in NLI classifier and the stand-in DialoGPT nine times (--only: fewer): as
``dialogpt-lanes-off`` (``priority_lanes: false``: one first-come-first-served queue), as
``dialogpt-lanes-on`` (the default lanes), as ``dialogpt-lanes-small-bulk`` (lanes, and bulk
engine calls of at most --bulk-max-batch positions within the default 2 s
``bulk_max_batch_hold_s`` of an interactive arrival) and as ``dialogpt-lanes-small-bulk-always``
(the same bound with no hold: every bulk call), and as ``dialogpt-lanes-pool`` (the default
lanes, and a bulk pool: a second deployment of the model that serves every request asking for
bulk, its engine thread at ``engine_priority: idle``), and as ``dialogpt-lanes-pool-yield`` (the
same, its pool also yielding to interactive requests on the node,
``yield_to_interactive_s: 0.25``, pool calls within --bulk-max-batch positions for the default
2 s ``bulk_max_batch_hold_s`` after an interactive request was on the node), and as
``dialogpt-lanes-pool-yield-always`` (the same, every pool call within the bound), and as
``dialogpt-lanes-pool-yield-ingress`` (the yielding pool again, the probe run's requests sent
through the app's bulk ingress: a second app, ``/lanes-bulk``, whose gateway process runs at
--ingress-priority, gateway/bulk_ingress.py), and as ``dialogpt-lanes-pool-yield-ingress-whole``
(the same, its pool waiting before each call only, ``yield_inside_calls: false``; the other
yielding pools also pause their running calls), each one replica with 2 threads
(``--device cuda``: each on a fifteenth of one GPU). Phases, each
--seconds long; the interactive stream is /v1/rerank requests (6-turn context, 8 candidates,
with ``nll_model``: its NLL term shares the dialogue model's replica with the probe run) sent
open-loop at --rate per second, no priority header (interactive):

1. *alone*: the stream alone, ``nll_model`` each deployment in turn;
2. *beside probe, lanes off*: the same stream while a probe run scores the shipped CEDAR sample's
   attribution items on the lanes-off deployment as the client's probe runs do
   (``AsyncDialscoreClient.nll_many``, 64 items per request, ``max_concurrency`` --concurrency,
   default 8 = the client's default, ``X-Dialscore-Priority: bulk``), over and over until the
   stream ends. The probe run is a process of its own, as a researcher's client is: its work
   (reading 64 items' per-token answers) never delays the stream's event loop, and so never
   the stream's timings. ``--bulk-nice N`` runs it at that nice value and ``--bulk-nice idle``
   under Linux's SCHED_IDLE policy, standing in for a client on another host. Ray starts the
   service's processes at nice 15, so only ``idle`` keeps the probe client from competing with
   them for the cores (nice 19 still weighs 15 against their 36);
3. *beside probe, lanes on* / *small bulk* / *s.b. always* / *bulk pool* / *yielding pool* /
   *y.p. always* / *bulk ingress* / *b.i. whole calls*: the same against the other deployments
   (on the last five, the probe run's requests go to the pool; on the last two, through the
   bulk ingress);
4. *probe only*: the probe run alone on the deployments with lanes, no stream (its items per
   second over --seconds): what the bound and the pool cost bulk work when no interactive
   request comes.

With ``--rounds N`` the whole sequence of phases runs N times, one round after another, so that
a drift of the host's speed reaches every phase alike.

Reported: the stream's p50/p99 latency over the requests of all rounds and the probe run's items
per second (items answered while the stream ran, counted per request; the mean over rounds), per
phase, and the ratio of p99 to the *alone* p99 of the same deployment; with more than one round,
also the lowest and highest of each round's own ratio (its phase's p99 over the same round's
*alone* p99), the spread one run of one round can show. Then, for each phase's slowest tenth (at least 3 requests), where their
time went, as medians in milliseconds from the rerank's timing headers
(contract/timing_headers.py): *replica queue* (``x-queue-time``: waiting in the detector's and
the NLL replica's batch queues, summed), *engine* (``x-compute-time``, summed likewise),
*tokenize* (``x-tokenization-time``), and *elsewhere*, the wall time less those three (at least
0): the front door, Serve's proxy, the gateway, the rerank deployment, the hops between them and
the client. The detector's and the NLL model's work run at once, so the sums can exceed the wall
time and *elsewhere* is a lower bound. Loopback only; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx

from dialscore.client import AsyncDialscoreClient, DialscoreClient
from loadtests.common import (
    NLL_MODEL, RERANK_CANDIDATES, RERANK_CONTEXT, WORK, Column,
    attribution_workload, item_json, open_loop, parser, percentile, serve_app, table,
)

APP = "lanes"
CLASSIFIER = "roberta-large-mnli"
OFF, ON, SMALL = "dialogpt-lanes-off", "dialogpt-lanes-on", "dialogpt-lanes-small-bulk"
ALWAYS = "dialogpt-lanes-small-bulk-always"
POOLED = "dialogpt-lanes-pool"
YIELDING = "dialogpt-lanes-pool-yield"
YIELD_ALWAYS = "dialogpt-lanes-pool-yield-always"
INGRESS = "dialogpt-lanes-pool-yield-ingress"
INGRESS_WHOLE = "dialogpt-lanes-pool-yield-ingress-whole"
#: --only's short names of the deployments.
SHORT = {"off": OFF, "on": ON, "small": SMALL, "always": ALWAYS, "pool": POOLED,
         "yield": YIELDING, "yield-always": YIELD_ALWAYS, "ingress": INGRESS,
         "ingress-whole": INGRESS_WHOLE}
#: The deployments whose probe run goes through the bulk ingress.
THROUGH_INGRESS = (INGRESS, INGRESS_WHOLE)
#: The bulk ingress's application (and route prefix, under /).
BULK_APP = "lanes-bulk"
#: Each deployment's share of the GPU with --device cuda (fourteen NLL deployments, pools
#: included, and the classifier).
GPU_SHARE = 1 / 15
#: The yielding pool's ``yield_to_interactive_s``.
YIELD_S = 0.25


def nll_entry(name: str, lanes: bool, device: str, bulk_max_batch: int | None = None,
              always: bool = False, pool: bool = False,
              yield_bulk_max_batch: int | None = None, yield_always: bool = False,
              yield_inside: bool = True) -> dict[str, Any]:
    """The stand-in DialoGPT served as `name` on `device` (``cuda``: :data:`GPU_SHARE`), with
    `bulk_max_batch` held for the service's default hold after each interactive arrival, or on
    every bulk call (`always`: ``bulk_max_batch_hold_s: null``); with `pool`, a bulk pool of the
    same serving at ``engine_priority: idle``; with `yield_bulk_max_batch` as well, a pool that
    also yields to interactive requests on the node (``yield_to_interactive_s``) and keeps its
    engine calls within that many positions for the default hold after one was there, or always
    (`yield_always`: ``bulk_max_batch_hold_s: null``), pausing its running calls while one is
    there too unless `yield_inside` is false (``yield_inside_calls``)."""
    serving = serving_options(lanes, device, bulk_max_batch, always)
    pool_options = {**serving, "engine_priority": "idle"}
    if yield_bulk_max_batch is not None:
        pool_options.update(yield_to_interactive_s=YIELD_S, bulk_max_batch=yield_bulk_max_batch,
                            yield_inside_calls=yield_inside,
                            **({"bulk_max_batch_hold_s": None} if yield_always else {}))
    return {"name": NLL_MODEL, "serve_as": name, "overrides": {"device": device},
            "serving": serving, **({"bulk_pool": pool_options} if pool else {})}


def serving_options(lanes: bool, device: str, bulk_max_batch: int | None,
                    always: bool) -> dict[str, Any]:
    """One replica's serving options (see :func:`nll_entry`)."""
    return {"num_cpus": 0.6, "num_gpus": GPU_SHARE if device == "cuda" else 0,
            "num_threads": 2, "max_ongoing_requests": 128, "max_queued_requests": 512,
            "priority_lanes": lanes, "bulk_max_batch": bulk_max_batch,
            **({"bulk_max_batch_hold_s": None} if always else {})}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--rate", type=float, default=3)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--concurrency", type=int, default=8,
                    help="the probe run's requests in flight (default 8: the client's default)")
    ap.add_argument("--bulk-max-batch", type=int, default=512,
                    help="bulk_max_batch of the third deployment (default 512: a quarter of a "
                         "chunk, to which its bulk requests are cut)")
    ap.add_argument("--bulk-nice", type=nice_value, default=0,
                    help="the probe run's process's nice value, or `idle` (SCHED_IDLE: stands "
                         "in for a client on another host); default 0")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the replicas' models run (default cpu; cuda: each deployment "
                         "takes a ninth of one GPU, the classifier too)")
    ap.add_argument("--only", default=",".join(SHORT),
                    help="the deployments to measure, by short name, comma-separated (default "
                         f"all: {','.join(SHORT)})")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the whole sequence of phases this many times (default 1); "
                         "percentiles pool the rounds' requests")
    ap.add_argument("--ingress-priority", choices=["normal", "low", "idle"], default="low",
                    help="the bulk ingress's ingress_priority (default low, the service's "
                         "default)")
    ap.add_argument("--num-cpus", type=int, default=5,
                    help="Ray's logical CPUs (default 5; the processes may use every core)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    unknown = set(args.only.split(",")) - set(SHORT)
    if unknown:
        ap.error(f"--only: unknown {sorted(unknown)}; choose from {sorted(SHORT)}")
    args.models = [SHORT[n] for n in SHORT if n in args.only.split(",")]
    entries = {
        OFF: nll_entry(OFF, False, args.device), ON: nll_entry(ON, True, args.device),
        SMALL: nll_entry(SMALL, True, args.device, args.bulk_max_batch),
        ALWAYS: nll_entry(ALWAYS, True, args.device, args.bulk_max_batch, always=True),
        POOLED: nll_entry(POOLED, True, args.device, pool=True),
        YIELDING: nll_entry(YIELDING, True, args.device, pool=True,
                            yield_bulk_max_batch=args.bulk_max_batch),
        YIELD_ALWAYS: nll_entry(YIELD_ALWAYS, True, args.device, pool=True,
                                yield_bulk_max_batch=args.bulk_max_batch, yield_always=True),
        INGRESS: nll_entry(INGRESS, True, args.device, pool=True,
                           yield_bulk_max_batch=args.bulk_max_batch),
        INGRESS_WHOLE: nll_entry(INGRESS_WHOLE, True, args.device, pool=True,
                                 yield_bulk_max_batch=args.bulk_max_batch, yield_inside=False)}
    app_args = {
        "stand_ins": str(WORK / "stand-ins"), "request_timeout_s": 300,
        "models": [entries[m] for m in args.models],
        "classifiers": [{"name": CLASSIFIER, "overrides": {"device": args.device}, "serving": {
            "num_cpus": 0.3, "num_gpus": GPU_SHARE if args.device == "cuda" else 0,
            "num_threads": 1, "max_ongoing_requests": 128, "max_queued_requests": 512}}],
    }
    with serve_app(app_args, name=APP, num_cpus=args.num_cpus) as url:
        if set(THROUGH_INGRESS) & set(args.models):
            deploy_bulk_ingress(url, app_args, args.ingress_priority)
        measure(url, args)
    return 0


def deploy_bulk_ingress(url: str, app_args: dict[str, Any], priority: str) -> None:
    """The app's bulk ingress under ``/{BULK_APP}``, at `priority`; returns once it is ready."""
    from ray import serve

    from dialscore_server.gateway.args import BulkIngressArgs
    from dialscore_server.gateway.build import build_bulk_ingress

    args = BulkIngressArgs.model_validate({**app_args, "of_app": APP,
                                           "ingress_priority": priority})
    serve.run(build_bulk_ingress(args), name=BULK_APP, route_prefix=f"/{BULK_APP}")
    with DialscoreClient(f"{url}/{BULK_APP}") as client:
        client.wait_ready(timeout=600)  # a hang guard


def probe_url(url: str, model: str) -> str:
    """Where the probe run sends its requests for `model`: the bulk ingress for
    :data:`THROUGH_INGRESS`, else the app."""
    return f"{url}/{BULK_APP}" if model in THROUGH_INGRESS else url


def rerank_body(model: str) -> dict[str, Any]:
    return {"context": RERANK_CONTEXT, "candidates": RERANK_CANDIDATES, "nll_model": model}


@dataclass(frozen=True)
class Timed:
    """One interactive request: its wall time (s) and its timing headers (ms; 0 when absent)."""

    wall_s: float
    queue_ms: float
    compute_ms: float
    tokenize_ms: float

    @property
    def elsewhere_ms(self) -> float:
        """Wall time outside the replicas' queues, engines and tokenizer (a lower bound)."""
        return max(0.0, self.wall_s * 1e3 - self.queue_ms - self.compute_ms - self.tokenize_ms)


def tail_breakdown(timed: list[Timed]) -> list[float | None]:
    """Medians over the slowest tenth of `timed` (at least 3): wall, replica queue, engine,
    tokenize and elsewhere, in ms."""
    if not timed:
        return [None] * 5
    slow = sorted(timed, key=lambda t: t.wall_s)[-max(3, len(timed) // 10):]
    return [statistics.median(f(t) for t in slow) for f in (
        lambda t: t.wall_s * 1e3, lambda t: t.queue_ms, lambda t: t.compute_ms,
        lambda t: t.tokenize_ms, lambda t: t.elsewhere_ms)]


def ratio_of_p99(timed: list[Timed], alone: list[Timed]) -> float | None:
    """The p99 of `timed` over that of `alone` (None when either has none)."""
    p99 = percentile([t.wall_s for t in timed], 99)
    base = percentile([t.wall_s for t in alone], 99)
    return p99 / base if p99 and base else None


async def stream(client: httpx.AsyncClient, model: str, rate: float, seconds: float
                 ) -> list[Timed]:
    """Interactive reranks open-loop at `rate` for `seconds`; their times."""
    timed: list[Timed] = []
    body = rerank_body(model)

    async def one() -> None:
        start = time.perf_counter()
        r = await client.post("/v1/rerank", json=body)
        wall = time.perf_counter() - start
        r.raise_for_status()
        assert r.headers["x-dialscore-lane"] == "interactive", r.headers
        timed.append(Timed(wall, *(float(r.headers.get(h, 0)) for h in (
            "x-queue-time", "x-compute-time", "x-tokenization-time"))))

    await open_loop(rate, seconds, one)
    return timed


def nice_value(text: str) -> int | str:
    """--bulk-nice: a nice value, or ``idle``."""
    return text if text == "idle" else int(text)


def probe_run(url: str, model: str, items: list[dict[str, Any]], concurrency: int,
              nice: int | str, stop: Any, scored: Any) -> None:
    """In a process of its own, at `nice` (a nice value or ``idle``, SCHED_IDLE): the probe's
    requests (nll_many, 64 items each, bulk) over and over until `stop` is set (at most 50
    passes), the items answered so far in `scored` (counted as each request's answer lands)."""
    if nice == "idle":
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    elif nice:
        os.nice(nice)

    def landed(offset: int, results: list[Any]) -> None:
        with scored.get_lock():
            scored.value += len(results)

    async def run() -> None:
        async with AsyncDialscoreClient(url, priority="bulk", max_concurrency=concurrency,
                                        timeout=300) as client:
            for _ in range(50):
                if stop.is_set():
                    break
                await client.nll_many(model, items, chunk_size=64, return_tokens=True,
                                      on_chunk=landed)

    asyncio.run(run())


def phase(url: str, model: str, probe: bool, args: argparse.Namespace,
          items: list[dict[str, Any]], interactive_stream: bool = True
          ) -> tuple[list[Timed], float]:
    """(the stream's requests, the probe run's items per second while the stream ran: items
    answered from the stream's first request to its last answer). Without
    `interactive_stream`, no stream: the probe run's items per second over --seconds."""
    context = multiprocessing.get_context("spawn")
    stop, scored = context.Event(), context.Value("q", 0)
    bulk = (context.Process(target=probe_run, args=(probe_url(url, model), model, items,
                                                    args.concurrency,
                                                    args.bulk_nice, stop, scored))
            if probe else None)
    if bulk is not None:
        bulk.start()

    async def interactive() -> list[Timed]:
        async with httpx.AsyncClient(base_url=url, timeout=300,
                                     limits=httpx.Limits(max_connections=100)) as client:
            if bulk is not None:
                await asyncio.sleep(2.0)  # the probe run's requests reach the replica first
            window[0], window[1] = time.perf_counter(), scored.value
            if interactive_stream:
                timed = await stream(client, model, args.rate, args.seconds)
            else:
                timed = []
                await asyncio.sleep(args.seconds)
            window[2], window[3] = time.perf_counter(), scored.value
            return timed

    window = [0.0, 0, 0.0, 0]
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
    return latencies, (window[3] - window[1]) / (window[2] - window[0])


#: Each deployment's name in the phases' names.
LABEL = {OFF: "lanes off", ON: "lanes on", SMALL: "small bulk", ALWAYS: "s.b. always",
         POOLED: "bulk pool", YIELDING: "yielding pool", YIELD_ALWAYS: "y.p. always",
         INGRESS: "bulk ingress", INGRESS_WHOLE: "b.i. whole calls"}


def phases(models: list[str]) -> list[tuple[str, str, bool, bool]]:
    """The phases over `models`, in order: (name, deployment, probe run on, stream on). Every
    *alone* phase first, then every *beside probe*, then every *probe only* (not on the lanes-off
    deployment)."""
    return ([(f"alone, {LABEL[m]}", m, False, True) for m in models]
            + [(f"beside probe, {LABEL[m]}", m, True, True) for m in models]
            + [(f"probe only, {LABEL[m]}", m, True, False) for m in models if m != OFF])


def measure(url: str, args: argparse.Namespace) -> None:
    items = [item_json(i) for i in attribution_workload(10_000, "Why?").items]  # the whole sample

    async def warm() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=300) as client:
            for model in args.models:
                for _ in range(3):
                    (await client.post("/v1/rerank", json=rerank_body(model))).raise_for_status()
                for lane in ("interactive", "bulk"):  # the pool too
                    (await client.post("/v1/nll", json={"model": model, "items": items[:64]},
                                       headers={"X-Dialscore-Priority": lane})
                     ).raise_for_status()
                if model in THROUGH_INGRESS:
                    (await client.post(f"/{BULK_APP}/v1/nll",
                                       json={"model": model, "items": items[:64]})
                     ).raise_for_status()

    asyncio.run(warm())
    print(f"interactive: /v1/rerank 6-turn context x 8 candidates with nll_model, {args.rate:g}/s "
          f"for {args.seconds:g} s; bulk: a probe run of {len(items)} attribution items "
          f"(nll_many, 64 per request, concurrency {args.concurrency}, X-Dialscore-Priority: bulk, "
          f"its own process at nice {args.bulk_nice}); {args.rounds} round(s) of every phase")
    plan = phases(args.models)
    # Per phase, one (requests, probe items/s) per round.
    runs: dict[str, list[tuple[list[Timed], float]]] = {name: [] for name, *_ in plan}
    for _ in range(args.rounds):
        for name, model, probe, streamed in plan:
            runs[name].append(phase(url, model, probe, args, items, streamed))
    rows, tails = [], []
    for name, model, probe, streamed in plan:
        alone = runs[f"alone, {LABEL[model]}"]
        timed = [t for got, _ in runs[name] for t in got]
        lat = [t.wall_s for t in timed]
        ratios = [ratio_of_p99(got, alone_got) for (got, _), (alone_got, _) in zip(runs[name], alone)]
        spread = (f"{min(ratios):.2f}-{max(ratios):.2f}" if streamed and None not in ratios
                  else None)
        rows.append([name, len(lat), percentile(lat, 50), percentile(lat, 99),
                     ratio_of_p99(timed, [t for got, _ in alone for t in got]), spread,
                     statistics.mean(r for _, r in runs[name]) if probe else None])
        if streamed:
            tails.append([name, *tail_breakdown(timed)])
    columns = [Column("phase", 27, left=True), Column("n", 4, "d"), Column("p50 s", 7, ".3f"),
               Column("p99 s", 7, ".3f"), Column("p99/alone", 9, ".2f"),
               Column("rounds' p99/alone", 17), Column("probe items/s", 13, ".1f")]
    if args.rounds == 1:
        columns.pop(5)
        rows = [row[:5] + row[6:] for row in rows]
    print(table(columns, rows))
    print("\nthe slowest tenth of each phase (medians, ms):")
    print(table([Column("phase", 27, left=True), *(Column(t, w, ".1f") for t, w in (
        ("wall", 7), ("replica queue", 13), ("engine", 7), ("tokenize", 8), ("elsewhere", 9)))],
        tails))


if __name__ == "__main__":
    sys.exit(main())
