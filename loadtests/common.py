"""What the benchmarks and load tests share: command lines, timing, peak FLOP/s, checkpoints,
workloads, the compared-method types, serving the app on loopback, HTTP load, a replica's work
counters from Ray's metrics agent, tables and JSON.

Every benchmark that compares methods builds one :class:`Method` per method (a function each in
its script), times them with :func:`interleave` (round-robin, so load from elsewhere on a shared
machine hits every method alike) and reads :class:`Result` objects. Traffic goes to 127.0.0.1
only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from dialscore.probes import SAMPLE_DATA
from dialscore.probes.corruptions import corrupt_dialogues
from dialscore.probes.data import load_dialogues
from dialscore_server import compat
from dialscore_server.checkpoints.loading import set_threads
from dialscore_server.checkpoints.registry import ModelConfig, stand_in_registry
from dialscore_server.checkpoints.standins import (
    MARKER, build_stand_ins, reinit_, templated_sentences,
)
from dialscore_server.gateway.args import AppArgs
from dialscore_server.gateway.embedded import serve_locally
from dialscore_server.nll.engine.encoding import EncodedItem, NLLItem
from dialscore_server.nll.engine.kernels import onednn_linear_available
from dialscore_server.nll.serving import NLLScorer
from tests.ray_metrics import replica_metrics, sample_sum

T = TypeVar("T")

#: The repository root (run the scripts from here).
ROOT = Path(__file__).resolve().parents[1]
#: Checkpoints the benchmarks build, reused across runs.
WORK = Path(tempfile.gettempdir()) / "dialscore-bench"
#: The data sets shared beside the repository (MuTual, DECODE).
SHARED_DATA = ROOT.parent / "shared" / "data"
#: The dialogue model every benchmark app serves (its stand-in or a benchmark checkpoint).
NLL_MODEL = "dialogpt-medium"


# ------------------------------------------------------------------------------ command lines
def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser whose help shows the script's docstring as written."""
    return argparse.ArgumentParser(description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_threads(p: argparse.ArgumentParser) -> None:
    """``--threads``: torch threads, default the CPUs this process may run on."""
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="torch threads (default: the CPUs this process may use)")


def quiet_torch(threads: int | None) -> int:
    """Set torch's threads (None: every CPU this process may use) and silence transformers'
    warnings; returns the thread count."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    return set_threads(threads)


# ------------------------------------------------------------------------------------ timing
def timed(fn: Callable[[], T], device: str = "cpu") -> tuple[T, float]:
    """(fn(), seconds), with CUDA synchronised before and after on a GPU."""
    import torch

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    value = fn()
    if cuda:
        torch.cuda.synchronize()
    return value, time.perf_counter() - start


def best_of(fn: Callable[[], object], reps: int) -> float:
    """The fastest of `reps` calls of `fn`, in seconds."""
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank `p`-th percentile (0 < p <= 100) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered) / 100) - 1))]


# --------------------------------------------------------------------------- peak FLOP/s
#: Side of the square matrix product that measures a peak.
PEAK_N = 2048


def square_products(dtype: str, device: str = "cpu", n: int = PEAK_N
                    ) -> dict[str, Callable[[], object]]:
    """One n x n x n product of random matrices in `dtype` on `device`, by route:
    ``torch.matmul`` (MKL for float32 on this CPU build, oneDNN for bfloat16), and on a CPU with
    oneDNN's linear op (what the engine's CPU kernels use) ``oneDNN linear``. Each call returns
    once the product is done (CUDA synchronised)."""
    import torch

    dt = getattr(torch, dtype)
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)

    def matmul() -> object:
        with torch.inference_mode():
            out = torch.matmul(a, b)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return out

    products: dict[str, Callable[[], object]] = {"torch.matmul": matmul}
    if device.startswith("cpu") and onednn_linear_available():
        z = torch.zeros(n, dtype=dt)

        def onednn() -> object:
            with torch.inference_mode():
                return compat.onednn_linear(a, b, z)

        products["oneDNN linear"] = onednn
    return products


def peak_flops(dtype: str, device: str = "cpu", reps: int = 5) -> dict[str, float]:
    """FLOP/s of :func:`square_products`'s routes, each the best of `reps` after a warm-up (0 for
    a route this machine lacks)."""
    out = {"torch.matmul": 0.0, "oneDNN linear": 0.0}
    for route, product in square_products(dtype, device).items():
        product()
        out[route] = 2 * PEAK_N ** 3 / best_of(product, reps)
    return out


# ------------------------------------------------------------------------------ checkpoints
def medium_gpt2(eos_id: int) -> Any:
    """A random-weight GPT-2 with DialoGPT-medium's shapes (24 layers, width 1024, 16 heads,
    vocabulary 50,257, 1,024 positions), GPT-2's own initialisation under torch's current seed,
    in eval mode."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=1024, n_embd=1024, n_layer=24,
                                      n_head=16, bos_token_id=eos_id, eos_token_id=eos_id)).eval()


#: Positions of the ``long`` benchmark checkpoint: DialoGPT's own window (the stand-in has 512).
LONG_WINDOW = 1024


def checkpoint(model: str, work: Path = WORK) -> Path:
    """The benchmark checkpoint `model` on disk under `work`, built on first use beside the
    gpt2 stand-in (``work/stand-ins``): ``small`` is the stand-in re-initialised N(0, 0.3), so NLLs
    vary strongly by token; ``medium`` is :func:`medium_gpt2` (1.4 GB); ``long`` is the stand-in's
    shapes (2 layers, 64 wide) with DialoGPT's 1,024-position window (:data:`LONG_WINDOW`), GPT-2's
    initialisation under seed 0, for dialogues longer than the stand-in's 512 positions."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    stand_ins = work / "stand-ins"
    build_stand_ins(stand_ins, kinds=["gpt2"])
    out = work / {"medium": "medium", "long": "small-long"}.get(model, "small-sharp")
    if (out / MARKER).is_file():
        return out
    tok = AutoTokenizer.from_pretrained(stand_ins / "gpt2")
    if model == "medium":
        weights = medium_gpt2(tok.eos_token_id)
    elif model == "long":
        import torch

        torch.manual_seed(0)
        config = AutoConfig.from_pretrained(stand_ins / "gpt2")
        config.n_positions = LONG_WINDOW
        weights = AutoModelForCausalLM.from_config(config).eval()
    else:
        weights = reinit_(AutoModelForCausalLM.from_pretrained(stand_ins / "gpt2"), std=0.3, seed=0)
    weights.save_pretrained(out)
    tok.save_pretrained(out)
    shutil.copy(stand_ins / "gpt2" / MARKER, out / MARKER)
    return out


def model_config(path: Path, dtype: str = "float32", device: str = "cpu") -> ModelConfig:
    """The DialoGPT registry entry pointed at the checkpoint `path` (made by :func:`checkpoint`),
    in `dtype` on `device`, its window the checkpoint's position table."""
    from transformers import AutoConfig

    cfg = stand_in_registry(path.parent / "stand-ins").get(NLL_MODEL)
    return cfg.model_copy(update={"source": str(path), "dtype": dtype, "device": device,
                                  "max_length": AutoConfig.from_pretrained(path).n_positions})


# -------------------------------------------------------------------------------- workloads
@dataclass
class AttributionWorkload:
    """CEDAR attribution probing: per explanation group, the valid explanation then each of its
    corruptions as targets after one context ``history + [response, why]``; `pairs` (valid,
    corruption) comparisons in all."""

    groups: list[list[NLLItem]]
    pairs: int

    @property
    def items(self) -> list[NLLItem]:
        return [it for g in self.groups for it in g]

    @property
    def sizes(self) -> list[int]:
        return [len(g) for g in self.groups]

    def pair_index(self) -> list[tuple[int, int]]:
        """Each probe pair as (valid item, corrupted item) indices into :attr:`items`."""
        out, start = [], 0
        for size in self.sizes:
            out += [(start, start + j) for j in range(1, size)]
            start += size
        return out


def attribution_workload(groups: int, why: str, seed: int = 0) -> AttributionWorkload:
    """The first `groups` explanation groups of the shipped CEDAR sample (``why``: the model
    format's why-turn). A corruption identical to an earlier target of its group is scored once."""
    from collections import defaultdict

    dialogues = load_dialogues(SAMPLE_DATA)
    by_id = {d.id: d for d in dialogues}
    pairs = defaultdict(list)
    for p in corrupt_dialogues(dialogues, seed).pairs:
        pairs[(p.dialogue_id, p.explanation_index)].append(p)
    chosen = list(pairs.items())[:groups]
    out, n_pairs = [], 0
    for (did, _), ps in chosen:
        d = by_id[did]
        context = tuple(d.history) + (d.response, why)
        texts = list(dict.fromkeys([ps[0].valid_text] + [p.corrupted_text for p in ps]))
        out.append([NLLItem(context=context, target=t) for t in texts])
        n_pairs += len(ps)
    return AttributionWorkload(out, n_pairs)


def templated_items(n: int, seed: int, pool_size: int, pool_seed: int) -> list[NLLItem]:
    """`n` probe-shaped items: 2-6 context turns and a target, drawn (seeded by `seed`) from
    `pool_size` templated sentences (seeded by `pool_seed`)."""
    rng = random.Random(seed)
    pool = templated_sentences(pool_size, seed=pool_seed)
    return [NLLItem(context=tuple(rng.sample(pool, rng.randint(2, 6))), target=rng.choice(pool))
            for _ in range(n)]


def chat_turns(n: int, rng: random.Random, pool: Sequence[str], words: tuple[int, int] = (10, 25)
               ) -> list[str]:
    """`n` chat turns, each templated sentences from `pool` joined until it has `words[0]` to
    `words[1]` words (a target drawn by `rng`; the last sentence is cut to the target)."""
    out = []
    for _ in range(n):
        want, turn = rng.randint(*words), []
        while len(turn) < want:
            turn += rng.choice(pool).split()
        out.append(" ".join(turn[:want]))
    return out


def item_json(item: NLLItem) -> dict[str, Any]:
    """A context-and-target item as POST /v1/nll takes it."""
    return {"context": list(item.context or ()), "target": item.target}


def naive_nlls(model: Any, device: str, encoded: Sequence[EncodedItem]) -> list[float]:
    """One item per forward pass; each NLL is the model's own loss (HF ``labels``, -100 on the
    source positions)."""
    import torch

    out = []
    with torch.inference_mode():
        for e in encoded:
            ids = torch.tensor([list(e.source_ids + e.target_ids)], device=device)
            labels = torch.tensor([[-100] * len(e.source_ids) + list(e.target_ids)], device=device)
            out.append(model(input_ids=ids, labels=labels).loss.item())
    return out


#: A 6-turn chat and 8 candidate replies: the rerank request of the latency benchmarks.
RERANK_CONTEXT = [
    {"speaker": "user", "text": "Hi! Do you have any pets?"},
    {"speaker": "bot", "text": "Yes, I have two dogs and a cat."},
    {"speaker": "user", "text": "What are their names?"},
    {"speaker": "bot", "text": "Rex, Max and Luna. I adopted them last year."},
    {"speaker": "user", "text": "Do you take them to the park?"},
    {"speaker": "bot", "text": "Every morning before work, I love it."},
]
RERANK_CANDIDATES = ["I do not have any pets.", "Rex loves the park the most.", "I hate dogs.",
                     "Luna stays at home, she is a cat.", "I have never been to a park.",
                     "We go at seven every day.", "My dogs are called Bella and Coco.",
                     "Yes, it is fun."]


# ------------------------------------------------------------------------- compared methods
class Unavailable(Exception):
    """A compared method cannot run in this run (an optional package is missing, an option
    skips it, the dtype or device does not apply); the message says why."""


@dataclass
class Run:
    """One run of a method over its whole workload.

    `nlls`: per item, in workload order. `computed`: positions the model computed, padding
    excluded; `padded`: with padding; `projected`: positions projected to the vocabulary (None:
    not known). `comparable`: per item, whether its NLL may be compared with the reference
    method's (None: every item). `seconds`: the method's own timing of the run when it times
    itself (an HTTP run, from its first request to its last answer); None: the wall time of the
    call. `detail`: what the method alone reports (engine statistics, per-request timings)."""

    nlls: list[float]
    computed: int | None = None
    padded: int | None = None
    projected: int | None = None
    comparable: list[bool] | None = None
    seconds: float | None = None
    detail: Any = None


@dataclass
class Method:
    """A compared method, set up and warmed up: `run()` scores the whole workload once;
    `repeat` timed runs are made. `key` names it in results and JSON, `label` in tables."""

    key: str
    label: str
    run: Callable[[], Run]
    repeat: int = 1


@dataclass
class Result:
    """A method's timed runs: each run's seconds and what it scored, in order."""

    key: str
    label: str
    seconds: list[float] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)

    @property
    def best(self) -> float:
        """The fastest run's seconds (the figure reported)."""
        return min(self.seconds)

    @property
    def last(self) -> Run:
        """What the last run scored."""
        return self.runs[-1]


def interleave(methods: Sequence[Method], device: str = "cpu") -> dict[str, Result]:
    """Time every method `repeat` times, round-robin: round k runs, in the given order, each
    method with more than k runs to make. Keyed by method key, in the given order."""
    results = {m.key: Result(m.key, m.label) for m in methods}
    for k in range(max((m.repeat for m in methods), default=0)):
        for m in methods:
            if k < m.repeat:
                run, seconds = timed(m.run, device)
                results[m.key].seconds.append(run.seconds if run.seconds is not None else seconds)
                results[m.key].runs.append(run)
    return results


def engine_run(engine: NLLScorer, encoded: Sequence[EncodedItem], projected: int | None = None
               ) -> Run:
    """One ``engine.score_encoded`` call over `encoded`: its NLLs, computed and padded
    positions, `projected` as given, and the call's ``BatchStats`` as the detail."""
    results, stats = engine.score_encoded(encoded)
    return Run([r.nll for r in results], computed=stats.real_tokens, padded=stats.padded_tokens,
               projected=projected, detail=stats)


def max_abs_diff(a: Sequence[float], b: Sequence[float],
                 comparable: Sequence[bool] | None = None) -> float:
    """max |a - b| over the items marked comparable (all when None); 0 when none are."""
    mask = comparable if comparable is not None else [True] * len(a)
    return max((abs(x - y) for x, y, c in zip(a, b, mask) if c), default=0.0)


# ------------------------------------------------------------------------ serving on loopback
@contextmanager
def serve_app(args: AppArgs | dict[str, Any], *, name: str = "bench", num_cpus: int | None = 4,
              port: int | None = None) -> Iterator[str]:
    """The application built from `args` on a local Ray instance, on 127.0.0.1 (a free port
    unless `port`): yields its base URL, shuts Ray down after. Replica metrics reach the node's
    metrics agent every second (Ray's default is 10 s) unless ``RAY_metrics_report_interval_ms``
    is set."""
    os.environ.setdefault("RAY_metrics_report_interval_ms", "1000")
    with serve_locally(AppArgs.model_validate(args), num_cpus=num_cpus, name=name,
                       port=port) as url:
        yield url


def nll_app_args(source: Path, config: ModelConfig, *, threads: int,
                 serving: dict[str, Any] | None = None, request_timeout_s: float = 1800
                 ) -> dict[str, Any]:
    """App arguments serving the benchmark checkpoint `source` as one NLL replica named
    :data:`NLL_MODEL` with `config`'s window, dtype and device: one CPU, `threads` torch threads,
    64 ongoing requests, 16,384 tokens per engine call; `serving` adds or overrides options."""
    return {
        "stand_ins": str(source.parent / "stand-ins"), "request_timeout_s": request_timeout_s,
        "models": [{"name": NLL_MODEL,
                    "overrides": {"source": str(source), "max_length": config.max_length,
                                  "dtype": config.dtype, "device": config.device},
                    "serving": {"num_cpus": 1, "num_threads": threads, "max_ongoing_requests": 64,
                                "max_batch_tokens": 16384, **(serving or {})}}],
    }


# ----------------------------------------------------------------------------- HTTP load
@dataclass
class ClosedLoopRun:
    """What :func:`closed_loop_nll` measured: wall seconds for all requests, each request's NLLs
    (in request order), and per request (in completion order) its latency and the replica's
    timing headers: engine time (``x-compute-time``), batch queue (``x-queue-time``) and
    tokenization (``x-tokenization-time``), in seconds."""

    seconds: float
    nlls: list[list[float]]
    latencies: list[float] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)
    queue_s: list[float] = field(default_factory=list)
    tokenize_s: list[float] = field(default_factory=list)


async def closed_loop_nll(url: str, bodies: Sequence[dict[str, Any]], clients: int,
                          timeout: float = 600) -> ClosedLoopRun:
    """POST every body to /v1/nll from `clients` concurrent closed-loop clients; an HTTP error
    aborts the run."""
    queue = list(enumerate(bodies))
    run = ClosedLoopRun(0.0, [[] for _ in bodies])
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
        async def worker() -> None:
            while queue:
                k, body = queue.pop(0)
                start = time.perf_counter()
                r = await client.post("/v1/nll", json=body)
                run.latencies.append(time.perf_counter() - start)
                r.raise_for_status()
                for into, header in ((run.compute_s, "x-compute-time"),
                                     (run.queue_s, "x-queue-time"),
                                     (run.tokenize_s, "x-tokenization-time")):
                    into.append(float(r.headers.get(header, "nan")) / 1000)  # ms, as TEI
                run.nlls[k] = [x["nll"] for x in r.json()["results"]]
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        run.seconds = time.perf_counter() - start
    return run


async def open_loop(rate: float, seconds: float,
                    send: Callable[[], Coroutine[Any, Any, object]]) -> float:
    """Start ``send()`` at a fixed `rate` per second for `seconds` (``int(rate * seconds)``
    calls, each its own task, on schedule whatever the answers), wait for all; returns the calls
    per second from the first start to the last answer."""
    tasks: list[asyncio.Task[object]] = []
    start = time.perf_counter()
    n = int(rate * seconds)
    for k in range(n):
        delay = start + k / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send()))
    await asyncio.gather(*tasks)
    return n / (time.perf_counter() - start)


# -------------------------------------------------------------------------- replica metrics
@dataclass
class ReplicaWork:
    """A model's work counters summed over its replicas (``dialscore_work_*``, in the ledger's
    unit: tokens or pairs; engine time in seconds). Admitted work is done, dropped (never
    computed), wasted (computed for a cancelled request) or still in flight."""

    admitted: float = 0.0
    done: float = 0.0
    dropped: float = 0.0
    wasted: float = 0.0
    busy_s: float = 0.0
    wasted_s: float = 0.0
    orphan_s: float = 0.0

    @property
    def in_flight(self) -> float:
        return self.admitted - self.done - self.dropped - self.wasted

    def since(self, before: ReplicaWork) -> ReplicaWork:
        """The counts added after `before` was read."""
        return ReplicaWork(**{k: getattr(self, k) - getattr(before, k) for k in vars(self)})


def replica_work(app: str, model: str) -> ReplicaWork:
    """`model`'s work counters in the Serve application `app` (Ray initialised in this process),
    as its replicas last reported them to the nodes' metrics agents (counters: exact, but up to a
    report interval late)."""
    texts = replica_metrics()
    where = {"application": app, "model": model}

    def total(name: str, **labels: str) -> float:
        return sample_sum(texts, f"ray_dialscore_{name}_total", **where, **labels)

    return ReplicaWork(
        admitted=total("work_admitted"), done=total("work_done"),
        dropped=total("work_abandoned", kind="dropped"), wasted=total("work_abandoned", kind="wasted"),
        busy_s=total("work_seconds", kind="busy"), wasted_s=total("work_seconds", kind="wasted"),
        orphan_s=total("work_seconds", kind="orphan"))


def cache_counters(app: str, model: str) -> dict[str, float]:
    """`model`'s replicas' engine and context cache counters in the Serve application `app`,
    summed over replicas since they started, from one read of their metrics:

    * ``positions``: positions computed, exactly: the item tokens fed
      (``dialscore_tokens_scored_total``, both sides) less those not recomputed
      (``dialscore_reused_tokens_total``: ``item_tokens - real_tokens`` per engine call), so the
      engine's ``BatchStats.real_tokens`` summed over its calls (padding not counted).
      ``dialscore_batch_tokens_sum`` would say the same but is not exact: Ray exports a
      histogram's sum rebuilt from its buckets (a 211-position call reads as 160, a 1,067-position
      one as 2,560);
    * ``reused_tokens``: the positions not recomputed (within a call or from the cache);
    * ``engine_calls``: engine calls (``dialscore_batch_tokens_count``);
    * ``hits``, ``misses``: context cache lookups that found a prefix, and that did not;
    * ``cached_tokens``: positions read from the context cache."""
    texts = replica_metrics()
    where = {"application": app, "model": model}

    def total(name: str, **labels: str) -> float:
        return sample_sum(texts, f"ray_dialscore_{name}", **where, **labels)

    fed, reused = total("tokens_scored_total"), total("reused_tokens_total")
    return {"positions": fed - reused, "reused_tokens": reused,
            "engine_calls": total("batch_tokens_count"),
            "hits": total("context_cache_lookups_total", result="hit"),
            "misses": total("context_cache_lookups_total", result="miss"),
            "cached_tokens": total("context_cache_tokens_total")}


def settled_work(app: str, model: str, limit_s: float = 120, quiet_s: float = 2.5) -> ReplicaWork:
    """`model`'s counters once nothing is in flight and they have not changed for `quiet_s`
    (longer than a report interval: the last chunk's counts have arrived), or after `limit_s`."""
    deadline = time.monotonic() + limit_s
    last, since = replica_work(app, model), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = replica_work(app, model)
        if now != last:
            last, since = now, time.monotonic()
        elif now.in_flight <= 0 and time.monotonic() - since >= quiet_s:
            break
    return last


# ---------------------------------------------------------------------------------- output
@dataclass(frozen=True)
class Column:
    """A table column: its title, width, and the format spec of its numbers (``.2f``, ``.1%``);
    `left`: left-aligned (text). A cell that is None prints as ``-``; a string as it is."""

    title: str
    width: int
    fmt: str = ""
    left: bool = False

    def cell(self, value: object) -> str:
        text = ("-" if value is None else value if isinstance(value, str)
                else format(value, self.fmt))
        return f"{text:<{self.width}s}" if self.left else f"{text:>{self.width}s}"


def table(columns: Sequence[Column], rows: Sequence[Sequence[object]], indent: str = "",
          tail: str = "") -> str:
    """A plain-text table: the titles, a rule, a line per row (`tail`: after the last title)."""
    head = indent + " ".join(c.cell(c.title) for c in columns) + tail
    lines = [head, indent + "-" * (len(head) - len(indent))]
    lines += [indent + " ".join(c.cell(v) for c, v in zip(columns, row)) for row in rows]
    return "\n".join(lines)


def write_json(path: str | Path | None, data: object) -> None:
    """Write `data` as indented JSON to `path` (nothing when None); non-JSON values (paths)
    are written as strings."""
    if path is not None:
        Path(path).write_text(json.dumps(data, indent=1, default=str) + "\n")
