"""lm-evaluation-harness, unmodified, on MuTual dev three ways in one run: its own `hf` model
(HFLM, in this process) and its `local-completions` model against the service on loopback, with
the replica's context cache on (the default) and off (``context_cache_bytes: 0``).

    python -m loadtests.bench_lm_eval_mutual --out lm-eval.json              # all 886 instances
    python -m loadtests.bench_lm_eval_mutual --out lm-eval.json --limit 100  # a quick run

Task: ``loadtests/lm_eval_tasks/mutual_dev`` (4 options per instance, so 4 log-likelihood
requests per instance), on ``../shared/data/mutual/dev.jsonl`` (`--data`). Model: the `small`
benchmark checkpoint (the gpt2 stand-in re-initialised N(0, 0.3), window 512). `hf` gets
``max_length`` 510 and `local-completions` 512, which gives identical numbers for contexts longer
than the window too (docs/ecosystem.md, "Long contexts"); `local-completions` sends token ids
(``tokenized_requests``, the checkpoint's own tokenizer), `--batch-size` prompts per request,
`--concurrent` requests at once. One app serves both replicas (one CPU and every torch thread
each, used one after the other: never both at work).

`--rounds` rounds (default 2), each: `hf`, then a fresh app (the cache-on replica starts empty)
and its two replicas, cache on first in odd rounds and cache off first in even ones; the fastest
round of each method is reported. The replicas report their metrics at Ray's default interval
(10 s, :data:`REPORT_INTERVAL_MS`), as a user's replicas do. Prints wall time
(``simple_evaluate`` from call to return), the ratios, accuracy, the largest per-option
log-likelihood difference from `hf` (absolute, and how many options differ by more than 1e-4),
the replicas' context cache counters and engine busy time; writes them as JSON to `--out`.
Exit status 1 when an accuracy differs from `hf`'s or an option's log-likelihood by more than
1e-6 relative (`hf` sums per-token log-probabilities in float32, whose spacing near -1000 is
6e-5). Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loadtests.common import (
    NLL_MODEL, ROOT, SHARED_DATA, Column, add_threads, cache_counters, checkpoint, parser,
    quiet_torch, replica_work, serve_app, table, write_json,
)

#: The task folder (lm-eval's `include_path`) and its task.
TASKS = ROOT / "loadtests" / "lm_eval_tasks"
TASK = "mutual_dev"
#: The served names of the two replicas: context cache on (the default) and off.
CACHE_ON, CACHE_OFF = NLL_MODEL, "dialogpt-medium-nocache"
#: The Serve application's name (its metrics' `application` label).
APP = "bench"
#: Replicas report their metrics at Ray's default interval, as a user's do, unless
#: ``RAY_metrics_report_interval_ms`` is set (every other benchmark reports every second): on 2
#: cores faster reporting is background work that slows the engine beside it.
REPORT_INTERVAL_MS = 10_000


def report_wait_s() -> float:
    """How long after the last request the counters are read: one and a half report intervals
    and a second."""
    return 1.5 * int(os.environ["RAY_metrics_report_interval_ms"]) / 1000 + 1


def task_folder(data: Path, folder: Path) -> Path:
    """A task folder for lm-eval's `include_path`: one YAML including the repository's
    ``mutual_dev.yaml`` with `data` as its data file (an absolute path: lm-eval may run
    anywhere)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{TASK}.yaml").write_text(
        f"include: {TASKS / TASK / (TASK + '.yaml')}\ntask: {TASK}\n"
        f"dataset_kwargs:\n  data_files:\n    validation: {data.resolve()}\n")
    return folder


def evaluate(lm: Any, tasks: Path, limit: int | None) -> tuple[dict, float]:
    """lm-eval's ``simple_evaluate`` of the task with `lm`, per-sample answers logged: (its
    results, wall seconds)."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(tasks))
    start = time.perf_counter()
    out = simple_evaluate(model=lm, tasks=[TASK], task_manager=manager, limit=limit,
                          log_samples=True)
    return out, time.perf_counter() - start


def per_sample(out: dict) -> dict[int, list[float]]:
    """Each instance's option log-likelihoods, by doc id."""
    return {s["doc_id"]: [float(r[0]) for r in s["filtered_resps"]]
            for s in out["samples"][TASK]}


def positions_bound(data: Path, source: Path, window: int, limit: int | None) -> dict[str, int]:
    """What lm-eval's requests ask the replica to compute, in positions: ``sent``, every prompt
    whole (the context's tokens, then the option's, cut to the last `window` as lm-eval cuts
    them) plus the one position ``max_tokens: 1`` generates, as with no reuse at all; and
    ``floor``, the same with every prefix that two prompts share computed once (the prompts'
    distinct prefixes, as a radix tree holds them, plus the generated positions): the fewest that
    any prefix reuse computes. Tokenized as lm-eval does (the context alone, then the option's
    tokens from context and option tokenized together), with the checkpoint's tokenizer on the
    task's own texts."""
    import importlib.util
    import json

    from transformers import AutoTokenizer

    from dialscore_server.scheduling.planner import common_prefix

    spec = importlib.util.spec_from_file_location("mutual_dev_utils", TASKS / TASK / "utils.py")
    assert spec is not None and spec.loader is not None
    task_utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task_utils)  # the task's own doc_to_text, as lm-eval loads it
    tok = AutoTokenizer.from_pretrained(source)
    prompts: list[tuple[int, ...]] = []
    lines = data.read_text().splitlines()
    for line in lines[:limit] if limit is not None else lines:
        doc = json.loads(line)
        context = task_utils.doc_to_text(doc)
        head = tok(context)["input_ids"]
        for option in doc["options"]:
            whole = tok(context + "\n" + option)["input_ids"]
            prompts.append(tuple((head + whole[len(head):])[-window:]))
    prompts.sort()
    distinct = sum(len(p) - common_prefix(p, q) for p, q in zip(prompts, [(), *prompts]))
    return {"sent": sum(map(len, prompts)) + len(prompts), "floor": distinct + len(prompts)}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--out", required=True, help="where to write the JSON results")
    ap.add_argument("--limit", type=int, default=None,
                    help="the first N instances only (default: all 886)")
    ap.add_argument("--data", type=Path, default=SHARED_DATA / "mutual" / "dev.jsonl")
    ap.add_argument("--batch-size", type=int, default=16,
                    help="local-completions: prompts per request (lm-eval's batch_size)")
    ap.add_argument("--concurrent", type=int, default=4,
                    help="local-completions: requests in flight (lm-eval's num_concurrent)")
    ap.add_argument("--hf-batch-size", type=int, default=16, help="hf: lm-eval's batch_size")
    ap.add_argument("--model", choices=("small", "medium"), default="small",
                    help="the checkpoint (loadtests.common.checkpoint): the 2-layer stand-in, or "
                    "random weights of DialoGPT-medium's shapes, whose cost per position is the "
                    "real model's")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where `hf` and both replicas run (cuda: each replica on half the GPU, "
                    "never both at work)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="timed runs of each method, interleaved (the fastest is reported)")
    add_threads(ap)
    args: argparse.Namespace = ap.parse_args(argv)
    if not args.data.is_file():
        print(f"{args.data} is absent (MuTual dev lives beside the checkout, in ../shared/data)")
        return 2
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("RAY_metrics_report_interval_ms", str(REPORT_INTERVAL_MS))
    threads = quiet_torch(args.threads)
    for name in ("lm-eval", "lm_eval", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)

    from transformers import AutoConfig

    from lm_eval.models.huggingface import HFLM
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    source = checkpoint(args.model)
    window = AutoConfig.from_pretrained(source).n_positions
    tasks = task_folder(args.data, Path(tempfile.mkdtemp(prefix="lm-eval-tasks-")))

    hf = HFLM(pretrained=str(source), backend="causal", device=args.device, dtype="float32",
              batch_size=args.hf_batch_size, max_length=window - 2)
    evaluate(hf, tasks, 1)  # warm-up (and the dataset read once)
    serving = {"num_cpus": 1, "num_threads": threads, "max_ongoing_requests": 64,
               "num_gpus": 0.5 if args.device == "cuda" else 0}
    app = {"stand_ins": str(source.parent / "stand-ins"), "request_timeout_s": 1800,
           "models": [{"name": NLL_MODEL, "serve_as": name,
                       "overrides": {"source": str(source), "max_length": window,
                                     "device": args.device},
                       "serving": {**serving, **extra}}
                      for name, extra in ((CACHE_ON, {}), (CACHE_OFF, {"context_cache_bytes": 0}))]}
    served = {"cache on": CACHE_ON, "cache off": CACHE_OFF}
    seconds: dict[str, list[float]] = {"hf": [], "cache on": [], "cache off": []}
    outs: dict[str, dict] = {}
    counters: dict[str, list[dict[str, float]]] = {"cache on": [], "cache off": []}
    busy: dict[str, list[float]] = {"cache on": [], "cache off": []}
    for k in range(args.rounds):
        out, s = evaluate(hf, tasks, args.limit)
        outs["hf"] = out
        seconds["hf"].append(s)
        # A fresh app each round: the cache-on replica starts empty every time.
        with serve_app(app, name=APP) as url:
            import httpx

            for name in served.values():  # warm-up, on a text no instance holds
                httpx.post(f"{url}/v1/completions", timeout=600, json={
                    "model": name, "prompt": "hello there , how are you ?", "echo": True,
                    "logprobs": 1, "max_tokens": 1}).raise_for_status()
            time.sleep(report_wait_s())  # the warm-ups counted before the first method's run
            order = ["cache on", "cache off"] if k % 2 == 0 else ["cache off", "cache on"]
            for key in order:
                name = served[key]
                before = replica_work(APP, name).busy_s
                computed_before = cache_counters(APP, name)["positions"]
                api = LocalCompletionsAPI(
                    base_url=f"{url}/v1/completions", model=name, tokenizer=str(source),
                    tokenizer_backend="huggingface", tokenized_requests=True, max_length=window,
                    batch_size=args.batch_size, num_concurrent=args.concurrent, max_retries=1,
                    timeout=1800)
                outs[key], s = evaluate(api, tasks, args.limit)
                seconds[key].append(s)
                time.sleep(report_wait_s())
                counters[key].append(cache_counters(APP, name))
                counters[key][-1]["positions"] -= computed_before
                busy[key].append(replica_work(APP, name).busy_s - before)
        print(f"round {k + 1}: " + ", ".join(f"{m} {v[-1]:.1f} s" for m, v in seconds.items()),
              flush=True)

    ref = per_sample(outs["hf"])
    requests = sum(len(v) for v in ref.values())
    rows, report = [], {}
    best = {key: min(v) for key, v in seconds.items()}
    for key, out in outs.items():
        got = per_sample(out)
        diffs = [abs(a - b) for d in ref for a, b in zip(got[d], ref[d])]
        relative = max(abs(a - b) / abs(b) for d in ref for a, b in zip(got[d], ref[d]) if b)
        acc = out["results"][TASK]["acc,none"]
        entry = {"seconds": best[key], "seconds_each_round": seconds[key], "accuracy": acc,
                 "acc_norm": out["results"][TASK]["acc_norm,none"],
                 "max_abs_diff_vs_hf": max(diffs), "max_rel_diff_vs_hf": relative,
                 "options_over_1e-4": sum(x > 1e-4 for x in diffs),
                 "requests_per_s": requests / best[key]}
        if key in counters:
            entry |= {"context_cache_each_round": counters[key], "engine_busy_s_each_round": busy[key]}
        report[key] = entry
        rows.append([key, best[key], " ".join(f"{x:.1f}" for x in seconds[key]),
                     requests / best[key], best["hf"] / best[key], acc, max(diffs),
                     sum(x > 1e-4 for x in diffs), min(busy[key]) if key in busy else None])
    on, off, hf_s = report["cache on"]["seconds"], report["cache off"]["seconds"], report["hf"]["seconds"]
    ratios = {"cache_on_vs_hf": hf_s / on, "cache_on_vs_cache_off": off / on,
              "cache_off_vs_hf": hf_s / off}
    bound = positions_bound(args.data, source, window, args.limit)
    computed = {key: min(r["positions"] for r in counters[key]) for key in counters}
    print(f"MuTual dev: {len(ref)} instances x 4 options = {requests} requests; checkpoint "
          f"{source} (window {window}); {threads} torch threads; local-completions: batch_size "
          f"{args.batch_size}, num_concurrent {args.concurrent}, token ids; hf: batch_size "
          f"{args.hf_batch_size}, max_length {window - 2}")
    print(table([Column("method", 10, left=True), Column("best s", 7, ".1f"),
                 Column("each round s", 14), Column("req/s", 7, ".1f"), Column("x hf", 6, ".2f"),
                 Column("acc", 6, ".4f"), Column("max |dLL|", 10, ".1e"), Column(">1e-4", 6, "d"),
                 Column("busy s", 7, ".1f")], rows))
    for key in ("cache on", "cache off"):
        c = {k: sum(r[k] for r in counters[key]) for k in counters[key][0]}
        print(f"{key}, {args.rounds} runs: context cache hits {c['hits']:.0f}, misses {c['misses']:.0f}, positions "
              f"read {c['cached_tokens']:.0f}; shared-prefix positions not recomputed "
              f"{c['reused_tokens']:.0f}")
    print(f"positions computed per run (fewest): cache on {computed['cache on']:.0f}, cache off "
          f"{computed['cache off']:.0f} ({computed['cache off'] / max(computed['cache on'], 1):.2f}x); "
          f"with no reuse {bound['sent']}, the fewest any prefix reuse computes {bound['floor']} "
          f"({computed['cache off'] / bound['floor']:.2f}x fewer than cache off at most)")
    print(f"cache on vs hf: {ratios['cache_on_vs_hf']:.2f}x (goal 3x); cache on vs cache off: "
          f"{ratios['cache_on_vs_cache_off']:.2f}x (goal 2x)")
    worst = max(r["max_rel_diff_vs_hf"] for r in report.values())
    same_acc = len({r["accuracy"] for r in report.values()}) == 1
    write_json(args.out, {
        "instances": len(ref), "requests": requests, "checkpoint": str(source), "window": window,
        "threads": threads, "batch_size": args.batch_size, "num_concurrent": args.concurrent,
        "hf_batch_size": args.hf_batch_size, "rounds": args.rounds, "methods": report, "ratios": ratios,
        "positions": {"computed_fewest": computed, "bound": bound},
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": os.cpu_count()})
    return 0 if worst < 1e-6 and same_acc else 1


if __name__ == "__main__":
    sys.exit(main())
