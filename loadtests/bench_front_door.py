"""What the embedded default's front door (gateway/front_door.py) costs on the HTTP path: the
same requests sent through the front door and straight to Serve's proxy behind it, interleaved
in one run, on loopback.

    python -m loadtests.bench_front_door                       # 5 rounds, about 4 minutes
    python -m loadtests.bench_front_door --rounds 3 --small 100

Each round measures both paths, in alternating order (door first in odd rounds, proxy first in
even ones), with one kept-alive client per path:

* latency: `--small` sequential requests each of GET /healthz (no model) and of a one-item
  POST /v1/nll; p50 and p99 per path;
* bulk: `--bulk` sequential POST /v1/nll requests of `--bulk-items` items each (bodies of some
  60 KB, scored); items/s per path;
* large bodies: `--large` sequential POST /v1/nll requests of 7.9 MB (one over-long target: the
  gateway reads and parses all of it, then answers 413 without scoring); MB/s per path.

The client runs in a process of its own. Wall-clock figures on a busy machine carry its
scheduling noise, so the run also reads the CPU time of the process that holds the front door
(the driver: the front door's thread, and Ray's driver threads, which run in both phases) over
each phase: door minus proxy is the front door's own CPU cost, per request and per MB.

Prints each round and the medians over rounds, with door / proxy ratios. Traffic goes to
127.0.0.1 only; the run is bounded by the counts above and stops after `--max-seconds`.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

import httpx

from dialscore_server.checkpoints.standins import build_stand_ins, templated_sentences
from dialscore_server.gateway.args import AppArgs
from dialscore_server.gateway.embedded import local_service
from loadtests.common import NLL_MODEL, WORK, parser, percentile

PATHS = ("door", "proxy")


def latencies(client: httpx.Client, method: str, url: str, n: int,
              body: dict | None = None) -> list[float]:
    """Seconds of each of `n` sequential requests, each answered 200."""
    out = []
    for _ in range(n):
        start = time.perf_counter()
        response = client.request(method, url, json=body)
        out.append(time.perf_counter() - start)
        assert response.status_code == 200, response.text[:300]
    return out


def send_all(client: httpx.Client, url: str, bodies: list[bytes], status: int) -> float:
    """Seconds for the JSON bodies sent one after another, each answered `status`."""
    start = time.perf_counter()
    for body in bodies:
        response = client.post(url, content=body, headers={"content-type": "application/json"})
        assert response.status_code == status, response.text[:300]
    return time.perf_counter() - start


def payloads(args: argparse.Namespace) -> tuple[dict, list[bytes], bytes]:
    """The one-item request, the bulk bodies and the large body (JSON bytes), from the seed."""
    import json

    rng = random.Random(args.seed)
    pool = templated_sentences(2000, seed=args.seed)
    small = {"model": NLL_MODEL, "items": [{"context": ["Hi!"], "target": "Hello there."}]}
    bodies = [json.dumps({"model": NLL_MODEL, "items": [
        {"context": rng.sample(pool, 4), "target": rng.choice(pool)} for _ in range(args.bulk_items)]}
    ).encode() for _ in range(args.bulk)]
    large = json.dumps({"model": NLL_MODEL, "items": [
        {"context": ["Hi!"], "target": "x" * 7_900_000}]}).encode()
    return small, bodies, large


def driver_cpu_s() -> float:
    """CPU seconds (user + system) this process has used."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def client_rounds(bases: dict[str, str], args: argparse.Namespace, driver: Connection) -> None:
    """The measurements, in a process of their own: one kept-alive client per path. `driver` is
    a pipe to the driver: "cpu" asks for its CPU seconds; the rows go back at the end."""
    def cpu() -> float:
        driver.send("cpu")
        return driver.recv()

    def measured(run: Callable[[], float]) -> tuple[float, float]:
        """(wall seconds of run(), driver CPU seconds meanwhile)."""
        before = cpu()
        wall = run()
        return wall, cpu() - before

    small, bodies, large = payloads(args)
    clients = {p: httpx.Client(base_url=bases[p], timeout=600) for p in PATHS}
    rows: list[dict[str, dict[str, float]]] = []
    stop_at = time.monotonic() + args.max_seconds
    try:
        for path in PATHS:  # warm-up: connections, the replica's first batches
            latencies(clients[path], "GET", "/readyz", 5)
            latencies(clients[path], "POST", "/v1/nll", 20, small)
            send_all(clients[path], "/v1/nll", bodies[:1], 200)
            send_all(clients[path], "/v1/nll", [large], 413)
        print(f"{'round':>5s} {'path':>5s} {'healthz p50':>11s} {'p99':>7s} {'nll p50':>8s} "
              f"{'p99':>7s} {'bulk items/s':>12s} {'large MB/s':>10s} {'CPU ms/req':>10s} "
              f"{'CPU ms/MB':>9s}   (ms; CPU: the driver's)", flush=True)
        for r in range(args.rounds):
            if time.monotonic() > stop_at:
                print(f"stopped after {r} rounds (--max-seconds)")
                break
            row: dict[str, dict[str, float]] = {}
            for path in (PATHS if r % 2 == 0 else PATHS[::-1]):
                client = clients[path]
                health: list[float] = []
                nll: list[float] = []
                _, small_cpu = measured(lambda: (
                    health.extend(latencies(client, "GET", "/healthz", args.small)),
                    nll.extend(latencies(client, "POST", "/v1/nll", args.small, small)), 0.0)[-1])
                seconds = send_all(client, "/v1/nll", bodies, 200)
                large_s, large_cpu = measured(
                    lambda: send_all(client, "/v1/nll", [large] * args.large, 413))
                megabytes = args.large * len(large) / 1e6
                row[path] = {"health_p50": statistics.median(health) * 1e3,
                             "health_p99": (percentile(health, 99) or 0.0) * 1e3,
                             "nll_p50": statistics.median(nll) * 1e3,
                             "nll_p99": (percentile(nll, 99) or 0.0) * 1e3,
                             "items_s": args.bulk * args.bulk_items / seconds,
                             "mb_s": megabytes / large_s,
                             "cpu_ms_req": small_cpu / (2 * args.small) * 1e3,
                             "cpu_ms_mb": large_cpu / megabytes * 1e3}
            for path in PATHS:
                v = row[path]
                print(f"{r + 1:5d} {path:>5s} {v['health_p50']:11.2f} {v['health_p99']:7.2f} "
                      f"{v['nll_p50']:8.2f} {v['nll_p99']:7.2f} {v['items_s']:12.0f} "
                      f"{v['mb_s']:10.1f} {v['cpu_ms_req']:10.3f} {v['cpu_ms_mb']:9.2f}", flush=True)
            rows.append(row)
    finally:
        for client in clients.values():
            client.close()
        driver.send(rows)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--small", type=int, default=200, help="requests per latency measurement")
    ap.add_argument("--bulk", type=int, default=4, help="bulk requests per round and path")
    ap.add_argument("--bulk-items", type=int, default=256)
    ap.add_argument("--large", type=int, default=3, help="7.9 MB requests per round and path")
    ap.add_argument("--max-seconds", type=float, default=900)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import multiprocessing

    stand_ins = WORK / "stand-ins"
    build_stand_ins(stand_ins)
    app_args = AppArgs.model_validate({
        "stand_ins": str(stand_ins), "request_timeout_s": 600,
        "models": [{"name": NLL_MODEL, "serving": {
            "num_cpus": 1, "num_threads": 1, "max_ongoing_requests": 64}}]})
    with local_service(app_args, num_cpus=4, name="bench-front-door") as service:
        bases = {"door": service.url, "proxy": service.proxy_url}
        assert all(b.startswith("http://127.0.0.1:") for b in bases.values()), bases
        print(f"machine: {os.cpu_count()} CPUs; door {bases['door']} -> proxy {bases['proxy']}; per "
              f"path and round: {args.small} small requests of each kind, {args.bulk} x "
              f"{args.bulk_items}-item requests, {args.large} x 7.9 MB", flush=True)
        context = multiprocessing.get_context("spawn")
        here, there = context.Pipe()
        client = context.Process(target=client_rounds, args=(bases, args, there))
        client.start()
        while (message := here.recv()) == "cpu":
            here.send(driver_cpu_s())
        rows = message
        client.join()
    if not rows:
        return 1
    print("median over rounds (door / proxy):")
    for key, label in (("health_p50", "GET /healthz p50 ms"), ("health_p99", "GET /healthz p99 ms"),
                       ("nll_p50", "1-item /v1/nll p50 ms"), ("nll_p99", "1-item /v1/nll p99 ms"),
                       ("items_s", "bulk items/s"), ("mb_s", "7.9 MB bodies, MB/s"),
                       ("cpu_ms_req", "driver CPU ms/small req"), ("cpu_ms_mb", "driver CPU ms/MB")):
        door = statistics.median(r["door"][key] for r in rows)
        proxy = statistics.median(r["proxy"][key] for r in rows)
        print(f"  {label:25s} door {door:9.3f}  proxy {proxy:9.3f}  ratio {door / proxy:6.3f}  "
              f"difference {door - proxy:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
