"""`dialscore probe`: run the CEDAR probes against a running service and write the report.

    dialscore probe --url http://127.0.0.1:8000 --data clients/dialscore/probes/cedar_sample.jsonl \\
        --models dialogpt-medium,bart-base --settings inference,attribution --seed 0 --out runs/probe

Re-running with the same inputs and --out reuses the scores already in OUT/scores.jsonl: a run
that dies halfway resumes where it stopped.
"""

from __future__ import annotations

import argparse
import sys

from dialscore.commands import service_args
from dialscore.commands.service_args import add_server_args, comma_list
from dialscore.probes.corruptions import CORRUPTIONS


def register(sub) -> None:
    p = sub.add_parser("probe", help="run the CEDAR inference/attribution probes against a service",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(p)
    p.add_argument("--data", default=None,
                   help="probe data, JSON Lines (default: the packaged 40-dialogue sample; schema "
                   "in the client's README)")
    p.add_argument("--models", type=comma_list, default=None,
                   help="comma-separated model names (default: every dialogue model the server serves)")
    p.add_argument("--settings", type=comma_list, default=["inference", "attribution"],
                   help="comma-separated: inference, attribution (default: both)")
    p.add_argument("--corruptions", type=comma_list, default=list(CORRUPTIONS),
                   help=f"comma-separated subset of {','.join(CORRUPTIONS)} (default: all six)")
    p.add_argument("--seed", type=int, default=0, help="seed of the corruptions and bootstrap")
    p.add_argument("--out", default="runs/probe", help="output folder (scores are resumed from it)")
    p.add_argument("--chunk-size", type=int, default=64, help="items per request (default 64)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95%% CIs")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_probe)


def _probe(args: argparse.Namespace) -> int:
    from dialscore.errors import DialscoreError, RetryBudgetExhaustedError
    from dialscore.extras import MissingExtra
    from dialscore.probes import SAMPLE_DATA
    from dialscore.probes.data import ProbeDataError
    from dialscore.probes.run import run_probes

    try:
        with service_args.client_from_args(args) as client:
            run_probes(client, args.data or SAMPLE_DATA, args.models, args.settings, args.seed, args.out,
                       chunk_size=args.chunk_size, corruptions=args.corruptions,
                       n_boot=args.bootstrap, plots=not args.no_plots,
                       progress=not args.no_progress, echo=print)
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
