"""Access and safety on the real Serve app: only served model names, CORS off, bodies never logged,
and bearer-token auth on a real gateway replica (a second, model-less app under /authed that
reuses the first app's model deployments by handle: one small replica, no model load)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.serve

ITEM = {"context": ["hi"], "target": "hello"}
DIALOGUE = {"turns": [{"speaker": 1, "text": "I love dogs."}, {"speaker": 1, "text": "I hate dogs."}]}


def _not_served_names(served) -> list[str]:
    """Hub ids, checkpoint paths (the served models' own among them), URLs and traversal."""
    own = served.config("dialogpt-medium").source
    return ["microsoft/DialoGPT-medium", "gpt2", "roberta-large-mnli ", own, str(Path(own).parent),
            "./" + Path(own).name, "../../../etc/passwd", "file:///etc/passwd", "hf://gpt2",
            "https://huggingface.co/gpt2", "DIALOGPT-MEDIUM", ""]


@pytest.mark.parametrize("route", ["nll", "contradiction", "rerank model", "rerank nll_model", "tei"])
def test_only_models_named_in_the_config_can_be_used(served, route):
    with httpx.Client(base_url=served.url, timeout=60) as client:
        for name in _not_served_names(served):
            path, body, param = {
                "nll": ("/v1/nll", {"model": name, "items": [ITEM]}, "model"),
                "contradiction": ("/v1/contradiction", {"model": name, "dialogues": [DIALOGUE]}, "model"),
                "rerank model": ("/v1/rerank", {"model": name, "context": [], "candidates": ["a"]}, "model"),
                "rerank nll_model": ("/v1/rerank", {"nll_model": name, "context": [], "candidates": ["a"]},
                                     "nll_model"),
                "tei": ("/rerank", {"model": name, "query": "hi", "texts": ["a"]}, "model"),
            }[route]
            r = client.post(path, json=body)
            assert r.status_code == 404, (name, r.text)
            assert r.json()["error"]["type"] == "unknown_model" and r.json()["error"]["param"] == param
        # A classifier is not an NLL model and vice versa.
        assert client.post("/v1/nll", json={"model": "roberta-large-mnli", "items": [ITEM]}).status_code == 404
        assert client.post("/v1/contradiction", json={"model": "dialogpt-medium",
                                                      "dialogues": [DIALOGUE]}).status_code == 404


def test_cors_is_off_by_default(served):
    origin = {"Origin": "https://evil.example"}
    with httpx.Client(base_url=served.url, timeout=60) as client:
        preflight = client.options("/v1/nll", headers=origin | {"Access-Control-Request-Method": "POST",
                                                                 "Access-Control-Request-Headers": "content-type"})
        assert preflight.status_code == 405
        assert preflight.json()["error"]["type"] == "invalid_request"
        simple = client.post("/v1/nll", json={"model": "dialogpt-medium", "items": [ITEM]}, headers=origin)
        assert simple.status_code == 200
        for r in (preflight, simple, client.get("/v1/models", headers=origin)):
            assert not any(h.startswith("access-control-") for h in r.headers), dict(r.headers)


def _log_files() -> list[Path]:
    from dialscore_server import compat

    return [p for p in Path(compat.session_logs_dir()).rglob("*") if p.is_file()]


def test_request_bodies_are_not_logged(served):
    """A marker sent in good, refused and failing requests appears in no log file of the Ray
    session (Serve access logs, replica logs, worker stdout/stderr), while the requests do."""
    marker = f"secret-{uuid.uuid4().hex}"
    with httpx.Client(base_url=served.url, timeout=60) as client:
        sent = [
            client.post("/v1/nll", json={"model": "dialogpt-medium", "items": [{"context": [marker], "target": marker}]}),
            client.post("/v1/nll", json={"model": marker, "items": [ITEM]}),  # 404 naming the model
            client.post("/v1/nll", json={"model": "dialogpt-medium", "items": [{"context": [], "target": 5,
                                                                                   "x": marker}]}),
            client.post("/v1/contradiction", json={"dialogues": [{"turns": [{"speaker": marker, "text": marker}]}]}),
            client.post("/rerank", json={"query": f"{marker}\n{marker}", "texts": [marker]}),
            client.post("/v1/nll", content=b'{"model": "' + marker.encode() + b'", ', headers={"content-type": "application/json"}),
        ]
    assert [r.status_code for r in sent] == [200, 404, 422, 200, 200, 422]
    time.sleep(2.0)  # log handlers flush
    files = _log_files()
    assert any("/v1/nll" in p.read_text(errors="replace") for p in files if "serve" in str(p)), \
        "Serve access logs were not found: the search would prove nothing"
    leaked = [str(p) for p in files if marker in p.read_text(errors="replace")]
    assert not leaked, leaked


# ---------------------------------------------------------------------------- auth, for real

TOKEN = f"tok-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def authed(served):
    """A second gateway app under /authed with auth on, routed to the first app's deployments."""
    from ray import serve

    from dialscore_server.gateway.deployment import Gateway

    handle = serve.get_deployment_handle("nll-untrained-gpt2", app_name="dialscore")
    args = {"stand_ins": served.args.stand_ins, "auth_token_env": "DIALSCORE_TEST_TOKEN",
            "models": [{"name": "dialogpt-medium", "serve_as": "untrained-gpt2"}]}
    app = Gateway.options(num_replicas=1, ray_actor_options={
        "num_cpus": 0.05, "runtime_env": {"env_vars": {"DIALSCORE_TEST_TOKEN": TOKEN}}},
    ).bind({"untrained-gpt2": handle}, args)
    serve.run(app, name="authed", route_prefix="/authed")
    try:
        yield f"{served.url}/authed"
    finally:
        serve.delete("authed")


def test_auth_on_a_real_gateway(authed):
    good = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=authed, timeout=60) as client:
        assert client.get("/healthz").status_code == 200  # open, under a route prefix too
        spec = client.get("/openapi.json")
        assert spec.status_code == 200
        for path, method in [("/v1/models", "GET"), ("/metrics", "GET"), ("/readyz", "GET"), ("/v1/nll", "POST")]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                r = client.request(method, path, headers=headers, json={"model": "untrained-gpt2", "items": [ITEM]})
                assert r.status_code == 401, (path, headers, r.text)
                assert r.json()["error"]["type"] == "unauthorized"
            assert "401" in spec.json()["paths"][path][method.lower()]["responses"]
        assert client.get("/v1/models", headers=good).status_code == 200
        r = client.post("/v1/nll", headers=good, json={"model": "untrained-gpt2", "items": [ITEM]})
        assert r.status_code == 200, r.text
        assert spec.json()["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
        assert "401" not in spec.json()["paths"]["/healthz"]["get"]["responses"]
