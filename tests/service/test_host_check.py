"""The Host check (issue 28, point 4; contract/host_check.py): with auth off, the embedded default
refuses a request whose ``Host`` is not a loopback name or address, so a web page that rebinds its
DNS name to 127.0.0.1 cannot drive the API; a setting widens the list; a bearer token makes the
check moot.

Over real HTTP, httpx forging the ``Host`` header: against the session's embedded default (the
real Serve app behind the front door, `served`), and against the gateway's own app in a uvicorn
server on loopback, for the settings the session's app does not have (no Ray: the check is the
gateway's, the same code in both).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from dialscore_server.gateway.args import AppArgs
from dialscore_server.gateway.embedded import embedded_args, free_port
from dialscore_server.contract.host_check import AllowedHosts, host_name
from waiting import wait_until

LOOPBACK = ["localhost", "LocalHost.", "app.localhost", "127.0.0.1", "127.5.6.7", "[::1]"]
REBINDING = ["evil.example", "127.0.0.1.evil.example", "localhost.evil.example", "0.0.0.0",
             "192.168.1.20", "[fe80::1]"]


def refused(r: httpx.Response) -> bool:
    """The documented refusal: 403 ``host_not_allowed``, param ``Host``, the error shape."""
    if r.status_code != 403:
        return False
    error = r.json()["error"]
    return (error["type"] == "host_not_allowed" and error["param"] == "Host"
            and r.headers["x-error-type"] == "host_not_allowed")


# ------------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("host,name", [
    ("localhost", "localhost"), ("LOCALHOST:8000", "localhost"), ("localhost.", "localhost"),
    ("127.0.0.1:80", "127.0.0.1"), ("[::1]", "::1"), ("[::1]:8000", "::1"), ("::1", "::1"),
    ("Example.COM:443", "example.com"),
])
def test_host_name_drops_port_brackets_case_and_final_dot(host, name):
    assert host_name(host) == name


def test_loopback_is_always_allowed_and_other_names_only_when_listed():
    plain, listed, anything = (AllowedHosts.of([]), AllowedHosts.of(["Dialscore.Test:8000", "10.0.0.5"]),
                               AllowedHosts.of(["*"]))
    for host in LOOPBACK + [f"{h}:8000" for h in LOOPBACK]:
        assert plain.allows(host) and listed.allows(host), host
    for host in REBINDING + [None, ""]:
        assert not plain.allows(host) and not listed.allows(host), host
        assert anything.allows(host)
    assert listed.allows("dialscore.test") and listed.allows("DIALSCORE.TEST:9999")
    assert listed.allows("10.0.0.5:8000") and not listed.allows("sub.dialscore.test")


def test_the_embedded_default_checks_with_the_flag_else_the_variable_else_the_config(stand_ins):
    base = AppArgs.model_validate({"models": [{"name": "dialogpt-medium"}]})
    assert base.allowed_hosts is None                              # a Serve config: no check
    assert embedded_args(base, environ={}).allowed_hosts == []     # embedded: loopback only
    yaml = base.model_copy(update={"allowed_hosts": ["from.yaml"]})
    env = {"DIALSCORE_ALLOWED_HOSTS": " a.test, b.test ,"}
    assert embedded_args(yaml, environ={}).allowed_hosts == ["from.yaml"]
    assert embedded_args(yaml, environ=env).allowed_hosts == ["a.test", "b.test"]
    assert embedded_args(yaml, ["cli.test"], environ=env).allowed_hosts == ["cli.test"]
    assert embedded_args(base, environ={"DIALSCORE_ALLOWED_HOSTS": ""}).allowed_hosts == []


# --------------------------------------------------------------- the embedded default, served
@pytest.mark.serve
def test_embedded_default_accepts_loopback_hosts(served):
    port = served.url.rsplit(":", 1)[1]
    for host in LOOPBACK + [f"{h}:{port}" for h in LOOPBACK]:
        r = httpx.get(f"{served.url}/v1/models", headers={"Host": host}, timeout=60)
        assert r.status_code == 200, (host, r.text)


@pytest.mark.serve
@pytest.mark.parametrize("method,path", [("GET", "/v1/models"), ("GET", "/healthz"),
                                         ("GET", "/readyz"), ("GET", "/metrics"),
                                         ("GET", "/openapi.json"), ("POST", "/v1/nll")])
def test_embedded_default_refuses_a_rebinding_host_on_every_route(served, method, path):
    port = served.url.rsplit(":", 1)[1]
    body = {"model": "dialogpt-medium", "items": [{"context": ["hi"], "target": "hello"}]}
    for host in REBINDING + [f"evil.example:{port}"]:
        r = httpx.request(method, f"{served.url}{path}", headers={"Host": host}, timeout=60,
                          json=body if method == "POST" else None)
        assert refused(r), (host, r.status_code, r.text)
        assert "Host" in r.json()["error"]["message"] and "--allowed-hosts" in r.json()["error"]["message"]


@pytest.mark.serve
def test_the_client_sends_a_loopback_host_from_its_base_url(served):
    from dialscore.client import DialscoreClient

    with DialscoreClient(served.url) as client:
        assert "dialogpt-medium" in [m.name for m in client.models()]


# ------------------------------------------------- the setting and auth, on the gateway's own app
@contextmanager
def gateway_on_loopback(allowed_hosts: list[str] | None, token: str | None = None) -> Iterator[str]:
    """The gateway's app over fake engines (tests/fake_api.py) with this Host check and token,
    served by uvicorn on a free loopback port in a thread; yields its base URL."""
    import uvicorn

    from fake_api import FakeAPI

    api = FakeAPI(token=token)
    api.backend.allowed_hosts = AllowedHosts.of(allowed_hosts) if allowed_hosts is not None else None
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(api.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "uvicorn listening")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def test_listed_hosts_are_accepted_and_others_still_refused():
    with gateway_on_loopback(["dialscore.test", "10.0.0.5"]) as url:
        assert httpx.get(f"{url}/v1/models", headers={"Host": "dialscore.test:8000"}).status_code == 200
        assert httpx.get(f"{url}/v1/models", headers={"Host": "10.0.0.5"}).status_code == 200
        assert httpx.get(f"{url}/v1/models", headers={"Host": "localhost"}).status_code == 200
        assert refused(httpx.get(f"{url}/v1/models", headers={"Host": "evil.example"}))


def test_a_star_allows_any_host_and_no_setting_means_no_check():
    for setting in (["*"], None):
        with gateway_on_loopback(setting) as url:
            for host in REBINDING:
                assert httpx.get(f"{url}/v1/models", headers={"Host": host}).status_code == 200


def test_with_auth_on_the_token_decides_whatever_the_host():
    """A page that rebinds a name cannot read the bearer token, so with auth on the Host is not
    checked: the token is (401 without it, whatever the Host)."""
    with gateway_on_loopback([], token="s3cret") as url:
        for host in ("evil.example", "localhost"):
            r = httpx.get(f"{url}/v1/models", headers={"Host": host})
            assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
            ok = httpx.get(f"{url}/v1/models",
                           headers={"Host": host, "Authorization": "Bearer s3cret"})
            assert ok.status_code == 200
