"""Probe-shaped scoring, five ways, in one run, on identical items and one checkpoint.

Workload: CEDAR attribution probing. For every valid explanation of clients/dialscore/probes/cedar_sample.jsonl
the items are ``context = history + [response, "Why?"]`` with the valid explanation and each of its
corruptions as targets (swapped, negation, incorrect, shuffle, dropped, reversed; ``incorrect`` is
skipped where the dialogue has no invalid explanation): 6-7 continuations after one shared prefix.
A probe *pair* is (valid, one corruption); pairs/s counts those comparisons.

Methods (all score the same token ids; NLLs are checked against (c) to 1e-4 in float32):

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

    python loadtests/bench_probe.py --model small
    python loadtests/bench_probe.py --model medium            # DialoGPT-medium shapes, 355M
    python loadtests/bench_probe.py --model medium --dtype bfloat16 --no-http

``(b)`` needs lm-evaluation-harness, which the project never depends on. Install it in a separate
bench environment, torch first (the CPU build on disk; otherwise pip resolves a CUDA build)::

    python3 -m venv /tmp/benchenv && /tmp/benchenv/bin/pip install torch==2.13.0
    /tmp/benchenv/bin/pip install -e '.[serve]' 'lm_eval[hf]'
    /tmp/benchenv/bin/python loadtests/bench_probe.py --model medium

Without it, (b) is reported as skipped. Checkpoints are written under $TMPDIR/dialscore-bench
(small: the gpt2 stand-in re-initialised N(0, 0.3); medium: random GPT-2 with DialoGPT-medium's
shapes, 1.4 GB). Traffic goes to 127.0.0.1 only. Exit status 1 when any NLL disagrees.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from loadtests.bench_engine import naive_nlls, timed  # noqa: E402  (needs ROOT on sys.path)

TOLERANCE = 1e-4
DEFAULT_GROUPS = {"small": 156, "medium": 12}


# ------------------------------------------------------------------------------------- setup
def checkpoint(model: str, work: Path) -> Path:
    """The benchmark checkpoint on disk (every method loads these same weights)."""
    import shutil

    from dialscore_server.checkpoints.standins import MARKER, build_stand_ins, reinit_

    stand_ins = work / "stand-ins"
    build_stand_ins(stand_ins, kinds=["gpt2"])
    if model == "medium":
        from loadtests.bench_serve import medium_checkpoint

        return medium_checkpoint(stand_ins, work / "medium")
    out = work / "small-sharp"
    if not (out / MARKER).is_file():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        m = reinit_(AutoModelForCausalLM.from_pretrained(stand_ins / "gpt2"), std=0.3, seed=0)
        m.save_pretrained(out)
        AutoTokenizer.from_pretrained(stand_ins / "gpt2").save_pretrained(out)
        shutil.copy(stand_ins / "gpt2" / MARKER, out / MARKER)
    return out


def model_config(path: Path, dtype: str, device: str):
    from dialscore_server.checkpoints.registry import stand_in_registry

    cfg = stand_in_registry(path.parent / "stand-ins").get("dialogpt-medium")
    from transformers import AutoConfig

    positions = AutoConfig.from_pretrained(path).n_positions
    return cfg.model_copy(update={"source": str(path), "dtype": dtype, "device": device,
                                  "max_length": positions})


def attribution_workload(groups: int, why: str, seed: int = 0):
    """(items, n_pairs, group sizes): the first `groups` explanation groups of the sample."""
    from dialscore.probes.corruptions import corrupt_dialogues
    from dialscore.probes import SAMPLE_DATA
    from dialscore.probes.data import load_dialogues
    from dialscore_server.nll.engine.encoding import NLLItem

    dialogues = load_dialogues(SAMPLE_DATA)
    by_id = {d.id: d for d in dialogues}
    pairs = defaultdict(list)
    for p in corrupt_dialogues(dialogues, seed).pairs:
        pairs[(p.dialogue_id, p.explanation_index)].append(p)
    chosen = list(pairs.items())[:groups]
    items, sizes, n_pairs = [], [], 0
    for (did, _), ps in chosen:
        d = by_id[did]
        context = tuple(d.history) + (d.response, why)
        texts = list(dict.fromkeys([ps[0].valid_text] + [p.corrupted_text for p in ps]))
        items.append([NLLItem(context=context, target=t) for t in texts])
        sizes.append(len(texts))
        n_pairs += len(ps)
    return items, n_pairs, sizes


def peak_matmul(dtype: str, device: str, reps: int = 5) -> float:
    """Best-of-`reps` FLOP/s of a 2048 x 2048 matmul in `dtype` on `device`."""
    import torch

    n = 2048
    dt = getattr(torch, dtype)
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(reps):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        torch.matmul(a, b)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def peak_onednn_linear(dtype: str, device: str, reps: int = 5) -> float:
    """The same product through oneDNN's linear op (what the engine's CPU kernels use); 0 when
    unavailable or not on CPU."""
    import torch

    from dialscore_server.compat import onednn_linear, onednn_linear_available

    if not device.startswith("cpu") or not onednn_linear_available():
        return 0.0
    n = 2048
    dt = getattr(torch, dtype)
    a = torch.randn(n, n).to(dt)
    w = torch.randn(n, n).to(dt)
    z = torch.zeros(n, dtype=dt)
    best = float("inf")
    with torch.inference_mode():
        onednn_linear(a, w, z)
        for _ in range(reps):
            t = time.perf_counter()
            onednn_linear(a, w, z)
            best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


# ------------------------------------------------------------------------------------- methods
def lm_eval_requests(engine, items):
    """(context, continuation) strings for lm-eval: the engine's formatted source, and the target
    with the eos token appended as text (the engine scores eos as the target's last token)."""
    tok = engine.tokenizer
    eos = tok.eos_token if engine.fmt.append_eos else ""
    reqs = []
    for item in items:
        pinned, body = engine.format_parts(item)
        reqs.append((pinned + body, item.target + eos))
    return reqs


def lm_eval_loglikelihood(lm, reqs):
    from lm_eval.api.instance import Instance

    instances = [Instance(request_type="loglikelihood", doc={}, arguments=r, idx=i)
                 for i, r in enumerate(reqs)]
    return [ll for ll, _ in lm.loglikelihood(instances, disable_tqdm=True)]


def lm_eval_padding(lengths: list[int], batch_size: int) -> int:
    """Positions lm-eval runs: its Collator sorts by length, longest first, then cuts batches."""
    ordered = sorted(lengths, reverse=True)
    return sum(len(ordered[k:k + batch_size]) * ordered[k] for k in range(0, len(ordered), batch_size))


def http_scores(source: Path, config, groups_json, args, in_process
                ) -> tuple[list[float], list[float], list, list[float], dict[str, str]]:
    """Serve the checkpoint on loopback and POST the requests from concurrent clients: (NLLs of
    the last round, each round's seconds, each round's ClosedLoopRun, each in-process run's
    seconds, the linear routes recorded for this machine, which the replica took).

    Each HTTP round alternates with an in-process run (`in_process()`, returning seconds), so that
    both see the same background (Ray's own processes idle beside them, other load on the
    machine): the HTTP / in-process ratio compares like with like."""
    import httpx

    from loadtests.bench_serve import closed_loop_nll
    from dialscore_server.gateway.args import AppArgs
    from dialscore_server.gateway.embedded import serve_locally

    per = args.groups_per_request
    requests = [sum(groups_json[k:k + per], []) for k in range(0, len(groups_json), per)]
    app_args = AppArgs.model_validate({
        "stand_ins": str(source.parent / "stand-ins"), "request_timeout_s": 1800,
        "models": [{"name": "dialogpt-medium",
                    "overrides": {"source": str(source), "max_length": config.max_length,
                                  "dtype": config.dtype, "device": config.device},
                    # The replica's engine fuses GELU like (c)/(d) (the serving default).
                    "serving": {"num_cpus": 1, "num_threads": args.threads, "max_ongoing_requests": 64,
                                "max_batch_tokens": 16384, "token_budget": args.token_budget,
                                "prefix_reuse": True,
                                **({"chunk_tokens": args.chunk_tokens} if args.chunk_tokens else {})}}],
    })
    with serve_locally(app_args, num_cpus=4, name="bench-probe") as url:
        httpx.post(f"{url}/v1/nll", json={"model": "dialogpt-medium", "items": requests[0][:7]},
                   timeout=1800).raise_for_status()  # warm-up
        seconds, runs, local = [], [], []
        for _ in range(args.repeat_engine):
            local.append(in_process())
            run = asyncio.run(closed_loop_nll(url, "dialogpt-medium", requests, args.clients,
                                              timeout=1800))
            seconds.append(run.seconds)
            runs.append(run)
        from dialscore_server.nll.engine.kernel_choice import described

        routes = described()  # the machine's route file, which the replica read or wrote
    return [x for r in run.nlls for x in r], seconds, runs, local, routes


# ------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["small", "medium"], default="small")
    p.add_argument("--groups", type=int, default=None,
                   help=f"explanation groups (7 items each, 6 without `incorrect`); default "
                        f"{DEFAULT_GROUPS['small']} (all) small, {DEFAULT_GROUPS['medium']} medium")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--token-budget", type=int, default=None,
                   help="engines' padded tokens per pass (default: the engine's own; on CPU 2^20 / width)")
    p.add_argument("--repeat", type=int, default=None,
                   help="(a), (b) and (c0): time this many runs and keep the fastest (default 3 "
                        "small, 2 medium)")
    p.add_argument("--repeat-engine", type=int, default=3,
                   help="(c), (d) and (e): runs, fastest kept; (a), (c), (d) alternate")
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
    args = p.parse_args(argv)
    repeat = args.repeat or (3 if args.model == "small" else 2)

    import torch
    from transformers.utils import logging as hf_logging

    from dialscore_server.checkpoints.loading import load_model, set_threads
    from dialscore_server.nll.engine.engine import NLLEngine

    hf_logging.set_verbosity_error()
    set_threads(args.threads)
    work = Path(tempfile.gettempdir()) / "dialscore-bench"
    source = checkpoint(args.model, work)
    config = model_config(source, args.dtype, args.device)
    loaded = load_model(config)
    device = loaded.device
    model = loaded.model
    mcfg = model.config
    n_body = sum(p.numel() for p in model.base_model.h.parameters())
    head_flops = 2 * mcfg.n_embd * mcfg.vocab_size
    # (a) and (c0) run the stock model as loaded; (c) and (d) share a second copy, which the
    # engine patches in place with its CPU kernels (services/dialscore_server/nll/engine/kernels.py).
    stock_loaded = None
    if not (args.no_naive and args.no_stock_engine):
        stock_loaded = load_model(config)
    stock = stock_loaded.model if stock_loaded is not None and not args.no_naive else None
    engine_stock = None
    if not args.no_stock_engine:
        engine_stock = NLLEngine(config, loaded=stock_loaded, token_budget=args.token_budget,
                                 num_threads=args.threads, prefix_reuse=False, fast_kernels=False)
    engine_plain = NLLEngine(config, loaded=loaded, token_budget=args.token_budget,
                             num_threads=args.threads, prefix_reuse=False)
    stats_budget = engine_plain.token_budget
    engine_reuse = NLLEngine(config, loaded=loaded, token_budget=args.token_budget,
                             num_threads=args.threads, prefix_reuse=True)
    engine_forced = None
    if args.forced_onednn:
        from dialscore_server.nll.engine import kernels

        forced = load_model(config)
        kernels.optimize(forced.model, onednn=True)  # the engine's own call then finds it decided
        engine_forced = NLLEngine(config, loaded=forced, token_budget=args.token_budget,
                                  num_threads=args.threads, prefix_reuse=True)
        engine_forced.projection.onednn = True

    groups, n_pairs, sizes = attribution_workload(args.groups or DEFAULT_GROUPS[args.model],
                                                  config.format.why_turn)
    items = [it for g in groups for it in g]
    encoded = [engine_plain.encode(it) for it in items]
    n = len(items)
    item_tokens = sum(e.cost for e in encoded)
    target_tokens = sum(len(e.target_ids) for e in encoded)
    src_mean = statistics.fmean(len(e.source_ids) for e in encoded)
    tgt_mean = statistics.fmean(len(e.target_ids) for e in encoded)

    # Probe pairs as item indices: each group's first item is the valid explanation.
    pair_index, start = [], 0
    for size in sizes:
        pair_index += [(start, start + j) for j in range(1, size)]
        start += size

    # (f) int8 engine and (g)/(h) CTranslate2: float32 runs only (they are compared with (c)).
    engine_int8 = None
    if not args.no_int8 and args.dtype == "float32" and device == "cpu":
        int8_config = config.model_copy(update={"dtype": "int8"})
        engine_int8 = NLLEngine(int8_config, token_budget=args.token_budget,
                                num_threads=args.threads, prefix_reuse=True)
        engine_int8.score_encoded(encoded[:14])
    ct2 = {}
    ct2_note = ""
    if not args.no_ct2 and args.dtype == "float32" and device == "cpu":
        from loadtests.ct2_peer import Ct2Scorer, available, convert

        ct2_note = available() or ""
        if not ct2_note:
            ct2_path = convert(source, work / f"ct2-{args.model}")
            for ct in ("int8",) if args.no_ct2_float32 else ("float32", "int8"):
                ct2[ct] = Ct2Scorer(ct2_path, ct, args.threads, stats_budget, engine_plain.tokenizer)
            ct2_tokens = ct2["int8"].strings(encoded)
            ct2_lengths = [len(e.target_ids) for e in encoded]
            for sc in ct2.values():
                sc.nlls(ct2_tokens[:14], ct2_lengths[:14])
    elif args.no_ct2:
        ct2_note = "skipped (--no-ct2)"

    peak = [peak_matmul(args.dtype, device)]
    peak_onednn = [peak_onednn_linear(args.dtype, device)]
    rows: dict[str, dict] = {}
    nlls: dict[str, list[float]] = {}

    # Warm-up outside the timings.
    engine_plain.score_encoded(encoded[:14])
    engine_reuse.score_encoded(encoded[:14])
    if engine_stock is not None:
        engine_stock.score_encoded(encoded[:14])
    if stock is not None:
        naive_nlls(stock, device, encoded[:2])

    timings = defaultdict(list)
    for k in range(max(repeat, args.repeat_engine)):  # alternate: load from elsewhere hits all alike
        if stock is not None and k < repeat:
            nlls["naive"], t = timed(lambda: naive_nlls(stock, device, encoded), device)
            timings["naive"].append(t)
        if engine_stock is not None and k < repeat:
            (res, _), t = timed(lambda: engine_stock.score_encoded(encoded), device)
            nlls["stock"] = [r.nll for r in res]
            timings["stock"].append(t)
        (res, stats_plain), t = timed(lambda: engine_plain.score_encoded(encoded), device)
        nlls["engine"] = [r.nll for r in res]
        timings["engine"].append(t)
        (res, stats_reuse), t = timed(lambda: engine_reuse.score_encoded(encoded), device)
        nlls["reuse"] = [r.nll for r in res]
        timings["reuse"].append(t)
        if engine_forced is not None:
            (res, stats_forced), t = timed(lambda: engine_forced.score_encoded(encoded), device)
            nlls["forced"] = [r.nll for r in res]
            timings["forced"].append(t)
        if engine_int8 is not None:
            (res, stats_int8), t = timed(lambda: engine_int8.score_encoded(encoded), device)
            nlls["int8"] = [r.nll for r in res]
            timings["int8"].append(t)
        for ct, sc in ct2.items():
            nlls[f"ct2_{ct}"], t = timed(lambda: sc.nlls(ct2_tokens, ct2_lengths), device)
            timings[f"ct2_{ct}"].append(t)

    # Decision agreement on a larger workload: each mode once, the float32 reference first.
    big = None
    if args.agreement_groups:
        from loadtests.probe_agreement import agreement

        big_groups, big_pairs, big_sizes = attribution_workload(args.agreement_groups,
                                                                config.format.why_turn)
        big_encoded = [engine_reuse.encode(it) for g in big_groups for it in g]
        big_index, start = [], 0
        for size in big_sizes:
            big_index += [(start, start + j) for j in range(1, size)]
            start += size
        scorers = {"reuse": lambda: [r.nll for r in engine_reuse.score_encoded(big_encoded)[0]]}
        if engine_int8 is not None:
            scorers["int8"] = lambda: [r.nll for r in engine_int8.score_encoded(big_encoded)[0]]
        if "int8" in ct2:
            big_tokens = ct2["int8"].strings(big_encoded)
            big_lengths = [len(e.target_ids) for e in big_encoded]
            scorers["ct2_int8"] = lambda: ct2["int8"].nlls(big_tokens, big_lengths)
        big = agreement(scorers, "reuse", big_index)
        big.update(groups=len(big_groups), items=len(big_encoded), pairs=big_pairs)

    # (b) lm-evaluation-harness, in this process, same threads, its own copy of the checkpoint.
    lmeval_note = ""
    try:
        from lm_eval.models.huggingface import HFLM
    except ImportError:
        HFLM = None
        lmeval_note = ("lm-eval not installed: pip install 'lm_eval[hf]' into a separate bench "
                       "environment (see this script's docstring)")
    if args.no_lmeval:
        HFLM, lmeval_note = None, "skipped (--no-lmeval)"
    lm_mismatch = 0
    if HFLM is not None:
        lm = HFLM(pretrained=str(source), backend="causal", batch_size=args.lmeval_batch_size,
                  device=device, dtype=args.dtype, max_length=config.max_length)
        torch.set_num_threads(args.threads)
        reqs = lm_eval_requests(engine_plain, items)
        lm_tokens = [lm._encode_pair(c, t) for c, t in reqs]
        lm_same = [tuple(c) == e.source_ids and tuple(t) == e.target_ids
                   for (c, t), e in zip(lm_tokens, encoded)]
        lm_mismatch = lm_same.count(False)
        lm_eval_loglikelihood(lm, reqs[:4])  # warm-up
        for _ in range(repeat):
            lls, t = timed(lambda: lm_eval_loglikelihood(lm, reqs), device)
            timings["lmeval"].append(t)
        nlls["lmeval"] = [-ll / len(e.target_ids) for ll, e in zip(lls, encoded)]
        lm_lengths = [len(c) + len(t) - 1 for c, t in lm_tokens]
        lm_padded = lm_eval_padding(lm_lengths, args.lmeval_batch_size)
        del lm
        gc.collect()
    peak.append(peak_matmul(args.dtype, device))
    peak_onednn.append(peak_onednn_linear(args.dtype, device))

    # (e) HTTP through Ray Serve (the in-process engines are released first).
    http_note = ""
    replica_routes: dict[str, str] = {}
    if not args.no_http:
        groups_json = [[{"context": list(it.context), "target": it.target} for it in g] for g in groups]
        del engine_plain, engine_stock, stock, stock_loaded
        gc.collect()
        served, t_http, http_runs, t_local, replica_routes = http_scores(
            source, config, groups_json, args,
            lambda: timed(lambda: engine_reuse.score_encoded(encoded), device)[1])
        nlls["http"] = served
        timings["http"] += t_http
        timings["reuse_beside_http"] += t_local

        def fmt_s(values: list[float]) -> str:
            return "/".join(f"{v:.2f}" for v in values)

        http_note = (f"(e): {len(http_runs[-1].latencies)} requests of {args.groups_per_request} "
                     f"groups from {args.clients} clients; per run, each request's latency, then "
                     "the replica's headers x-compute-time (engine), x-queue-time (batch queue) "
                     "and x-tokenization-time, in s (the path includes JSON and tokenization in "
                     "the replica):")
        for k, run in enumerate(http_runs):
            http_note += (f"\n  run {k + 1}: {run.seconds:.2f} s; latency {fmt_s(run.latencies)}; "
                          f"compute {fmt_s(run.compute_s)}; queue {fmt_s(run.queue_s)}; "
                          f"tokenize {fmt_s(run.tokenize_s)}")
    else:
        http_note = "(e) skipped (--no-http)"

    # ---------------------------------------------------------------------------- the table
    peak_flops = max(peak + peak_onednn)
    engine_budget = stats_budget
    ref = nlls["engine"]
    comparable = {k: [True] * n for k in nlls}
    if "lmeval" in nlls:
        comparable["lmeval"] = lm_same
    worst = {k: max((abs(a - b) for a, b, c in zip(v, ref, comparable[k]) if c), default=0.0)
             for k, v in nlls.items()}
    reduced = {"int8", "ct2_int8"}
    ok = (all(w <= TOLERANCE for k, w in worst.items() if k not in reduced)
          if args.dtype == "float32" else True)

    def agreement(key):
        a, b = nlls["engine"], nlls[key]
        return statistics.fmean((a[i] < a[j]) == (b[i] < b[j]) for i, j in pair_index)

    def row(key, name, computed, projected, padded):
        t = min(timings[key])
        flops = 2 * n_body * computed + head_flops * projected
        rows[key] = {
            "method": name, "seconds": t, "all_runs": timings[key], "pairs_s": n_pairs / t,
            "items_s": n / t, "item_tokens_s": item_tokens / t, "computed_tokens_s": computed / t,
            "padding_waste": None if padded is None else 1 - computed / padded,
            "mfu": flops / t / peak_flops, "max_abs_diff": worst.get(key),
            "pair_agreement": agreement(key) if key in nlls else None,
        }

    if "naive" in timings:
        row("naive", "(a) naive loop, HF loss, 1 item", item_tokens, item_tokens, item_tokens)
    if "lmeval" in timings:
        real = sum(lm_lengths)
        row("lmeval", f"(b) lm-eval HFLM.loglikelihood bs={args.lmeval_batch_size}", real, lm_padded,
            lm_padded)
    if "stock" in timings:
        row("stock", "(c0) engine, reuse off, stock kernels", stats_plain.real_tokens, target_tokens,
            stats_plain.padded_tokens)
    row("engine", "(c) engine, prefix reuse off", stats_plain.real_tokens, target_tokens,
        stats_plain.padded_tokens)
    row("reuse", "(d) engine, prefix reuse on", stats_reuse.real_tokens, target_tokens,
        stats_reuse.padded_tokens)
    if "forced" in timings:
        row("forced", "(d1) engine, reuse on, all oneDNN", stats_forced.real_tokens, target_tokens,
            stats_forced.padded_tokens)
    if "http" in timings:
        row("http", "(e) HTTP via Ray Serve, reuse on", stats_reuse.real_tokens, target_tokens, None)
    if "int8" in timings:
        row("int8", "(f) engine int8, prefix reuse on", stats_int8.real_tokens, target_tokens,
            stats_int8.padded_tokens)
    # CTranslate2 computes every position of every item and projects all but the first to the
    # vocabulary (its padding is unknown: "-").
    ct2_projected = item_tokens - n
    if "ct2_float32" in timings:
        row("ct2_float32", "(g) CTranslate2 float32 score_batch", item_tokens, ct2_projected, None)
    if "ct2_int8" in timings:
        row("ct2_int8", "(h) CTranslate2 int8 score_batch", item_tokens, ct2_projected, None)

    print(f"model   : {args.model}: {source} ({n_body / 1e6:.0f}M non-embedding params, width "
          f"{mcfg.n_embd}, {mcfg.n_layer} layers, vocab {mcfg.vocab_size}), {args.dtype} on {device}")
    print(f"machine : {os.cpu_count()} CPUs visible, {args.threads} torch threads, engine token "
          f"budget {engine_budget}, torch "
          f"{torch.__version__}; peak {args.dtype} matrix product {peak_flops / 1e9:.1f} GFLOP/s "
          f"(2048^3, best of 5, before/after the methods: torch.matmul {peak[0] / 1e9:.0f}/"
          f"{peak[1] / 1e9:.0f}, oneDNN linear {peak_onednn[0] / 1e9:.0f}/{peak_onednn[1] / 1e9:.0f})")
    print(f"workload: {len(groups)} explanation groups ({min(sizes)}-{max(sizes)} continuations), "
          f"{n} items, {n_pairs} probe pairs; {item_tokens} item tokens (source mean {src_mean:.1f}, "
          f"target mean {tgt_mean:.1f}); fastest of {repeat} run(s) for (a)/(b)/(c0), "
          f"{args.repeat_engine} for (c)/(d)/(e)")
    print()
    hdr = (f"{'method':40s} {'s':>7s} {'pairs/s':>8s} {'items/s':>8s} {'itok/s':>8s} {'ctok/s':>8s} "
           f"{'pad':>6s} {'x naive':>7s} {'x lmev':>7s} {'MFU':>6s} {'max|dNLL|':>9s} {'pairs=':>7s}")
    print(hdr)
    print("-" * len(hdr))
    for key, r in rows.items():
        xn = r["pairs_s"] / rows["naive"]["pairs_s"] if "naive" in rows else None
        xl = r["pairs_s"] / rows["lmeval"]["pairs_s"] if "lmeval" in rows else None
        pad = "-" if r["padding_waste"] is None else f"{r['padding_waste']:.1%}"
        diff = "ref" if key == "engine" else f"{r['max_abs_diff']:.1e}"
        print(f"{r['method']:40s} {r['seconds']:7.2f} {r['pairs_s']:8.1f} {r['items_s']:8.1f} "
              f"{r['item_tokens_s']:8.0f} {r['computed_tokens_s']:8.0f} {pad:>6s} "
              f"{'-' if xn is None else f'{xn:.2f}':>7s} {'-' if xl is None else f'{xl:.2f}':>7s} "
              f"{r['mfu']:6.1%} {diff:>9s} {r['pair_agreement']:7.2%}")
    print()
    print(f"(d) prefix groups {stats_reuse.shared_groups}, items in groups {stats_reuse.shared_items}, "
          f"prefix tokens computed once {stats_reuse.shared_prefix_tokens}; computed {stats_reuse.real_tokens} "
          f"of {stats_reuse.item_tokens} item tokens ({stats_reuse.reused_tokens} reused); forward passes "
          f"{stats_reuse.forward_passes} (off: {stats_plain.forward_passes})")
    if "lmeval" in timings:
        print(f"(b) tokenization equals the engine's for {n - lm_mismatch} of {n} items"
              + ("" if not lm_mismatch else " (NLLs of the others are not comparable)")
              + f"; padding estimated from its length-sorted batches of {args.lmeval_batch_size}")
    else:
        print(f"(b) {lmeval_note}")
    print(http_note)
    print("pairs=: share of the %d (valid, corruption) pairs ordered as by (c)" % len(pair_index))
    if ct2_note:
        print(f"(g)/(h) {ct2_note}")
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
        from loadtests.probe_agreement import print_agreement

        print()
        print(f"decision agreement with (d) float32 on {big['groups']} groups, {big['items']} items, "
              f"{big['pairs']} pairs (each mode run once, in this order; seconds not interleaved):")
        print_agreement(big, {"int8": "(f) engine int8",
                              "ct2_int8": "(h) CTranslate2 int8"})
    if "http" in rows:
        local = min(timings["reuse_beside_http"])
        rows["http"]["in_process_beside_s"] = local
        print(f"HTTP / in-process: {local / rows['http']['seconds']:.2f} against (d) re-timed while "
              f"the Serve app was up, alternating with (e) (best {local:.2f} s; runs "
              f"{', '.join(f'{x:.2f}' for x in timings['reuse_beside_http'])}); "
              f"{rows['http']['pairs_s'] / rows['reuse']['pairs_s']:.2f} against (d) above; "
              "round by round, against the (d) run just before each: "
              + ", ".join(f"{d / e:.2f}" for d, e in zip(timings["reuse_beside_http"],
                                                          timings["http"]))
              + " (target >= 0.95)")
    from dialscore_server.nll.engine.kernel_choice import described

    routes = described()
    print("float32 linear routes timed by the engine's kernels (oneDNN / PyTorch's own, fastest "
          "of each, then the choice)" + (", in this process | in (e)'s replica:" if replica_routes
                                         else ":"))
    for key in sorted(routes.keys() | replica_routes.keys()):
        here, there = routes.get(key, "not timed"), replica_routes.get(key)
        differs = there is not None and here.split("-> ")[-1] != there.split("-> ")[-1]
        print(f"  {key}: {here}" + (f" | {there}" if there else "")
              + ("  <- the replica chose differently" if differs else ""))
    if args.dtype == "float32":
        print(f"NLL agreement with (c): {'OK' if ok else 'MISMATCH'} (tolerance {TOLERANCE:g})")
    else:
        print(f"NLL agreement with (c) not checked to {TOLERANCE:g} in {args.dtype}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "peak_flops": peak, "rows": rows,
                                               "pairs": n_pairs, "items": n, "item_tokens": item_tokens,
                                               "agreement": big, "kernel_routes": routes,
                                               "replica_kernel_routes": replica_routes},
                                              indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
