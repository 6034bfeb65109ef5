"""Where the NLL engine's time goes on lm-evaluation-harness's MuTual requests, in one process
(no Ray, no HTTP, no lm-eval): the engine with its context cache on and off against a padded
forward pass per batch as lm-eval's `hf` model computes it, on the same prompts, in one run.

    python -m loadtests.profile_lm_eval_engine --device cuda --model medium --limit 60 --out DIR

The prompts are those lm-eval's `local-completions` sends for ``loadtests/lm_eval_tasks/mutual_dev``
(`--data`, first `--limit` instances): per option, the context's tokens (``doc_to_text``) followed
by those of ``"\\n" + option`` (lm-eval's split: the whole string's tokens after the context's),
the last `window` - 1 kept, longest first (lm-eval's order), `--batch-size` prompts per request.
Each engine call merges `--merge` consecutive requests, as a replica merges the requests in flight
(``num_concurrent``): ``encode_prompt`` with the greedy next token and one alternative per
position (lm-eval's ``echo``, ``logprobs: 1``, ``max_tokens: 1``), then ``score_encoded``.

`padded` is lm-eval's `hf` model's computation of the same requests: each request's prompts padded
to its longest, one forward pass, float32 log-softmax over the vocabulary, the continuation's
log-probabilities gathered and summed, and whether each is the greedy token. No engine code runs
in it.

Engines: one with the context cache on and one with it off, at each of `--token-budgets` (default:
the engine's own budget) and each of `--pass-limits` (``overhead:waste`` pairs, e.g.
``32:0.03,1024:0.25``; default: the device's, ``PassLimits``), with `cuda_graph_positions`
`--graph-positions` on a CUDA device. Each
method runs `--rounds` times after one warm-up round (the cache-on engine's cache emptied before
each round): with `--heap both`, first with the process's heap as loading left it, then frozen as
a replica freezes it (:func:`dialscore_server.heap.freeze_loaded_heap`); with `--heap frozen`,
frozen only. The fastest round of each is reported (`loaded` or `frozen`), with the positions the
engine computed, padding included, and its forward passes. Then, frozen, one round of the first
cache-on engine runs under cProfile (Python time by function) and one under ``torch.profiler``
(operators by CPU time and, on a GPU, by device time); their tables go to `--out`
(``profile_python.txt``, ``profile_torch.txt``) beside ``summary.json``.
"""

from __future__ import annotations

import cProfile
import importlib.util
import io
import json
import pstats
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loadtests.common import (
    ROOT, SHARED_DATA, checkpoint, model_config, parser, quiet_torch, timed,
)

TASK_UTILS = ROOT / "loadtests" / "lm_eval_tasks" / "mutual_dev" / "utils.py"


def task_utils() -> Any:
    """The task's ``utils`` module (``doc_to_text``), loaded from its file."""
    spec = importlib.util.spec_from_file_location("mutual_dev_utils", TASK_UTILS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prompts(data: Path, limit: int, tokenizer: Any, window: int) -> list[tuple[list[int], int]]:
    """(prompt ids, continuation length) per option of the first `limit` instances, longest
    first: the context's ids then the continuation's, the last ``window - 1`` kept."""
    utils = task_utils()
    out = []
    with data.open() as f:
        for n, line in enumerate(f):
            if n == limit:
                break
            doc = json.loads(line)
            context = utils.doc_to_text(doc)
            context_ids = tokenizer.encode(context)
            for option in doc["options"]:
                whole = tokenizer.encode(context + "\n" + option)
                cont = whole[len(context_ids):]
                out.append((whole[-(window - 1):], len(cont)))
    out.sort(key=lambda p: -len(p[0]))
    return out


def chunks(seq: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [seq[i:i + size] for i in range(0, len(seq), size)]


def padded(model: Any, device: str, pad_id: int, requests: list[Sequence[tuple[list[int], int]]]
           ) -> Callable[[], int]:
    """A round of lm-eval `hf`'s computation: per request, one right-padded forward pass and a
    float32 log-softmax; returns the positions computed, padding included."""
    import torch

    def run() -> int:
        positions = 0
        with torch.inference_mode():
            for req in requests:
                width = max(len(p) for p, _ in req)
                ids = torch.full((len(req), width), pad_id, dtype=torch.long)
                for r, (p, _) in enumerate(req):
                    ids[r, :len(p)] = torch.tensor(p)
                ids = ids.to(device)
                logp = torch.log_softmax(model(ids).logits.float(), dim=-1)
                for r, (p, cont) in enumerate(req):
                    n = len(p)
                    rows = logp[r, n - cont - 1:n - 1]
                    target = ids[r, n - cont:n]
                    float(rows.gather(1, target[:, None]).sum())
                    bool((rows.argmax(-1) == target).all())
                positions += ids.numel()
        return positions
    return run


def engine_round(engine: Any, calls: list[list[list[int]]]) -> Callable[[], dict[str, int]]:
    """A round of the engine's calls: encode every prompt as a completions item and score each
    call's items; returns the positions computed and forward passes."""

    def run() -> dict[str, int]:
        if engine.context_cache is not None:
            engine.context_cache.clear()
        totals = {"positions": 0, "forward_passes": 0, "cached_tokens": 0}
        for call in calls:
            encoded = [engine.encode_prompt(p, True, 1) for p in call]
            _, stats = engine.score_encoded(encoded)
            totals["positions"] += stats.padded_tokens
            totals["forward_passes"] += stats.forward_passes
            totals["cached_tokens"] += stats.cached_tokens
        return totals
    return run


def fastest_round(run: Callable[[], Any], rounds: int, device: str) -> tuple[float, Any]:
    """(fastest of `rounds` wall seconds, that round's result), after one warm-up round; each
    round timed by :func:`loadtests.common.timed` (synchronised on a GPU)."""
    timed(run, device)
    result, seconds = min((timed(run, device) for _ in range(rounds)), key=lambda r: r[1])
    return seconds, result


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--model", choices=("small", "medium"), default="small")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--data", type=Path, default=SHARED_DATA / "mutual" / "dev.jsonl")
    ap.add_argument("--limit", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--merge", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--graph-positions", type=int, default=512,
                    help="cuda_graph_positions of both engines on a CUDA device")
    ap.add_argument("--token-budgets", default="",
                    help="comma-separated token budgets: a cache-on and a cache-off engine for "
                    "each (default: one pair at the engine's default budget)")
    ap.add_argument("--pass-limits", default="",
                    help="comma-separated overhead:waste pairs (PassLimits): a cache-on and a "
                    "cache-off engine for each (default: the device's limits)")
    ap.add_argument("--heap", choices=("both", "frozen"), default="both",
                    help="both: every method with the heap as loaded, then frozen")
    ap.add_argument("--out", type=Path, default=Path("profile-lm-eval"))
    args = ap.parse_args()
    quiet_torch(None)
    import torch
    from dialscore_server.checkpoints.loading import load_model
    from dialscore_server.heap import freeze_loaded_heap
    from dialscore_server.nll.engine.engine import NLLEngine
    from dialscore_server.scheduling.planner import PassLimits

    config = model_config(checkpoint(args.model), device=args.device)
    loaded = load_model(config)
    tok = loaded.tokenizer
    items = prompts(args.data, args.limit, tok, config.max_length)
    requests = chunks(items, args.batch_size)
    calls = [[p for req in group for p, _ in req] for group in chunks(requests, args.merge)]
    graphs = args.graph_positions if args.device.startswith("cuda") else 0
    budgets: list[int | None] = [int(b) for b in args.token_budgets.split(",") if b] or [None]
    limits: list[PassLimits | None] = [
        PassLimits(int(pair.split(":")[0]), float(pair.split(":")[1]))
        for pair in args.pass_limits.split(",") if pair] or [None]
    engines = {
        f"cache {state}" + (f" @{budget}" if budget else "")
        + (f" limits {lim.overhead_tokens}:{lim.max_waste:g}" if lim else ""): NLLEngine(
            config, loaded, token_budget=budget, context_cache_bytes=cache_bytes,
            cuda_graph_positions=graphs, pass_limits=lim)
        for budget in budgets for lim in limits for state, cache_bytes in (("on", None), ("off", 0))}
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    runs = {"padded": padded(loaded.model, args.device, pad, requests),
            **{name: engine_round(e, calls) for name, e in engines.items()}}
    summary: dict[str, Any] = {
        "model": args.model, "device": args.device, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        "instances": args.limit, "prompts": len(items), "requests": len(requests),
        "engine_calls": len(calls), "graph_positions": graphs, "methods": {}}
    for heap in ("loaded", "frozen") if args.heap == "both" else ("frozen",):
        if heap == "frozen":
            summary["frozen_objects"] = freeze_loaded_heap()
        for name, run in runs.items():
            seconds, result = fastest_round(run, args.rounds, args.device)
            summary["methods"][f"{name}, {heap}"] = {"s": round(seconds, 4), "work": result}
            print(f"{name:>10}, {heap}: {seconds:.3f} s  {result}", flush=True)
    for key, method in summary["methods"].items():
        method["x_padded"] = round(
            summary["methods"]["padded, " + key.split(", ")[1]]["s"] / method["s"], 3)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))

    on = runs[next(iter(engines))]
    prof = cProfile.Profile()
    prof.enable()
    timed(on, args.device)
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(60)
    (args.out / "profile_python.txt").write_text(text.getvalue())

    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    with profile(activities=activities) as tp:
        timed(on, args.device)
    table = tp.key_averages()
    parts = [table.table(sort_by="self_cpu_time_total", row_limit=30)]
    if args.device.startswith("cuda"):
        parts.append(table.table(sort_by="self_cuda_time_total", row_limit=30))
    (args.out / "profile_torch.txt").write_text("\n\n".join(parts))
    print(json.dumps(summary["methods"]), flush=True)


if __name__ == "__main__":
    main()
