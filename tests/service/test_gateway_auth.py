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


def test_required_auth_without_a_token_refuses_to_start(monkeypatch, tmp_path):
    """auth_required: a gateway replica on a node without the token must not serve the API."""
    from dialscore_server.gateway.auth import AuthConfigError, gateway_token

    monkeypatch.delenv("DIALSCORE_API_TOKEN", raising=False)
    assert gateway_token("DIALSCORE_API_TOKEN", required=False) is None      # auth off, as before
    with pytest.raises(AuthConfigError, match="DIALSCORE_API_TOKEN is unset or empty"):
        gateway_token("DIALSCORE_API_TOKEN", required=True)
    monkeypatch.setenv("DIALSCORE_API_TOKEN", "   ")
    with pytest.raises(AuthConfigError):
        gateway_token("DIALSCORE_API_TOKEN", required=True)
    monkeypatch.setenv("DIALSCORE_API_TOKEN", f"file:{tmp_path / 'missing'}")
    with pytest.raises(AuthConfigError, match="cannot read the token file"):
        gateway_token("DIALSCORE_API_TOKEN", required=True)
    (tmp_path / "token").write_text("t0k\n")
    monkeypatch.setenv("DIALSCORE_API_TOKEN", f"file:{tmp_path / 'token'}")
    assert gateway_token("DIALSCORE_API_TOKEN", required=True) == "t0k"


def test_token_comparison_is_constant_time_and_exact(monkeypatch):
    import hmac

    from dialscore_server.gateway import auth

    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(auth.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    assert auth.authorized("s3cret", "/v1/nll", "Bearer s3cret")
    assert not auth.authorized("s3cret", "/v1/nll", "Bearer s3cre")
    assert not auth.authorized("s3cret", "/v1/nll", "bearer s3cret")
    assert not auth.authorized("s3cret", "/v1/nll", "Bearer s3cret\u00e9")   # non-ASCII: no crash
    assert not auth.authorized("s3cret", "/v1/nll", None)
    assert len(calls) == 4 and all(isinstance(a, bytes) for a, _ in calls)


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus text `text` (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name + "{"):
            got = ",".join(sorted(line[len(name) + 1:line.index("}")].split(",")))
            if got == want:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_requests_are_counted_by_endpoint_status_and_error_type():
    """The gateway's observer (gateway/observe.py): one count per answered request, labelled with
    the documented path (else `other`), the status and the error type of error answers, 401s
    included."""
    app = FakeAPI(token="s3cret").app
    auth = {"Authorization": "Bearer s3cret"}

    def metrics_text() -> str:
        return _get(app, "/metrics", auth).text

    before = metrics_text()
    counts = {
        ("/v1/models", "200"): 2, ("/v1/models", "401"): 1, ("other", "404"): 1,
    }
    for _ in range(2):
        assert _get(app, "/v1/models", auth).status_code == 200
    assert _get(app, "/v1/models").status_code == 401
    assert _get(app, "/no/such/path", auth).status_code == 404
    after = metrics_text()
    for (endpoint, status), n in counts.items():
        got = (_sample(after, "dialscore_requests_total", endpoint=endpoint, status=status)
               - _sample(before, "dialscore_requests_total", endpoint=endpoint, status=status))
        assert got == n, (endpoint, status)
    got = (_sample(after, "dialscore_errors_total", endpoint="/v1/models", type="unauthorized")
           - _sample(before, "dialscore_errors_total", endpoint="/v1/models", type="unauthorized"))
    assert got == 1
    assert (_sample(after, "dialscore_request_latency_seconds_count", endpoint="/v1/models")
            - _sample(before, "dialscore_request_latency_seconds_count", endpoint="/v1/models")) == 3
