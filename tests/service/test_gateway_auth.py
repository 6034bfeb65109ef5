"""Bearer-token auth on the gateway app (the in-process fake API behind it; no Ray needed)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from dialscore_server.gateway.auth import read_token
from fake_api import FakeAPI


def _get(app, path, headers=None):
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.get(path, headers=headers or {})
    return asyncio.run(go())


def test_auth_off_by_default():
    app = FakeAPI(token=None).app
    assert _get(app, "/v1/models").status_code == 200


def test_auth_on_guards_everything_but_healthz_and_docs():
    app = FakeAPI(token="s3cret").app
    assert _get(app, "/healthz").status_code == 200
    assert _get(app, "/openapi.json").status_code == 200
    denied = _get(app, "/v1/models")
    assert denied.status_code == 401 and denied.json()["error"]["type"] == "unauthorized"
    assert _get(app, "/v1/models", {"Authorization": "Bearer wrong"}).status_code == 401
    assert _get(app, "/v1/models", {"Authorization": "Bearer s3cret"}).status_code == 200


def test_token_from_env_or_secret_file(monkeypatch, tmp_path):
    monkeypatch.delenv("DIALSCORE_API_TOKEN", raising=False)
    assert read_token("DIALSCORE_API_TOKEN") is None
    monkeypatch.setenv("DIALSCORE_API_TOKEN", "abc")
    assert read_token("DIALSCORE_API_TOKEN") == "abc"
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    monkeypatch.setenv("DIALSCORE_API_TOKEN", f"file:{secret}")
    assert read_token("DIALSCORE_API_TOKEN") == "from-file"


@pytest.mark.parametrize("path", ["/v1/models", "/metrics", "/readyz"])
def test_unauthorized_requests_are_counted_as_errors(path):
    app = FakeAPI(token="t").app
    _get(app, path)
    text = _get(app, "/metrics", {"Authorization": "Bearer t"}).text
    assert f'dialscore_errors_total{{endpoint="{path}",type="unauthorized"}}' in text
