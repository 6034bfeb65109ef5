"""The real Serve application on loopback, started once per session, and small apps of their own
for the tests that need something the others must not see.

The shared app (`served`) carries only what most service tests use: two re-initialised dialogue
stand-ins (one causal, one seq2seq), the plain causal stand-in and one NLI classifier. Tests that
kill replicas, overload a tiny queue or need a trained model deploy their own app into the same
Serve instance with :func:`deploy_app` (under their own route prefix) and delete it after.
"""

from __future__ import annotations

import pytest

from serve_apps import LINGER_S, ONE_THREAD, SESSION_HEADER_TIMEOUT_S, Served, app_args, deploy_app, wait_ready


@pytest.fixture(scope="session")
def served(stand_ins, sharp_stand_ins):
    """Start Ray and the shared Serve app once per session on a free loopback port, behind the
    front door, whose deadlines are hang guards (SESSION_HEADER_TIMEOUT_S, LINGER_S);
    test_slow_clients.py puts a front door of its own, with a short header deadline, before the
    same proxy."""
    import os
    from pathlib import Path

    from dialscore_server.gateway.embedded import local_service
    from dialscore_server.gateway.front_door import FrontDoorLimits

    # Replica metrics reach the node's agent every second (Ray's default: 10 s), so a test
    # reads a replica's counts promptly; and replicas can import the test fakes
    # (gated_engines.py, fake_api.py) that some test apps serve.
    os.environ.setdefault("RAY_metrics_report_interval_ms", "1000")
    here = Path(__file__).resolve().parent
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(here), str(here.parent), os.environ.get("PYTHONPATH")) if p)

    sharp = sharp_stand_ins
    args = app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "overrides": {"source": str(sharp["gpt2"])},
         "serving": {**ONE_THREAD, "max_ongoing_requests": 64}},
        {"name": "bart-base", "overrides": {"source": str(sharp["bart"])}, "serving": ONE_THREAD},
        {"name": "dialogpt-medium", "serve_as": "untrained-gpt2", "serving": ONE_THREAD},
    ], classifiers=[
        {"name": "roberta-large-mnli", "overrides": {"source": str(sharp["nli-contradiction-first"])},
         "serving": ONE_THREAD},
    ])
    # Lingering after an answer lasts until the client closes (LINGER_S only guards a hang): a
    # test sending a body the service refuses reads its answer however slowly it sends the rest.
    limits = FrontDoorLimits(header_timeout_s=SESSION_HEADER_TIMEOUT_S, linger_s=LINGER_S)
    with local_service(args, num_cpus=4, limits=limits) as service:
        wait_ready(service.url)
        yield Served(service.url, args, service.proxy_url)


@pytest.fixture(scope="session")
def tiny_queue(served, stand_ins):
    """An app whose one model (`tiny-queue`) holds 1 request and queues 1: bursts are shed."""
    args = app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "serve_as": "tiny-queue",
         "serving": {**ONE_THREAD, "max_ongoing_requests": 1, "max_queued_requests": 1}}])
    with deploy_app(served, "tiny", args) as app:
        yield app


@pytest.fixture(scope="session")
def fair(served, stand_ins):
    """An app (`fair`, under /fair) serving fake engines whose every engine call waits at a gate
    the test opens (gated_engines.py): what a replica computes is decided by the test."""
    from gated_engines import gated_args

    with deploy_app(served, "fair", gated_args(stand_ins)) as app:
        yield app


@pytest.fixture()
def gate(fair):
    """A fresh gate for the `fair` app (every engine call waits at it); afterwards every call
    may pass."""
    import ray

    from gated_engines import open_gate

    g = open_gate()
    yield g
    ray.get(g.allow.remote(10_000))
