"""Probe-shaped scoring, several ways, in one run, on identical items and one checkpoint.

Workload: CEDAR attribution probing. For every valid explanation of clients/dialscore/probes/cedar_sample.jsonl
the items are ``context = history + [response, "Why?"]`` with the valid explanation and each of its
corruptions as targets (swapped, negation, incorrect, shuffle, dropped, reversed; ``incorrect`` is
skipped where the dialogue has no invalid explanation): 6-7 continuations after one shared prefix.
A probe *pair* is (valid, one corruption); pairs/s counts those comparisons.

Methods (all score the same token ids; NLLs are checked against (c) to 1e-4 in float32), one
function each below:

  (a) naive      one item per forward pass, the model's own loss (HF ``labels``, -100 on the source);
  (b) lm-eval    lm-evaluation-harness ``HFLM.loglikelihood`` on (context, continuation) strings
                 built so that its tokenization equals the engine's (checked; pairs whose tokens
                 differ would be compared on speed only, and the table says how many);
  (c0) engine on stock kernels: as (c), ``fast_kernels=False`` (PyTorch's own float32 matmul, which
                 is MKL's, and GPT-2's Python-composed GELU), to separate batching from kernels;
  (c) engine     ``NLLEngine.score_encoded``, all items in one call, prefix reuse off, the engine's
                 CPU kernels (services/dialscore_server/nll/engine/kernels.py: oneDNN linear layers, fused GELU);
  (d) engine+reuse  the same with shared-prefix reuse on (the default);
  (d1) all oneDNN  (d) with every float32 linear and the head through oneDNN whether or not it
                 measured faster (``--forced-onednn``; the kernels' behaviour before they timed
                 both routes, services/dialscore_server/nll/engine/kernel_choice.py);
  (e) HTTP       POST /v1/nll through the Ray Serve application on loopback (gateway + one model
                 replica, reuse on), requests of whole explanation groups from concurrent clients.
  (f) engine int8   (d) with the registry's ``dtype: int8`` (int8 body linears, float32 head and
                 log-softmax; services/dialscore_server/checkpoints/quantize.py), activation rows
                 quantized over their own [min, max];
  (g) CT2 fp32   CTranslate2 ``Generator.score_batch`` on the same token ids (as token strings),
                 batches of the engine's token budget in tokens, same threads, float32
                 (loadtests/ct2_peer.py; bench environment only: loadtests/requirements-bench.txt);
  (h) CT2 int8   the same with ``compute_type="int8"``.

(a), (c0), (c), (d), (d1), (f), (g) and (h) alternate run by run; (b) runs after them, and (e)
alternates with (d) re-timed while the Serve app is up.

Reduced-precision rows ((f), (h)) report, besides max|dNLL| against (c), the pair-decision
agreement with (c): the share of (valid, corruption) pairs ordered the same way (valid scored
lower or not). Run with ``--dtype float32`` for these rows. ``--agreement-groups N`` adds an
untimed comparison of (f) and (h) with (d) on the first N groups (all 156: 896 pairs), with
Wilson intervals and McNemar's paired test (loadtests/probe_agreement.py).

Columns: pairs/s, items/s, item tokens/s (source + target of every item: the same work measure
for every method), computed tokens/s (positions the model actually ran, padding excluded),
padding waste (padded positions / all positions run; (b) estimated from lm-eval's batching), the
ratios against (a) and (b) in pairs/s, and MFU: executed matrix FLOPs per second over the peak
matrix-multiply FLOP/s measured in the same run for the same dtype: the faster of a 2048^3
``torch.matmul`` and the same product through oneDNN's linear op (on this AMD CPU oneDNN is about
twice as fast as the MKL path behind ``torch.matmul`` in float32), best of 5, before and after the
methods, the highest kept. Executed FLOPs = 2 x non-embedding parameters x computed
tokens + 2 x width x vocabulary x positions projected to the vocabulary ((a) and (b) project every
position, the engine only the scored target positions). Attention-score FLOPs and padding are not
counted. (e) uses (d)'s computed-token count.

    python -m loadtests.bench_probe --model small
    python -m loadtests.bench_probe --model medium            # DialoGPT-medium shapes, 355M
    python -m loadtests.bench_probe --model medium --dtype bfloat16 --no-http

``(b)`` needs lm-evaluation-harness with its ``hf`` model. Install it in a separate bench
environment, torch first (the CPU build on disk; otherwise pip resolves a CUDA build)::

    python3 -m venv /tmp/benchenv && /tmp/benchenv/bin/pip install torch==2.13.0
    /tmp/benchenv/bin/pip install -e '.[serve]' 'lm_eval[hf]'
    /tmp/benchenv/bin/python -m loadtests.bench_probe --model medium

Without it, (b) is reported as skipped. Checkpoints are written under $TMPDIR/dialscore-bench
(small: the gpt2 stand-in re-initialised N(0, 0.3); medium: random GPT-2 with DialoGPT-medium's
shapes, 1.4 GB). Traffic goes to 127.0.0.1 only. Exit status 1 when any NLL disagrees.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from dialscore_server.checkpoints.loading import LoadedModel, load_model
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.nll.engine import kernel_choice, kernels
from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.engine import NLLEngine
from loadtests import ct2_peer
from loadtests.common import (
    NLL_MODEL, WORK, AttributionWorkload, Column, Method, Result, Run, Unavailable,
    add_threads, attribution_workload, checkpoint, closed_loop_nll, engine_run, interleave,
    item_json, max_abs_diff, model_config, naive_nlls, nll_app_args, parser, peak_flops,
    quiet_torch, serve_app, table, write_json,
)
from loadtests.probe_agreement import agreement, print_agreement

TOLERANCE = 1e-4
DEFAULT_GROUPS = {"small": 156, "medium": 12}
#: Reduced-precision rows: their NLLs are not held to TOLERANCE.
REDUCED = {"int8", "ct2_int8"}
#: Items each engine scores once before any timing (first-call allocations, packed weights).
WARM = 14


@dataclass
class ProbeMethod(Method):
    """A :class:`~loadtests.common.Method` that can also score other items once, untimed
    (`nlls_of`: item NLLs in order), for the decision-agreement comparison."""

    nlls_of: Callable[[Sequence[EncodedItem]], list[float]] | None = None


@dataclass
class Probe:
    """What every method shares: the options, the checkpoint, the workload encoded once by the
    reuse-off engine (:attr:`plain`, which is (c)), and the timing counts."""

    args: argparse.Namespace
    source: Path
    config: ModelConfig
    loaded: LoadedModel
    plain: NLLEngine
    workload: AttributionWorkload
    encoded: list[EncodedItem]

    @property
    def device(self) -> str:
        return self.loaded.device

    @property
    def repeat(self) -> int:
        """Timed runs of (a), (b) and (c0)."""
        return self.args.repeat or (3 if self.args.model == "small" else 2)

    @property
    def item_tokens(self) -> int:
        return sum(e.cost for e in self.encoded)

    @property
    def target_tokens(self) -> int:
        return sum(len(e.target_ids) for e in self.encoded)

    @cached_property
    def body_params(self) -> int:
        """Non-embedding parameters: the transformer blocks'."""
        return sum(x.numel() for x in self.loaded.model.base_model.h.parameters())

    @cached_property
    def stock(self) -> LoadedModel:
        """A second copy of the checkpoint, left as loaded: (a) and (c0) share it ((c) and (d)
        share :attr:`loaded`, which their engine patches with its CPU kernels)."""
        return load_model(self.config)

    def engine(self, **options: Any) -> NLLEngine:
        """An engine on `options` (``loaded``, ``prefix_reuse``, ...) with the run's token budget
        and threads; a `config` option replaces the run's."""
        config = options.pop("config", self.config)
        return NLLEngine(config, token_budget=self.args.token_budget,
                         num_threads=self.args.threads, **options)


def prepare(args: argparse.Namespace) -> Probe:
    """Build the checkpoint, load it, encode the workload."""
    source = checkpoint(args.model)
    config = model_config(source, args.dtype, args.device)
    loaded = load_model(config)
    plain = NLLEngine(config, loaded=loaded, token_budget=args.token_budget,
                      num_threads=args.threads, prefix_reuse=False)
    workload = attribution_workload(args.groups or DEFAULT_GROUPS[args.model],
                                    config.format.why_turn)
    return Probe(args, source, config, loaded, plain, workload,
                 [plain.encode(it) for it in workload.items])


# ------------------------------------------------------------------------------ the methods
def _engine_method(p: Probe, key: str, label: str, engine: NLLEngine, repeat: int) -> ProbeMethod:
    """`engine` scoring the whole workload in one call, warmed up."""
    engine.score_encoded(p.encoded[:WARM])
    return ProbeMethod(key, label, lambda: engine_run(engine, p.encoded, p.target_tokens), repeat,
                       nlls_of=lambda encoded: engine_run(engine, encoded).nlls)


def naive_loop(p: Probe) -> ProbeMethod:
    """(a): one item per forward pass of the stock model, its own loss."""
    model = p.stock.model
    naive_nlls(model, p.device, p.encoded[:2])
    tokens = p.item_tokens
    return ProbeMethod("naive", "(a) naive loop, HF loss, 1 item",
                       lambda: Run(naive_nlls(model, p.device, p.encoded), computed=tokens,
                                   padded=tokens, projected=tokens), p.repeat)


def lm_eval_harness(p: Probe) -> ProbeMethod:
    """(b): lm-evaluation-harness's ``HFLM.loglikelihood``, in this process, same threads, its
    own copy of the checkpoint. The context is the engine's formatted source and the
    continuation the target with the eos token appended as text (the engine scores eos as the
    target's last token); items whose lm-eval tokens differ from the engine's are marked not
    comparable."""
    import torch

    if p.args.no_lmeval:
        raise Unavailable("skipped (--no-lmeval)")
    try:
        from lm_eval.api.instance import Instance
        from lm_eval.models.huggingface import HFLM
    except ImportError as exc:
        raise Unavailable("lm-eval not installed: pip install 'lm_eval[hf]' into a separate bench "
                          f"environment (see this script's docstring) ({exc})") from None
    batch = p.args.lmeval_batch_size
    lm = HFLM(pretrained=str(p.source), backend="causal", batch_size=batch, device=p.device,
              dtype=p.args.dtype, max_length=p.config.max_length)
    torch.set_num_threads(p.args.threads)
    eos = p.plain.tokenizer.eos_token if p.plain.fmt.append_eos else ""
    reqs = []
    for item in p.workload.items:
        pinned, body = p.plain.format_parts(item)
        reqs.append((pinned + body, item.target + eos))
    tokens = [lm._encode_pair(c, t) for c, t in reqs]
    same = [tuple(c) == e.source_ids and tuple(t) == e.target_ids
            for (c, t), e in zip(tokens, p.encoded)]
    lengths = [len(c) + len(t) - 1 for c, t in tokens]
    # Positions lm-eval runs: its Collator sorts by length, longest first, then cuts batches.
    ordered = sorted(lengths, reverse=True)
    padded = sum(len(ordered[k:k + batch]) * ordered[k] for k in range(0, len(ordered), batch))

    def loglikelihoods(requests: Sequence[tuple[str, str]]) -> list[float]:
        instances = [Instance(request_type="loglikelihood", doc={}, arguments=r, idx=i)
                     for i, r in enumerate(requests)]
        return [ll for ll, _ in lm.loglikelihood(instances, disable_tqdm=True)]

    def run() -> Run:
        lls = loglikelihoods(reqs)
        return Run([-ll / len(e.target_ids) for ll, e in zip(lls, p.encoded)],
                   computed=sum(lengths), padded=padded, projected=padded, comparable=same)

    loglikelihoods(reqs[:4])  # warm-up
    return ProbeMethod("lmeval", f"(b) lm-eval HFLM.loglikelihood bs={batch}", run, p.repeat)


def engine_stock_kernels(p: Probe) -> ProbeMethod:
    """(c0): the engine, reuse off, on the stock model's PyTorch kernels."""
    return _engine_method(p, "stock", "(c0) engine, reuse off, stock kernels",
                          p.engine(loaded=p.stock, prefix_reuse=False, fast_kernels=False),
                          p.repeat)


def engine_no_reuse(p: Probe) -> ProbeMethod:
    """(c), the reference: the engine with its CPU kernels, prefix reuse off."""
    return _engine_method(p, "engine", "(c) engine, prefix reuse off", p.plain,
                          p.args.repeat_engine)


def engine_reuse(p: Probe) -> ProbeMethod:
    """(d): the engine as served, prefix reuse on."""
    return _engine_method(p, "reuse", "(d) engine, prefix reuse on",
                          p.engine(loaded=p.loaded, prefix_reuse=True), p.args.repeat_engine)


def engine_all_onednn(p: Probe) -> ProbeMethod:
    """(d1): (d) on its own copy of the checkpoint with every linear layer and the head through
    oneDNN, unmeasured."""
    forced = load_model(p.config)
    kernels.optimize(forced.model, onednn=True)  # the engine's own call then finds it decided
    engine = p.engine(loaded=forced, prefix_reuse=True)
    engine.projection.onednn = True
    return _engine_method(p, "forced", "(d1) engine, reuse on, all oneDNN", engine,
                          p.args.repeat_engine)


def engine_int8(p: Probe) -> ProbeMethod:
    """(f): the registry's ``dtype: int8``, prefix reuse on (float32 runs on CPU only)."""
    if p.args.no_int8:
        raise Unavailable("skipped (--no-int8)")
    if p.args.dtype != "float32" or p.device != "cpu":
        raise Unavailable("int8 is compared with float32 on CPU only")
    engine = p.engine(config=p.config.model_copy(update={"dtype": "int8"}), prefix_reuse=True)
    return _engine_method(p, "int8", "(f) engine int8, prefix reuse on", engine,
                          p.args.repeat_engine)


def ctranslate2(p: Probe, compute_type: str) -> ProbeMethod:
    """(g) float32 or (h) int8: CTranslate2 scoring the same token ids, batches of the engine's
    token budget in tokens. It computes every position of every item and projects all but the
    first to the vocabulary; its padding is unknown."""
    if p.args.no_ct2:
        raise Unavailable("skipped (--no-ct2)")
    if p.args.dtype != "float32" or p.device != "cpu":
        raise Unavailable("CTranslate2 is compared with float32 on CPU only")
    if compute_type == "float32" and p.args.no_ct2_float32:
        raise Unavailable("skipped (--no-ct2-float32)")
    missing = ct2_peer.available()
    if missing:
        raise Unavailable(missing)
    path = ct2_peer.convert(p.source, WORK / f"ct2-{p.args.model}")
    scorer = ct2_peer.Ct2Scorer(path, compute_type, p.args.threads, p.plain.token_budget,
                                p.plain.tokenizer)

    def nlls_of(encoded: Sequence[EncodedItem]) -> list[float]:
        return scorer.nlls(scorer.strings(encoded), [len(e.target_ids) for e in encoded])

    strings = scorer.strings(p.encoded)  # prepared once, outside the timings
    lengths = [len(e.target_ids) for e in p.encoded]
    scorer.nlls(strings[:WARM], lengths[:WARM])
    key, label = (("ct2_float32", "(g) CTranslate2 float32 score_batch") if compute_type == "float32"
                  else ("ct2_int8", "(h) CTranslate2 int8 score_batch"))
    return ProbeMethod(key, label,
                       lambda: Run(scorer.nlls(strings, lengths), computed=p.item_tokens,
                                   projected=p.item_tokens - len(p.encoded)),
                       p.args.repeat_engine, nlls_of=nlls_of)


def http_serving(p: Probe, beside: Method) -> tuple[Result, Result]:
    """(e): the checkpoint served on loopback (gateway + one NLL replica, reuse on), every
    request sent by ``--clients`` closed-loop clients; each round alternates with a run of
    `beside` ((d)), so both see the same background (Ray's processes idle beside them, other
    load on the machine). Returns (`beside` re-timed, (e)); (e) computes what (d) computes."""
    args = p.args
    per = args.groups_per_request
    groups = p.workload.groups
    bodies = [{"model": NLL_MODEL, "items": [item_json(it) for g in groups[k:k + per] for it in g]}
              for k in range(0, len(groups), per)]
    serving = {"token_budget": args.token_budget, "prefix_reuse": True,
               **({"chunk_tokens": args.chunk_tokens} if args.chunk_tokens else {})}
    app = nll_app_args(p.source, p.config, threads=args.threads, serving=serving)

    def over_http(url: str) -> Run:
        run = asyncio.run(closed_loop_nll(url, bodies, args.clients, timeout=1800))
        return Run([x for r in run.nlls for x in r], projected=p.target_tokens,
                   seconds=run.seconds, detail=run)

    with serve_app(app, name="bench-probe") as url:
        import httpx

        httpx.post(f"{url}/v1/nll", json={"model": NLL_MODEL, "items": bodies[0]["items"][:7]},
                   timeout=1800).raise_for_status()  # warm-up
        got = interleave([Method("reuse_beside_http", beside.label, beside.run, args.repeat_engine),
                          Method("http", "(e) HTTP via Ray Serve, reuse on", lambda: over_http(url),
                                 args.repeat_engine)], p.device)
    local, http = got["reuse_beside_http"], got["http"]
    for run in http.runs:
        run.computed = local.last.computed
    return local, http


# ------------------------------------------------------------------------------- the driver
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_torch(args.threads)
    p = prepare(args)
    peaks = [peak_flops(args.dtype, p.device)]
    notes: dict[str, str] = {}

    def build(key: str, make: Callable[[], ProbeMethod]) -> ProbeMethod | None:
        try:
            return make()
        except Unavailable as why:
            notes[key] = str(why)
            return None

    methods = {k: m for k, m in {
        "naive": None if args.no_naive else build("naive", lambda: naive_loop(p)),
        "stock": None if args.no_stock_engine else build("stock", lambda: engine_stock_kernels(p)),
        "engine": engine_no_reuse(p),
        "reuse": engine_reuse(p),
        "forced": build("forced", lambda: engine_all_onednn(p)) if args.forced_onednn else None,
        "int8": build("int8", lambda: engine_int8(p)),
        "ct2_float32": build("ct2", lambda: ctranslate2(p, "float32")),
        "ct2_int8": build("ct2", lambda: ctranslate2(p, "int8")),
    }.items() if m is not None}
    results = interleave(list(methods.values()), p.device)
    big = decision_agreement(p, methods) if args.agreement_groups else None
    lmeval = build("lmeval", lambda: lm_eval_harness(p))
    if lmeval is not None:
        results.update(interleave([lmeval], p.device))
        del lmeval
        gc.collect()
    peaks.append(peak_flops(args.dtype, p.device))
    if args.no_http:
        notes["http"] = "(e) skipped (--no-http)"
    else:  # the other in-process methods release their models first
        reuse = methods["reuse"]
        methods.clear()
        p.__dict__.pop("stock", None)
        gc.collect()
        results["reuse_beside_http"], results["http"] = http_serving(p, reuse)
    rows = figures(p, results, max(v for peak in peaks for v in peak.values()))
    ok = report(p, results, rows, peaks, notes, big)
    write_json(args.json, {"args": vars(args), "peak_flops": [pk["torch.matmul"] for pk in peaks],
                           "rows": rows, "pairs": p.workload.pairs, "items": len(p.encoded),
                           "item_tokens": p.item_tokens, "agreement": big,
                           "kernel_routes": kernel_choice.described()})
    return 0 if ok else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = parser(__doc__)
    p.add_argument("--model", choices=["small", "medium"], default="small")
    p.add_argument("--groups", type=int, default=None,
                   help=f"explanation groups (7 items each, 6 without `incorrect`); default "
                        f"{DEFAULT_GROUPS['small']} (all) small, {DEFAULT_GROUPS['medium']} medium")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument("--device", default="cpu")
    add_threads(p)
    p.add_argument("--token-budget", type=int, default=None,
                   help="engines' padded tokens per pass (default: the engine's own; on CPU 2^20 / width)")
    p.add_argument("--repeat", type=int, default=None,
                   help="(a), (b) and (c0): time this many runs and keep the fastest (default 3 "
                        "small, 2 medium)")
    p.add_argument("--repeat-engine", type=int, default=3,
                   help="(c), (d), (d1), (e), (f), (g), (h): runs, fastest kept")
    p.add_argument("--no-stock-engine", action="store_true",
                   help="skip (c0), the engine on stock PyTorch kernels (NLLEngine(fast_kernels=False))")
    p.add_argument("--lmeval-batch-size", type=int, default=32)
    p.add_argument("--no-lmeval", action="store_true", help="skip (b)")
    p.add_argument("--no-naive", action="store_true", help="skip (a)")
    p.add_argument("--no-http", action="store_true", help="skip (e)")
    p.add_argument("--forced-onednn", action="store_true",
                   help="add (d1): (d) with every linear through oneDNN (its own model copy)")
    p.add_argument("--no-ct2-float32", action="store_true", help="skip (g), keep (h)")
    p.add_argument("--no-int8", action="store_true", help="skip (f)")
    p.add_argument("--agreement-groups", type=int, default=0,
                   help="also score the first N groups once with (d), (f) and (h) and report "
                        "decision agreement with (d) with confidence intervals (0: off)")
    p.add_argument("--no-ct2", action="store_true", help="skip (g) and (h)")
    p.add_argument("--groups-per-request", type=int, default=4, help="(e): explanation groups per request")
    p.add_argument("--clients", type=int, default=4, help="(e): concurrent HTTP clients")
    p.add_argument("--chunk-tokens", type=int, default=None,
                   help="(e): the replica's chunk_tokens (default: the service's)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    return p.parse_args(argv)


def decision_agreement(p: Probe, methods: dict[str, ProbeMethod]) -> dict[str, Any]:
    """(d), (f) and (h) on the first ``--agreement-groups`` groups, each once, the float32
    reference first (see loadtests/probe_agreement.py)."""
    big = attribution_workload(p.args.agreement_groups, p.config.format.why_turn)
    encoded = [p.plain.encode(it) for it in big.items]
    def scorer(method: ProbeMethod) -> Callable[[], list[float]]:
        assert method.nlls_of is not None
        return partial(method.nlls_of, encoded)

    scorers: dict[str, Callable[[], list[float]]] = {
        key: scorer(methods[key]) for key in ("reuse", "int8", "ct2_int8") if key in methods}
    out = agreement(scorers, "reuse", big.pair_index())
    out.update(groups=len(big.groups), items=len(encoded), pairs=big.pairs)
    return out


def figures(p: Probe, results: dict[str, Result], peak: float) -> dict[str, dict[str, Any]]:
    """Each timed method's row of the table (the JSON's ``rows``), in table order."""
    mcfg = p.loaded.model.config
    head_flops = 2 * mcfg.n_embd * mcfg.vocab_size
    ref = results["engine"].last.nlls
    pairs = p.workload.pair_index()
    n = len(p.encoded)
    rows = {}
    order = ["naive", "lmeval", "stock", "engine", "reuse", "forced", "http", "int8",
             "ct2_float32", "ct2_int8"]
    for key in (k for k in order if k in results):
        r = results[key]
        s = r.last
        t = r.best
        computed = s.computed or 0
        flops = 2 * p.body_params * computed + head_flops * (s.projected or 0)
        rows[key] = {
            "method": r.label, "seconds": t, "all_runs": r.seconds,
            "pairs_s": p.workload.pairs / t, "items_s": n / t, "item_tokens_s": p.item_tokens / t,
            "computed_tokens_s": computed / t,
            "padding_waste": None if s.padded is None else 1 - computed / s.padded,
            "mfu": flops / t / peak, "max_abs_diff": max_abs_diff(s.nlls, ref, s.comparable),
            "pair_agreement": statistics.fmean((ref[i] < ref[j]) == (s.nlls[i] < s.nlls[j])
                                               for i, j in pairs),
        }
    if "http" in rows:
        rows["http"]["in_process_beside_s"] = results["reuse_beside_http"].best
    return rows


def report(p: Probe, results: dict[str, Result], rows: dict[str, dict[str, Any]],
           peaks: list[dict[str, float]], notes: dict[str, str], big: dict[str, Any] | None
           ) -> bool:
    """Print the run's figures; True when every NLL agrees with (c) (float32 only)."""
    import torch

    args = p.args
    mcfg = p.loaded.model.config
    n = len(p.encoded)
    peak = max(v for pk in peaks for v in pk.values())
    src_mean = statistics.fmean(len(e.source_ids) for e in p.encoded)
    tgt_mean = statistics.fmean(len(e.target_ids) for e in p.encoded)
    sizes = p.workload.sizes
    print(f"model   : {args.model}: {p.source} ({p.body_params / 1e6:.0f}M non-embedding params, width "
          f"{mcfg.n_embd}, {mcfg.n_layer} layers, vocab {mcfg.vocab_size}), {args.dtype} on {p.device}")
    print(f"machine : {os.cpu_count()} CPUs visible, {args.threads} torch threads, engine token "
          f"budget {p.plain.token_budget}, torch {torch.__version__}; peak {args.dtype} matrix "
          f"product {peak / 1e9:.1f} GFLOP/s (2048^3, best of 5, before/after the methods: "
          f"torch.matmul {peaks[0]['torch.matmul'] / 1e9:.0f}/{peaks[-1]['torch.matmul'] / 1e9:.0f}, "
          f"oneDNN linear {peaks[0]['oneDNN linear'] / 1e9:.0f}/"
          f"{peaks[-1]['oneDNN linear'] / 1e9:.0f})")
    print(f"workload: {len(sizes)} explanation groups ({min(sizes)}-{max(sizes)} continuations), "
          f"{n} items, {p.workload.pairs} probe pairs; {p.item_tokens} item tokens (source mean "
          f"{src_mean:.1f}, target mean {tgt_mean:.1f}); fastest of {p.repeat} run(s) for "
          f"(a)/(b)/(c0), {args.repeat_engine} for the others")
    print()
    naive, lmev = rows.get("naive"), rows.get("lmeval")
    columns = [Column("method", 40, left=True), Column("s", 7, ".2f"), Column("pairs/s", 8, ".1f"),
               Column("items/s", 8, ".1f"), Column("itok/s", 8, ".0f"), Column("ctok/s", 8, ".0f"),
               Column("pad", 6, ".1%"), Column("x naive", 7, ".2f"), Column("x lmev", 7, ".2f"),
               Column("MFU", 6, ".1%"), Column("max|dNLL|", 9, ".1e"), Column("pairs=", 7, ".2%")]
    print(table(columns, [
        [r["method"], r["seconds"], r["pairs_s"], r["items_s"], r["item_tokens_s"],
         r["computed_tokens_s"], r["padding_waste"],
         r["pairs_s"] / naive["pairs_s"] if naive else None,
         r["pairs_s"] / lmev["pairs_s"] if lmev else None,
         r["mfu"], "ref" if key == "engine" else r["max_abs_diff"], r["pair_agreement"]]
        for key, r in rows.items()]))
    print()
    reuse, plain = results["reuse"].last.detail, results["engine"].last.detail
    print(f"(d) prefix groups {reuse.shared_groups}, items in groups {reuse.shared_items}, "
          f"prefix tokens computed once {reuse.shared_prefix_tokens}; computed {reuse.real_tokens} "
          f"of {reuse.item_tokens} item tokens ({reuse.reused_tokens} reused); forward passes "
          f"{reuse.forward_passes} (off: {plain.forward_passes})")
    if "lmeval" in results:
        mismatch = (results["lmeval"].last.comparable or []).count(False)
        print(f"(b) tokenization equals the engine's for {n - mismatch} of {n} items"
              + ("" if not mismatch else " (NLLs of the others are not comparable)")
              + f"; padding estimated from its length-sorted batches of {args.lmeval_batch_size}")
    else:
        print(f"(b) {notes.get('lmeval', '')}")
    print(http_note(results, args) if "http" in results else notes["http"])
    print(f"pairs=: share of the {len(p.workload.pair_index())} (valid, corruption) pairs ordered "
          "as by (c)")
    if "ct2" in notes and "ct2_int8" not in rows:
        print(f"(g)/(h) {notes['ct2']}")
    if "int8" in rows and "ct2_int8" in rows:
        print(f"(f) engine int8 / (h) CTranslate2 int8: "
              f"{rows['int8']['pairs_s'] / rows['ct2_int8']['pairs_s']:.2f}x pairs/s (target >= 2), "
              f"pair agreement {rows['int8']['pair_agreement']:.2%} vs "
              f"{rows['ct2_int8']['pair_agreement']:.2%}")
    if "ct2_float32" in rows:
        print(f"(d) float32 / (g) CTranslate2 float32: "
              f"{rows['reuse']['pairs_s'] / rows['ct2_float32']['pairs_s']:.2f}x")
    if "forced" in rows:
        print(f"(d) measured kernel routes / (d1) all oneDNN: "
              f"{rows['reuse']['pairs_s'] / rows['forced']['pairs_s']:.2f}x pairs/s")
    if big is not None:
        print()
        print(f"decision agreement with (d) float32 on {big['groups']} groups, {big['items']} items, "
              f"{big['pairs']} pairs (each mode run once, in this order; seconds not interleaved):")
        print_agreement(big, {"int8": "(f) engine int8", "ct2_int8": "(h) CTranslate2 int8"})
    if "http" in rows:
        local = results["reuse_beside_http"]
        print(f"HTTP / in-process: {local.best / rows['http']['seconds']:.2f} against (d) re-timed "
              f"while the Serve app was up, alternating with (e) (best {local.best:.2f} s; runs "
              f"{', '.join(f'{x:.2f}' for x in local.seconds)}); "
              f"{rows['http']['pairs_s'] / rows['reuse']['pairs_s']:.2f} against (d) above; "
              "round by round, against the (d) run just before each: "
              + ", ".join(f"{d / e:.2f}" for d, e in zip(local.seconds, results["http"].seconds))
              + " (target >= 0.95)")
    print("float32 linear routes timed by the engine's kernels in this process (oneDNN / "
          "PyTorch's own, fastest of each, then the choice):")
    for key, route in sorted(kernel_choice.described().items()):
        print(f"  {key}: {route}")
    if args.dtype != "float32":
        print(f"NLL agreement with (c) not checked to {TOLERANCE:g} in {args.dtype}")
        return True
    ok = all(r["max_abs_diff"] <= TOLERANCE for k, r in rows.items() if k not in REDUCED)
    print(f"NLL agreement with (c): {'OK' if ok else 'MISMATCH'} (tolerance {TOLERANCE:g})")
    return ok


def http_note(results: dict[str, Result], args: argparse.Namespace) -> str:
    """(e)'s requests: per run, each request's latency and the replica's timing headers."""
    def fmt_s(values: list[float]) -> str:
        return "/".join(f"{v:.2f}" for v in values)

    runs = [s.detail for s in results["http"].runs]
    note = (f"(e): {len(runs[-1].latencies)} requests of {args.groups_per_request} groups from "
            f"{args.clients} clients; per run, each request's latency, then the replica's headers "
            "x-compute-time (engine), x-queue-time (batch queue) and x-tokenization-time, in s "
            "(the path includes JSON and tokenization in the replica):")
    for k, run in enumerate(runs):
        note += (f"\n  run {k + 1}: {run.seconds:.2f} s; latency {fmt_s(run.latencies)}; "
                 f"compute {fmt_s(run.compute_s)}; queue {fmt_s(run.queue_s)}; "
                 f"tokenize {fmt_s(run.tokenize_s)}")
    return note


if __name__ == "__main__":
    sys.exit(main())
