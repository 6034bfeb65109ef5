"""`dialscore probe`: run the CEDAR probes against a running service and write the report.

    dialscore probe --url http://127.0.0.1:8000 --data clients/dialscore/probes/cedar_sample.jsonl \\
        --models dialogpt-medium,bart-base --settings inference,attribution --seed 0 --out runs/probe

Re-running with the same inputs and --out reuses the scores already in OUT/scores.jsonl: a run
that dies halfway resumes where it stopped. --sampling one-per-explanation probes one corruption
per valid explanation, its type drawn (seeded) as CEDAR does; the default probes all of them.

As a batch job (a CEDAR sweep on the cluster's spare capacity instead of over HTTP):

    dialscore probe --url URL --models A,B --out runs/probe --as-batch requests.jsonl
    dialscore batch -i requests.jsonl -o results.jsonl        # the server's command (Ray Data)
    dialscore probe --url URL --models A,B --out runs/probe --from-batch-output results.jsonl

The first writes the items still to score as batch lines and scores nothing; the last reads the
job's output instead of sending requests (same options both times; URL still answers the model
cards).

    dialscore probe compare runs/probe --models bart-large bart-base --seed 0 --n-boot 2000

compares two models of a finished run on the pairs both scored (paired, dialogue-level
bootstrap): accuracy of each, difference A - B with its 95% interval and p-value, per setting and
per setting and category; prints the table and writes OUT/compare-A-vs-B.json and .txt.
"""

from __future__ import annotations

import argparse
import sys

from dialscore.commands import service_args
from dialscore.commands.service_args import add_server_args, comma_list
from dialscore.probes.corruptions import ALL_TYPES, CORRUPTIONS, SAMPLINGS


def register(sub) -> None:
    p = sub.add_parser("probe", help="run the CEDAR inference/attribution probes against a service",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(p, priority="bulk")
    p.add_argument("--data", default=None,
                   help="probe data, JSON Lines (default: the packaged 40-dialogue sample; schema "
                   "in the client's README)")
    p.add_argument("--models", type=comma_list, default=None,
                   help="comma-separated model names (default: every dialogue model the server serves)")
    p.add_argument("--settings", type=comma_list, default=["inference", "attribution"],
                   help="comma-separated: inference, attribution (default: both)")
    p.add_argument("--corruptions", type=comma_list, default=list(CORRUPTIONS),
                   help=f"comma-separated subset of {','.join(CORRUPTIONS)} (default: all six)")
    p.add_argument("--sampling", choices=SAMPLINGS, default=ALL_TYPES,
                   help="all: every corruption type of each valid explanation (default); "
                        "one-per-explanation: CEDAR's protocol, one type per valid explanation "
                        "drawn uniformly (seeded) among those it allows; recorded in report.json")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the corruptions, the one-per-explanation draw and the bootstrap")
    p.add_argument("--out", default="runs/probe", help="output folder (scores are resumed from it)")
    p.add_argument("--chunk-size", type=int, default=64, help="items per request (default 64)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95%% CIs")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--no-tokens", action="store_true",
                   help="do not keep per-token NLLs in scores.jsonl (kept by default for the heat "
                        "maps of report.html: a larger response and store, no extra model time)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--as-batch", default=None, metavar="FILE",
                       help="write the items to score as `dialscore batch` input lines to FILE "
                       "and score nothing")
    batch.add_argument("--from-batch-output", default=None, metavar="FILE",
                       help="take the scores from a `dialscore batch` output FILE (of the file "
                       "--as-batch wrote with the same options) instead of sending requests")
    p.set_defaults(func=_probe)
    # Optional, so `dialscore probe --url ...` keeps running the probes.
    actions = p.add_subparsers(dest="probe_action", required=False, metavar="{compare}")
    c = actions.add_parser("compare", help="compare two models of a finished probe run",
                           description=_COMPARE_DOC)
    c.add_argument("run_dir", metavar="RUN_DIR", help="the --out folder of a finished probe run")
    c.add_argument("--models", nargs=2, metavar=("A", "B"), required=True,
                   help="the two models to compare (the difference is A - B)")
    c.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    c.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    c.set_defaults(func=_compare)


_COMPARE_DOC = """Compare two models of a finished probe run on the pairs both scored.

Reads RUN_DIR/pairs.jsonl; per setting, and per setting and category, prints the accuracy of
each model, the difference A - B with its 95% percentile interval and the two-sided p-value of a
paired bootstrap that resamples dialogues; writes RUN_DIR/compare-A-vs-B.json and .txt."""


def _compare(args: argparse.Namespace) -> int:
    from dialscore.extras import REPORTS, MissingExtra, require
    from dialscore.probes.compare import (compare_run, format_comparison, read_run_sampling,
                                          read_scored_pairs, write_comparison)

    model_a, model_b = args.models
    try:
        require(("numpy",), REPORTS, "the paired bootstrap")
        if args.n_boot < 1:
            raise ValueError(f"--n-boot must be at least 1, got {args.n_boot}")
        groups = compare_run(read_scored_pairs(args.run_dir), model_a, model_b, seed=args.seed,
                             n_boot=args.n_boot)
        sampling = read_run_sampling(args.run_dir)
        table = format_comparison(groups, model_a, model_b, args.n_boot, sampling)
        files = write_comparison(args.run_dir, groups, model_a, model_b, args.seed, args.n_boot,
                                 table, sampling)
    except MissingExtra as exc:
        print(f"dialscore probe compare: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError, KeyError, TypeError) as exc:
        print(f"dialscore probe compare: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    from dialscore.reporting.html_runs import write_report_html

    pages = write_report_html(args.run_dir)
    print(table)
    print(f"wrote {files['json']}, {files['table']} and {pages.get(files['json'].stem, '')}")
    return 0


def _probe(args: argparse.Namespace) -> int:
    from dialscore.errors import DialscoreError, RetryBudgetExhaustedError
    from dialscore.extras import MissingExtra
    from dialscore.probes import SAMPLE_DATA
    from dialscore.probes.data import ProbeDataError
    from dialscore.probes.run import run_probes, write_probe_batch

    try:
        with service_args.client_from_args(args) as client:
            if args.as_batch:
                counts = write_probe_batch(
                    client, args.data or SAMPLE_DATA, args.as_batch, args.models, args.settings,
                    args.seed, args.out, chunk_size=args.chunk_size, corruptions=args.corruptions,
                    sampling=args.sampling, tokens=not args.no_tokens)
                print(f"wrote {counts['lines']} requests ({counts['items']} items) to "
                      f"{args.as_batch}; run `dialscore batch -i {args.as_batch} -o OUTPUT`, then "
                      "this command again with --from-batch-output OUTPUT instead of --as-batch")
                return 0
            run_probes(client, args.data or SAMPLE_DATA, args.models, args.settings, args.seed, args.out,
                       chunk_size=args.chunk_size, corruptions=args.corruptions,
                       sampling=args.sampling,
                       n_boot=args.bootstrap, plots=not args.no_plots, tokens=not args.no_tokens,
                       progress=not args.no_progress, echo=print,
                       batch_output=args.from_batch_output)
    except ProbeDataError as exc:
        print(f"dialscore probe: bad probe data\n{exc}", file=sys.stderr)
        return 2
    except MissingExtra as exc:
        print(f"dialscore probe: {exc}", file=sys.stderr)
        return 1
    except RetryBudgetExhaustedError as exc:
        print(f"dialscore probe: stopped: {exc}\nThe rows scored so far are kept in {args.out}; run "
              "the same command again later to resume from them.", file=sys.stderr)
        return 75  # EX_TEMPFAIL: try again later
    except (DialscoreError, ValueError, OSError) as exc:
        print(f"dialscore probe: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
