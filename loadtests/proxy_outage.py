"""How long the embedded default is without Serve's HTTP proxy after the proxy process dies, and
what a client meets meanwhile: before (Ray's default proxy health checks, a front door that
closes a connection it cannot relay) and after (gateway/embedded.py's ``PROXY_HEALTH_ENV``, a
front door that waits for the proxy: ``FrontDoorLimits.upstream_wait_s``).

    python -m loadtests.proxy_outage                       # settings 10:0 (before), 2:60 (after)
    python -m loadtests.proxy_outage --settings 2:60 --kills 5

For each PERIOD:DOOR_WAIT in `--settings`, a fresh process starts the embedded default (stand-in
checkpoints, loopback) with ``RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S`` = PERIOD and the front
door's ``upstream_wait_s`` = DOOR_WAIT, and `--kills` times SIGKILLs Serve's proxy actor (found
among this process's own children by its process title, ``ray::ProxyActor``: only the Ray this
script started), then measures

* on Serve's proxy port (``GET /-/healthz``, polled every `--poll` seconds): **refused**, the
  time from the kill until a connection is accepted again after the first refusal (the controller
  has started a new proxy on the same port);
* on the front door (``GET /readyz``, in a thread of its own): what it answers meanwhile, and
  when it answers 200 (the front door may hold a request until the proxy is back);
* three calls of the client library made at the kill (``models()``): to the proxy port with the
  default :class:`~dialscore.client.RetryPolicy` (waits up to ``unreachable_wait_s`` for refused
  connections), to the proxy port with waiting off (``unreachable_wait_s=0``: 5 attempts, the
  previous default), and to the front door with the default policy.

Each kill waits for the service to be ready again before the next one. Prints one line per kill
and, per setting, the median refused time and how many calls were answered; with two settings,
the ratio of their medians. Traffic goes to 127.0.0.1 only; each wait stops after
`--max-seconds`.
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
from dialscore_server.gateway.front_door import FrontDoorLimits
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


def probe(url: str, read_s: float = 5.0) -> str:
    """``"200"`` (or another status), ``"refused"``, or the transport error's name."""
    try:
        return str(httpx.get(url, timeout=httpx.Timeout(read_s, connect=1.0)).status_code)
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
    out["seconds"] = round(time.monotonic() - start, 2)


def one_kill(service, poll_s: float, limit_s: float) -> dict:
    """SIGKILL the proxy; poll its port (refused time) and, in another thread, the front door's
    /readyz (each poll waits up to `limit_s` for an answer: the front door may hold it); three
    client calls start at the kill."""
    health, ready = f"{service.proxy_url}/-/healthz", f"{service.url}/readyz"
    pid = proxy_pid()
    calls: dict[str, dict] = {"proxy_default": {}, "proxy_no_wait": {}, "door_default": {}}
    targets = {"proxy_default": (service.proxy_url, RetryPolicy()),
               "proxy_no_wait": (service.proxy_url, RetryPolicy(unreachable_wait_s=0)),
               "door_default": (service.url, RetryPolicy())}
    threads = [threading.Thread(target=client_call, args=(*targets[name], calls[name]))
               for name in calls]
    door_seen: Counter = Counter()
    door_ready: list[float] = []

    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()

    def poll_door() -> None:
        while time.monotonic() - killed < limit_s:
            answer = probe(ready, read_s=limit_s)
            door_seen[answer] += 1
            if answer == "200" and time.monotonic() - killed > 1.0:
                door_ready.append(time.monotonic() - killed)
                return
            time.sleep(poll_s)

    threads.append(threading.Thread(target=poll_door))
    for t in threads:
        t.start()
    refused_until = None
    seen_refused = False   # the dying process's socket may accept a connection or two first
    while refused_until is None:
        now = time.monotonic() - killed
        if now > limit_s:
            raise TimeoutError(f"the proxy was not back within {limit_s:.0f} s")
        refused = probe(health) == "refused"
        seen_refused = seen_refused or refused
        if seen_refused and not refused:
            refused_until = now
        time.sleep(poll_s)
    for t in threads:
        t.join(limit_s)
    return {"pid": pid, "refused_s": refused_until, "ready_s": door_ready[0] if door_ready else None,
            "door": dict(door_seen), "calls": calls}


def run_setting(period: str, door_wait_s: float, kills: int, poll_s: float,
                limit_s: float) -> list[dict]:
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
    limits = FrontDoorLimits(upstream_wait_s=door_wait_s)
    with local_service(args, num_cpus=2, name="proxy-outage", limits=limits) as service:
        deadline = time.monotonic() + limit_s
        while probe(f"{service.url}/readyz") != "200":
            if time.monotonic() > deadline:
                raise TimeoutError("the service never got ready")
            time.sleep(0.5)
        for k in range(kills):
            row = one_kill(service, poll_s, limit_s)
            rows.append(row)
            print(f"  period {period} s, front door wait {door_wait_s:g} s, kill {k + 1}: refused "
                  f"{row['refused_s']:.1f} s, front door /readyz 200 at {row['ready_s']:.1f} s "
                  f"(meanwhile {row['door']}); client calls made at the kill: {row['calls']}",
                  file=sys.stderr, flush=True)
    return rows


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--settings", default="10:0,2:60",
                    help="PERIOD:DOOR_WAIT pairs: RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S and the "
                         "front door's upstream_wait_s (default: before, after)")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--poll", type=float, default=0.05, help="seconds between polls")
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--one", help=argparse.SUPPRESS)   # a child run: one setting
    args = ap.parse_args()
    if args.one is not None:   # a child: one setting, rows as JSON on stdout
        period, door_wait = args.one.split(":")
        print(json.dumps(run_setting(period, float(door_wait), args.kills, args.poll,
                                     args.max_seconds)))
        return 0
    print(f"machine: {os.cpu_count()} CPUs; {args.kills} proxy kills per setting", flush=True)
    medians = []
    for setting in args.settings.split(","):
        out = subprocess.run([sys.executable, "-m", "loadtests.proxy_outage", "--one", setting,
                              "--kills", str(args.kills), "--poll", str(args.poll),
                              "--max-seconds", str(args.max_seconds)],
                             stdout=subprocess.PIPE, text=True, timeout=args.max_seconds * (args.kills + 2))
        if out.returncode != 0:
            print(f"setting {setting}: the run failed ({out.returncode})")
            return 1
        rows = json.loads(out.stdout.strip().splitlines()[-1])
        refused = [r["refused_s"] for r in rows]
        medians.append(statistics.median(refused))
        answered = {name: sum(r["calls"][name]["result"] == "answered" for r in rows)
                    for name in rows[0]["calls"]}
        period, door_wait = setting.split(":")
        print(f"{PERIOD_VARIABLE}={period}, front door upstream_wait_s={door_wait}: refused median "
              f"{medians[-1]:.1f} s (min {min(refused):.1f}, max {max(refused):.1f}); front door "
              f"/readyz 200 median {statistics.median(r['ready_s'] for r in rows):.1f} s; calls made "
              f"at the kill answered (of {len(rows)}): {answered}", flush=True)
    if len(medians) == 2:
        print(f"refused time, second setting / first: {medians[1] / medians[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
