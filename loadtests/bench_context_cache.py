"""Chat-session rerank with the replicas' context cache off and on (and affinity routing where the
code has it), the cache's effect alone in-process, and the cache's memory at its bound.

    python -m loadtests.bench_context_cache                 # served: two NLL replicas per variant
    python -m loadtests.bench_context_cache --engine        # in-process engines, no Ray
    python -m loadtests.bench_context_cache --memory        # peak RSS, cache at a small bound

**Workload.** --sessions synthetic chat sessions (seeded), each --turns bot turns; a turn is 10-25
templated words. Bot turn t is one rerank: the conversation so far (t user turns and the t - 1
bot replies before, oldest first) and 8 candidate replies; one candidate becomes the bot's turn.
The model is the gpt2 stand-in's shapes with DialoGPT's 1,024-position window
(``checkpoint("long")``: a 20-turn session of turns this long does not fit the stand-in's 512).

**Served** (default). One app serves the stand-in NLI classifier and the dialogue model once per
variant, each variant its own deployment of two replicas (0.3 CPU, 1 torch thread each):

* ``cache-off``: ``context_cache_bytes: 0``;
* ``cache-on``: the default bound, Serve's default request router;
* ``cache-affinity``: the default bound and ``affinity_routing: true``; skipped, with a note,
  when ServingOptions has no such field in the code being run (where it has, the other two
  variants say ``affinity_routing: false``).

``--variants`` picks some of them (in its order; the first is the one the ratios are to): at
``--model medium`` three variants' six replicas with their caches at the default bound do not
fit a 23 GiB host. ``--model medium`` serves a random GPT-2 with DialoGPT-medium's shapes instead
(1.4 GB per replica; use few sessions): at the stand-in's width a call's engine time is a few milliseconds of
the whole path's hundreds, so only the positions, not the latency, show the cache there.

Each variant gets the same sessions as POST /v1/rerank with ``nll_model`` and ``mode:
unstructured`` (one NLI pair per candidate, so the classifier's share of every call stays small
and the same), turn by turn: turn t of every session at once against one variant, then against
the next, then turn t + 1 (variants interleaved, so load from elsewhere on a shared host hits
them alike), from one ``AsyncDialscoreClient`` (``max_concurrency``: each value of
--concurrency is a round of its own with new sessions; default 8, the client's default; retries
off, so any refused request fails the run). Reported per variant, from the replicas' series in
Ray's metrics agents (deltas over the round, read once they have settled):
positions computed per call (``ray_dialscore_tokens_scored_total`` less
``ray_dialscore_reused_tokens_total``: each engine call's ``BatchStats.real_tokens``, exactly; see
:func:`counters`), the cache's hit rate (``ray_dialscore_context_cache_lookups_total``,
hit / (hit + miss)) and positions read from it; and, measured by the client, p50/p99 latency per
call and the p50 at the last turn (and over the last 5 turns).

**--engine**: the same sessions, turn by turn round-robin over the sessions, scored in-process by
NLLEngine, one call per rerank (its 8 items): cache off; cache on over two engines picked at random
per call (what a router blind to the context does with two equally idle replicas); cache on over
two engines picked by session (affinity); the variants interleaved call by call. ``--model
medium`` runs it at DialoGPT-medium's shapes (24 layers, 1,024 wide: the real model's cost per
position), where time falls with positions; the stand-in is so narrow that each call's fixed
cost weighs as much as its positions. Positions are ``BatchStats.real_tokens`` (exact); time is
each call's wall time and its CPU time (``time.process_time``, one torch thread: what load from
elsewhere on a shared host disturbs least).

**--memory**: one engine with the cache bounded at --memory-mib MiB, fed --memory-contexts distinct
long contexts (--memory-turns turns, 8 candidates each), against the same with the cache off, each
in a process of its own: peak RSS (``ru_maxrss``), RSS at the end and after ``malloc_trim`` (what
glibc kept of freed blocks returned), the most bytes the cache held after any call (never above
the bound), evictions, and whether every call scored every item.

Loopback only; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import random
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from dialscore_server.checkpoints.standins import templated_sentences
from dialscore_server.contract.options import ServingOptions
from dialscore_server.nll.engine.encoding import NLLItem
from loadtests.common import (
    NLL_MODEL, WORK, Column, chat_turns, cache_counters, checkpoint, model_config, parser, percentile,
    quiet_torch, serve_app, table, write_json,
)

APP = "context-cache"
CLASSIFIER = "roberta-large-mnli"
CANDIDATES = 8
#: Whether the code being run has affinity routing (a serving option, branch context-affinity).
HAS_AFFINITY = "affinity_routing" in ServingOptions.model_fields


# ------------------------------------------------------------------------------ sessions
@dataclass
class Session:
    """One chat session's rerank calls: per bot turn, (context turns as dicts, candidates)."""

    calls: list[tuple[list[dict[str, str]], list[str]]] = field(default_factory=list)


def sessions(n: int, turns: int, seed: int) -> list[Session]:
    """`n` sessions of `turns` bot turns each (see module)."""
    rng = random.Random(seed)
    pool = templated_sentences(1000, seed=seed)
    out = []
    for _ in range(n):
        s, history = Session(), []
        for _ in range(turns):
            history.append({"speaker": "user", "text": chat_turns(1, rng, pool)[0]})
            candidates = chat_turns(CANDIDATES, rng, pool)
            s.calls.append((list(history), candidates))
            history.append({"speaker": "bot", "text": rng.choice(candidates)})
        out.append(s)
    return out


def nll_items(context: list[dict[str, str]], candidates: list[str]) -> list[NLLItem]:
    """The NLL items the reranker sends for one call (each candidate after the context)."""
    texts = tuple(t["text"] for t in context)
    return [NLLItem(context=texts, target=c) for c in candidates]


def round_robin(ss: list[Session]) -> list[tuple[int, int]]:
    """(session, turn) pairs: turn 1 of every session, then turn 2, ..."""
    return [(s, t) for t in range(len(ss[0].calls)) for s in range(len(ss))]


# ------------------------------------------------------------------------------ reporting
@dataclass
class VariantResult:
    """What one variant measured: per call (session, turn from 1, seconds and, in-process, the
    positions it computed and the CPU seconds it took), and positions and cache lookups summed
    over its calls."""

    label: str
    calls: list[tuple]  # (session, turn, seconds[, positions computed, CPU seconds: in-process])
    positions: float
    engine_calls: float = 0.0
    hits: float = 0.0
    misses: float = 0.0
    cached_tokens: float = 0.0

    def row(self, last_turn: int) -> list[Any]:
        lat = [c[2] for c in self.calls]
        last = [c[2] for c in self.calls if c[1] == last_turn]
        tail = [c[2] for c in self.calls if c[1] > last_turn - 5]
        lookups = self.hits + self.misses
        at_last = [c[3] for c in self.calls if c[1] == last_turn and len(c) > 3]
        cpu = [c[4] for c in self.calls if len(c) > 4]
        cpu_last = [c[4] for c in self.calls if c[1] == last_turn and len(c) > 4]
        return [self.label, self.positions / len(self.calls),
                sum(at_last) / len(at_last) if at_last else None,
                self.hits / lookups if lookups else None, self.cached_tokens / len(self.calls),
                percentile(lat, 50) * 1000, percentile(lat, 99) * 1000,
                percentile(last, 50) * 1000, percentile(tail, 50) * 1000,
                percentile(cpu, 50) * 1000 if cpu else None,
                percentile(cpu_last, 50) * 1000 if cpu_last else None]


COLUMNS = [Column("variant", 31, left=True), Column("positions/call", 15, ".1f"),
           Column("at last turn", 13, ".1f"),
           Column("hit rate", 9, ".1%"), Column("cached/call", 12, ".1f"),
           Column("p50 ms", 8, ".1f"), Column("p99 ms", 8, ".1f"),
           Column("p50 last ms", 12, ".1f"), Column("p50 last 5 ms", 14, ".1f"),
           Column("CPU p50 ms", 11, ".1f"), Column("CPU p50 last", 13, ".1f")]


def report(results: list[VariantResult], turns: int) -> list[dict[str, Any]]:
    """Print the variants' table and their ratios to the first; the figures, for JSON."""
    print(table(COLUMNS, [r.row(turns) for r in results]))
    base = results[0].row(turns)
    for r in results[1:]:
        row = r.row(turns)
        last = (f" ({base[2] / row[2]:.2f}x at turn {turns})" if row[2] else "")
        print(f"{r.label} vs {results[0].label}: {base[1] / row[1]:.2f}x fewer positions per "
              f"call{last}, p50 {base[5] / row[5]:.2f}x lower, p50 at turn {turns} "
              f"{base[7] / row[7]:.2f}x lower, over the last 5 turns {base[8] / row[8]:.2f}x lower"
              + (f"; CPU p50 {base[9] / row[9]:.2f}x lower, at turn {turns} "
                 f"{base[10] / row[10]:.2f}x lower" if row[9] else ""))
    return [{"label": r.label, "row": dict(zip([c.title for c in COLUMNS], r.row(turns))),
             "engine_calls": r.engine_calls, "calls": r.calls} for r in results]


# ------------------------------------------------------------------------------ served
def nll_entry(name: str, source: Any, window: int, cache: int | None, affinity: bool
              ) -> dict[str, Any]:
    serving: dict[str, Any] = {"num_cpus": 0.3, "num_threads": 1, "num_replicas": 2,
                               "max_ongoing_requests": 64, "context_cache_bytes": cache}
    if HAS_AFFINITY:  # said either way: the option's default may be on
        serving["affinity_routing"] = affinity
    return {"name": NLL_MODEL, "serve_as": name, "serving": serving,
            "overrides": {"source": str(source), "max_length": window}}


def settled(model: str, quiet_s: float = 3.0, limit_s: float = 60) -> dict[str, float]:
    """:func:`~loadtests.common.cache_counters` once unchanged for `quiet_s` (longer than the 1 s report interval)."""
    deadline = time.monotonic() + limit_s
    last, since = cache_counters(APP, model), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.5)
        now = cache_counters(APP, model)
        if now != last:
            last, since = now, time.monotonic()
    return last


async def run_rounds(url: str, names: list[str], ss: list[Session], concurrency: int
                     ) -> dict[str, list[tuple[int, int, float]]]:
    """Turn by turn, every variant in turn: turn t of every session at once against one variant,
    then against the next (so load from elsewhere on a shared host hits every variant alike),
    then turn t + 1. Per variant, each call's (session, turn, seconds)."""
    from dialscore import AsyncDialscoreClient, RetryPolicy

    calls: dict[str, list[tuple[int, int, float]]] = {n: [] for n in names}
    async with AsyncDialscoreClient(url, max_concurrency=concurrency, timeout=300,
                                    retry=RetryPolicy(max_attempts=1)) as client:
        async def one(name: str, k: int, t: int) -> None:
            context, candidates = ss[k].calls[t]
            start = time.perf_counter()
            await client.rerank(context, candidates, nll_model=name, mode="unstructured")
            calls[name].append((k, t + 1, time.perf_counter() - start))

        for t in range(len(ss[0].calls)):
            for name in names:
                await asyncio.gather(*(one(name, k, t) for k in range(len(ss))))
    return calls


def served(args: argparse.Namespace) -> list[dict[str, Any]]:
    path = checkpoint(args.model)
    window = model_config(path).max_length
    variants = [("cache-off", "cache off", 0, False),
                ("cache-on", "cache on, default router", None, False)]
    if HAS_AFFINITY:
        variants.append(("cache-affinity", "cache on + affinity routing", None, True))
    else:
        print("note: ServingOptions has no affinity_routing field in this code; the "
              "cache-on + affinity variant is skipped")
    chosen = args.variants.split(",")
    unknown = set(chosen) - {v[0] for v in variants}
    if unknown:
        raise SystemExit(f"--variants: unknown or unavailable {sorted(unknown)}")
    variants = [v for v in variants if v[0] in chosen]
    app_args = {
        "stand_ins": str(WORK / "stand-ins"), "request_timeout_s": 300,
        "models": [nll_entry(name, path, window, cache, aff) for name, _, cache, aff in variants],
        "classifiers": [{"name": CLASSIFIER, "serving": {"num_cpus": 0.3, "num_threads": 1,
                                                         "max_ongoing_requests": 64}}],
    }
    names = [v[0] for v in variants]
    out = []
    with serve_app(app_args, name=APP) as url:
        asyncio.run(run_rounds(url, names, sessions(2, 2, args.seed + 1000), 8))  # warm-up
        for round_, concurrency in enumerate(int(c) for c in args.concurrency.split(",")):
            ss = sessions(args.sessions, args.turns, args.seed + round_)  # new contexts each round
            before = {n: settled(n) for n in names}
            start = time.perf_counter()
            calls = asyncio.run(run_rounds(url, names, ss, concurrency))
            seconds = time.perf_counter() - start
            results = []
            for name, label, _, _ in variants:
                after = settled(name)
                d = {k: after[k] - before[name][k] for k in after}
                results.append(VariantResult(label, calls[name], d["positions"], d["engine_calls"],
                                             d["hits"], d["misses"], d["cached_tokens"]))
            print(f"\nserved, model {args.model}: {args.sessions} sessions x {args.turns} "
                  f"bot turns, turn by turn "
                  f"(each turn of every session at once, variants in turn); client "
                  f"max_concurrency {concurrency}; 2 NLL replicas per variant (0.3 CPU, 1 thread); "
                  f"{seconds:.0f} s; engine calls "
                  + ", ".join(f"{r.engine_calls:.0f}" for r in results))
            out.append({"mode": "served", "model": args.model, "concurrency": concurrency, "affinity": HAS_AFFINITY,
                        "variants": report(results, args.turns)})
    return out


# ------------------------------------------------------------------------------ in-process
def engine_mode(args: argparse.Namespace) -> list[dict[str, Any]]:
    from dialscore_server.checkpoints.loading import load_model
    from dialscore_server.nll.engine.engine import NLLEngine

    threads = quiet_torch(args.threads)
    cfg = model_config(checkpoint(args.model))
    loaded = load_model(cfg)

    def engine(cache: int | None) -> NLLEngine:
        return NLLEngine(cfg, loaded=loaded, num_threads=threads, context_cache_bytes=cache)

    ss = sessions(args.sessions, args.turns, args.seed)
    order = round_robin(ss)
    pick = random.Random(args.seed)
    variants = [
        ("cache off", [engine(0)], lambda s: 0),
        ("cache on, 2 engines, random", [engine(None), engine(None)], lambda s: pick.randrange(2)),
        ("cache on, 2 engines, by session", [engine(None), engine(None)], lambda s: s % 2),
    ]
    for _, engines, _ in variants:  # warm-up, on a session of its own
        for e in engines:
            for context, candidates in sessions(1, 2, args.seed + 1000)[0].calls:
                e.score_encoded([e.encode(it) for it in nll_items(context, candidates)])
    base = variants[0][1][0]
    results = [VariantResult(label, [], 0) for label, _, _ in variants]
    longest = 0
    for s, t in order:  # the variants interleaved call by call: load from elsewhere hits all alike
        encoded = [base.encode(it) for it in nll_items(*ss[s].calls[t])]
        longest = max(longest, max(e.cost for e in encoded))
        for r, (_, engines, route) in zip(results, variants):
            start, cpu = time.perf_counter(), time.process_time()
            _, stats = engines[route(s)].score_encoded(encoded)
            r.calls.append((s, t + 1, time.perf_counter() - start, stats.real_tokens,
                            time.process_time() - cpu))
            r.positions += stats.real_tokens
            r.engine_calls += 1
            r.hits += stats.cache_hits
            r.misses += stats.cache_misses
            r.cached_tokens += stats.cached_tokens
    print(f"in-process, model {args.model}: {args.sessions} sessions x {args.turns} bot turns, "
          f"round-robin; one "
          f"engine call per rerank ({CANDIDATES} items); {threads} thread(s); longest item "
          f"{longest} tokens (window {cfg.max_length})\n")
    return [{"mode": "engine", "model": args.model, "threads": threads, "variants": report(results, args.turns)}]


def _rss_mib() -> float:
    """This process's resident size now (``VmRSS``), in MiB."""
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def memory_child(cache_bytes: int, contexts: int, turns: int, seed: int, threads: int | None
                 ) -> dict[str, Any]:
    """In its own process: feed `contexts` distinct contexts to one engine (cache bound
    `cache_bytes`, 0 = off); peak RSS and the cache's high-water mark."""
    from dialscore_server.nll.engine.engine import NLLEngine

    threads = quiet_torch(threads)
    engine = NLLEngine(model_config(checkpoint("long")), num_threads=threads,
                       context_cache_bytes=cache_bytes)
    rng = random.Random(seed)
    pool = templated_sentences(1000, seed=seed)
    engine.score([NLLItem(context=("hello there, how are you?",), target="fine")])
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    most, complete, positions, start = 0, 0, 0, time.perf_counter()
    for _ in range(contexts):
        context = tuple(chat_turns(turns, rng, pool))
        items = [NLLItem(context=context, target=c) for c in chat_turns(CANDIDATES, rng, pool)]
        results, stats = engine.score_encoded([engine.encode(it) for it in items])
        complete += all(r is not None for r in results)
        positions += stats.real_tokens
        if engine.context_cache is not None:
            most = max(most, engine.context_cache.stats.bytes)
    cache = engine.context_cache
    rss_end = _rss_mib()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # what glibc keeps of freed blocks goes back
    return {"cache_bytes": cache_bytes, "contexts": contexts, "complete": complete,
            "seconds": time.perf_counter() - start, "positions": positions,
            "rss_loaded_mib": rss_loaded / 1024,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_end_mib": rss_end, "rss_trimmed_mib": _rss_mib(),
            "cache_most_bytes": most, "evictions": cache.stats.evictions if cache else 0,
            "entries": cache.stats.entries if cache else 0}


def memory_mode(args: argparse.Namespace) -> int:
    bound = args.memory_mib << 20
    rows = []
    for cache in (0, bound):
        cmd = [sys.executable, "-m", "loadtests.bench_context_cache", "--memory-child", str(cache),
               "--memory-contexts", str(args.memory_contexts), "--memory-turns",
               str(args.memory_turns), "--seed", str(args.seed)]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1200)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"memory: {args.memory_contexts} distinct contexts of {args.memory_turns} turns, "
          f"{CANDIDATES} candidates each, one engine per process\n")
    print(table([Column("cache bound MiB", 16, ".0f"), Column("calls complete", 15, left=False),
                 Column("s", 7, ".1f"), Column("RSS loaded MiB", 15, ".0f"),
                 Column("peak RSS MiB", 13, ".0f"), Column("RSS end", 8, ".0f"),
                 Column("end, trimmed", 13, ".0f"), Column("cache most MiB", 15, ".1f"),
                 Column("evictions", 10, "d"), Column("entries", 8, "d")],
                [[r["cache_bytes"] / 2 ** 20, f"{r['complete']}/{r['contexts']}", r["seconds"],
                  r["rss_loaded_mib"], r["peak_rss_mib"], r["rss_end_mib"], r["rss_trimmed_mib"],
                  r["cache_most_bytes"] / 2 ** 20,
                  r["evictions"], r["entries"]] for r in rows]))
    on = rows[1]
    ok = on["cache_most_bytes"] <= bound and all(r["complete"] == r["contexts"] for r in rows)
    print(f"peak RSS, cache on - off: {on['peak_rss_mib'] - rows[0]['peak_rss_mib']:+.0f} MiB "
          f"(bound {args.memory_mib} MiB); cache within its bound and every call complete: "
          f"{'yes' if ok else 'NO'}")
    write_json(args.json, {"mode": "memory", "args": vars(args), "rows": rows})
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--engine", action="store_true", help="in-process engines (no Ray)")
    ap.add_argument("--memory", action="store_true", help="peak RSS with the cache at a bound")
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--turns", type=int, default=20, help="bot turns per session")
    ap.add_argument("--concurrency", default="8",
                    help="served: the client's max_concurrency, a round per value, each with new "
                         "sessions (default 8: the client's default)")
    ap.add_argument("--variants", default="cache-off,cache-on,cache-affinity",
                    help="served: which variants the app serves, in this order (ratios are to the "
                         "first); fewer variants, fewer replicas: two per variant")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads, in-process modes (default 1, as each served replica)")
    ap.add_argument("--model", choices=["long", "medium"], default="long",
                    help="served and --engine: the stand-in's shapes with a 1,024-position window "
                         "(long), or a random GPT-2 with DialoGPT-medium's shapes (medium, 1.4 GB "
                         "per replica)")
    ap.add_argument("--memory-mib", type=int, default=64, help="--memory: the cache bound")
    ap.add_argument("--memory-contexts", type=int, default=400)
    ap.add_argument("--memory-turns", type=int, default=36)
    ap.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    if args.memory_child is not None:
        print(json.dumps(memory_child(args.memory_child, args.memory_contexts, args.memory_turns,
                                      args.seed, args.threads)))
        return 0
    if args.memory:
        return memory_mode(args)
    got = engine_mode(args) if args.engine else served(args)
    write_json(args.json, {"args": vars(args), "runs": got})
    return 0


if __name__ == "__main__":
    sys.exit(main())
