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
in-process ratio. Traffic goes to 127.0.0.1 only; each run is bounded (``--groups``).

    python loadtests/profile_http.py --model small
    python loadtests/profile_http.py --model medium
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from loadtests.bench_probe import (  # noqa: E402
    DEFAULT_GROUPS, attribution_workload, checkpoint, model_config,
)

MODEL = "dialogpt-medium"


def best_of(fn: Callable[[], Any], reps: int) -> float:
    """Fastest of `reps` calls of `fn`, in seconds."""
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


class CannedHandle:
    """A deployment-handle stand-in answering each request's precomputed reply at once (the
    gateway's own work, without Ray)."""

    def __init__(self, card, replies: dict[int, Any]):
        self._card, self._replies = card, replies
        outer = self

        class _Method:
            def __init__(self, fn):
                self.remote = fn

        async def score(items, return_tokens=False):
            return outer._replies[len(items)]

        async def card():
            return outer._card

        self.score = _Method(score)
        self.card = _Method(card)


async def asgi_post(app, path: str, body: bytes) -> tuple[int, bytes]:
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


def offline_stages(bodies: list[dict], replies: list[Any], card, reps: int) -> dict[str, list[float]]:
    """Per request, seconds of each stage measured in this process (see the module docstring)."""
    from pydantic import TypeAdapter

    from dialscore_server.contract.limits import Limits
    from dialscore_server.contract.strict_json import loads_strict
    from dialscore_server.gateway.app import create_app
    from dialscore_server.gateway.deployment import HandleBackend
    from dialscore_server.nll.protocol import NLLRequest, NLLResponse, NLLResultOut, Usage

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
        handle = CannedHandle(card, {len(items): reply})
        app = create_app(HandleBackend({MODEL: handle}, limits=limits, request_timeout_s=60,
                                       queue_timeout_s=None, token=None))
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


async def closed_loop(url: str, bodies: list[dict], clients: int) -> tuple[float, list[list[float]]]:
    """Every request from `clients` concurrent closed-loop clients: (seconds, NLLs per request)."""
    import httpx

    queue = list(enumerate(bodies))
    nlls: list[list[float]] = [[] for _ in bodies]
    async with httpx.AsyncClient(base_url=url, timeout=1800) as client:
        async def worker():
            while queue:
                k, body = queue.pop(0)
                r = await client.post("/v1/nll", json=body)
                r.raise_for_status()
                nlls[k] = [x["nll"] for x in r.json()["results"]]

        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return time.perf_counter() - t, nlls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["small", "medium"], default="small")
    p.add_argument("--groups", type=int, default=None,
                   help=f"explanation groups (default {DEFAULT_GROUPS['small']} small, "
                        f"{DEFAULT_GROUPS['medium']} medium)")
    p.add_argument("--groups-per-request", type=int, default=4)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--chunk-tokens", type=int, default=None, help="the replica's chunk_tokens")
    p.add_argument("--return-tokens", action="store_true", help="ask for per-token arrays")
    p.add_argument("--repeat", type=int, default=2, help="closed-loop runs (alternating), best kept")
    p.add_argument("--reps", type=int, default=5, help="in-process stage timings: best of this many")
    args = p.parse_args(argv)

    from transformers.utils import logging as hf_logging

    from dialscore_server.checkpoints.loading import set_threads
    from dialscore_server.contract.options import ServingOptions
    from dialscore_server.gateway.args import AppArgs
    from dialscore_server.gateway.embedded import serve_locally
    from dialscore_server.nll.engine.engine import NLLEngine
    from dialscore_server.nll.serving import NLLServing

    hf_logging.set_verbosity_error()
    set_threads(args.threads)
    work = Path(tempfile.gettempdir()) / "dialscore-bench"
    source = checkpoint(args.model, work)
    config = model_config(source, "float32", "cpu")
    groups, n_pairs, _ = attribution_workload(args.groups or DEFAULT_GROUPS[args.model],
                                              config.format.why_turn)
    per = args.groups_per_request
    requests = [sum(groups[k:k + per], []) for k in range(0, len(groups), per)]
    bodies = [{"model": MODEL, "items": [{"context": list(it.context), "target": it.target}
                                         for it in req], **({"return_tokens": True} if args.return_tokens else {})}
              for req in requests]
    chunk_tokens = args.chunk_tokens or ServingOptions().chunk_tokens

    # In this process: the engine the replica runs (same options), the replies it gives.
    engine = NLLEngine(config, num_threads=args.threads, prefix_reuse=True)
    serving = NLLServing(engine, 16384, chunk_tokens=chunk_tokens, model=MODEL)
    card = serving.card()
    encoded_all = [engine.encode(it) for req in requests for it in req]
    engine.score_encoded(encoded_all[:14])  # warm-up
    loop = asyncio.new_event_loop()
    replies = [loop.run_until_complete(serving.score(req, args.return_tokens)) for req in requests]
    local_chunked = []
    for req in requests:
        runs = [work.encoded for work in serving.admit(req)]  # the replica's own chunks
        t = time.perf_counter()
        for run in runs:
            engine.score_encoded(run)
        local_chunked.append(time.perf_counter() - t)
    offline = offline_stages(bodies, replies, card, args.reps)

    app_args = AppArgs.model_validate({
        "stand_ins": str(source.parent / "stand-ins"), "request_timeout_s": 1800,
        "models": [{"name": MODEL,
                    "overrides": {"source": str(source), "max_length": config.max_length,
                                  "dtype": "float32", "device": "cpu"},
                    "serving": {"num_cpus": 1, "num_threads": args.threads, "max_ongoing_requests": 64,
                                "max_batch_tokens": 16384, "prefix_reuse": True,
                                "chunk_tokens": chunk_tokens}}],
    })
    with serve_locally(app_args, num_cpus=4, name="profile-http") as url:
        import httpx

        httpx.post(f"{url}/v1/nll", json={"model": MODEL, "items": bodies[0]["items"][:7]},
                   timeout=1800).raise_for_status()  # warm-up
        live = asyncio.run(sequential(url, bodies))
        http_s, local_s = [], []
        for _ in range(args.repeat):
            t = time.perf_counter()
            engine.score_encoded(encoded_all)
            local_s.append(time.perf_counter() - t)
            seconds, nlls = asyncio.run(closed_loop(url, bodies, args.clients))
            http_s.append(seconds)

    local_nlls = [r.nll for r in engine.score_encoded(encoded_all)[0]]
    served = [x for req in nlls for x in req]
    worst = max(abs(a - b) for a, b in zip(local_nlls, served))

    # ------------------------------------------------------------------------------ the table
    n = len(bodies)
    med = {k: statistics.median(v) for k, v in {**offline, **live}.items()}
    total = {k: sum(v) for k, v in {**offline, **live}.items()}
    floor = med["floor"]
    accounted = ("client encode", "gateway app", "tokenize", "queue", "compute", "client decode",
                 "floor")
    rest = [lat - sum(offline[k][i] if k in offline else live[k][i] for k in accounted)
            for i, lat in enumerate(live["latency"])]
    print(f"model   : {args.model} ({source}), float32, {args.threads} threads, chunk_tokens "
          f"{chunk_tokens}, return_tokens {args.return_tokens}")
    print(f"workload: {len(groups)} groups, {sum(len(r) for r in requests)} items, {n_pairs} pairs, "
          f"{n} requests of {per} groups; request {med['request bytes'] / 1e3:.1f} kB, response "
          f"{med['response bytes'] / 1e3:.1f} kB, Ray call {med['call bytes'] / 1e3:.1f} kB, reply "
          f"{med['reply bytes'] / 1e3:.1f} kB (medians)")
    print()
    print(f"one request at a time ({n} requests): ms per request, median and share of the summed latency")
    hdr = f"{'stage':38s} {'median ms':>10s} {'share':>7s}"
    print(hdr)
    print("-" * len(hdr))
    lat_sum = total["latency"]
    rows = [("client encode (json.dumps)", "client encode"),
            ("gateway app, in-process (all below)", "gateway app"),
            ("  strict JSON parse", "gateway parse"),
            ("  pydantic validation + limits", "gateway validate"),
            ("  response build + JSON", "gateway respond"),
            ("replica tokenize (x-tokenization)", "tokenize"),
            ("replica queue (x-queue-time)", "queue"),
            ("engine compute (x-compute-time)", "compute"),
            ("client decode (json.loads)", "client decode")]
    for label, key in rows:
        print(f"{label:38s} {med[key] * 1e3:10.1f} {total[key] / lat_sum:7.1%}")
    print(f"{'proxy floor (GET /healthz before it)':38s} {floor * 1e3:10.1f} "
          f"{total['floor'] / lat_sum:7.1%}")
    print(f"{'rest: gateway-replica hop, replica Python':38s} {statistics.median(rest) * 1e3:10.1f} "
          f"{sum(rest) / lat_sum:7.1%}")
    print(f"{'  of it: Ray payload pickling, in-proc':38s} {med['Ray payloads'] * 1e3:10.1f} "
          f"{total['Ray payloads'] / lat_sum:7.1%}")
    print(f"{'latency':38s} {med['latency'] * 1e3:10.1f} {1:7.1%}")
    print(f"{'(same chunks scored in this process)':38s} {statistics.median(local_chunked) * 1e3:10.1f} "
          f"{sum(local_chunked) / lat_sum:7.1%}")
    print()
    print(f"closed loop, {args.clients} clients, {n} requests: HTTP {min(http_s):.2f} s (runs "
          f"{', '.join(f'{x:.2f}' for x in http_s)}), in-process all items in one call "
          f"{min(local_s):.2f} s (runs {', '.join(f'{x:.2f}' for x in local_s)}); HTTP / in-process "
          f"{min(local_s) / min(http_s):.2f}; max |dNLL| {worst:.1e}")
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
