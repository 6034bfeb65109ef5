"""Captured CUDA graphs against eager passes of a causal model's trunk, on a GPU, in one run
(services/dialscore_server/nll/engine/cuda_graphs.py).

    python -m loadtests.bench_cuda_graphs                  # DialoGPT-medium's shapes
    python -m loadtests.bench_cuda_graphs --model stand-in  # the 2-layer, 64-wide stand-in

The model is built on the GPU from its configuration with random weights (GPT-2's init, seed 0),
float32: DialoGPT-medium's shapes (24 layers, 1,024 wide, 50,257-token vocabulary) cost per
pass what the real model does. For the trunk without key/value states (a replica with the context
cache off) and with them (cache on), it reports:

- the capture of every bucket of at most ``--positions`` positions: seconds, and the GPU memory
  it holds afterwards (``torch.cuda.memory_allocated``, outputs and the shared pool);
- for each pass shape of ``--shapes`` (rows x width), the median time of an eager pass and of a
  replay (the padding copy included), over ``--repeats`` passes each after warm-up, each timed
  from launch to ``torch.cuda.synchronize``, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from loadtests.common import Column, parser, table

SHAPES = "1x16,1x64,1x128,4x128,2x256,1x512"


def build(model: str) -> Any:
    """The model on the GPU, random weights under seed 0, float32, eval mode."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    shapes = ({"n_layer": 24, "n_embd": 1024, "n_head": 16, "vocab_size": 50257,
               "n_positions": 1024} if model == "medium"
              else {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 50257,
                    "n_positions": 512})
    torch.manual_seed(0)
    with torch.device("cuda"):
        return GPT2LMHeadModel(GPT2Config(**shapes)).eval()


def median_s(fn: Any, repeats: int) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--model", choices=("medium", "stand-in"), default="medium")
    ap.add_argument("--positions", type=int, default=512,
                    help="the captured buckets' bound (cuda_graph_positions; default 512)")
    ap.add_argument("--shapes", default=SHAPES, help=f"pass shapes timed (default {SHAPES})")
    ap.add_argument("--repeats", type=int, default=50)
    args: argparse.Namespace = ap.parse_args(argv)

    import torch

    from dialscore_server.nll.engine.cuda_graphs import GraphedTrunk, buckets
    from dialscore_server.nll.engine.forward import ForwardPasses

    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 2
    model = build(args.model)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    print(f"{args.model} shapes ({model.config.n_layer} layers, {model.config.n_embd} wide), "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    # The engine's trunk pass (no projection is run here).
    passes = ForwardPasses(model, "cuda", pad_id=0, decoder_prefix=(),
                           window=model.config.n_positions, project=lambda *a: [])
    for keep in (False, True):
        def trunk(ids: Any, keep: bool = keep) -> Any:
            return passes.trunk(ids, keep)

        with torch.inference_mode():
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            start = time.perf_counter()
            graphs = GraphedTrunk(passes.trunk, "cuda", 0,
                                  buckets(args.positions, model.config.n_positions),
                                  keep_states=keep)
            torch.cuda.synchronize()
            took = time.perf_counter() - start
            held = torch.cuda.memory_allocated() - before
            print(f"\nkeys/values kept: {keep}. Captured {len(graphs.shapes)} buckets "
                  f"({len(graphs.failed)} failed: {graphs.failed or '-'}) in {took:.2f} s, "
                  f"holding {held / 2**20:.0f} MiB")
            rows = []
            for rows_n, width in shapes:
                ids = torch.randint(0, model.config.vocab_size, (rows_n, width))
                on_device = ids.cuda()
                eager = median_s(lambda t=trunk, x=on_device: t(x), args.repeats)
                replay = median_s(lambda g=graphs, x=ids: g(x), args.repeats)
                rows.append([f"{rows_n} x {width}", graphs.bucket(rows_n, width),
                             eager * 1e3, replay * 1e3, eager / replay])
            print(table([Column("pass", 10, left=True), Column("bucket", 12, left=True),
                         Column("eager ms", 9, ".3f"), Column("replay ms", 10, ".3f"),
                         Column("x faster", 9, ".2f")],
                        [[r[0], "x".join(map(str, r[1])) if r[1] else "-", *r[2:]]
                         for r in rows]))
            del graphs
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
