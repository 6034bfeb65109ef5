"""Request limits: every field of `Limits` is enforced before tokenization (a 413 naming the field),
documented in the OpenAPI schema with this deployment's values, and configurable per deployment.

Over-limit requests name an unknown model on purpose where they can: the 413 (not the 404) shows
the limit was checked in the gateway before the request could reach any model; the same request
at the limit gets the 404, so the limit is not one off.
"""

from __future__ import annotations

import asyncio

import httpx

from ray_metrics import replica_metrics, sample_sum
from serve_apps import wait_until
import pytest

from fake_api import FakeAPI
from dialscore_server.contract.limits import Limits

pytestmark = pytest.mark.serve

L = Limits()  # the served app uses the defaults
T = "x" * L.max_text_chars  # a text at the limit
TURN = {"speaker": 1, "text": "hi"}
PAIRS_SIDE = 128  # 128 x 128 = the default max_request_pairs
assert PAIRS_SIDE * PAIRS_SIDE == L.max_request_pairs
#: 256 turns, speakers 1, 2, 1, 2...: the candidate speaker (1) has 128 earlier turns.
ALTERNATING = [{"speaker": 1 + j % 2, "text": "hi"} for j in range(2 * PAIRS_SIDE)]
LONG = "x" * (L.max_item_tokens + 10)  # an item counted as max_item_tokens
TOKEN_ITEMS = L.max_request_tokens // L.max_item_tokens


def nll(items, model="nope"):
    return {"model": model, "items": items}


def item(**kw):
    return {"context": [], "target": "t", **kw}


def dialogues(ds, model="nope"):
    return {"model": model, "dialogues": ds}


def rerank(context, candidates, model="nope"):
    return {"model": model, "context": context, "candidates": candidates}


def tei(query, texts, model="nope"):
    return {"model": model, "query": query, "texts": texts}


def cohere(query, documents, model="nope"):
    return {"model": model, "query": query, "documents": documents}


def completion(prompt, model="nope"):
    return {"model": model, "prompt": prompt, "echo": True, "max_tokens": 0}


# (id, path, body over the limit, param named by the 413, the same body at the limit)
CASES = [
    ("nll items", "/v1/nll", nll([item()] * (L.max_items + 1)), "items", nll([item()] * L.max_items)),
    ("nll turns", "/v1/nll", nll([item(), item(context=["t"] * (L.max_turns + 1))]), "items[1].context",
     nll([item(), item(context=["t"] * L.max_turns)])),
    ("nll target chars", "/v1/nll", nll([item(target=T + "x")]), "items[0].target", nll([item(target=T)])),
    ("nll turn chars", "/v1/nll", nll([item(context=["a", T + "x"])]), "items[0].context[1]",
     nll([item(context=["a", T])])),
    ("nll knowledge chars", "/v1/nll", nll([item(knowledge=T + "x")]), "items[0].knowledge",
     nll([item(knowledge=T)])),
    ("nll source chars", "/v1/nll", nll([{"source": T + "x", "target": "t"}]), "items[0].source",
     nll([{"source": T, "target": "t"}])),
    ("contradiction dialogues", "/v1/contradiction", dialogues([{"turns": [TURN]}] * (L.max_dialogues + 1)),
     "dialogues", dialogues([{"turns": [TURN]}] * L.max_dialogues)),
    ("contradiction turns", "/v1/contradiction", dialogues([{"turns": [TURN] * (L.max_turns + 1)}]),
     "dialogues[0].turns", dialogues([{"turns": [TURN] * L.max_turns}])),
    ("contradiction text chars", "/v1/contradiction",
     dialogues([{"turns": [TURN]}, {"turns": [TURN, {"speaker": 2, "text": T + "x"}]}]),
     "dialogues[1].turns[1].text", dialogues([{"turns": [TURN]}, {"turns": [TURN, {"speaker": 2, "text": T}]}])),
    ("rerank candidates", "/v1/rerank", rerank([], ["c"] * (L.max_candidates + 1)), "candidates",
     rerank([], ["c"] * L.max_candidates)),
    ("rerank turns", "/v1/rerank", rerank([TURN] * (L.max_turns + 1), ["c"]), "context",
     rerank([TURN] * L.max_turns, ["c"])),
    ("rerank candidate chars", "/v1/rerank", rerank([], ["a", "b", T + "x"]), "candidates[2]",
     rerank([], ["a", "b", T])),
    ("rerank turn chars", "/v1/rerank", rerank([{"speaker": 1, "text": T + "x"}], ["c"]), "context[0].text",
     rerank([{"speaker": 1, "text": T}], ["c"])),
    ("tei texts", "/rerank", tei("q", ["c"] * (L.max_candidates + 1)), "texts", tei("q", ["c"] * L.max_candidates)),
    ("tei query lines", "/rerank", tei("\n".join(["q"] * (L.max_turns + 1)), ["c"]), "query",
     tei("\n".join(["q"] * L.max_turns), ["c"])),
    ("tei query line chars", "/rerank", tei("hi\n" + T + "x", ["c"]), "query", tei("hi\n" + T, ["c"])),
    ("tei text chars", "/rerank", tei("q", [T + "x"]), "texts[0]", tei("q", [T])),
    ("completions prompts", "/v1/completions", completion(["p"] * (L.max_items + 1)), "prompt",
     completion(["p"] * L.max_items)),
    ("completions prompt chars", "/v1/completions", completion(["p", T + "x"]), "prompt[1]",
     completion(["p", T])),
    ("completions prompt ids", "/v1/completions", completion([[5] * (L.max_item_tokens + 1)]),
     "prompt[0]", completion([[5] * L.max_item_tokens])),
    # Cost: work the request makes, counted from speakers and bytes before anything is queued.
    ("completions tokens", "/v1/completions", completion([[5] * L.max_item_tokens] * (TOKEN_ITEMS + 1)),
     "prompt", completion([[5] * L.max_item_tokens] * TOKEN_ITEMS)),
    ("contradiction pairs", "/v1/contradiction",
     dialogues([{"turns": [TURN] * (PAIRS_SIDE + 1)}] * (PAIRS_SIDE + 1)), "dialogues",
     dialogues([{"turns": [TURN] * (PAIRS_SIDE + 1)}] * PAIRS_SIDE)),
    ("rerank pairs", "/v1/rerank", rerank(ALTERNATING, ["c"] * (PAIRS_SIDE + 1)), "candidates",
     rerank(ALTERNATING, ["c"] * PAIRS_SIDE)),
    ("tei pairs", "/rerank", tei("\n".join(["q"] * 2 * PAIRS_SIDE), ["c"] * (PAIRS_SIDE + 1)), "texts",
     tei("\n".join(["q"] * 2 * PAIRS_SIDE), ["c"] * PAIRS_SIDE)),
    ("cohere documents", "/v2/rerank", cohere("a\nb", ["c"] * (L.max_candidates + 1)), "documents",
     cohere("a\nb", ["c"] * L.max_candidates)),
    ("cohere document chars", "/v2/rerank", cohere("a\nb", ["c", T + "x"]), "documents[1]",
     cohere("a\nb", ["c", T])),
    ("cohere pairs", "/v2/rerank", cohere("\n".join(["q"] * 2 * PAIRS_SIDE), ["c"] * (PAIRS_SIDE + 1)),
     "documents", cohere("\n".join(["q"] * 2 * PAIRS_SIDE), ["c"] * PAIRS_SIDE)),
    ("nll tokens", "/v1/nll", nll([item(target=LONG)] * (TOKEN_ITEMS + 1)), "items",
     nll([item(target=LONG)] * TOKEN_ITEMS)),
    ("rerank id chars", "/v1/rerank", rerank([{"id": "i" * (L.max_id_chars + 1), **TURN}], ["c"]),
     "context[0].id", rerank([{"id": "i" * L.max_id_chars, **TURN}], ["c"])),
    ("contradiction speaker chars", "/v1/contradiction",
     dialogues([{"turns": [{"speaker": "s" * (L.max_id_chars + 1), "text": "t"}]}]),
     "dialogues[0].turns[0].speaker", dialogues([{"turns": [{"speaker": "s" * L.max_id_chars, "text": "t"}]}])),
]


@pytest.mark.parametrize("name,path,over,param,at", CASES, ids=[c[0] for c in CASES])
def test_each_limit_is_a_413_naming_the_field_before_any_model(served, name, path, over, param, at):
    with httpx.Client(base_url=served.url, timeout=60) as client:
        r = client.post(path, json=over)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["type"] == "payload_too_large"
        assert r.json()["error"]["param"] == param
        assert r.headers["x-error-type"] == "payload_too_large"
        at_limit = client.post(path, json=at)
        assert at_limit.status_code == 404, at_limit.text  # past the limits, refused by model name
        assert at_limit.json()["error"]["param"] == "model"


def test_limits_are_checked_before_tokenization_for_a_served_model(served):
    """A served model's token counters do not move for an over-limit request: after it, a valid
    request moves them by exactly its own tokens."""
    def tokens() -> float:
        return sample_sum(replica_metrics(), "ray_dialscore_tokens_scored_total",
                          application="dialscore", model="dialogpt-medium")

    before = tokens()
    r = httpx.post(f"{served.url}/v1/nll", json=nll([item(target=T + "x")], model="dialogpt-medium"),
                   timeout=60)
    assert r.status_code == 413 and r.json()["error"]["param"] == "items[0].target"
    ok = httpx.post(f"{served.url}/v1/nll", json=nll([item(target="hello")], model="dialogpt-medium"),
                    timeout=60)
    assert ok.status_code == 200, ok.text[:300]
    usage = ok.json()["usage"]
    valid = usage["source_tokens"] + usage["target_tokens"]
    wait_until(lambda: tokens() - before >= valid, "the valid request's tokens counted")
    assert tokens() - before == valid


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("path", ["/v1/nll", "/v1/contradiction", "/v1/rerank", "/rerank", "/v2/rerank"])
def test_body_bytes_limit_on_every_route(served, path, chunked):
    """Counted on the bytes received: a chunked body (no Content-Length) is cut off too."""
    raw = b'{"model": "' + b"x" * (L.max_body_bytes + 10) + b'"}'
    content = (raw[i:i + (1 << 20)] for i in range(0, len(raw), 1 << 20)) if chunked else raw
    r = httpx.post(f"{served.url}{path}", content=content, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 413, r.text[:300]
    assert r.json()["error"] == {"type": "payload_too_large", "param": "body",
                                 "message": f"request body exceeds {L.max_body_bytes} bytes"}


# ------------------------------------------------------------------------------ documentation

def _prop(spec, schema, prop):
    node = spec["components"]["schemas"][schema]["properties"][prop]
    return next((b for b in node.get("anyOf", []) if b.get("type") == "array"), node)


def test_openapi_documents_every_limit_with_this_deployments_values(served):
    spec = httpx.get(f"{served.url}/openapi.json", timeout=30).json()
    assert spec["info"]["x-limits"] == L.model_dump()
    assert _prop(spec, "NLLRequest", "items")["maxItems"] == L.max_items
    assert _prop(spec, "NLLItemIn", "context")["maxItems"] == L.max_turns
    assert _prop(spec, "NLLItemIn", "context")["items"]["maxLength"] == L.max_text_chars
    assert _prop(spec, "NLLItemIn", "target")["maxLength"] == L.max_text_chars
    assert _prop(spec, "ContradictionRequest", "dialogues")["maxItems"] == L.max_dialogues
    assert _prop(spec, "DialogueIn", "turns")["maxItems"] == L.max_turns
    assert _prop(spec, "TurnIn", "text")["maxLength"] == L.max_text_chars
    assert _prop(spec, "RerankRequest", "candidates")["maxItems"] == L.max_candidates
    assert _prop(spec, "RerankRequest", "candidates")["items"]["maxLength"] == L.max_text_chars
    assert _prop(spec, "RerankRequest", "context")["maxItems"] == L.max_turns
    assert _prop(spec, "TEIRerankRequest", "texts")["maxItems"] == L.max_candidates
    query = _prop(spec, "TEIRerankRequest", "query")
    assert "maxLength" not in query  # the query's limits are per line: documented, not a bound
    assert {x["name"] for x in query["x-limit"]} == {"max_turns", "max_text_chars"}
    every = {"max_body_bytes", "max_json_values"}
    want = {
        "/v1/nll": {"max_items", "max_turns", "max_text_chars", "max_request_tokens",
                    "max_item_tokens"} | every,
        "/v1/contradiction": {"max_dialogues", "max_turns", "max_text_chars", "max_request_pairs",
                              "max_id_chars", "max_evidence"} | every,
        "/v1/rerank": {"max_candidates", "max_turns", "max_text_chars", "max_request_pairs",
                       "max_request_tokens", "max_item_tokens", "max_id_chars", "max_evidence"} | every,
        "/rerank": {"max_candidates", "max_turns", "max_text_chars", "max_request_pairs"} | every,
        "/v2/rerank": {"max_candidates", "max_turns", "max_text_chars", "max_request_pairs"} | every,
        "/v1/completions": {"max_items", "max_text_chars", "max_request_tokens", "max_item_tokens"}
        | every,
        "/v1/nll/dialogues": {"max_items", "max_turns", "max_text_chars", "max_request_tokens",
                              "max_item_tokens", "max_id_chars"} | every,
        "/tokenize": {"max_text_chars"} | every,
        "/detokenize": {"max_item_tokens"} | every,
    }
    for path, names in want.items():
        op = spec["paths"][path]["post"]
        assert set(op["x-limits"]) == names, path
        assert "413" in op["responses"] and "payload_too_large" in op["responses"]["413"]["description"]
        for n in names:
            assert f"at most {getattr(L, n)} " in op["description"] and f"`{n}`" in op["description"]


def test_limits_are_configurable_per_deployment():
    """Another deployment's limits (Serve YAML `args.limits`) are enforced and documented."""
    small = Limits(max_body_bytes=2000, max_items=3, max_turns=2, max_text_chars=10, max_dialogues=2,
                   max_candidates=2, max_request_tokens=20, max_item_tokens=8, max_request_pairs=1)
    app = FakeAPI(limits=small).app

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            spec = (await c.get("/openapi.json")).json()
            out = [spec]
            for path, body in [("/v1/nll", nll([item()] * 4)), ("/v1/nll", nll([item(context=["a"] * 3)])),
                               ("/v1/nll", nll([item(target="x" * 11)])),
                               ("/v1/contradiction", dialogues([{"turns": [TURN]}] * 3)),
                               ("/v1/rerank", rerank([], ["c"] * 3)), ("/rerank", tei("a\nb\nc", ["c"])),
                               ("/v1/nll", nll([item(target="x" * 10)] * 3)),
                               ("/v1/contradiction", dialogues([{"turns": [TURN] * 2}] * 2)),
                               ("/v1/rerank", rerank([TURN, {"speaker": 2, "text": "a"}], ["c"] * 2)),
                               ("/v1/nll", nll([item(target="x" * 5)] * 3)),
                               ("/v1/nll", nll([item(context=["x" * 10] * 2)] * 3) | {"pad": "y" * 2000})]:
                out.append((await c.post(path, json=body)).json()["error"])
            return out

    spec, *errors = asyncio.run(go())
    assert spec["info"]["x-limits"] == small.model_dump()
    assert _prop(spec, "NLLRequest", "items")["maxItems"] == 3
    assert _prop(spec, "TurnIn", "text")["maxLength"] == 10
    assert [(e["type"], e["param"]) for e in errors] == [
        ("payload_too_large", "items"), ("payload_too_large", "items[0].context"),
        ("payload_too_large", "items[0].target"), ("payload_too_large", "dialogues"),
        ("payload_too_large", "candidates"), ("payload_too_large", "query"),
        ("payload_too_large", "items"),  # 3 items x 8 tokens (capped) > 20 tokens
        ("payload_too_large", "dialogues"),  # 2 pairs > 1
        ("payload_too_large", "candidates"),  # 2 candidates x 1 turn of speaker 1 > 1 pair
        ("unknown_model", "model"),  # at every limit (3 items x 6 tokens): to the model lookup
        ("payload_too_large", "body"),
    ]


def test_cost_refusal_names_the_figure_and_happens_before_any_work(served):
    """The 413 says what the request costs and what the limit is (for a served classifier)."""
    over = dialogues([{"turns": [TURN] * (PAIRS_SIDE + 1)}] * (PAIRS_SIDE + 1), model="roberta-large-mnli")
    r = httpx.post(f"{served.url}/v1/contradiction", json=over, timeout=60)
    assert r.status_code == 413
    msg = r.json()["error"]["message"]
    assert f"costs {(PAIRS_SIDE + 1) * PAIRS_SIDE} NLI pairs" in msg and str(L.max_request_pairs) in msg


def test_json_values_are_counted_before_parsing(served):
    """A body of many small values is refused as a whole (param `body`) before it is parsed."""
    body = b'{"model": "nope", "items": [' + b",".join([b"0"] * L.max_json_values) + b"]}"
    r = httpx.post(f"{served.url}/v1/nll", content=body, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 413, r.text[:300]
    assert r.json()["error"]["param"] == "body"
    assert "max_json_values" in r.json()["error"]["message"]
    deep = b'{"model": "nope", "items": ' + b"[" * 40 + b"]" * 40 + b"}"
    r = httpx.post(f"{served.url}/v1/nll", content=deep, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 422 and "nested deeper" in r.json()["error"]["message"]


def test_rerank_evidence_is_capped_whatever_the_context(served):
    """Every context turn of the candidate speaker is evidence at evidence_threshold 0, yet each
    result names at most max_evidence turns: the most probable, in dialogue order."""
    context = [{"id": f"turn-{j}", "speaker": 1 + j % 2, "text": f"I have {j} dogs."} for j in range(80)]
    body = {"model": "roberta-large-mnli", "context": context, "candidates": ["I have no dog.", "Hi."],
            "evidence_threshold": 0.0, "speaker": 1}
    r = httpx.post(f"{served.url}/v1/rerank", json=body, timeout=120)
    assert r.status_code == 200, r.text[:300]
    order = {c["id"]: j for j, c in enumerate(context)}
    for result in r.json()["results"]:
        ev = result["evidence"]
        assert len(ev) == L.max_evidence
        assert [order[e["turn"]] for e in ev] == sorted(order[e["turn"]] for e in ev)
        assert max(e["probability"] for e in ev) == pytest.approx(result["contradiction_probability"])
