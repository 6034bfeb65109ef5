"""Does oneDNN routing pay? The engine in-process on the CEDAR probe workload, kernels on and off.

Not a test (pytest never collects loadtests/). Three kernel settings, each on its own copy of the
same checkpoint, each with prefix reuse on (the serving default) and off:

  stock      ``NLLEngine(fast_kernels=False)``: PyTorch's own products, GPT-2's five-op GELU;
  gelu-only  stock + ``kernels.optimize(onednn=False)``: GELU as one kernel, no oneDNN routing;
  routed     ``NLLEngine(fast_kernels=True)`` (the default): linear layers through oneDNN where
             this machine's route file says so (services/dialscore_server/nll/engine/kernel_choice.py),
             GELU fused into the product.

Every repeat runs all the engines in turn (load from elsewhere hits them alike); the fastest run
of each is kept. Prints pairs/s by wall clock and by this process's CPU time, the ratios, and
each engine's largest NLL difference from stock (reuse off when it runs, else on). With
``--threads 1`` the CPU time is the forward passes' own work, so its ratios hold on a machine
busy with other work, where wall-clock ratios do not. The workload and checkpoint are
bench_probe's (``--model medium``: DialoGPT-medium shapes).

    python -m loadtests.bench_kernels --model medium --repeat 3
    python -m loadtests.bench_kernels --model medium --threads 1 --reuse on --groups 6
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

SETTINGS = ("stock", "gelu-only", "routed")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["small", "medium"], default="medium")
    p.add_argument("--groups", type=int, default=None, help="explanation groups (default: bench_probe's)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--reuse", choices=["on", "off", "both"], default="both",
                   help="prefix reuse of the engines timed")
    args = p.parse_args(argv)

    from dialscore_server.checkpoints.loading import load_model, set_threads
    from dialscore_server.nll.engine import kernel_choice, kernels
    from dialscore_server.nll.engine.engine import NLLEngine
    from loadtests.bench_probe import DEFAULT_GROUPS
    from loadtests.common import attribution_workload, checkpoint, model_config

    set_threads(args.threads)
    reuses = {"on": (True,), "off": (False,), "both": (True, False)}[args.reuse]
    source = checkpoint(args.model, Path(tempfile.gettempdir()) / "dialscore-bench")
    config = model_config(source, "float32", "cpu")
    engines = {}
    for setting in SETTINGS:
        loaded = load_model(config)
        if setting == "gelu-only":
            kernels.optimize(loaded.model, onednn=False)
        for reuse in reuses:
            engines[setting, reuse] = NLLEngine(config, loaded=loaded, num_threads=args.threads,
                                                prefix_reuse=reuse,
                                                fast_kernels=setting == "routed")
    print("routed:", {k: v for k, v in engines["routed", reuses[0]].kernels.items() if k != "routes"})
    for key, route in sorted(kernel_choice.described().items()):
        print(f"  route {key}: {route}")
    workload = attribution_workload(args.groups or DEFAULT_GROUPS[args.model],
                                    config.format.why_turn)
    groups, n_pairs = workload.groups, workload.pairs
    encoded = [engines["stock", reuses[0]].encode(it) for g in groups for it in g]
    print(f"{len(groups)} groups, {len(encoded)} items, {n_pairs} pairs, "
          f"{sum(e.cost for e in encoded)} item tokens, {args.threads} threads")
    for engine in engines.values():
        engine.score_encoded(encoded[:14])  # warm-up

    seconds: dict = {key: [] for key in engines}
    cpu: dict = {key: [] for key in engines}
    nlls: dict = {}
    for r in range(args.repeat):
        for key, engine in engines.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            results, _ = engine.score_encoded(encoded)
            seconds[key].append(time.perf_counter() - start)
            cpu[key].append(time.process_time() - start_cpu)
            nlls[key] = [x.nll for x in results]
        print(f"repeat {r + 1}: " + ", ".join(
            f"{s}/{'reuse' if u else 'plain'} {seconds[s, u][-1]:.2f} s ({cpu[s, u][-1]:.2f} cpu s)"
            for s, u in engines), flush=True)

    reference = nlls["stock", reuses[-1]]
    print(f"\n| kernels | prefix reuse | best s | pairs/s | runs, s | best cpu s | pairs/cpu s | "
          f"max abs dNLL vs stock, reuse {'on' if reuses[-1] else 'off'} |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    for (setting, reuse), runs in seconds.items():
        diff = max(abs(a - b) for a, b in zip(nlls[setting, reuse], reference))
        best_cpu = min(cpu[setting, reuse])
        print(f"| {setting} | {'on' if reuse else 'off'} | {min(runs):.2f} | {n_pairs / min(runs):.2f} | "
              f"{', '.join(f'{x:.1f}' for x in runs)} | {best_cpu:.2f} | {n_pairs / best_cpu:.2f} | "
              f"{diff:.1e} |")
    for reuse in reuses:
        for name, table in (("wall", seconds), ("cpu", cpu)):
            stock, gelu, routed = (min(table[s, reuse]) for s in SETTINGS)
            per_round = ", ".join(f"{a / b:.2f}" for a, b in zip(table["stock", reuse],
                                                                  table["routed", reuse]))
            print(f"reuse {'on' if reuse else 'off'}, {name} time: routed / stock {stock / routed:.2f}x "
                  f"pairs/s (each repeat: {per_round}); routed / gelu-only {gelu / routed:.2f}x; "
                  f"gelu-only / stock {stock / gelu:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
