"""`dialscore demo`: the main job, on the embedded default (a local Ray instance, stand-in models).

It starts the service from ``deployments/local.yaml`` on a free loopback port, runs the CEDAR
inference and attribution probes for every served dialogue model on the shipped sample
(``clients/dialscore/probes/cedar_sample.jsonl``), prints the tables, writes the report under ``--out``, and stops
the service.

Stand-in weights are random, so the accuracies sit near chance (0.5): the run shows the pipeline,
not a model's judgement. For the real checkpoints, delete the ``stand_ins:`` line of the YAML (the
registry then loads the hub ids, e.g. ``microsoft/DialoGPT-medium``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("demo", help="start the local service, run the CEDAR probes, write the report")
    p.add_argument("--config", default=None,
                   help="Serve config whose first application's args are used (default: the "
                   "packaged deployments/local.yaml)")
    p.add_argument("--data", default=None,
                   help="probe data (default: the packaged 40-dialogue sample)")
    p.add_argument("--out", default="runs/demo", help="report folder (re-runs resume from it)")
    p.add_argument("--settings", default="inference,attribution")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from dialscore.client import DialscoreClient
    from dialscore.probes.run import run_probes
    from dialscore.probes import SAMPLE_DATA
    from dialscore_server.gateway.embedded import LOCAL_CONFIG, app_args_from_yaml, serve_locally

    config = args.config or LOCAL_CONFIG
    data = args.data or SAMPLE_DATA
    app_args = app_args_from_yaml(config)
    if app_args.stand_ins:
        print("NOTE: serving STAND-IN checkpoints with random weights: probe accuracies will sit near "
              "chance (0.5).\n      For the real models, remove `stand_ins:` from "
              f"{config} (hub ids such as microsoft/DialoGPT-medium are then loaded).")
    start = time.monotonic()
    with serve_locally(app_args) as url:
        print(f"service ready at {url} after {time.monotonic() - start:.0f} s")
        with DialscoreClient(url, timeout=120) as client:
            client.wait_ready(timeout=120)
            run_probes(client, data, None, args.settings, seed=args.seed, out_dir=args.out,
                       echo=print)
    print(f"\nreport written to {Path(args.out).resolve()} ({time.monotonic() - start:.0f} s in all)")
    return 0
