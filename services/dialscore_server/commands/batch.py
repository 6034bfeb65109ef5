"""`dialscore batch`: run a file of scoring requests (OpenAI Batch API lines) as a job on Ray Data,
with the service's engines and routes, and write one output line per request.

    dialscore batch -i requests.jsonl -o results.jsonl
    dialscore batch -i requests.jsonl -o results.jsonl --config deployments/local.yaml \\
        --address ray://head:10001 --concurrency 4 --num-gpus 1

Models: the first application's `args` of a Serve config (default: the packaged
deployments/local.yaml), the same models the service would serve. Ray: a local instance started
for the job by default; a cluster with --address or RAY_ADDRESS. Running the same command again
after a stop resumes from the output file. Format, grouping, resume and limits: docs/batch.md.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    p = sub.add_parser("batch", help="run a file of scoring requests (OpenAI batch lines) on Ray Data",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-i", "--input", required=True, help="request lines (JSON Lines)")
    p.add_argument("-o", "--output", required=True,
                   help="output lines (JSON Lines), appended to: an existing file is resumed")
    p.add_argument("--config", default=None,
                   help="Serve config whose first application's models are loaded (default: the "
                   "packaged deployments/local.yaml)")
    p.add_argument("--executor", choices=["ray", "inline"], default="ray",
                   help="ray: Ray Data over an actor pool (default); inline: this process, no Ray")
    p.add_argument("--address", default=None,
                   help="Ray cluster address (default: RAY_ADDRESS, else a local Ray for the job)")
    p.add_argument("--concurrency", type=int, default=1, help="scoring actors (default 1)")
    p.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per actor (default 1)")
    p.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per actor (default 0)")
    p.add_argument("--local-cpus", type=int, default=None,
                   help="CPUs of the local Ray started for the job (default: the machine's)")
    p.add_argument("--batch-size", type=int, default=16,
                   help="requests per block: scored together by one actor, written together")
    p.add_argument("--summary-json", default=None, help="also write the summary here (JSON)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_batch)


def _batch(args: argparse.Namespace) -> int:
    from dialscore_server.batch.executors import InlineExecutor, RayDataExecutor
    from dialscore_server.batch.job import run_job
    from dialscore_server.batch.models import JobModels
    from dialscore_server.gateway.embedded import LOCAL_CONFIG, app_args_from_yaml

    if args.batch_size < 1 or args.concurrency < 1:
        raise SystemExit("dialscore batch: --batch-size and --concurrency must be at least 1")
    app = app_args_from_yaml(args.config or LOCAL_CONFIG)
    models = JobModels(nll=app.batch_model_configs(), classifiers=app.classifier_configs(),
                       limits=app.limits)
    executor = (InlineExecutor(models, args.batch_size) if args.executor == "inline" else
                RayDataExecutor(models, address=args.address, concurrency=args.concurrency,
                                num_cpus=args.num_cpus, num_gpus=args.num_gpus,
                                batch_size=args.batch_size, local_cpus=args.local_cpus))
    try:
        summary = run_job(args.input, args.output, executor, progress=not args.no_progress)
    except OSError as exc:
        print(f"dialscore batch: {exc}", file=sys.stderr)
        return 1
    print(summary.line(), flush=True)
    if args.summary_json:
        with open(args.summary_json, "w", encoding="utf-8") as f:
            json.dump(summary.to_dict(), f)
    return 0
