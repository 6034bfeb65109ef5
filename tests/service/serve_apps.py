"""Serve applications for the service tests: building their arguments, deploying one more app into
the session's Serve instance, waiting until one is ready."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from ray_metrics import replica_metrics, sample_sum
from waiting import wait_until  # noqa: F401 - where the service tests find it


#: The header deadline of the session's front door (conftest.py's `served`), and how long it
#: lingers after an answer before it closes: hang guards, not windows a test has to make (a
#: client on a busy machine may take seconds to send its headers; the front door closes as soon
#: as the client does).
SESSION_HEADER_TIMEOUT_S = 120.0
LINGER_S = 120.0
#: The header deadline of the front door test_slow_clients.py puts before the session's proxy.
HEADER_TIMEOUT_S = 3.0

#: The apps' request deadline: a hang guard, under pytest's 600 s per test. A test of the
#: deadline itself builds an app with its own (test_fair_serving.py); with 60 s, a
#: DECODE RCT run on a saturated machine met it and failed.
REQUEST_DEADLINE_S = 500.0

#: One torch thread and a fifth of a CPU per replica: many replicas share 2 cores.
ONE_THREAD = {"num_cpus": 0.2, "num_threads": 1}


def running_replicas(app: str | None = None, deployment: str | None = None) -> list[str]:
    """The actor names of the Serve replicas in state RUNNING, of `app` and of `deployment` where
    given, sorted (a replacement has a new name), as Serve's controller lists them
    (:func:`dialscore_server.compat.serve_replicas`) on the Ray this process is connected to."""
    from dialscore_server.compat import serve_replicas

    return sorted(r["actor_name"] for r in serve_replicas() if r["state"] == "RUNNING"
                  and app in (None, r["app"]) and deployment in (None, r["deployment"]))


class Served:
    """A Serve application on loopback: its base URL, the arguments it was built from and, for
    the session's app, the URL of Serve's proxy behind its front door."""

    def __init__(self, url: str, args, proxy_url: str | None = None):
        self.url = url
        self.args = args
        self.proxy_url = proxy_url

    def config(self, name: str):
        """The served ModelConfig of `name` (for building the same engine in-process)."""
        every = self.args.model_configs() + self.args.classifier_configs()
        return {c.name: c for c, _ in every}[name]


def app_args(stand_ins: Path, models: list[dict[str, Any]],
             classifiers: list[dict[str, Any]] | None = None, **extra: Any):
    """AppArgs on the stand-ins, with the test settings every app shares."""
    from dialscore_server.gateway.args import AppArgs

    return AppArgs.model_validate({
        "stand_ins": str(stand_ins),
        "request_timeout_s": REQUEST_DEADLINE_S,
        # A request no replica accepts within 3 s (e.g. while a killed replica is replaced) is a 503.
        "queue_timeout_s": 3,
        "models": models, "classifiers": classifiers or [], **extra,
    })


def wait_ready(url: str, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not become ready within {limit_s:.0f} s")


@contextmanager
def deploy_app(served: Served, name: str, args, build: Any = None) -> Iterator[Served]:
    """Deploy another application (built from `args` by `build`, default ``build_app``) into the
    session's Serve instance under ``/{name}``, wait until it is ready, yield it, delete it
    afterwards."""
    from ray import serve

    from dialscore_server.gateway.build import build_app

    serve.run((build or build_app)(args), name=name, route_prefix=f"/{name}")
    try:
        url = f"{served.url}/{name}"
        wait_ready(url)
        yield Served(url, args)
    finally:
        serve.delete(name)


def work(app: str, model: str) -> dict[str, float]:
    """A replica's work ledger as its counters report it (``dialscore_work_*`` of `model` in the
    Serve application `app`): admitted, done, dropped and wasted work in the ledger's unit, and
    what is in flight (admitted and none of the others). Counters, not the in-flight gauge: Ray
    exports a gauge only while it is being set."""
    texts = replica_metrics()
    where = {"application": app, "model": model}
    got = {
        "admitted": sample_sum(texts, "ray_dialscore_work_admitted_total", **where),
        "done": sample_sum(texts, "ray_dialscore_work_done_total", **where),
        "dropped": sample_sum(texts, "ray_dialscore_work_abandoned_total", kind="dropped", **where),
        "wasted": sample_sum(texts, "ray_dialscore_work_abandoned_total", kind="wasted", **where),
    }
    got["in_flight"] = got["admitted"] - got["done"] - got["dropped"] - got["wasted"]
    return got
