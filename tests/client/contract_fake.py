"""The fake dialscore service of the client's tests, built from the server's published contract
alone: the live app's OpenAPI document and recorded exchanges in ``tests/contract/``
(:mod:`contract_snapshot`). It needs the client, httpx and jsonschema; never the server.

    fake = ContractFake()                                    # models: FAKE_CARDS
    client = DialscoreClient("http://fake", transport=fake.transport())   # or an async client
    fake.nll_items                                           # [(model, item JSON), ...] scored
    fake.bodies["/v1/rerank"]                                # every JSON body POSTed there

How a request is answered, in this order:

1. **Replayed.** A POST whose path and JSON body equal those of an exchange recorded from the live
   app (``source: live``) gets the recorded response: its status, recorded headers and body,
   whatever the fake's models (its name is appended to :attr:`ContractFake.replayed`). GET
   requests carry nothing to match and are always computed.
2. **Checked as the gateway checks.** A path the document does not define gets the recorded
   ``not_found`` 404; a method it does not define for the path raises :class:`ContractViolation`.
   Then, as the gateway orders them: more bytes than ``max_body_bytes`` (a 413 naming ``body``); a
   body that is not JSON (422, no param); a body that does not validate against the route's
   request schema in the document (JSON Schema 2020-12, the bounds the limits put into the schema
   left out): a 422 ``invalid_request`` whose param is the offending field's path
   (``items[3].target``; for a missing or unknown field, that field's path); then the limits:
   every list or string the schema marks with ``x-limit`` may hold at most the fake's value of
   that limit (the document's ``info.x-limits``, with the fake's `limits` over them), checked in
   document order, a 413 ``payload_too_large`` naming the field. The cost limits
   (``max_request_pairs``, ``max_request_tokens``, ``max_item_tokens``, ``max_id_chars``) are not
   computed, nor the unique turn ids; the other rules of the routes' descriptions the fake does
   apply are listed below.
3. **Computed**, with deterministic fake numbers:

   * ``GET /v1/models``: the cards, in both shapes; ``GET /healthz``; ``GET /readyz`` (every
     model ``ok``); ``GET /openapi.json``: the document, its ``info.x-limits`` the fake's limits.
   * ``POST /v1/nll``: each item gives either ``source`` or ``context`` (with optional
     ``knowledge``), else 422 naming ``items[i]``; a model that is not a served dialogue model is
     a 404 ``unknown_model`` naming ``model``. Each item's ``nll`` is ``scorer(model, item)``, the
     item as the client sent it (null fields left out); one token per word of the target plus
     eos. After `fail_after` scored requests every further one is a 503 ``overloaded``.
   * ``POST /v1/nll/dialogues``: the scored turns (every turn, those of ``speaker`` by
     ``speakers``, or the distinct ``score_turns``; the refusals the route's descriptions state,
     naming the same fields; more scored turns than ``max_items``: 413 naming ``dialogues``)
     become the /v1/nll items ``{"context": turns[:k], "knowledge"?, "target": turns[k]}``,
     answered as above (one scored request); per dialogue, the token-weighted mean NLL.
   * ``POST /v1/contradiction``: the classifier named (default: the first served one, else 404
     naming ``model``) through the pairing the route documents: structured mode pairs the last
     turn with each earlier turn of the same speaker (same JSON type and value) and takes the
     largest ``classifier(premise, hypothesis)``, 0.0 with no pair; evidence is those turns (by
     id, default the position) whose probability exceeds ``evidence_threshold`` (default
     ``threshold``), at most ``max_evidence``; unstructured mode makes one pair, the earlier turns
     as ``speaker: text`` lines. Defaults come from the request schema.
   * ``POST /v1/rerank``: each candidate is the last turn, said by the candidate speaker (the
     request's, else the most recent context speaker other than the last one's, else a fresh
     one), of context + candidate, detected as above; ``score = -(w_c * p + w_n * nll)`` with
     the documented default weights (1.0; 0.1 with ``nll_model``, else 0), ``nll`` being
     ``scorer(nll_model, {"context": context texts, "target": candidate})``; best first, ties in
     input order, cut to ``top_n``. Nothing to contradict and no ``nll_model``: 422 naming
     ``speaker``; a positive ``weights.nll`` without ``nll_model``: 422 naming ``weights.nll``.

   The other routes (completions, the TEI and Cohere reranks, metrics) answer only what was
   recorded: anything else there raises :class:`ContractViolation`.
4. **Checked on the way out.** Every response (replayed or computed, success or error) must
   validate against the document's schema for its route and status, and its status must be one
   the document lists for the route; otherwise :class:`ContractViolation` is raised from the
   transport, which fails the test. An error's headers are those recorded for its type
   (``x-error-type``; ``Retry-After`` for ``overloaded`` and ``model_error``; ``x-work-dropped``
   for ``timeout``).

What the recorded exchanges promise about the live app, and ``tests/service/test_contract_snapshot.py``
checks: the status, the headers content-type, x-error-type, retry-after and x-work-dropped, and
the body, equal except at each exchange's ``volatile`` paths, where only the JSON type is
compared (the stand-ins' floats and what follows from them: verdicts, evidence, orders by score;
response ids, timestamps, checkpoint paths and revisions).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import httpx
import jsonschema
from jsonschema.exceptions import best_match

import contract_snapshot
from dialscore.model_card import ModelCard
from fake_models import (
    FAKE_CARDS, PairClassifier, RequestLog, Scorer, hash_nll, negation_probability,
)

__all__ = ["DEFAULT_LIMITS", "FAKE_CARDS", "ContractFake", "ContractViolation", "contract", "error",
           "hash_nll", "negation_probability", "recorded_cards"]

#: The documented default weights of POST /v1/rerank's score (RerankWeightsIn's descriptions).
CONTRADICTION_WEIGHT, NLL_WEIGHT = 1.0, 0.1
#: The name of a candidate speaker the context does not name (then suffixed _2, _3... if taken).
FRESH_SPEAKER = "candidate"
#: What GET /v1/models says the gateway replica started at (Unix seconds).
STARTED = 1_700_000_000


class ContractViolation(AssertionError):
    """A request the document does not define, or a response of the fake it does not allow."""


def _field_path(parts: Sequence[str | int]) -> str:
    """``["items", 3, "target"]`` as ``items[3].target``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _without_limit_bounds(node: Any) -> Any:
    """A copy of a schema without the maxItems/maxLength that the limits put beside each
    ``x-limit`` mark (the gateway answers those with 413, not 422)."""
    node = copy.deepcopy(node)
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list):
            stack.extend(n)
        elif isinstance(n, dict):
            if isinstance(n.get("x-limit"), dict):
                for branch in [n, *n.get("anyOf", [])]:
                    branch.pop("maxItems", None)
                    branch.pop("maxLength", None)
            stack.extend(n.values())
    return node


class Contract:
    """The snapshot, read for answering: routes, schemas, error shapes, replayable exchanges."""

    def __init__(self, document: dict[str, Any], exchanges: list[dict[str, Any]]):
        self.document = document
        self.exchanges = exchanges
        self.limits: dict[str, int] = dict(document["info"]["x-limits"])
        self._components = document["components"]
        self._unbounded = _without_limit_bounds(document["components"])
        self._validators: dict[tuple[int, bool], jsonschema.Draft202012Validator] = {}
        #: Each error type's status and recorded headers.
        self.errors: dict[str, tuple[int, dict[str, str]]] = {}
        for e in exchanges:
            body = e["response"]["body"]
            if isinstance(body, dict) and isinstance(body.get("error"), dict):
                self.errors.setdefault(body["error"]["type"],
                                       (e["response"]["status"], e["response"]["headers"]))
        #: The live exchanges a request can match: POSTs with a JSON body.
        self.replays = {(e["request"]["method"], e["request"]["path"], _canonical(e["request"]["body"])): e
                        for e in exchanges if e["source"] == "live" and e["request"]["method"] == "POST"
                        and e["request"]["body"] is not None and "content" not in e["request"]}

    def operation(self, method: str, path: str) -> dict[str, Any] | None:
        return self.document["paths"].get(path, {}).get(method.lower())

    def validator(self, node: dict[str, Any], bounded: bool = True) -> jsonschema.Draft202012Validator:
        """A validator of `node`, a schema node of the document, its ``$ref``s resolved in the
        document's components, those without the limits' bounds when not `bounded`. Cached per
        node: the document lives as long as the process."""
        key = (id(node), bounded)
        if key not in self._validators:
            components = self._components if bounded else self._unbounded
            self._validators[key] = jsonschema.Draft202012Validator({**node, "components": components})
        return self._validators[key]

    def schema(self, node: dict[str, Any], bounded: bool = True) -> dict[str, Any]:
        """`node` with its ``$ref`` followed (in the components with or without the bounds)."""
        schemas = (self._components if bounded else self._unbounded)["schemas"]
        while "$ref" in node:
            node = schemas[node["$ref"].rsplit("/", 1)[1]]
        return node

    def error(self, type: str, message: str, param: str | None = None) -> httpx.Response:
        """The error response of `type` as recorded: its status and headers."""
        status, headers = self.errors[type]
        return httpx.Response(status, headers=headers,
                              json={"error": {"type": type, "message": message, "param": param}})


def _canonical(body: Any) -> str:
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@lru_cache(maxsize=1)
def contract() -> Contract:
    """The committed snapshot (read once)."""
    return Contract(*contract_snapshot.read())


#: The limits the snapshot's deployment publishes (the service's defaults).
DEFAULT_LIMITS: dict[str, int] = dict(contract().limits)


def error(status: int, type: str, message: str, param: str | None = None,
          headers: dict[str, str] | None = None) -> httpx.Response:
    """An error response in the server's recorded shape, for MockTransport handlers: its body,
    and the headers recorded with every error of `type` (``x-error-type``; ``x-work-dropped`` for
    ``timeout``) but ``Retry-After``, whose value depends on the cause: pass it in `headers`.
    `status` is checked against the recorded status of `type`."""
    recorded_status, recorded = contract().errors[type]
    assert recorded_status == status, f"{type} is {recorded_status}, not {status}"
    sent = {k: v for k, v in recorded.items() if k != "retry-after"}
    return httpx.Response(status, headers={**sent, **(headers or {})},
                          json={"error": {"type": type, "message": message, "param": param}})


def recorded_cards() -> list[ModelCard]:
    """The cards of the live app the exchanges were recorded from (its GET /v1/models)."""
    listing = next(e for e in contract().exchanges if e["name"] == "models")
    return [ModelCard.model_validate(m) for m in listing["response"]["body"]["models"]]


#: What a body that is not JSON parses to.
NOT_JSON = object()


class _Refusal(Exception):
    """An error answer the fake computed (raised from the computations, answered as recorded)."""

    def __init__(self, type: str, message: str, param: str | None = None):
        super().__init__(message)
        self.type, self.message, self.param = type, message, param


def _same_speaker(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


class ContractFake(RequestLog):
    """The service as its contract says (see the module docstring); what it answered is in its
    :class:`~fake_models.RequestLog` attributes and :attr:`replayed`.

    Args:
        cards: the served models (classifiers have family ``classifier``).
        scorer: the fake NLL of an item, ``scorer(model, item JSON)``.
        classifier: the contradiction probability of a (premise, hypothesis) pair.
        limits: the deployment's limits, over the document's defaults (``{"max_items": 5}``).
        fail_after: answer 503 ``overloaded`` to every POST /v1/nll after that many were scored
            (a service going down halfway).
        replay: answer recorded requests with their recorded responses (step 1).
    """

    def __init__(self, cards: Sequence[ModelCard] = FAKE_CARDS, scorer: Scorer = hash_nll,
                 limits: dict[str, int] | None = None, fail_after: int | None = None,
                 classifier: PairClassifier = negation_probability, replay: bool = True):
        super().__init__(fail_after)
        self.contract = contract()
        unknown = set(limits or {}) - set(self.contract.limits)
        if unknown:
            raise ValueError(f"limits: unknown limit(s) {sorted(unknown)}; the document publishes "
                             f"{sorted(self.contract.limits)}")
        self.cards = {c.name: c for c in cards}
        self.scorer, self.classifier = scorer, classifier
        self.limits = {**self.contract.limits, **(limits or {})}
        self.replay = replay
        self.replayed: list[str] = []  # the recorded exchanges answered, by name

    # -- transport ------------------------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        """A transport for a sync or an async client (``transport=`` of either)."""
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer one request (see the module docstring)."""
        path, method, content = request.url.path, request.method, request.read()
        try:
            body = json.loads(content) if content else None
        except ValueError:
            body = NOT_JSON
        with self.lock:
            self.paths.append(path)
            if method == "POST" and body is not NOT_JSON:
                self.bodies.setdefault(path, []).append(body)
        recorded = None
        if self.replay and body is not NOT_JSON:
            recorded = self.contract.replays.get((method, path, _canonical(body)))
        if recorded is not None:
            with self.lock:
                self.replayed.append(recorded["name"])
            r = recorded["response"]
            response = httpx.Response(r["status"], headers=r["headers"], json=r["body"])
        else:
            response = self._answer(method, path, len(content), body)
        self._check_out(method, path, response)
        return response

    def _answer(self, method: str, path: str, size: int, body: Any) -> httpx.Response:
        if path == "/openapi.json" and method == "GET":
            document = copy.deepcopy(self.contract.document)
            document["info"]["x-limits"] = dict(self.limits)
            return httpx.Response(200, json=document)
        if path not in self.contract.document["paths"]:
            return self.contract.error("not_found", "no such route")
        operation = self.contract.operation(method, path)
        if operation is None:
            raise ContractViolation(f"{method} {path}: the document defines no such operation")
        try:
            if "requestBody" in operation:
                self._check_request(operation, size, body)
            return httpx.Response(200, json=self._compute(method, path, body))
        except _Refusal as refusal:
            return self.contract.error(refusal.type, refusal.message, refusal.param)

    def _check_request(self, operation: dict[str, Any], size: int, body: Any) -> None:
        """Raise the refusal the gateway gives a body: bytes, JSON, schema, then limits."""
        if size > self.limits["max_body_bytes"]:
            raise _Refusal("payload_too_large", f"request body exceeds {self.limits['max_body_bytes']} bytes",
                           "body")
        if body is NOT_JSON:
            raise _Refusal("invalid_request", "request body is not valid JSON")
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        problem = best_match(self.contract.validator(schema, bounded=False).iter_errors(body))
        if problem is not None:
            parts = list(problem.absolute_path)
            if problem.validator == "required":
                parts.append(next(f for f in problem.validator_value if f not in problem.instance))
            elif problem.validator == "additionalProperties":
                allowed = set(problem.schema.get("properties", {}))
                parts.append(sorted(set(problem.instance) - allowed)[0])
            param = _field_path(parts) or None
            raise _Refusal("invalid_request", f"{param or 'body'}: {problem.message}", param)
        self._check_limits(schema, body, [])

    def _check_limits(self, node: dict[str, Any], value: Any, parts: list[str | int]) -> None:
        """Raise the 413 for the first list or string over the limit its ``x-limit`` names (the
        schema walked along the value: properties, array items, the anyOf branch it matches)."""
        node = self.contract.schema(node, bounded=False)
        mark = node.get("x-limit")
        if isinstance(mark, dict) and isinstance(value, (list, str)):
            limit = self.limits[mark["name"]]
            if len(value) > limit:
                param = _field_path(parts)
                raise _Refusal("payload_too_large", f"{param}: {len(value)} elements; the limit is "
                               f"{limit} ({mark['name']})", param)
        for branch in node.get("anyOf", []):
            if self.contract.validator(branch, bounded=False).is_valid(value):
                self._check_limits(branch, value, parts)
                break
        if isinstance(value, dict):
            for key, item in value.items():
                if key in node.get("properties", {}):
                    self._check_limits(node["properties"][key], item, [*parts, key])
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for i, item in enumerate(value):
                self._check_limits(node["items"], item, [*parts, i])

    def _check_out(self, method: str, path: str, response: httpx.Response) -> None:
        """Raise ContractViolation unless the document allows `response` for the route."""
        operation = self.contract.operation(method, path)
        if operation is None:
            return  # /openapi.json, or an unknown route's recorded not_found
        documented = operation.get("responses", {}).get(str(response.status_code))
        if documented is None:
            raise ContractViolation(f"{method} {path}: the document lists no "
                                    f"{response.status_code} response")
        schema = documented.get("content", {}).get("application/json", {}).get("schema")
        if schema is None:
            return
        problem = best_match(self.contract.validator(schema).iter_errors(response.json()))
        if problem is not None:
            raise ContractViolation(f"{method} {path} {response.status_code}: the fake's response "
                                    f"does not validate at {_field_path(list(problem.absolute_path)) or '$'}: "
                                    f"{problem.message}")

    # -- computed answers ------------------------------------------------------------------------

    def _compute(self, method: str, path: str, body: Any) -> Any:
        if (method, path) == ("GET", "/healthz"):
            return {"status": "ok"}
        if (method, path) == ("GET", "/readyz"):
            return {"ready": True, "deployments": {name: "ok" for name in self.cards}}
        if (method, path) == ("GET", "/v1/models"):
            cards = list(self.cards.values())
            return {"object": "list",
                    "data": [{"id": c.name, "object": "model", "created": STARTED,
                              "owned_by": "dialscore", "root": c.source, "family": c.family,
                              "max_model_len": c.max_length}
                             for c in cards],
                    "models": [c.model_dump(mode="json") for c in cards]}
        if (method, path) == ("POST", "/v1/nll"):
            return self._nll(body)
        if (method, path) == ("POST", "/v1/nll/dialogues"):
            return self._nll_dialogues(body)
        if (method, path) == ("POST", "/v1/contradiction"):
            return self._contradiction(body)
        if (method, path) == ("POST", "/v1/rerank"):
            return self._rerank(body)
        raise ContractViolation(f"{method} {path}: the fake answers this route only with what was "
                                "recorded, and this request was not")

    def _defaults(self, ref: str, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with the request schema's defaults for the fields it leaves out (null where
        the schema states none)."""
        properties = self.contract.schema({"$ref": ref})["properties"]
        return {**{k: p.get("default") for k, p in properties.items()}, **body}

    def _model(self, name: str | None, classifier: bool, param: str) -> ModelCard:
        """The served model `name` of the kind asked for (None: the first classifier)."""
        kind = [c for c in self.cards.values() if (c.family == "classifier") == classifier]
        if name is None and classifier and kind:
            return kind[0]
        if name not in {c.name for c in kind}:
            what = "classifier" if classifier else "dialogue (NLL) model"
            raise _Refusal("unknown_model", f"unknown {what} {name!r}; served: "
                           f"{', '.join(sorted(c.name for c in kind)) or 'none'}", param)
        return self.cards[name]

    def _nll(self, body: dict[str, Any]) -> dict[str, Any]:
        for i, item in enumerate(body["items"]):
            source, context = item.get("source"), item.get("context")
            if (source is not None and (context is not None or item.get("knowledge") is not None)
                    or source is None and context is None):
                raise _Refusal("invalid_request", f"items[{i}]: give either `source` or `context` "
                               "(with optional `knowledge`)", f"items[{i}]")
        card = self._model(body["model"], False, "model")
        items = [{k: v for k, v in item.items() if v is not None} for item in body["items"]]
        if not self.scored(card.name, items):
            raise _Refusal("overloaded", "going down")
        tokens = body.get("return_tokens", False)
        results, source_tokens = [], 0
        for item in items:
            nll = self.scorer(card.name, item)
            words = [*item["target"].split(), "<eos>"]
            source_words = " ".join([*item.get("context", []), item.get("knowledge") or "",
                                     item.get("source") or ""]).split()
            source_tokens += max(1, len(source_words))
            results.append({"nll": nll, "num_tokens": len(words), "truncated": False,
                            "token_nlls": [nll] * len(words) if tokens else None,
                            "tokens": words if tokens else None})
        return {"model": card.name, "source": card.source or "", "revision": card.revision,
                "stand_in": bool(card.stand_in),
                "append_eos": card.format.append_eos if card.format else True,
                "results": results,
                "usage": {"source_tokens": source_tokens,
                          "target_tokens": sum(r["num_tokens"] for r in results)}}

    @staticmethod
    def _chosen(dialogue: dict[str, Any], i: int) -> list[int]:
        """The scored turns of dialogue `i`, by the rules of the route's schema: every turn, the
        turns of `speaker` (with `speakers`, one per turn) or the distinct `score_turns`;
        refusals name the field as the route does."""
        turns, speakers = dialogue["turns"], dialogue.get("speakers")
        speaker, indices = dialogue.get("speaker"), dialogue.get("score_turns")
        where = f"dialogues[{i}]"
        if speakers is not None and len(speakers) != len(turns):
            raise _Refusal("invalid_request", "one speaker per turn", f"{where}.speakers")
        if speaker is not None and indices is not None:
            raise _Refusal("invalid_request", "speaker or score_turns", f"{where}.score_turns")
        if speaker is not None:
            if speakers is None:
                raise _Refusal("invalid_request", "speaker needs speakers", f"{where}.speaker")
            chosen = [k for k, s in enumerate(speakers) if _same_speaker(s, speaker)]
            if not chosen:
                raise _Refusal("invalid_request", "no turn of that speaker", f"{where}.speaker")
        elif indices is not None:
            for j, k in enumerate(indices):
                if not 0 <= k < len(turns) or k in indices[:j]:
                    raise _Refusal("invalid_request", "bad turn index",
                                   f"{where}.score_turns[{j}]")
            chosen = sorted(indices)
        else:
            chosen = list(range(len(turns)))
        for k in chosen:
            if not turns[k]:
                raise _Refusal("invalid_request", "empty scored turn", f"{where}.turns[{k}]")
        return chosen

    def _nll_dialogues(self, body: dict[str, Any]) -> dict[str, Any]:
        chosen = [self._chosen(d, i) for i, d in enumerate(body["dialogues"])]
        if sum(len(c) for c in chosen) > self.limits["max_items"]:
            raise _Refusal("payload_too_large", "too many scored turns", "dialogues")
        items = [{"context": d["turns"][:k], "target": d["turns"][k],
                  **({"knowledge": d["knowledge"]} if d.get("knowledge") is not None else {})}
                 for d, c in zip(body["dialogues"], chosen) for k in c]
        scored = self._nll({"model": body["model"], "items": items,
                            "return_tokens": body.get("return_tokens", False)})
        results, pos = [], 0
        for c in chosen:
            turns = [{"turn": k, **scored["results"][pos + j]} for j, k in enumerate(c)]
            pos += len(c)
            n = sum(t["num_tokens"] for t in turns)
            results.append({"nll": sum(t["nll"] * t["num_tokens"] for t in turns) / n,
                            "num_tokens": n, "turns": turns})
        return {**scored, "results": results}

    def _detect(self, turns: list[dict[str, Any]], mode: str, threshold: float,
                evidence_threshold: float) -> dict[str, Any]:
        """One dialogue's result (see the module docstring)."""
        *earlier, last = turns
        if mode == "unstructured":
            pairs = [(None, "\n".join(f"{t['speaker']}: {t['text']}" for t in earlier))] if earlier else []
        else:
            pairs = [(j if t.get("id") is None else t["id"], t["text"])
                     for j, t in enumerate(earlier) if _same_speaker(t["speaker"], last["speaker"])]
        probs = [self.classifier(premise, last["text"]) for _, premise in pairs]
        probability = max(probs, default=0.0)
        evidence = [] if mode == "unstructured" else [
            {"turn": turn, "probability": p} for (turn, _), p in zip(pairs, probs)
            if p > evidence_threshold]
        if len(evidence) > self.limits["max_evidence"]:
            keep = sorted(range(len(evidence)), key=lambda k: -evidence[k]["probability"])
            evidence = [evidence[k] for k in sorted(keep[:self.limits["max_evidence"]])]
        return {"is_contradiction": probability > threshold, "probability": probability,
                "evidence": evidence, "num_pairs": len(pairs)}

    def _contradiction(self, body: dict[str, Any]) -> dict[str, Any]:
        body = self._defaults("#/components/schemas/ContradictionRequest", body)
        card = self._model(body["model"], True, "model")
        ev = body["threshold"] if body["evidence_threshold"] is None else body["evidence_threshold"]
        return {"model": card.name, "source": card.source, "revision": card.revision,
                "stand_in": bool(card.stand_in), "mode": body["mode"],
                "threshold": body["threshold"], "evidence_threshold": ev,
                "results": [self._detect(d["turns"], body["mode"], body["threshold"], ev)
                            for d in body["dialogues"]]}

    @staticmethod
    def _candidate_speaker(context: list[dict[str, Any]]) -> Any:
        if context:
            last = context[-1]["speaker"]
            for turn in reversed(context):
                if not _same_speaker(turn["speaker"], last):
                    return turn["speaker"]
        taken, name, k = {str(t["speaker"]) for t in context}, FRESH_SPEAKER, 1
        while name in taken:
            k += 1
            name = f"{FRESH_SPEAKER}_{k}"
        return name

    def _rerank(self, body: dict[str, Any]) -> dict[str, Any]:
        body = self._defaults("#/components/schemas/RerankRequest", body)
        card = self._model(body["model"], True, "model")
        nll_card = self._model(body["nll_model"], False, "nll_model") if body["nll_model"] else None
        context, mode = body["context"], body["mode"]
        who = self._candidate_speaker(context) if body["speaker"] is None else body["speaker"]
        something = (bool(context) if mode == "unstructured"
                     else any(_same_speaker(t["speaker"], who) for t in context))
        if not something and nll_card is None:
            raise _Refusal("invalid_request", "there is nothing a candidate could contradict, so "
                           "every candidate would tie", "speaker")
        weights = body["weights"] or {}
        w_nll = weights.get("nll")
        if w_nll and nll_card is None:
            raise _Refusal("invalid_request", f"weights.nll is {w_nll} but no NLL model was chosen",
                           "weights.nll")
        w_c = CONTRADICTION_WEIGHT if weights.get("contradiction") is None else weights["contradiction"]
        w_n = (NLL_WEIGHT if nll_card else 0.0) if w_nll is None else w_nll
        ev = body["threshold"] if body["evidence_threshold"] is None else body["evidence_threshold"]
        texts = [t["text"] for t in context]
        results = []
        for k, candidate in enumerate(body["candidates"]):
            found = self._detect([*context, {"speaker": who, "text": candidate}], mode,
                                 body["threshold"], ev)
            nll = (self.scorer(nll_card.name, {"context": texts, "target": candidate})
                   if nll_card else None)
            results.append({"index": k, "score": -(w_c * found["probability"] + w_n * (nll or 0.0)),
                            "contradiction_probability": found["probability"],
                            "is_contradiction": found["is_contradiction"],
                            "evidence": found["evidence"], "nll": nll, "text": None})
        results.sort(key=lambda r: -r["score"])  # stable: ties keep the input order
        return {"id": "rerank-" + hashlib.sha256(_canonical(body).encode()).hexdigest()[:32],
                "usage": {"candidates": len(body["candidates"]), "context_turns": len(context)},
                "model": card.name, "revision": card.revision, "stand_in": bool(card.stand_in),
                "nll_model": nll_card.name if nll_card else None,
                "nll_revision": nll_card.revision if nll_card else None,
                "nll_stand_in": bool(nll_card.stand_in) if nll_card else None,
                "speaker": who, "mode": mode,
                "weights": {"contradiction": float(w_c), "nll": float(w_n)},
                "results": results[:body["top_n"]] if body["top_n"] else results}
