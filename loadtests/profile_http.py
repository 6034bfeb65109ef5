"""Where the time of POST /v1/nll goes on the probe workload (issue 16): a breakdown table.

The workload is bench_probe's: CEDAR explanation groups (the valid explanation and its
corruptions after one shared context), sent as requests of ``--groups-per-request`` groups. The
script serves the checkpoint on loopback (gateway + one NLL replica, as bench_probe's (e)) and
times each stage of one request, one request at a time:

  client encode      ``json.dumps`` of the body and its UTF-8 bytes (what httpx does), here;
  gateway parse      the strict JSON reader (contract/strict_json.py), here, on the same bytes;
  gateway validate   FastAPI's validation of ``NLLRequest``, the limits and ``to_item``, here;
  gateway respond    the response built and serialized by the route and FastAPI (validation and
                     JSON encoding), here, from the replica's real answer;
  gateway app        the whole FastAPI app in this process (middleware, strict reader, routing,
                     the three rows above) over a backend that answers the replica's reply at once;
  Ray payloads       pickling and unpickling the call's arguments and its reply, here (a part of
                     the two hops, with the bytes that cross them);
  replica tokenize   ``x-tokenization-time`` (the replica's admission: tokenizing, chunking);
  replica queue      ``x-queue-time`` (``@serve.batch`` wait, waits between chunks);
  engine compute     ``x-compute-time``; beside it, the same items scored in this process, chunk
                     by chunk as the replica does;
  client decode      ``json.loads`` of the response, here;
  proxy floor        latency of a GET /healthz sent just before the request (client, Serve's
                     HTTP proxy, gateway; no model);
  rest               the request's latency less every row above except Ray payloads and the
                     in-process compute: the gateway-replica hop, the replica's own Python
                     (replies, token strings), event-loop waits.

Then ``--clients`` closed-loop clients send every request, alternating with the engine scoring all
items in one call in this process (bench_probe's (d)), best of ``--repeat``: the HTTP /
in-process ratio (one function each below). Traffic goes to 127.0.0.1 only; each run is
bounded (``--groups``).

    python -m loadtests.profile_http --model small
    python -m loadtests.profile_http --model medium
"""

from __future__ import annotations

import asyncio
import json
import pickle
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter

from dialscore.model_card import ModelCard
from dialscore_server.contract.limits import Limits
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contract.reply import Reply
from dialscore_server.contract.strict_json import loads_strict
from dialscore_server.gateway.app import create_app
from dialscore_server.directory import ModelDirectory
from dialscore_server.nll.completions.serving import CompletionCall, Completed
from dialscore_server.nll.engine.encoding import EncodedItem, NLLItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.nll.protocol import NLLRequest, NLLResponse, NLLResultOut, Usage
from dialscore_server.nll.serving import NLLServing, Scored
from loadtests.common import (
    NLL_MODEL, Column, Method, Result, Run, add_threads, attribution_workload, best_of,
    checkpoint, closed_loop_nll, interleave, item_json, max_abs_diff, model_config, nll_app_args,
    parser, quiet_torch, serve_app, table,
)
from loadtests.bench_probe import DEFAULT_GROUPS

MODEL = NLL_MODEL


class CannedService:
    """An :class:`~dialscore_server.nll.serving.NLLService` answering each request with the reply
    precomputed for its item count, at once (the gateway's own work, without Ray)."""

    def __init__(self, card: ModelCard, replies: dict[int, Reply[Scored]]):
        self._card, self._replies = card, replies

    async def score(self, items: Sequence[NLLItem], return_tokens: bool = False) -> Reply[Scored]:
        return self._replies[len(items)]

    async def complete(self, call: CompletionCall) -> Reply[Completed]:
        raise NotImplementedError("the profile sends POST /v1/nll only")

    async def card(self) -> ModelCard:
        return self._card


async def asgi_post(app: Any, path: str, body: bytes) -> tuple[int, bytes]:
    """POST `body` to the ASGI `app` in this process; (status, response body)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": b"", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1),
             "headers": [(b"host", b"x"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    sent = False
    status, chunks = 0, []

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


def offline_stages(bodies: list[dict[str, Any]], replies: list[Reply[Scored]], card: ModelCard,
                   reps: int) -> dict[str, list[float]]:
    """Per request, seconds of each stage measured in this process (see the module docstring)."""
    limits = Limits()
    out: dict[str, list[float]] = {k: [] for k in (
        "client encode", "gateway parse", "gateway validate", "gateway respond", "gateway app",
        "Ray payloads", "client decode", "request bytes", "response bytes", "call bytes",
        "reply bytes")}
    response_adapter = TypeAdapter(NLLResponse)
    request_adapter = TypeAdapter(NLLRequest)
    loop = asyncio.new_event_loop()
    for body, reply in zip(bodies, replies):
        raw = json.dumps(body).encode()
        out["client encode"].append(best_of(lambda: json.dumps(body).encode(), reps))
        out["gateway parse"].append(best_of(lambda: loads_strict(raw, limits.max_json_values), reps))
        value = loads_strict(raw, limits.max_json_values)

        def validate():
            req = request_adapter.validate_python(value)
            req.check_limits(limits)
            return [it.to_item() for it in req.items]

        out["gateway validate"].append(best_of(validate, reps))
        items = validate()
        scored = reply.unwrap()
        rt = bool(body.get("return_tokens"))

        def respond():
            results = [NLLResultOut(nll=r.nll, num_tokens=r.num_tokens, truncated=r.truncated,
                                    token_nlls=r.token_nlls if rt else None,
                                    tokens=scored.tokens[i] if rt and scored.tokens else None)
                       for i, r in enumerate(scored.results)]
            resp = NLLResponse(model=MODEL, source=card.source or "", revision=card.revision,
                               stand_in=card.stand_in, append_eos=True, results=results,
                               usage=Usage(source_tokens=sum(r.source_tokens for r in scored.results),
                                           target_tokens=sum(r.num_tokens for r in scored.results)))
            return response_adapter.dump_json(response_adapter.validate_python(resp))

        out["gateway respond"].append(best_of(respond, reps))
        app = create_app(ModelDirectory({MODEL: CannedService(card, {len(items): reply})},
                                        limits=limits))
        status, answer = loop.run_until_complete(asgi_post(app, "/v1/nll", raw))
        assert status == 200, answer[:300]
        out["gateway app"].append(best_of(
            lambda: loop.run_until_complete(asgi_post(app, "/v1/nll", raw)), reps))
        call = pickle.dumps((items, rt), protocol=5)
        back = pickle.dumps(reply, protocol=5)
        out["Ray payloads"].append(best_of(lambda: (pickle.loads(pickle.dumps((items, rt), protocol=5)),
                                                    pickle.loads(pickle.dumps(reply, protocol=5))), reps))
        out["client decode"].append(best_of(lambda: json.loads(answer), reps))
        out["request bytes"].append(len(raw))
        out["response bytes"].append(len(answer))
        out["call bytes"].append(len(call))
        out["reply bytes"].append(len(back))
    loop.close()
    return out


async def sequential(url: str, bodies: list[dict]) -> dict[str, list[float]]:
    """Each request alone (one client): latency and the timing headers, seconds."""
    import httpx

    out: dict[str, list[float]] = {k: [] for k in ("latency", "tokenize", "queue", "compute", "floor")}
    async with httpx.AsyncClient(base_url=url, timeout=1800) as client:
        for body in bodies:
            # The floor just before each request: on a shared machine it drifts with the load.
            t = time.perf_counter()
            (await client.get("/healthz")).raise_for_status()
            out["floor"].append(time.perf_counter() - t)
            t = time.perf_counter()
            r = await client.post("/v1/nll", json=body)
            r.json()
            out["latency"].append(time.perf_counter() - t)
            r.raise_for_status()
            out["tokenize"].append(float(r.headers["x-tokenization-time"]) / 1000)
            out["queue"].append(float(r.headers["x-queue-time"]) / 1000)
            out["compute"].append(float(r.headers["x-compute-time"]) / 1000)
    return out


def in_process(engine: NLLEngine, encoded: list[EncodedItem], repeat: int) -> Method:
    """The engine scoring every item in one call in this process (bench_probe's (d))."""
    return Method("local", "in-process, all items in one call",
                  lambda: Run([r.nll for r in engine.score_encoded(encoded)[0]]), repeat)


def over_http(url: str, bodies: list[dict[str, Any]], clients: int, repeat: int) -> Method:
    """Every request from `clients` concurrent closed-loop clients."""
    def run() -> Run:
        got = asyncio.run(closed_loop_nll(url, bodies, clients, timeout=1800))
        return Run([x for r in got.nlls for x in r], seconds=got.seconds)

    return Method("http", "HTTP", run, repeat)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--model", choices=["small", "medium"], default="small")
    p.add_argument("--groups", type=int, default=None,
                   help=f"explanation groups (default {DEFAULT_GROUPS['small']} small, "
                        f"{DEFAULT_GROUPS['medium']} medium)")
    p.add_argument("--groups-per-request", type=int, default=4)
    p.add_argument("--clients", type=int, default=4)
    add_threads(p)
    p.add_argument("--chunk-tokens", type=int, default=None, help="the replica's chunk_tokens")
    p.add_argument("--return-tokens", action="store_true", help="ask for per-token arrays")
    p.add_argument("--repeat", type=int, default=2, help="closed-loop runs (alternating), best kept")
    p.add_argument("--reps", type=int, default=5, help="in-process stage timings: best of this many")
    args = p.parse_args(argv)

    quiet_torch(args.threads)
    source = checkpoint(args.model)
    config = model_config(source)
    workload = attribution_workload(args.groups or DEFAULT_GROUPS[args.model],
                                    config.format.why_turn)
    per = args.groups_per_request
    groups = workload.groups
    requests = [sum(groups[k:k + per], []) for k in range(0, len(groups), per)]
    bodies: list[dict[str, Any]] = [{"model": MODEL, "items": [item_json(it) for it in req],
               **({"return_tokens": True} if args.return_tokens else {})} for req in requests]
    chunk_tokens = args.chunk_tokens or ServingOptions().chunk_tokens

    # In this process: the engine the replica runs (same options), the replies it gives.
    engine = NLLEngine(config, num_threads=args.threads, prefix_reuse=True)
    serving = NLLServing(engine, max_batch_tokens=16384, chunk_tokens=chunk_tokens, model=MODEL)
    encoded_all = [engine.encode(it) for req in requests for it in req]
    engine.score_encoded(encoded_all[:14])  # warm-up
    loop = asyncio.new_event_loop()
    card = loop.run_until_complete(serving.card())
    replies = [loop.run_until_complete(serving.score(req, args.return_tokens)) for req in requests]
    loop.close()
    local_chunked = []
    for req in requests:
        runs = [work.encoded for work in serving.admit(req)]  # the replica's own chunks
        start = time.perf_counter()
        for run in runs:
            engine.score_encoded(run)
        local_chunked.append(time.perf_counter() - start)
    offline = offline_stages(bodies, replies, card, args.reps)

    app = nll_app_args(source, config, threads=args.threads,
                       serving={"prefix_reuse": True, "chunk_tokens": chunk_tokens})
    with serve_app(app, name="profile-http") as url:
        import httpx

        httpx.post(f"{url}/v1/nll", json={"model": MODEL, "items": bodies[0]["items"][:7]},
                   timeout=1800).raise_for_status()  # warm-up
        live = asyncio.run(sequential(url, bodies))
        got = interleave([in_process(engine, encoded_all, args.repeat),
                          over_http(url, bodies, args.clients, args.repeat)])
    local, http = got["local"], got["http"]
    worst = max_abs_diff(local.last.nlls, http.last.nlls)

    # ------------------------------------------------------------------------------ the table
    n = len(bodies)
    med = {k: statistics.median(v) for k, v in {**offline, **live}.items()}
    total = {k: sum(v) for k, v in {**offline, **live}.items()}
    accounted = ("client encode", "gateway app", "tokenize", "queue", "compute", "client decode",
                 "floor")
    rest = [lat - sum(offline[k][i] if k in offline else live[k][i] for k in accounted)
            for i, lat in enumerate(live["latency"])]
    print(f"model   : {args.model} ({source}), float32, {args.threads} threads, chunk_tokens "
          f"{chunk_tokens}, return_tokens {args.return_tokens}")
    print(f"workload: {len(groups)} groups, {sum(len(r) for r in requests)} items, {workload.pairs} pairs, "
          f"{n} requests of {per} groups; request {med['request bytes'] / 1e3:.1f} kB, response "
          f"{med['response bytes'] / 1e3:.1f} kB, Ray call {med['call bytes'] / 1e3:.1f} kB, reply "
          f"{med['reply bytes'] / 1e3:.1f} kB (medians)")
    print()
    print(f"one request at a time ({n} requests): ms per request, median and share of the summed latency")
    lat_sum = total["latency"]
    stages = [("client encode (json.dumps)", "client encode"),
              ("gateway app, in-process (all below)", "gateway app"),
              ("  strict JSON parse", "gateway parse"),
              ("  pydantic validation + limits", "gateway validate"),
              ("  response build + JSON", "gateway respond"),
              ("replica tokenize (x-tokenization)", "tokenize"),
              ("replica queue (x-queue-time)", "queue"),
              ("engine compute (x-compute-time)", "compute"),
              ("client decode (json.loads)", "client decode"),
              ("proxy floor (GET /healthz before it)", "floor")]
    rows = [[label, med[key] * 1e3, total[key] / lat_sum] for label, key in stages]
    rows += [["rest: gateway-replica hop, replica Python", statistics.median(rest) * 1e3,
              sum(rest) / lat_sum],
             ["  of it: Ray payload pickling, in-proc", med["Ray payloads"] * 1e3,
              total["Ray payloads"] / lat_sum],
             ["latency", med["latency"] * 1e3, 1.0],
             ["(same chunks scored in this process)", statistics.median(local_chunked) * 1e3,
              sum(local_chunked) / lat_sum]]
    print(table([Column("stage", 38, left=True), Column("median ms", 10, ".1f"),
                 Column("share", 7, ".1%")], rows))
    print()

    def each(r: Result) -> str:
        return ", ".join(f"{x:.2f}" for x in r.seconds)

    print(f"closed loop, {args.clients} clients, {n} requests: HTTP {http.best:.2f} s (runs "
          f"{each(http)}), in-process all items in one call {local.best:.2f} s (runs {each(local)}); "
          f"HTTP / in-process {local.best / http.best:.2f}; max |dNLL| {worst:.1e}")
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
