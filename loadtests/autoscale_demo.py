"""Show the NLL deployment autoscaling (1 -> 2 replicas under load, back to 1 after it).

    python -m loadtests.autoscale_demo [--load-seconds 40] [--idle-seconds 45]

Starts deployments/autoscale-local.yaml on a free loopback port, sends closed-loop NLL traffic
from 8 concurrent clients for --load-seconds, then stops and waits --idle-seconds, printing every
2 s the RUNNING replica count read from `serve.status()` and the requests completed. Bounded in
time; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time

import httpx

from dialscore_server.checkpoints.standins import templated_sentences
from dialscore_server.gateway.embedded import app_args_from_yaml
from loadtests.common import NLL_MODEL, ROOT, parser, serve_app


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--load-seconds", type=float, default=40)
    ap.add_argument("--idle-seconds", type=float, default=45)
    args = ap.parse_args(argv)

    with serve_app(app_args_from_yaml(ROOT / "deployments" / "autoscale-local.yaml"),
                   name="dialscore", num_cpus=None) as url:
        return drive(url, args)


def drive(url: str, args: argparse.Namespace) -> int:
    """Load the app at `url`, then idle, printing the replica count every 2 s."""
    from ray import serve

    pool = templated_sentences(500, seed=3)
    body = {"model": NLL_MODEL,
            "items": [{"context": pool[k:k + 4], "target": pool[k + 5]} for k in range(32)]}
    done = {"n": 0, "errors": 0}
    stop = threading.Event()

    async def load():
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            async def worker():
                while not stop.is_set():
                    r = await client.post("/v1/nll", json=body)
                    done["n" if r.status_code == 200 else "errors"] += 1
            await asyncio.gather(*(worker() for _ in range(8)))

    def replicas() -> int:
        dep = serve.status().applications["dialscore"].deployments[f"nll-{NLL_MODEL}"]
        return dep.replica_states.get("RUNNING", 0)

    loader = threading.Thread(target=lambda: asyncio.run(load()), daemon=True)
    start = time.monotonic()
    loader.start()
    timeline = []
    print(f"{'t (s)':>6s} {'phase':>5s} {'replicas':>8s} {'requests done':>13s}")
    while time.monotonic() - start < args.load_seconds + args.idle_seconds:
        t = time.monotonic() - start
        if t >= args.load_seconds and not stop.is_set():
            stop.set()
        n = replicas()
        timeline.append((t, n))
        print(f"{t:6.0f} {'load' if not stop.is_set() else 'idle':>5s} {n:8d} {done['n']:13d}", flush=True)
        time.sleep(2)
    stop.set()
    loader.join(timeout=70)
    peak = max(n for _, n in timeline)
    final = timeline[-1][1]
    print(f"peak replicas {peak}, final {final}; {done['n']} requests, {done['errors']} errors")
    print("OK: scaled up under load and back down after it" if peak == 2 and final == 1
          else "NOTE: did not see the full 1 -> 2 -> 1 cycle within the time given")
    return 0


if __name__ == "__main__":
    sys.exit(main())
