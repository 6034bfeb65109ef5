"""A replica whose engine call hangs is replaced by Serve, end to end: real Serve, real HTTP.

This module's app (`stall`, under /stall) serves one NLL deployment with a gated fake engine
(gated_engines.py: every engine call waits at a gate the test opens) and
``engine_stall_s: 2``, its health checked every second (``health_check_period_s: 1``). The test sends one request with the gate closed, so its engine call is at
work and never returns, by construction. From two seconds into the call, the replica's health
check fails (:class:`~dialscore_server.scheduling.serving.EngineStalled`); Serve replaces the
replica after three failed checks in a row.
The held request is answered as a dying replica's are (424, retryable), not left hanging; once
the old replica is gone the test opens the gate and the replacement serves.

No outcome depends on how fast the machine is: the call is held until the test opens the gate,
which it does only after the replacement, so it is at work beyond any stall bound however slow
the machine; every wait is a hang guard (HANG_S). Without the stall bound the replica stays
running, as Serve's controller lists replicas, and the test fails at that wait.
"""

from __future__ import annotations

import time

import httpx
import pytest
import ray

from gated_engines import open_gate
from probe_checks import Answer, assert_retryable
from serve_apps import ONE_THREAD, app_args, deploy_app, running_replicas
from waiting import InBackground, wait_until

#: A hang guard for every wait (three failed checks 10 s apart, Serve's graceful shutdown of the
#: stalled replica, the replacement's start), not a speed requirement.
HANG_S = 600.0
#: The app's request deadline: beyond every wait, so the held request meets the replacement
#: however slow the machine, not its deadline.
DEADLINE_S = 4 * HANG_S

pytestmark = [pytest.mark.serve, pytest.mark.slow, pytest.mark.timeout(int(3 * HANG_S))]

APP = "stall"
DEPLOYMENT = "nll-hung"
#: The app's stall bound: far below the hang guard, far above a fake engine's health probe.
STALL_S = 2.0
#: The app's health_check_period_s (Serve's default: 10 s).
HEALTH_CHECK_S = 1.0
#: Permits enough for any test: the gate is open.
OPEN = 10**6


def replicas() -> list[str]:
    return running_replicas(APP, DEPLOYMENT)


@pytest.fixture(scope="module")
def stalling(stand_ins, served):
    """This module's app; its gate holds every engine call until the test opens it."""
    args = app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "serve_as": "hung",
         "serving": {**ONE_THREAD, "engine": "gated_engines:GatedNLLEngine",
                     "engine_stall_s": STALL_S, "health_check_period_s": HEALTH_CHECK_S}}],
        request_timeout_s=DEADLINE_S)
    gate = open_gate()  # kept referenced: a gate nobody holds is gone
    ray.get(gate.allow_starts.remote(OPEN))
    try:
        with deploy_app(served, APP, args) as app:
            yield app, gate
    finally:
        ray.get(gate.allow.remote(OPEN))


def post(url: str) -> httpx.Response:
    with httpx.Client(timeout=HANG_S) as http:
        return http.post(f"{url}/v1/nll",
                         json={"model": "hung", "items": [{"context": [], "target": "x"}]})


def test_a_replica_whose_engine_call_hangs_is_replaced_and_its_request_answered(stalling):
    app, gate = stalling
    (old,) = replicas()
    held = InBackground(lambda: post(app.url))
    state = ray.get(gate.wait_for.remote(1, 0, HANG_S))
    assert state["waiting"] == 1 and state["passed"] == 0, state  # the call is at work, held
    started = time.monotonic()

    new = wait_until(lambda: (lambda now: now if now and old not in now else None)(replicas()),
                     "the stalled replica replaced", HANG_S, step_s=0.5)
    replaced_s = time.monotonic() - started
    answer: httpx.Response = held.result(HANG_S)
    assert_retryable([Answer(answer.status_code, answer.headers.get("x-error-type"),
                             answer.headers.get("retry-after"))])
    assert answer.status_code == 424, answer.text  # the held request: as a dying replica's

    ray.get(gate.allow.remote(OPEN))
    served = wait_until(lambda: (lambda r: r if r.status_code == 200 else None)(post(app.url)),
                        "the replacement serves", HANG_S, step_s=0.5)
    assert len(served.json()["results"]) == 1
    assert old not in replicas() and len(new) == 1
    print(f"\nstall: replaced {replaced_s:.1f} s after the held call began "
          f"(stall bound {STALL_S:g} s); the held request got {answer.status_code}")
