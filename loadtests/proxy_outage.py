"""How long the embedded default is without Serve's HTTP proxy after the proxy process dies, with
Ray's default proxy health checks and with the embedded default's (gateway/embedded.py,
``PROXY_HEALTH_ENV``), and whether a client call made at the kill survives it.

    python -m loadtests.proxy_outage                  # periods 10 (Ray's default) and 2, 3 kills each
    python -m loadtests.proxy_outage --periods 2 --kills 5

For each ``RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S`` in `--periods`, a fresh process starts the
embedded default (stand-in checkpoints, loopback) with that period, and `--kills` times:
SIGKILLs Serve's proxy actor (found among this process's own children by its process title,
``ray::ProxyActor``: only the Ray this script started), then polls every `--poll` seconds

* Serve's proxy port (``GET /-/healthz``): **refused** is the time from the kill until a
  connection is accepted again after the first refusal (the controller has started a new proxy
  on the same port);
* the front door's ``GET /readyz`` (what clients use): what it answers meanwhile, and when it
  answers 200 again;

while two calls of the client library, started at the kill, go to the proxy port: one with the
default :class:`~dialscore.client.RetryPolicy` (waits up to ``unreachable_wait_s`` for refused
connections) and one with waiting off (``unreachable_wait_s=0``: 5 attempts, as before). Each kill
waits for the service to be ready again before the next one.

Prints one line per kill and the median refused time per period. Traffic goes to 127.0.0.1
only; each period's run stops after `--max-seconds`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter

import httpx

from dialscore.client import DialscoreClient, RetryPolicy
from dialscore_server.checkpoints.standins import build_stand_ins
from dialscore_server.gateway.args import AppArgs
from dialscore_server.gateway.embedded import local_service
from loadtests.common import NLL_MODEL, WORK, parser

PERIOD_VARIABLE = "RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S"


def proxy_pid() -> int:
    """The pid of Serve's proxy actor among this process's children (the Ray it started)."""
    import psutil

    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if " ".join(proc.cmdline()).strip().startswith("ray::ProxyActor"):
                found.append(proc.pid)
        except psutil.Error:
            pass
    if len(found) != 1:
        titles = sorted({" ".join(p.cmdline())[:40] for p in psutil.Process().children(recursive=True)})
        raise RuntimeError(f"expected one ray::ProxyActor among this process's children, found "
                           f"{found} among {titles}")
    return found[0]


def probe(url: str) -> str:
    """``"200"`` (or another status), ``"refused"``, or the transport error's name."""
    try:
        return str(httpx.get(url, timeout=httpx.Timeout(5.0, connect=1.0)).status_code)
    except httpx.ConnectError:
        return "refused"
    except httpx.TransportError as exc:
        return type(exc).__name__


def client_call(base_url: str, policy: RetryPolicy, out: dict) -> None:
    start = time.monotonic()
    try:
        with DialscoreClient(base_url, retry=policy) as client:
            client.models()
        out["result"] = "answered"
    except Exception as exc:  # noqa: BLE001 - reported
        out["result"] = type(exc).__name__
    out["seconds"] = time.monotonic() - start


def one_kill(service, poll_s: float, limit_s: float) -> dict:
    health, ready = f"{service.proxy_url}/-/healthz", f"{service.url}/readyz"
    pid = proxy_pid()
    calls = {"default": {}, "no_wait": {}}
    policies = {"default": RetryPolicy(), "no_wait": RetryPolicy(unreachable_wait_s=0)}
    threads = [threading.Thread(target=client_call, args=(service.proxy_url, policy, calls[name]))
               for name, policy in policies.items()]
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    for t in threads:
        t.start()
    door_seen: Counter = Counter()
    refused_until = ready_at = None
    seen_refused = False   # the dying process's socket may accept a connection or two first
    while ready_at is None:
        now = time.monotonic() - killed
        if now > limit_s:
            raise TimeoutError(f"the proxy was not back within {limit_s:.0f} s")
        if refused_until is None:
            refused = probe(health) == "refused"
            seen_refused = seen_refused or refused
            if seen_refused and not refused:
                refused_until = now
        door = probe(ready)
        door_seen[door] += 1
        if refused_until is not None and door == "200":
            ready_at = time.monotonic() - killed
        time.sleep(poll_s)
    for t in threads:
        t.join(limit_s)
    return {"pid": pid, "refused_s": refused_until, "ready_s": ready_at, "door": dict(door_seen),
            "calls": calls}


def run_period(period: str, kills: int, poll_s: float, limit_s: float) -> list[dict]:
    import logging

    # Every refused connection is logged by the front door and the client: hundreds per kill.
    logging.getLogger("dialscore").setLevel(logging.ERROR)
    os.environ[PERIOD_VARIABLE] = period   # before Ray starts: the controller inherits it
    stand_ins = WORK / "stand-ins"
    build_stand_ins(stand_ins)
    serving = {"num_cpus": 0.5, "num_threads": 1}
    args = AppArgs.model_validate({"stand_ins": str(stand_ins),
                                   "models": [{"name": NLL_MODEL, "serving": serving}]})
    rows = []
    with local_service(args, num_cpus=2, name="proxy-outage") as service:
        deadline = time.monotonic() + limit_s
        while probe(f"{service.url}/readyz") != "200":
            if time.monotonic() > deadline:
                raise TimeoutError("the service never got ready")
            time.sleep(0.5)
        for k in range(kills):
            row = one_kill(service, poll_s, limit_s)
            rows.append(row)
            print(f"  period {period} s, kill {k + 1}: refused {row['refused_s']:.1f} s, /readyz 200 "
                  f"again at {row['ready_s']:.1f} s; front door meanwhile {row['door']}; client call "
                  f"at the kill: default policy {row['calls']['default']}, waiting off "
                  f"{row['calls']['no_wait']}", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--periods", default="10,2", help="RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S values")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--poll", type=float, default=0.05, help="seconds between polls")
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--one", help=argparse.SUPPRESS)   # a child run: one period
    args = ap.parse_args()
    if args.one is not None:   # a child: one period, rows as JSON on stdout
        print(json.dumps(run_period(args.one, args.kills, args.poll, args.max_seconds)))
        return 0
    print(f"machine: {os.cpu_count()} CPUs; {args.kills} proxy kills per period", flush=True)
    summary = {}
    for period in args.periods.split(","):
        out = subprocess.run([sys.executable, "-m", "loadtests.proxy_outage", "--one", period,
                              "--kills", str(args.kills), "--poll", str(args.poll),
                              "--max-seconds", str(args.max_seconds)],
                             stdout=subprocess.PIPE, text=True, timeout=args.max_seconds + 300)
        if out.returncode != 0:
            print(f"period {period}: the run failed ({out.returncode})")
            return 1
        rows = json.loads(out.stdout.strip().splitlines()[-1])
        summary[period] = rows
        refused = [r["refused_s"] for r in rows]
        survived = {p: sum(r["calls"][p]["result"] == "answered" for r in rows)
                    for p in ("default", "no_wait")}
        print(f"{PERIOD_VARIABLE}={period}: refused median {statistics.median(refused):.1f} s "
              f"(min {min(refused):.1f}, max {max(refused):.1f}); /readyz 200 again median "
              f"{statistics.median(r['ready_s'] for r in rows):.1f} s; client calls at the kill "
              f"answered: default policy {survived['default']}/{len(rows)}, waiting off "
              f"{survived['no_wait']}/{len(rows)}",
              flush=True)
    if len(summary) == 2:
        (a, ra), (b, rb) = summary.items()
        ratio = statistics.median(r["refused_s"] for r in rb) / statistics.median(r["refused_s"] for r in ra)
        print(f"refused time, period {b} / period {a}: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
