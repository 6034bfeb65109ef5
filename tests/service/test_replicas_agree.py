"""Every replica of a model computes the same numbers for the same request: two replicas of one
stand-in (weights re-initialised at std 0.3, so numbers vary by token; CPU kernels on, as served
by default), the same request sent until both replicas have answered it (affinity routing off, so
that it reaches both), every answer identical to the last bit."""

from __future__ import annotations

import httpx
import pytest

from ray_metrics import replica_metrics
from serve_apps import ONE_THREAD, app_args, deploy_app, wait_until

pytestmark = [pytest.mark.serve, pytest.mark.slow]

MODEL = "twin-gpt"
BODY = {"model": MODEL, "return_tokens": True, "items": [
    {"context": ["we could go to the museum on saturday", "or the park if it is sunny"],
     "target": f"the park, because {k} of us like the sun"} for k in range(6)]}


def items_per_replica(app: str) -> dict[str, float]:
    """Items scored by each replica of `app`'s model, from the replicas' own counters."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for text in replica_metrics():
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if (s.name == "ray_dialscore_items_scored_total"
                        and s.labels.get("application") == app and s.labels.get("model") == MODEL):
                    out[s.labels["replica"]] = out.get(s.labels["replica"], 0.0) + s.value
    return out


def test_two_replicas_of_a_model_answer_the_same_request_identically(served, stand_ins,
                                                                        sharp_stand_ins):
    args = app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "serve_as": MODEL,
         "overrides": {"source": str(sharp_stand_ins["gpt2"])},
         # Serve's default router: affinity routing would keep the one request on one replica.
         "serving": {**ONE_THREAD, "num_replicas": 2, "affinity_routing": False}}])
    with deploy_app(served, "twins", args) as app:
        answers: list[list[list[float]]] = []
        fresh = httpx.Limits(max_keepalive_connections=0)

        def both_answered() -> dict[str, float] | None:
            with httpx.Client(timeout=60, limits=fresh) as http:
                for _ in range(4):
                    r = http.post(f"{app.url}/v1/nll", json=BODY)
                    assert r.status_code == 200, r.text[:300]
                    answers.append([res["token_nlls"] for res in r.json()["results"]])
            served_by = items_per_replica("twins")
            return served_by if len(served_by) == 2 and all(served_by.values()) else None

        served_by = wait_until(both_answered, "both replicas answering", limit_s=300, step_s=0)
        assert len(served_by) == 2
        assert len({repr(a) for a in answers}) == 1, "the replicas' numbers differ"
        assert len({round(x, 3) for a in answers[0] for x in a}) > 10  # numbers vary by token
