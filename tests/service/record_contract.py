"""The server's published contract, recorded for the client's tests: the live app's OpenAPI document
and request/response pairs, kept in ``tests/contract/`` (``openapi.json``, ``exchanges.json``).
The client's tests answer from them alone (``tests/client/contract_fake.py``);
``tests/service/test_contract_snapshot.py`` fails while they and the live app disagree.

Regenerate after a deliberate change of the API (never in CI: refused when ``CI`` is set)::

    make record-contract
    # that is: DIALSCORE_RECORD_CONTRACT=1 .venv/bin/python -m pytest tests/service/test_contract_snapshot.py

then review ``git diff tests/contract`` and commit it. The files, an exchange's fields and how
responses are compared: ``tests/contract_snapshot.py``.

Where each exchange's response comes from (its ``"source"``):

* ``live``: the shared Serve app on loopback (``served`` in tests/service/conftest.py: the
  dialogue models dialogpt-medium, bart-base and untrained-gpt2, the classifier
  roberta-large-mnli, default limits, no token). Every route and every error a request can cause.
* ``gateway``: what that app cannot show without killing replicas or changing its settings: the
  gateway's own FastAPI app (``gateway/app.py`` over a ``ModelDirectory`` of typed handles, as
  a gateway replica builds it), in-process, with the exchange's ``"gateway"`` condition: a token
  (401), small limits (the list-level 413s of ``items`` and ``dialogues`` (contradiction
  dialogues, and the scored turns of /v1/nll/dialogues) and the byte limit's
  ``body``, which at the default limits need bodies of a thousand elements or megabytes), or
  model handles that fail as Ray fails (503 backpressure, 408 deadline, 424 dead replica, 500 a
  bug).

A recorded response holds the status, the headers of ``CONTRACT_HEADERS`` it had, and the body
(JSON, or the text of a non-JSON body). Replaying compares all of them; the body is equal
everywhere except at the exchange's ``"volatile"`` paths (``results[*].nll``; ``$`` is the whole
body), where only the JSON type is compared: the stand-ins' floats and what follows from them
(verdicts, evidence, orders by score), response ids, timestamps, checkpoint paths and revisions.
An exchange with a ``"call"`` records the request the client sends for that call
(``DialscoreClient.<method>(*args, **kwargs)``), captured from the client itself.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

import httpx

from contract_snapshot import CONTRACT_HEADERS

RECORD_VARIABLE = "DIALSCORE_RECORD_CONTRACT"

#: Volatile paths shared by responses that name a checkpoint.
CHECKPOINT = ("source", "revision")
#: The gateway's model names: the shared app's.
DIALOGUE_MODELS = ("dialogpt-medium", "bart-base", "untrained-gpt2")
CLASSIFIER = "roberta-large-mnli"

CONTEXT = [{"speaker": "bot", "text": "I have two dogs.", "id": "t0"},
           {"speaker": "user", "text": "Do you like them?", "id": "t1"}]
ITEMS = [{"context": ["Hi!", "Hello, how are you?"], "target": "Great, thanks."},
         {"context": [], "knowledge": "Dogs need walks.", "target": "I walk mine daily."},
         {"source": "Translate: bonjour", "target": "hello"}]
DIALOGUES = [
    {"turns": [*CONTEXT, {"speaker": "bot", "text": "I have no pets.", "id": "t2"}]},
    {"turns": [{"speaker": 1, "text": "I am tall."}, {"speaker": 2, "text": "Ok."},
               {"speaker": 1, "text": "I am short."}]},
    {"turns": [{"speaker": "a", "text": "Hello."}]},
]

#: POST /v1/nll/dialogues: a plain list of turns, and one with knowledge scoring one speaker.
NLL_DIALOGUES = [
    ["Hi!", "Hello, how are you?", "Fine, thanks."],
    {"turns": ["Do you walk your dog?", "Every day.", "Where?", "In the park."],
     "knowledge": "Dogs need walks.", "speakers": ["a", "b", "a", "b"], "speaker": "b"},
]
#: The volatile paths of a dialogues response: the stand-ins' floats.
DIALOGUE_FLOATS = ("results[*].nll", "results[*].turns[*].nll", "results[*].turns[*].token_nlls")


def call(method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """A client call: ``DialscoreClient.<method>(*args, **kwargs)``."""
    return {"method": method, "args": list(args), "kwargs": kwargs}


@dataclass(frozen=True)
class Case:
    """One request to record. `call` (the client call that sends it), else `body` (JSON) or
    `content` (raw text); `gateway`: None for the live app, else the in-process condition."""

    name: str
    method: str
    path: str
    call: dict[str, Any] | None = None
    body: Any = None
    content: str | None = None
    volatile: tuple[str, ...] = ()
    gateway: dict[str, Any] | None = None


LIVE: list[Case] = [
    Case("healthz", "GET", "/healthz"),
    Case("readyz", "GET", "/readyz"),
    Case("metrics", "GET", "/metrics", volatile=("$",)),
    Case("models", "GET", "/v1/models", call("models"),
         volatile=("data[*].created", "data[*].root", "models[*].source", "models[*].revision")),
    Case("nll", "POST", "/v1/nll", call("nll", "dialogpt-medium", ITEMS),
         volatile=(*CHECKPOINT, "results[*].nll")),
    Case("nll-tokens", "POST", "/v1/nll",
         call("nll", "bart-base", ITEMS[:1], return_tokens=True),
         volatile=(*CHECKPOINT, "results[*].nll", "results[*].token_nlls", "results[*].tokens")),
    Case("nll-dialogues", "POST", "/v1/nll/dialogues",
         call("score_dialogues", "dialogpt-medium", NLL_DIALOGUES),
         volatile=(*CHECKPOINT, *DIALOGUE_FLOATS)),
    Case("nll-dialogues-tokens", "POST", "/v1/nll/dialogues",
         call("score_dialogues", "bart-base", NLL_DIALOGUES[1:],
              return_tokens=True, extra_body={"priority": 1}),
         volatile=(*CHECKPOINT, *DIALOGUE_FLOATS, "results[*].turns[*].tokens")),
    Case("contradiction", "POST", "/v1/contradiction",
         call("contradiction", DIALOGUES, evidence_threshold=0.3),
         volatile=(*CHECKPOINT, "results[*].probability", "results[*].is_contradiction",
                   "results[*].evidence")),
    Case("contradiction-unstructured", "POST", "/v1/contradiction",
         call("contradiction", DIALOGUES[:2], mode="unstructured", model=CLASSIFIER,
              threshold=0.6),
         volatile=(*CHECKPOINT, "results[*].probability", "results[*].is_contradiction")),
    Case("rerank", "POST", "/v1/rerank",
         call("rerank", CONTEXT, ["I have no pets.", "Yes, very much.", "They bark."]),
         volatile=("id", *CHECKPOINT, "results[*].index", "results[*].score",
                   "results[*].contradiction_probability", "results[*].is_contradiction",
                   "results[*].evidence")),
    Case("rerank-nll", "POST", "/v1/rerank",
         call("rerank", CONTEXT, ["I have no pets.", "Yes, very much."], top_n=1,
              nll_model="dialogpt-medium", speaker="bot", weights={"contradiction": 2.0}),
         volatile=("id", *CHECKPOINT, "nll_revision", "results[*].index", "results[*].score",
                   "results[*].contradiction_probability", "results[*].is_contradiction",
                   "results[*].evidence", "results[*].nll")),
    Case("completions", "POST", "/v1/completions",
         body={"model": "dialogpt-medium", "prompt": "Hello there, friend.", "max_tokens": 0,
               "echo": True, "logprobs": 1},
         volatile=("id", "created", "choices[*].logprobs.token_logprobs[*]",
                   "choices[*].logprobs.top_logprobs")),
    Case("tokenize", "POST", "/tokenize",
         body={"model": "dialogpt-medium", "prompt": "Hello <|endoftext|> there.",
               "add_special_tokens": False}),
    Case("detokenize", "POST", "/detokenize",
         body={"model": "dialogpt-medium", "tokens": [0, 1, 2]}),
    Case("tokenizer-info", "GET", "/tokenizer_info?model=dialogpt-medium"),
    Case("rerank-bulk", "POST", "/v1/rerank",
         body={"context": CONTEXT, "candidates": ["I have no pets.", "Yes."], "priority": 1},
         volatile=("id", *CHECKPOINT, "results[*].index", "results[*].score",
                   "results[*].contradiction_probability", "results[*].is_contradiction",
                   "results[*].evidence")),
    Case("tei-rerank", "POST", "/rerank",
         body={"query": "I have two dogs.\nDo you like them?", "texts": ["I have no pets.", "Yes."]},
         volatile=("[*].index", "[*].score")),
    Case("cohere-rerank", "POST", "/v2/rerank",
         body={"query": "I have two dogs.\nDo you like them?", "documents": ["I have no pets.", "Yes."],
               "top_n": 1},
         volatile=("id", "results[*].index", "results[*].relevance_score")),
    # Errors a request can cause.
    Case("nll-empty-target", "POST", "/v1/nll",
         call("nll", "dialogpt-medium", [{"context": ["Hi!"], "target": ""}])),
    Case("nll-source-and-context", "POST", "/v1/nll",
         call("nll", "dialogpt-medium", [{"source": "Hi!", "context": [], "target": "Hello."}])),
    Case("nll-missing-model", "POST", "/v1/nll", body={"items": ITEMS[:1]}),
    Case("nll-not-json", "POST", "/v1/nll", content="not json"),
    Case("nll-unknown-model", "POST", "/v1/nll", call("nll", "nope", ITEMS[:1])),
    Case("nll-too-many-turns", "POST", "/v1/nll",
         call("nll", "dialogpt-medium", [{"context": ["hi"] * 257, "target": "x"}])),
    Case("nll-dialogues-turn-outside", "POST", "/v1/nll/dialogues",
         call("score_dialogues", "dialogpt-medium",
              [["Hi!"], {"turns": ["Hi!", "Hello."], "score_turns": [2]}])),
    Case("nll-dialogues-unknown-speaker", "POST", "/v1/nll/dialogues",
         call("score_dialogues", "dialogpt-medium",
              [{"turns": ["Hi!"], "speakers": ["a"], "speaker": "b"}])),
    Case("nll-dialogues-no-turns", "POST", "/v1/nll/dialogues",
         call("score_dialogues", "dialogpt-medium", [[]])),
    Case("contradiction-unknown-classifier", "POST", "/v1/contradiction",
         call("contradiction", DIALOGUES[:1], model="dialogpt-medium")),
    Case("rerank-unknown-nll-model", "POST", "/v1/rerank",
         call("rerank", CONTEXT, ["Yes."], nll_model="nope")),
    Case("rerank-nothing-to-contradict", "POST", "/v1/rerank",
         call("rerank", [{"speaker": "bot", "text": "Hi."}], ["Hello."])),
    Case("rerank-too-many-candidates", "POST", "/v1/rerank",
         call("rerank", CONTEXT, ["x"] * 257)),
    Case("rerank-bad-priority", "POST", "/v1/rerank",
         body={"context": CONTEXT, "candidates": ["Yes."], "priority": "high"}),
    Case("tokenize-model-required", "POST", "/tokenize", body={"prompt": "Hello."}),
    Case("tokenizer-info-model-required", "GET", "/tokenizer_info"),
    Case("detokenize-unknown-model", "POST", "/detokenize", body={"model": "nope", "tokens": [1]}),
    Case("detokenize-outside-vocabulary", "POST", "/detokenize",
         body={"model": "dialogpt-medium", "tokens": [1, 10000000]}),
    Case("no-such-route", "GET", "/v1/nope"),
]

#: A body of 300 bytes and more: over the 256 bytes of the small limits.
LONG_TARGET = [{"context": [], "target": "x" * 300}]

GATEWAY: list[Case] = [
    Case("limits-items", "POST", "/v1/nll", call("nll", "dialogpt-medium", ITEMS),
         gateway={"limits": {"max_items": 2}}),
    Case("limits-dialogues", "POST", "/v1/contradiction", call("contradiction", DIALOGUES),
         gateway={"limits": {"max_dialogues": 2}}),
    Case("limits-dialogue-turns", "POST", "/v1/nll/dialogues",
         call("score_dialogues", "dialogpt-medium", NLL_DIALOGUES),
         gateway={"limits": {"max_items": 2}}),
    Case("limits-body", "POST", "/v1/nll", call("nll", "dialogpt-medium", LONG_TARGET),
         gateway={"limits": {"max_body_bytes": 256}}),
    Case("unauthorized", "GET", "/v1/models", call("models"), gateway={"token": "s3cret"}),
    # The embedded default's Host check (loopback only) meets the recorder's Host, "gateway".
    Case("host-not-allowed", "GET", "/v1/models", call("models"), gateway={"allowed_hosts": []}),
    Case("overloaded", "POST", "/v1/nll", call("nll", "dialogpt-medium", ITEMS[:1]),
         gateway={"failure": "backpressure"}),
    Case("timeout", "POST", "/v1/nll", call("nll", "dialogpt-medium", ITEMS[:1]),
         gateway={"failure": "deadline"}),
    Case("model-error", "POST", "/v1/nll", call("nll", "dialogpt-medium", ITEMS[:1]),
         gateway={"failure": "replica_died"}),
    Case("internal", "POST", "/v1/nll", call("nll", "dialogpt-medium", ITEMS[:1]),
         gateway={"failure": "bug"}),
]

CASES = LIVE + GATEWAY


# ------------------------------------------------------------------------------- requests

def client_request(spec: dict[str, Any]) -> tuple[str, str, Any]:
    """(method, path, JSON body or None) that ``DialscoreClient`` sends for the call `spec`."""
    from dialscore.client import DialscoreClient, RetryPolicy

    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(599, text="captured")

    with DialscoreClient("http://capture", transport=httpx.MockTransport(handler),
                         retry=RetryPolicy(max_attempts=1)) as client:
        try:
            getattr(client, spec["method"])(*spec["args"], **spec["kwargs"])
        except Exception:  # noqa: BLE001 - the 599 above: only the request matters
            pass
    [request] = sent
    body = json.loads(request.content) if request.content else None
    return request.method, request.url.path, body


def request_of(case: Case) -> dict[str, Any]:
    """The recorded request: method, path, and the JSON body or raw content."""
    if case.call is not None:
        method, path, body = client_request(case.call)
        assert (method, path) == (case.method, case.path), (case.name, method, path)
        return {"method": method, "path": path, "body": body}
    out: dict[str, Any] = {"method": case.method, "path": case.path, "body": case.body}
    if case.content is not None:
        out["content"] = case.content
    return out


def request_kwargs(request: dict[str, Any]) -> dict[str, Any]:
    """httpx's keyword arguments for a recorded request's body (JSON, or raw content)."""
    if "content" in request:
        return {"content": request["content"], "headers": {"content-type": "application/json"}}
    return {"json": request["body"]}


def response_record(response: httpx.Response) -> dict[str, Any]:
    """What a response promises: status, the contract's headers it has, the body."""
    headers = {name: response.headers[name] for name in CONTRACT_HEADERS if name in response.headers}
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    return {"status": response.status_code, "headers": headers, "body": body}


# ------------------------------------------------------------------------------- the gateway in-process

class _Answering:
    """Stands in for a model deployment's handle (``handle.method.remote(*args)``): every call
    ends in `outcome`, raised when it is an exception."""

    def __init__(self, outcome: Any):
        self._outcome = outcome

    def __getattr__(self, method: str) -> Any:
        outcome = self._outcome

        class _Method:
            @staticmethod
            def remote(*args: Any) -> asyncio.Future:
                async def answer() -> Any:
                    if isinstance(outcome, BaseException):
                        raise outcome
                    return outcome
                return asyncio.ensure_future(answer())

        return _Method


def _failure(name: str | None) -> Any:
    """What a model handle ends in under the condition `name`: the exception Ray raises (mapped
    by the gateway's contract/deadline.py), or for ``bug`` an answer no route can read."""
    from ray import exceptions as ray_exceptions
    from ray.serve.exceptions import BackPressureError

    return {None: None, "backpressure": BackPressureError(num_queued_requests=2, max_queued_requests=1),
            "deadline": TimeoutError(), "replica_died": ray_exceptions.ActorDiedError(),
            "bug": object()}[name]


def gateway_app(condition: dict[str, Any]) -> Any:
    """The gateway's FastAPI app, wired as a Serve gateway replica wires it (typed handles under
    the gateway's deadlines, in a ModelDirectory) over model handles that all end as
    `condition` says (its ``failure``), with its ``limits`` and ``token``, and the shared app's
    model names."""
    from dialscore_server.contract.deadline import Deadlines
    from dialscore_server.contract.limits import Limits
    from dialscore_server.contradiction.deployment import ClassifierHandle
    from dialscore_server.gateway.app import create_app
    from dialscore_server.directory import ModelDirectory
    from dialscore_server.contract.host_check import AllowedHosts
    from dialscore_server.nll.deployment import NLLHandle
    from dialscore_server.rerank.deployment import RerankHandle

    handle = _Answering(_failure(condition.get("failure")))
    deadlines = Deadlines(60.0, None, count_in_flight=True)
    directory = ModelDirectory({m: NLLHandle(handle, deadlines, m) for m in DIALOGUE_MODELS},
                               {CLASSIFIER: ClassifierHandle(handle, deadlines, CLASSIFIER)},
                               RerankHandle(handle, deadlines),
                               limits=Limits(**condition.get("limits", {})),
                               token=condition.get("token"),
                               allowed_hosts=(AllowedHosts.of(condition["allowed_hosts"])
                                              if "allowed_hosts" in condition else None))
    return create_app(directory)


def send_in_process(condition: dict[str, Any], request: dict[str, Any]) -> httpx.Response:
    """Send a recorded request to :func:`gateway_app` (`condition`); the response read whole."""
    transport = httpx.ASGITransport(app=gateway_app(condition), raise_app_exceptions=False)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            response = await client.request(request["method"], request["path"],
                                             **request_kwargs(request))
            await response.aread()
            return response

    return asyncio.run(go())


# ------------------------------------------------------------------------------- record and compare

def answer(exchange: dict[str, Any], url: str) -> dict[str, Any]:
    """The response record the live app (at `url`) or the in-process gateway gives now for a
    recorded exchange's request."""
    if exchange["source"] == "gateway":
        return response_record(send_in_process(exchange["gateway"], exchange["request"]))
    request = exchange["request"]
    with httpx.Client(base_url=url, timeout=120) as client:
        return response_record(client.request(request["method"], request["path"],
                                              **request_kwargs(request)))


def record(url: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The live app's OpenAPI document and every case's exchange, as they are now."""
    document = httpx.get(f"{url}/openapi.json", timeout=60).json()
    exchanges = []
    for case in CASES:
        exchange: dict[str, Any] = {"name": case.name,
                                    "source": "live" if case.gateway is None else "gateway"}
        if case.gateway is not None:
            exchange["gateway"] = case.gateway
        if case.call is not None:
            exchange["call"] = case.call
        exchange["request"] = request_of(case)
        exchange["volatile"] = list(case.volatile)
        exchange["response"] = response = answer(exchange, url)
        if "$" in case.volatile and isinstance(response["body"], str):
            response["body"] = response["body"].split("\n", 1)[0]  # its type is what is compared
        exchanges.append(exchange)
    return document, exchanges


def recording() -> bool:
    """Whether this run rewrites the snapshot (``DIALSCORE_RECORD_CONTRACT`` set to anything but
    0); RuntimeError when that is asked in CI (``CI`` set)."""
    on = os.environ.get(RECORD_VARIABLE, "") not in ("", "0")
    if on and os.environ.get("CI"):
        raise RuntimeError(f"{RECORD_VARIABLE} is set in CI: the contract snapshot is regenerated "
                           "by a person, reviewed and committed, never in CI")
    return on
