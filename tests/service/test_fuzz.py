"""Fuzzing the real app: schemathesis against its own /openapi.json, and a table of hostile bodies.

No 5xx anywhere, every response conforms to the documented schema, every error has the one shape
``{"error": {"type", "message", "param"}}`` with a type from the closed set and its status.

Schemathesis configuration, and why:

* ``negative_data_rejection`` also accepts 413: the documented ``maxItems``/``maxLength`` are this
  deployment's limits, which the service refuses with 413 ``payload_too_large`` by contract
  (services/dialscore_server/contract/errors.py), not 422.
* ``positive_data_acceptance`` also accepts 413 and 422: some rules of the API are not
  expressible in JSON Schema and are refused with a 422 naming the field (an NLL item gives
  `context` or `source`, not both; turn ids are unique within a dialogue; a target must fit the
  model's window; an `nll` weight needs an `nll_model`), and the TEI query's limits apply per
  line (413).
* 30 examples per operation and mode (positive, negative; ``DIALSCORE_FUZZ_EXAMPLES`` to change),
  each positive body sent twice: as generated, and naming served models (so fuzzed text reaches
  the tokenizers and engines, not only the 404 of a random model name). Bounded time.
* 401 does not occur (auth is off in this app: tests/test_access.py covers auth); 404 and 405
  for unknown routes and methods are checked in the hostile table (the Allow header included).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter

import httpx
import pytest

pytestmark = pytest.mark.serve

import schemathesis  # noqa: E402  (the test extra installs it)
from hypothesis import HealthCheck, settings  # noqa: E402

from dialscore_server.contract.errors import STATUS  # noqa: E402

#: Examples per operation and mode (DIALSCORE_FUZZ_EXAMPLES=500 for a longer run).
EXAMPLES = int(os.environ.get("DIALSCORE_FUZZ_EXAMPLES", "30"))
TALLY: Counter = Counter()  # requests tried and statuses seen, for the closing figures

CONFIG = {
    "generation": {"mode": "all", "max-examples": EXAMPLES},
    "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
    "checks": {
        "negative_data_rejection": {"expected-statuses": [
            "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]},
        "positive_data_acceptance": {"expected-statuses": ["2xx", "404", "413", "422"]},
    },
    "request-timeout": 60,
}


@pytest.fixture(scope="module")
def api_schema(served):
    config = schemathesis.Config.from_dict(CONFIG)
    return schemathesis.openapi.from_url(f"{served.url}/openapi.json", config=config)


def assert_error_shape(response) -> None:
    """An error response: exactly {"error": {"type", "message", "param"}}, type ↔ status."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"type", "message", "param"}, body
    assert body["error"]["type"] in STATUS, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"]["param"] is None or isinstance(body["error"]["param"], str)
    expected = 405 if response.status_code == 405 else STATUS[body["error"]["type"]]
    assert response.status_code == expected, (response.status_code, body)
    assert response.headers.get("x-error-type") == body["error"]["type"]


OPERATIONS = [("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/v1/models"),
              ("POST", "/v1/nll"), ("POST", "/v1/nll/dialogues"), ("POST", "/v1/contradiction"),
              ("POST", "/v1/rerank"), ("POST", "/rerank"), ("POST", "/v2/rerank"), ("POST", "/v1/completions"), ("GET", "/tokenizer_info"),
              ("POST", "/tokenize"), ("POST", "/detokenize")]


def test_every_documented_operation_is_fuzzed(api_schema):
    documented = {(op.method.upper(), op.path) for op in (r.ok() for r in api_schema.get_all_operations())}
    assert documented == set(OPERATIONS)


# schemathesis' own pytest loader (`schemathesis.pytest.from_fixture`) does not run under
# pytest 9 (it sets Node._nodeid), so each operation's strategy is driven by Hypothesis here;
# the checks are the same (`case.call_and_validate`).
# Negative data needs something to negate: the GET routes take no input.
RUNS = [(m, p, mode) for m, p in OPERATIONS for mode in (["positive", "negative"] if m == "POST" else ["positive"])]


@pytest.mark.parametrize("method,path,mode", RUNS, ids=[f"{m} {p} {mode}" for m, p, mode in RUNS])
def test_schemathesis_no_5xx_and_responses_match_the_schema(api_schema, method, path, mode):
    from hypothesis import given

    operation = api_schema[path][method]
    strategy = operation.as_strategy(generation_mode=schemathesis.GenerationMode(mode))

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None,
              derandomize=True)
    @given(case=strategy)
    def check(case):
        call(case)
        # Generated model names are random strings (404 at once): the same generated body is
        # sent again naming served models, so fuzzed texts reach the tokenizers and engines.
        if mode == "positive" and isinstance(case.body, dict) and path in SERVED:
            case.body = {**case.body, **SERVED[path]}
            if "nll_model" in case.body and "nll_model" not in SERVED[path]:
                case.body["nll_model"] = "dialogpt-medium"
            call(case)

    check()


#: Served model names per route (tests/conftest.py), substituted into generated bodies.
SERVED = {"/v1/nll": {"model": "dialogpt-medium"}, "/v1/nll/dialogues": {"model": "dialogpt-medium"},
          "/v1/contradiction": {"model": "roberta-large-mnli"},
          "/v1/rerank": {"model": "roberta-large-mnli"}, "/rerank": {"model": "roberta-large-mnli"},
          "/v2/rerank": {"model": "roberta-large-mnli"}, "/v1/completions": {"model": "dialogpt-medium"},
          "/tokenize": {"model": "dialogpt-medium"}, "/detokenize": {"model": "dialogpt-medium"}}


def call(case) -> None:
    response = case.call_and_validate(timeout=60)
    TALLY["requests"] += 1
    TALLY[response.status_code] += 1
    assert response.status_code < 500, response.text
    if response.status_code >= 400 and case.operation.path != "/readyz":
        headers = [(k, v) for k, vs in response.headers.items() for v in vs]
        assert_error_shape(httpx.Response(response.status_code, headers=headers, content=response.content))


# --------------------------------------------------------------------------- hostile bodies

JSON = {"content-type": "application/json"}
OK_NLL = {"model": "dialogpt-medium", "items": [{"context": ["hi"], "target": "hello"}]}
DIALOGUE = {"turns": [{"speaker": 1, "text": "I love dogs."}, {"speaker": 1, "text": "I hate dogs."}]}
TEN_MB = b'{"model": "dialogpt-medium", "items": [{"context": [], "target": "' + b"x" * 10_000_000 + b'"}]}'


def j(obj) -> bytes:
    return json.dumps(obj).encode()


def chunks(raw: bytes):
    return (raw[i:i + (1 << 20)] for i in range(0, len(raw), 1 << 20))


# (id, method, path, content, headers, expected status, expected param or ... for "any")
HOSTILE = [
    ("10,000 nested lists", "POST", "/v1/nll", b"[" * 10_000 + b"]" * 10_000, JSON, 422, ...),
    ("10,000 nested lists in a field", "POST", "/v1/nll",
     b'{"model": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", JSON, 422, ...),
    ("10,000 nested objects", "POST", "/v1/contradiction", b'{"a":' * 10_000 + b"1" + b"}" * 10_000, JSON, 422, ...),
    ("33 nested lists in a field", "POST", "/v1/rerank",
     b'{"context": [], "candidates": ' + b"[" * 33 + b"]" * 33 + b"}", JSON, 422, ...),
    ("10 MB string", "POST", "/v1/nll", TEN_MB, JSON, 413, "body"),
    ("10 MB string, chunked", "POST", "/v1/nll", TEN_MB, JSON | {"chunked": "1"}, 413, "body"),
    ("NaN threshold", "POST", "/v1/contradiction",
     b'{"threshold": NaN, "dialogues": [' + j(DIALOGUE) + b"]}", JSON, 422, ...),
    ("Infinity threshold", "POST", "/v1/contradiction",
     b'{"evidence_threshold": Infinity, "dialogues": [' + j(DIALOGUE) + b"]}", JSON, 422, ...),
    ("-Infinity weight", "POST", "/v1/rerank",
     b'{"context": [], "candidates": ["a"], "weights": {"contradiction": -Infinity}}', JSON, 422, ...),
    ("1e999 threshold", "POST", "/v1/contradiction",
     b'{"threshold": 1e999, "dialogues": [' + j(DIALOGUE) + b"]}", JSON, 422, ...),
    ("threshold 1.5", "POST", "/v1/contradiction", j({"threshold": 1.5, "dialogues": [DIALOGUE]}), JSON, 422,
     "threshold"),
    ("5000-digit top_n", "POST", "/v1/rerank",
     b'{"context": [], "candidates": ["a"], "top_n": ' + b"9" * 5000 + b"}", JSON, 422, ...),
    ("lone surrogate in a target", "POST", "/v1/nll",
     b'{"model": "dialogpt-medium", "items": [{"context": [], "target": "a\\udc00"}]}', JSON, 422,
     "items[0].target"),
    ("lone surrogate in a speaker", "POST", "/v1/rerank",
     b'{"context": [{"speaker": "\\ud800", "text": "hi"}], "candidates": ["a"], "mode": "unstructured"}',
     JSON, 422, "context[0].speaker"),
    ("lone surrogate in a turn id", "POST", "/v1/contradiction",
     b'{"dialogues": [{"turns": [{"id": "\\ud800", "speaker": 1, "text": "a"}, {"speaker": 1, "text": "b"}]}]}',
     JSON, 422, "dialogues[0].turns[0].id"),
    ("lone surrogate in a key", "POST", "/v1/nll", b'{"\\ud800": 1, "model": "m", "items": []}', JSON, 422, ...),
    ("lone surrogate in the model", "POST", "/rerank", b'{"query": "a", "texts": ["b"], "model": "\\udfff"}',
     JSON, 422, "model"),
    ("paired surrogates are fine", "POST", "/v1/nll",
     b'{"model": "dialogpt-medium", "items": [{"context": ["\\ud83d\\ude00"], "target": "ok \\ud83d\\ude00"}]}',
     JSON, 200, None),
    ("null bytes in texts", "POST", "/v1/nll",
     j({"model": "dialogpt-medium", "items": [{"context": ["a\x00b", "\x00"], "target": "c\x00"}]}), JSON, 200, None),
    ("null bytes in a dialogue", "POST", "/v1/contradiction",
     j({"dialogues": [{"turns": [{"speaker": "\x00", "text": "\x00\x00"}, {"speaker": "\x00", "text": "x\x00"}]}]}),
     JSON, 200, None),
    ("null bytes in a TEI query", "POST", "/rerank", j({"query": "\x00\n\x00", "texts": ["\x00"]}), JSON, 200, None),
    ("zero-width, RTL and combining marks", "POST", "/v1/nll",
     j({"model": "bart-base", "items": [{"context": ["\u200b\u200f\u202e"], "target": "e\u0301\u0301\u0301"}]}),
     JSON, 200, None),
    ("duplicated keys", "POST", "/v1/nll",
     b'{"model": "dialogpt-medium", "model": "bart-base", "items": [{"context": [], "target": "x"}]}', JSON, 422, ...),
    ("duplicated keys in an item", "POST", "/v1/nll",
     b'{"model": "dialogpt-medium", "items": [{"target": "x", "context": [], "target": "y"}]}', JSON, 422, ...),
    ("text/plain", "POST", "/v1/nll", j(OK_NLL), {"content-type": "text/plain"}, 422, None),
    ("multipart", "POST", "/v1/contradiction",
     b'--b\r\nContent-Disposition: form-data; name="dialogues"\r\n\r\n[]\r\n--b--\r\n',
     {"content-type": "multipart/form-data; boundary=b"}, 422, None),
    ("form (curl -d)", "POST", "/v1/rerank", b"context=&candidates=a",
     {"content-type": "application/x-www-form-urlencoded"}, 422, None),
    ("no content type", "POST", "/v1/nll", j(OK_NLL), {}, 422, None),
    ("json with charset", "POST", "/v1/nll", j(OK_NLL), {"content-type": "application/json; charset=utf-8"},
     200, None),
    ("empty body", "POST", "/v1/nll", b"", JSON, 422, None),
    ("whitespace body", "POST", "/rerank", b" \n ", JSON, 422, None),
    ("gzip-declared garbage", "POST", "/v1/nll", b"\x1f\x8bnot gzip at all", JSON | {"content-encoding": "gzip"},
     422, None),
    ("gzip-declared valid gzip", "POST", "/v1/nll", gzip.compress(j(OK_NLL)), JSON | {"content-encoding": "gzip"},
     422, None),
    ("invalid UTF-8", "POST", "/v1/contradiction", b'{"dialogues": "\xff\xfe"}', JSON, 422, None),
    ("UTF-16 body", "POST", "/v1/nll", json.dumps(OK_NLL).encode("utf-16"), JSON, 422, None),
    ("top-level null", "POST", "/v1/nll", b"null", JSON, 422, ...),
    ("100,000 ints as items", "POST", "/v1/nll", j({"model": "dialogpt-medium", "items": [1] * 100_000}), JSON,
     422, ...),
    ("wrong method", "DELETE", "/v1/nll", b"", {}, 405, None),
    ("unknown route", "POST", "/v2/nll", j(OK_NLL), JSON, 404, None),
    ("path traversal", "GET", "/../../etc/passwd", b"", {}, 404, None),
]


def _send(client: httpx.Client, method, path, content, headers):
    headers = dict(headers)
    if headers.pop("chunked", None):
        content = chunks(content)
    try:
        return client.request(method, path, content=content or None, headers=headers)
    except httpx.RemoteProtocolError:
        return None  # the server closed a connection whose framing lied: not a 5xx


@pytest.mark.parametrize("name,method,path,content,headers,status,param", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bodies_get_a_typed_error_never_a_5xx(served, name, method, path, content, headers, status, param):
    with httpx.Client(base_url=served.url, timeout=60) as client:
        r = _send(client, method, path, content, headers)
        TALLY["hostile"] += 1
        if r is None:
            assert status is ..., "the connection was dropped"
            TALLY["hostile dropped"] += 1
        else:
            TALLY[r.status_code] += 1
            assert r.status_code < 500, r.text[:500]
            if status is not ...:
                assert r.status_code == status, r.text[:500]
            if r.status_code >= 400:
                assert_error_shape(r)
                if param is not ...:
                    assert r.json()["error"]["param"] == param, r.text[:500]
            if r.status_code == 405:
                assert r.headers["allow"] == "POST"
        # The service is still fine afterwards.
        assert client.post("/v1/nll", json=OK_NLL).status_code == 200


@pytest.mark.parametrize("declared,sent", [(9_000_000, 100), (50, 5000)], ids=["over the limit", "under the body"])
def test_lying_content_length_is_refused_not_trusted(served, declared, sent):
    """A Content-Length announcing more than the limit is refused at once (413, before reading);
    one announcing less than is sent gets its truncated body refused (422), never a 5xx."""
    import http.client
    import socket
    from urllib.parse import urlsplit

    host, port = urlsplit(served.url).hostname, urlsplit(served.url).port
    body = b'{"model": "dialogpt-medium", "items": [{"context": [], "target": "' + b"x" * sent + b'"}]}'
    head = (f"POST /v1/nll HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {declared}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head + body[:min(len(body), declared)])
        response = http.client.HTTPResponse(sock)
        response.begin()
        status, error = response.status, json.loads(response.read())
    TALLY["hostile"] += 1
    TALLY[status] += 1
    assert status == (413 if declared > 8_000_000 else 422), error
    assert set(error["error"]) == {"type", "message", "param"}


def test_fuzzing_figures():
    """Runs last in this module: prints what was tried (the figures of the closing note)."""
    print(f"\nfuzzing figures: {dict(sorted(TALLY.items(), key=str))}")
    assert not [s for s in TALLY if isinstance(s, int) and s >= 500]
