"""The bulk ingress (gateway/bulk_ingress.py) without Ray: behind :class:`AllBulk`, the API over
fake engines serves every request in the bulk lane whatever it asks; the main application's
deployments are looked up by name, waiting while they do not exist yet, and a deployment that
never appears fails the start naming it. Served, on a real Serve app: test_bulk_pool_served.py."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from pydantic import ValidationError

from dialscore_server.gateway import bulk_ingress
from dialscore_server.gateway.args import BulkIngressArgs
from dialscore_server.gateway.bulk_ingress import AllBulk, lookup
from fake_api import FakeAPI
from test_priority_routes import COMPLETIONS, QUERY_ROUTES, ROUTES

#: The headers a caller may send to ask for the interactive lane (none: the default).
HEADERS = [{}, {"X-Dialscore-Priority": "interactive"},
           {"X-Dialscore-Priority": "Interactive", "x-dialscore-priority": "interactive"}]


def post(path: str, body: dict, headers: dict, bulk_ingress_on: bool = True) -> httpx.Response:
    api = FakeAPI()
    if bulk_ingress_on:
        api.app.add_middleware(AllBulk)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=api.transport(), base_url="http://fake") as http:
            return await http.post(path, json=body, headers=headers)

    return asyncio.run(go())


@pytest.mark.parametrize("path", [*ROUTES, *QUERY_ROUTES])
@pytest.mark.parametrize("headers", HEADERS)
def test_every_request_through_the_bulk_ingress_is_served_in_bulk(path, headers):
    body = {**ROUTES, **QUERY_ROUTES}[path]
    r = post(path, body, headers)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["x-dialscore-lane"] == "bulk"
    # The same request to the service's own gateway is interactive: the ingress decides.
    assert post(path, body, headers, bulk_ingress_on=False).headers["x-dialscore-lane"] == \
        "interactive"


@pytest.mark.parametrize("path", ROUTES)
def test_a_body_priority_cannot_ask_for_interactive_through_it(path):
    r = post(path, {**ROUTES[path], "priority": -1}, {})
    assert r.status_code == 200 and r.headers["x-dialscore-lane"] == "bulk"


def test_a_bad_priority_header_is_replaced_not_refused():
    r = post("/v1/nll", ROUTES["/v1/nll"], {"X-Dialscore-Priority": "urgent"})
    assert r.status_code == 200 and r.headers["x-dialscore-lane"] == "bulk"


def test_a_bad_body_is_still_a_422_naming_the_field():
    r = post("/v1/completions", {**COMPLETIONS, "priority": "high"}, {})
    assert r.status_code == 422 and r.json()["error"]["param"] == "priority"


def test_a_deployment_of_the_main_application_is_waited_for(monkeypatch):
    tries: list[tuple[str, str]] = []

    def get_deployment_handle(name: str, app_name: str):
        tries.append((name, app_name))
        if len(tries) < 3:
            raise ValueError("no such application")
        return "handle"

    monkeypatch.setattr(bulk_ingress.serve, "get_deployment_handle", get_deployment_handle)
    got = asyncio.run(lookup("nll-gpt", "dialscore", wait_s=3600, retry_s=0))
    assert got == "handle" and tries == [("nll-gpt", "dialscore")] * 3


def test_a_deployment_that_never_appears_fails_the_start_naming_it(monkeypatch):
    def missing(name: str, app_name: str):
        raise ValueError("no such application")

    monkeypatch.setattr(bulk_ingress.serve, "get_deployment_handle", missing)
    with pytest.raises(RuntimeError, match="no deployment 'nli-x' in application 'main'"):
        asyncio.run(lookup("nli-x", "main", wait_s=0, retry_s=0))


def test_the_ingress_args_name_a_bad_priority():
    base = {"models": [{"name": "dialogpt-medium"}]}
    assert BulkIngressArgs.model_validate(base).ingress_priority == "low"
    assert BulkIngressArgs.model_validate(base).of_app == "dialscore"
    with pytest.raises(ValidationError, match="ingress_priority"):
        BulkIngressArgs.model_validate({**base, "ingress_priority": "lowest"})


def test_the_documented_serve_config_builds_both_applications_args():
    """docs/operating/lanes.md#bulk-ingress: its YAML (one anchor for both applications' args) is what
    Serve would validate against AppArgs and BulkIngressArgs."""
    import re
    from pathlib import Path

    import yaml

    from dialscore_server.gateway.args import AppArgs

    page = (Path(__file__).resolve().parents[2] / "docs" / "operating" / "lanes.md").read_text()
    section = page[page.index("## A bulk ingress"):]
    config = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    service, bulk = config["applications"]
    assert bulk["import_path"] == "dialscore_server.gateway.build:build_bulk_ingress"
    args = BulkIngressArgs.model_validate(bulk["args"])
    assert args.of_app == service["name"]
    assert args.models == AppArgs.model_validate(service["args"]).models
