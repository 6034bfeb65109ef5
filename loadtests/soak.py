"""Overload soak: measure capacity, offer 1.5x that for a while, watch shedding, latency and memory,
then stop and time the recovery.

    python -m loadtests.soak                                 # 10 min, own stand-in app on loopback
    python -m loadtests.soak --seconds 60 --factor 2.0       # shorter, harder
    python -m loadtests.soak --url http://127.0.0.1:8000 --model dialogpt-medium --seconds 600

Phases:

1. **capacity**: ``--concurrency`` closed-loop clients for ``--measure-seconds``; capacity =
   answered requests per second (a shed request is retried after a short pause, not counted).
2. **overload**: open-loop arrivals (Poisson, seeded) at ``--factor`` x capacity for
   ``--seconds``; every request has its own task and a ``--timeout``; requests in flight are
   capped at ``--max-in-flight`` (an arrival over the cap counts as ``client_capped``, so a
   hung server cannot make the script grow without bound). RSS of the Serve replica processes
   is sampled every ``--rss-every`` seconds.
3. **recovery**: after the last arrival, in-flight requests drain; then one request at a time
   until ``3`` in a row are answered 200: recovery time = from the end of the load to the first
   of those.

Workload: requests of ``--items`` (default 16) probe-shaped items, so the model replica is the
bottleneck. With tiny requests on a small machine the Python front end (Serve's proxy, the
gateway) and this load generator saturate first: the generator's send lag is reported and a
warning printed when its p99 exceeds 0.1 s (its latency figures then include its own delay). The
gateway's own queue is bounded too (``gateway_max_queued_requests``; Serve's proxy then answers
503 with Retry-After and a plain-text body, counted as 503 here).

Reported (stdout, and JSON with ``--report``): capacity, offered rate, requests sent, status
counts, shed rate (503 share), share of 503s carrying ``Retry-After``, p50/p90/p99/max latency of
admitted (200) requests, RSS per process over time (first, last, max, slope in MB/min), recovery
time. Exit status 1 when a 5xx other than 503 or a connection error was seen.

Without ``--url`` the script starts Ray and the app itself (stand-in checkpoints, one model
``soak`` with ``--max-ongoing``/``--max-queued``), on 127.0.0.1 only; RSS is then read exactly
(each replica reports its own pid). With ``--url``, RSS is read from /proc for processes named
``ray::ServeReplica:<app>:...`` on this machine (``--app``, default ``dialscore``).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from dialscore_server.gateway.args import AppArgs
from loadtests.common import parser, percentile, serve_app, write_json


def request_body(model: str, items: int, seed: int = 0) -> dict:
    """A small probe-shaped NLL request (same every time: the load, not the data, varies)."""
    rng = random.Random(seed)
    words = "the a dog cat house sold happy because weekend buyer found great".split()
    return {"model": model, "items": [
        {"context": [" ".join(rng.choices(words, k=8)) for _ in range(3)],
         "target": " ".join(rng.choices(words, k=10))} for _ in range(items)]}


@dataclass
class Sample:
    t: float          # seconds since the phase started, at send
    latency: float
    status: int       # -1: connection error or client timeout
    retry_after: str | None = None
    error_type: str | None = None


@dataclass
class SoakReport:
    model: str
    capacity_rps: float
    offered_rps: float
    seconds: float
    sent: int = 0
    client_capped: int = 0
    statuses: dict = field(default_factory=dict)
    shed_rate: float = 0.0
    retry_after_share: float = 0.0
    admitted_p50_s: float | None = None
    admitted_p90_s: float | None = None
    admitted_p99_s: float | None = None
    admitted_max_s: float | None = None
    capacity_p50_s: float | None = None
    rss_mb: dict = field(default_factory=dict)       # process -> [[t, MB], ...]
    rss_summary: dict = field(default_factory=dict)  # process -> {first, last, max, slope_mb_per_min}
    recovery_s: float | None = None
    send_lag_p99_s: float | None = None  # > 0.1 s: the load generator was saturated
    errors: list = field(default_factory=list)

    def bad(self) -> list[str]:
        """What an operator would be paged for: a 5xx other than 503, a dropped connection."""
        return [f"{n} x {s}" for s, n in self.statuses.items() if int(s) == -1 or (int(s) >= 500 and int(s) != 503)]

    def table(self) -> str:
        lines = [
            f"model {self.model}: capacity {self.capacity_rps:.1f} req/s (p50 {_ms(self.capacity_p50_s)}), "
            f"offered {self.offered_rps:.1f} req/s for {self.seconds:.0f} s",
            f"sent {self.sent} (+{self.client_capped} over the client's in-flight cap); statuses "
            f"{dict(sorted(self.statuses.items()))}",
            f"shed rate (503 share) {self.shed_rate:.1%}; 503s with Retry-After {self.retry_after_share:.0%}",
            f"admitted latency p50 {_ms(self.admitted_p50_s)}  p90 {_ms(self.admitted_p90_s)}  "
            f"p99 {_ms(self.admitted_p99_s)}  max {_ms(self.admitted_max_s)}",
            f"recovery after the load stopped: {self.recovery_s:.2f} s" if self.recovery_s is not None
            else "recovery: NOT RECOVERED",
        ]
        if self.send_lag_p99_s is not None and self.send_lag_p99_s > 0.1:
            lines.append(f"WARNING: arrivals were sent up to {self.send_lag_p99_s:.2f} s late (p99): the "
                         "load generator was saturated, latencies include its own delay; use "
                         "bigger requests (--items) or a lower --factor")
        for name, s in sorted(self.rss_summary.items()):
            lines.append(f"RSS {name}: {s['first']:.0f} -> {s['last']:.0f} MB (max {s['max']:.0f}, "
                         f"slope {s['slope_mb_per_min']:+.1f} MB/min)")
        return "\n".join(lines)


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1000:.0f} ms"


async def _send(client: httpx.AsyncClient, body: dict, t0: float) -> Sample:
    start = time.monotonic()
    try:
        r = await client.post("/v1/nll", json=body)
    except httpx.HTTPError as exc:
        return Sample(start - t0, time.monotonic() - start, -1, None, type(exc).__name__)
    err = None
    if r.status_code != 200:
        try:
            err = r.json()["error"]["type"]
        except (ValueError, KeyError, TypeError):
            err = "(not the JSON error shape: Serve's proxy)"
    return Sample(start - t0, time.monotonic() - start, r.status_code, r.headers.get("retry-after"), err)


async def measure_capacity(url: str, body: dict, seconds: float, concurrency: int,
                           timeout: float = 60.0) -> tuple[float, float | None]:
    """Closed loop: (answered requests per second, p50 latency of the answered)."""
    done: list[Sample] = []
    t0 = time.monotonic()
    end = t0 + seconds

    async def worker(client):
        while time.monotonic() < end:
            s = await _send(client, body, t0)
            if s.status == 200:
                done.append(s)
            else:
                await asyncio.sleep(0.05)  # shed: back off a little, do not spin

    async with httpx.AsyncClient(base_url=url, timeout=timeout,
                                 limits=httpx.Limits(max_connections=concurrency)) as client:
        await _send(client, body, t0)  # warm-up
        t0 = time.monotonic()
        end = t0 + seconds
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        elapsed = time.monotonic() - t0
    return len(done) / elapsed, percentile([s.latency for s in done], 50)


class RSSSampler:
    """RSS of named processes over time: `pids` {name: pid}, or found by process title."""

    def __init__(self, pids: dict[str, int] | None = None, app: str = "dialscore"):
        self.pids = pids
        self.app = app
        self.series: dict[str, list[list[float]]] = {}

    def _find(self) -> dict[str, int]:
        out = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                title = (d / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if title.startswith(f"ray::ServeReplica:{self.app}:") or title.startswith("ray::ProxyActor"):
                out[title.split(":", 1)[1].split(".")[0] + f"[{d.name}]"] = int(d.name)
        return out

    def sample(self, t: float) -> None:
        for name, pid in (self.pids or self._find()).items():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.series.setdefault(name, []).append([round(t, 1), int(line.split()[1]) / 1024])
            except OSError:
                self.series.setdefault(name, []).append([round(t, 1), float("nan")])

    def summary(self) -> dict:
        out = {}
        for name, pts in self.series.items():
            pts = [p for p in pts if p[1] == p[1]]
            if not pts:
                continue
            ts, ms = [p[0] for p in pts], [p[1] for p in pts]
            slope = 0.0
            if len(pts) > 2 and max(ts) > min(ts):
                mt, mm = statistics.fmean(ts), statistics.fmean(ms)
                slope = sum((a - mt) * (b - mm) for a, b in pts) / sum((a - mt) ** 2 for a in ts) * 60
            out[name] = {"first": ms[0], "last": ms[-1], "max": max(ms), "slope_mb_per_min": slope}
        return out


async def overload(url: str, body: dict, rate: float, seconds: float, *, seed: int = 0,
                   timeout: float = 60.0, max_in_flight: int = 512, rss: RSSSampler | None = None,
                   rss_every: float = 5.0) -> tuple[list[Sample], int, float | None]:
    """Open-loop Poisson arrivals at `rate` for `seconds`; returns (samples, arrivals over the cap,
    p99 of how late arrivals were sent)."""
    rng = random.Random(seed)
    samples: list[Sample] = []
    capped = 0
    in_flight: set[asyncio.Task] = set()
    lags: list[float] = []  # how late each arrival was sent: the load generator's own saturation

    def finished(task: asyncio.Task[Sample]) -> None:
        in_flight.discard(task)
        samples.append(task.result())

    async with httpx.AsyncClient(base_url=url, timeout=timeout,
                                 limits=httpx.Limits(max_connections=max_in_flight,
                                                     max_keepalive_connections=64)) as client:
        t0 = time.monotonic()
        next_at, next_rss = 0.0, 0.0
        while next_at < seconds:
            now = time.monotonic() - t0
            if rss is not None and now >= next_rss:
                rss.sample(now)
                next_rss += rss_every
            if now < next_at:
                await asyncio.sleep(min(next_at - now, 0.05))
                continue
            lags.append(now - next_at)
            if len(in_flight) >= max_in_flight:
                capped += 1
            else:
                task = asyncio.create_task(_send(client, body, t0))
                in_flight.add(task)
                task.add_done_callback(finished)
            next_at += rng.expovariate(rate)
        if in_flight:
            await asyncio.wait(in_flight, timeout=timeout + 5)
        if rss is not None:
            rss.sample(time.monotonic() - t0)
    return samples, capped, percentile(lags, 99)


async def recovery(url: str, body: dict, *, limit_s: float = 120.0, in_a_row: int = 3,
                   timeout: float = 60.0) -> float | None:
    """Seconds from now until `in_a_row` consecutive requests are answered 200 (first of them)."""
    t0 = time.monotonic()
    streak_start, streak = None, 0
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
        while time.monotonic() - t0 < limit_s:
            s = await _send(client, body, t0)
            if s.status == 200:
                if streak == 0:
                    streak_start = s.t
                streak += 1
                if streak >= in_a_row:
                    return streak_start
            else:
                streak = 0
                await asyncio.sleep(0.1)
    return None


def soak(url: str, model: str, *, seconds: float, factor: float = 1.5, measure_seconds: float = 20.0,
         concurrency: int = 4, items: int = 4, seed: int = 0, timeout: float = 60.0,
         max_in_flight: int = 512, rss_pids: dict[str, int] | None = None, app: str = "dialscore",
         rss_every: float = 5.0, echo: Callable[[str], object] = print) -> SoakReport:
    """The three phases against a running service; returns the report (nothing asserted)."""
    body = request_body(model, items, seed)
    capacity, cap_p50 = asyncio.run(measure_capacity(url, body, measure_seconds, concurrency, timeout))
    if capacity <= 0:
        raise RuntimeError(f"no request to {model!r} was answered while measuring capacity")
    rate = factor * capacity
    echo(f"capacity {capacity:.1f} req/s (p50 {_ms(cap_p50)}); offering {rate:.1f} req/s for {seconds:.0f} s")
    rss = RSSSampler(rss_pids, app)
    samples, capped, lag_p99 = asyncio.run(overload(url, body, rate, seconds, seed=seed, timeout=timeout,
                                           max_in_flight=max_in_flight, rss=rss, rss_every=rss_every))
    recovered = asyncio.run(recovery(url, body, timeout=timeout))
    statuses = Counter(str(s.status) for s in samples)
    shed = [s for s in samples if s.status == 503]
    admitted = [s.latency for s in samples if s.status == 200]
    report = SoakReport(
        model=model, capacity_rps=capacity, offered_rps=rate, seconds=seconds, sent=len(samples),
        client_capped=capped, statuses=dict(statuses),
        shed_rate=len(shed) / len(samples) if samples else 0.0,
        retry_after_share=sum(1 for s in shed if s.retry_after) / len(shed) if shed else 1.0,
        admitted_p50_s=percentile(admitted, 50), admitted_p90_s=percentile(admitted, 90),
        admitted_p99_s=percentile(admitted, 99), admitted_max_s=max(admitted) if admitted else None,
        capacity_p50_s=cap_p50, rss_mb=rss.series, rss_summary=rss.summary(), recovery_s=recovered,
        send_lag_p99_s=lag_p99,
        errors=sorted({f"{s.status} {s.error_type} retry-after={s.retry_after}" for s in samples
                       if s.status != 200})[:20],
    )
    return report


# ------------------------------------------------------------------------ own app (no --url)

@contextmanager
def own_app(port: int, max_ongoing: int, max_queued: int, num_threads: int
            ) -> Iterator[tuple[str, dict[str, int]]]:
    """Ray + the app with one stand-in model `soak` on 127.0.0.1:port: yields (base URL,
    {deployment: replica pid}); shuts both down after."""
    stand_ins = Path(tempfile.gettempdir()) / "dialscore-soak-stand-ins"
    args = AppArgs.model_validate({
        "stand_ins": str(stand_ins),
        "models": [{"name": "dialogpt-medium", "serve_as": "soak", "serving": {
            "num_cpus": 0.5, "num_threads": num_threads, "max_ongoing_requests": max_ongoing,
            "max_queued_requests": max_queued}}],
    })
    args.registry()  # builds the stand-ins once, here
    with serve_app(args, name="dialscore", num_cpus=2, port=port) as url:
        yield url, replica_pids("dialscore")


def replica_pids(app: str = "dialscore", deployments: tuple[str, ...] | None = None) -> dict[str, int]:
    """{deployment: pid} of the app's replicas, each asked for its own pid (Ray must be
    initialised in this process, connected to the cluster that runs the app)."""
    import ray

    pids: dict[str, int] = {}
    for a in ray.util.list_named_actors(all_namespaces=True):
        if a["namespace"] == "serve" and a["name"].startswith(f"SERVE_REPLICA::{app}#"):
            deployment = a["name"].split("#")[1]
            if deployments is None or deployment in deployments:
                actor = ray.get_actor(a["name"], namespace="serve")
                pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=30)
                pids[deployment] = int(pid)
    return pids


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--url", default=None, help="a running service (default: start an own stand-in app)")
    p.add_argument("--model", default=None, help="model to load (default: `soak`, the own app's)")
    p.add_argument("--seconds", type=float, default=600.0, help="overload duration (default 600)")
    p.add_argument("--factor", type=float, default=1.5, help="offered load / measured capacity (default 1.5)")
    p.add_argument("--measure-seconds", type=float, default=20.0, help="capacity measurement (default 20)")
    p.add_argument("--concurrency", type=int, default=4, help="closed-loop clients when measuring")
    p.add_argument("--items", type=int, default=16, help="items per request (default 16)")
    p.add_argument("--timeout", type=float, default=60.0, help="client timeout per request, s")
    p.add_argument("--max-in-flight", type=int, default=512, help="cap on requests in flight")
    p.add_argument("--rss-every", type=float, default=5.0, help="RSS sampling period, s")
    p.add_argument("--app", default="dialscore", help="Serve app name (RSS by process title with --url)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report", default=None, help="write the full report (JSON) here")
    p.add_argument("--port", type=int, default=18777, help="own app's port (default 18777)")
    p.add_argument("--max-ongoing", type=int, default=8, help="own app: max_ongoing_requests")
    p.add_argument("--max-queued", type=int, default=16, help="own app: max_queued_requests")
    p.add_argument("--num-threads", type=int, default=1, help="own app: torch threads of the replica")
    a = p.parse_args(argv)
    if a.url is not None and not a.url.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")):
        p.error("traffic goes to loopback only: --url must be http://127.0.0.1:PORT")
    service = (own_app(a.port, a.max_ongoing, a.max_queued, a.num_threads) if a.url is None
               else nullcontext((a.url, None)))
    with service as (url, pids):
        report = soak(url, a.model or "soak", seconds=a.seconds, factor=a.factor,
                      measure_seconds=a.measure_seconds, concurrency=a.concurrency, items=a.items,
                      seed=a.seed, timeout=a.timeout, max_in_flight=a.max_in_flight, rss_pids=pids,
                      app=a.app, rss_every=a.rss_every)
    print(report.table())
    write_json(a.report, asdict(report))
    bad = report.bad()
    if bad:
        print(f"FAILED: {bad}", file=sys.stderr)
    return 1 if bad or report.recovery_s is None else 0


if __name__ == "__main__":
    sys.exit(main())
