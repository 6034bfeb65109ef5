"""`dialscore eval`: the MuTual, DECODE and robustness evaluations against a running service.

    dialscore eval mutual --url http://127.0.0.1:8000 --data ../shared/data/mutual/dev.jsonl \\
        --scorer nll --model dialogpt-medium --out runs/eval
    dialscore eval mutual --data ../shared/data/mutual/dev --scorer rerank --out runs/eval
    dialscore eval decode --data ../shared/data/decode/test.jsonl --modes structured,unstructured \\
        --diagnostics a2t,rct --seed 0 --out runs/eval
    dialscore eval decode-human-bot --data human_bot.jsonl --mode structured --out runs/eval
    dialscore eval robustness --data ../shared/data/mutual/dev.jsonl --scorer nll \\
        --model dialogpt-medium --n 200 --seed 0 --out runs/eval

Each writes its table to the terminal and CSV / JSON rows, a JSON report (with the served
models' provenance) and, for the robustness battery, a PNG (with matplotlib, the `reports` extra)
into --out; the battery's POS, entity and synonym variants need the `evals` extra; see
clients/dialscore/evals/runners/__init__.py for the files. Exit status: 0 done, 1 service or data
error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from dialscore.commands import service_args
from dialscore.commands.service_args import add_server_args, comma_list
from dialscore.evals.detector_kind import DETECTOR_KINDS
from dialscore.evals.robustness import KINDS
from dialscore.evals.runners.decode import DECODE_MODES, DIAGNOSTICS
from dialscore.evals.runners.mutual import MUTUAL_SCORERS
from dialscore.evals.runners.robustness import ROBUSTNESS_SCORERS
from dialscore.evals.scorers import DIALOGUE_CHUNK


def _common(p: argparse.ArgumentParser) -> None:
    add_server_args(p, concurrency=16, priority="bulk")
    p.add_argument("--data", required=True, help="the data file (or MuTual folder) to evaluate")
    p.add_argument("--out", default="runs/eval", help="output folder (default runs/eval)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def register(sub) -> None:
    p = sub.add_parser("eval", help="MuTual, DECODE and robustness evaluations against a service",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    evals = p.add_subparsers(dest="evaluation", required=True)

    m = evals.add_parser("mutual", help="MuTual / MuTual-plus response selection: R@1, R@2, MRR")
    _common(m)
    m.add_argument("--scorer", choices=MUTUAL_SCORERS, default="nll",
                   help="nll: -NLL of each option under --model; rerank: POST /v1/rerank's score")
    m.add_argument("--model", default=None,
                   help="nll: the dialogue model (required); rerank: the classifier "
                        "(default: the service's detector)")
    m.add_argument("--nll-model", default=None,
                   help="rerank only: also weigh in this dialogue model's NLL")
    m.add_argument("--limit", type=int, default=None, help="evaluate the first N instances only")
    m.add_argument("--chunk-size", type=int, default=64,
                   help="NLL items per request (default 64; lowered to the service's max_items)")
    m.set_defaults(func=_mutual)

    d = evals.add_parser("decode", help="DECODE contradiction detection, A2T and RCT diagnostics")
    _common(d)
    d.add_argument("--modes", type=comma_list, default=list(DECODE_MODES),
                   help="comma-separated: structured, unstructured (default: both, side by side)")
    d.add_argument("--threshold", type=float, default=0.5, help="contradiction threshold (0.5)")
    d.add_argument("--evidence-threshold", type=float, default=None,
                   help="evidence threshold (default: the threshold)")
    d.add_argument("--diagnostics", type=comma_list, default=list(DIAGNOSTICS),
                   help="comma-separated: a2t, rct (default both; '' for none)")
    d.add_argument("--seed", type=int, default=0, help="seed of the A2T donor draw")
    d.add_argument("--model", default=None, help="the classifier (default: the service's detector)")
    d.add_argument("--limit", type=int, default=None, help="evaluate the first N dialogues only")
    d.add_argument("--chunk-size", type=int, default=DIALOGUE_CHUNK,
                   help=f"dialogues per request (default {DIALOGUE_CHUNK}; lowered to the "
                        "service's published max_dialogues)")
    d.add_argument("--detector-kind", choices=DETECTOR_KINDS, default="nli",
                   help="nli: an off-the-shelf NLI checkpoint (default); decode-trained: fine-tuned "
                        "on DECODE (dialscore train detector); the report names the comparable "
                        "paper row")
    d.set_defaults(func=_decode)

    h = evals.add_parser("decode-human-bot",
                         help="DECODE human-bot analyses: every utterance against its context "
                              "(resumable), P/R/F1/AUC, five fire-rate groups, per-bot Pearson r")
    _common(h)
    h.add_argument("--mode", choices=DECODE_MODES, default="structured", help="detector mode")
    h.add_argument("--threshold", type=float, default=0.5, help="contradiction threshold (0.5)")
    h.add_argument("--model", default=None, help="the classifier (default: the service's detector)")
    h.add_argument("--min-utterances", type=int, default=180,
                   help="bots with fewer bot utterances are left out of Pearson r (default 180)")
    h.add_argument("--annotator-key", default=None,
                   help="for logs in another format: the turn auxiliary's field counting the "
                        "annotators who agreed (an integer, or a list of votes); default: DECODE's "
                        "original_verifier_contradiction_count + new_verifier_contradiction_count")
    h.add_argument("--limit", type=int, default=None, help="evaluate the first N utterances only")
    h.add_argument("--chunk-size", type=int, default=DIALOGUE_CHUNK,
                   help=f"dialogues per request (default {DIALOGUE_CHUNK})")
    h.add_argument("--no-plot", action="store_true", help="skip the PNG")
    h.add_argument("--detector-kind", choices=DETECTOR_KINDS, default="nli",
                   help="nli (default) or decode-trained; the report names the comparable figures")
    h.set_defaults(func=_decode_human_bot)

    r = evals.add_parser("robustness", help="ADEM-style perturbation battery for any scorer")
    _common(r)
    r.add_argument("--scorer", choices=ROBUSTNESS_SCORERS, default="nll",
                   help="nll: -NLL under --model; contradiction: 1 - P(contradiction); rerank: "
                        "the reranker's score")
    r.add_argument("--model", default=None,
                   help="nll: the dialogue model (required); contradiction / rerank: the "
                        "classifier (default: the service's detector)")
    r.add_argument("--nll-model", default=None, help="rerank only: also weigh in this model's NLL")
    r.add_argument("--n", type=int, default=None, help="a seeded sample of N responses (default all)")
    r.add_argument("--seed", type=int, default=0, help="seed of the sample and the variants")
    r.add_argument("--kinds", type=comma_list, default=list(KINDS),
                   help=f"comma-separated subset of {','.join(KINDS)} (default: all)")
    r.add_argument("--corpus", choices=("auto", "mutual", "decode"), default="auto",
                   help="the data's format (default: detected)")
    r.add_argument("--mode", choices=DECODE_MODES, default="structured",
                   help="contradiction scorer's detector mode (default structured)")
    r.add_argument("--chunk-size", type=int, default=64,
                   help="NLL items per request (default 64; lowered to the service's max_items)")
    r.add_argument("--no-plot", action="store_true", help="skip the PNG")
    r.set_defaults(func=_robustness)


def _run(args: argparse.Namespace, make) -> int:
    from dialscore.errors import DialscoreError
    from dialscore.extras import MissingExtra

    async def main() -> None:
        async with service_args.async_client_from_args(args) as client:
            await make(client)

    try:
        asyncio.run(main())
    except MissingExtra as exc:
        print(f"dialscore eval {args.evaluation}: {exc}", file=sys.stderr)
        return 1
    except (DialscoreError, ValueError, OSError) as exc:
        print(f"dialscore eval {args.evaluation}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def _mutual(args: argparse.Namespace) -> int:
    from dialscore.evals.runners.mutual import arun_mutual

    return _run(args, lambda client: arun_mutual(
        client, args.data, args.scorer, args.model, args.out, nll_model=args.nll_model,
        limit=args.limit, chunk_size=args.chunk_size, progress=not args.no_progress, echo=print))


def _decode(args: argparse.Namespace) -> int:
    from dialscore.evals.runners.decode import arun_decode

    return _run(args, lambda client: arun_decode(
        client, args.data, args.out, modes=args.modes, threshold=args.threshold,
        evidence_threshold=args.evidence_threshold, diagnostics=args.diagnostics, seed=args.seed,
        model=args.model, chunk_size=args.chunk_size, limit=args.limit,
        detector_kind=args.detector_kind, progress=not args.no_progress, echo=print))


def _decode_human_bot(args: argparse.Namespace) -> int:
    from dialscore.evals.runners.decode_human_bot import arun_decode_human_bot

    return _run(args, lambda client: arun_decode_human_bot(
        client, args.data, args.out, mode=args.mode, threshold=args.threshold, model=args.model,
        min_utterances=args.min_utterances, annotator_key=args.annotator_key,
        chunk_size=args.chunk_size, limit=args.limit, detector_kind=args.detector_kind,
        plot=not args.no_plot,
        progress=not args.no_progress, echo=print))


def _robustness(args: argparse.Namespace) -> int:
    from dialscore.evals.runners.robustness import arun_robustness

    return _run(args, lambda client: arun_robustness(
        client, args.data, args.scorer, args.model, args.n, args.seed, args.out,
        kinds=args.kinds, corpus=args.corpus, nll_model=args.nll_model, mode=args.mode,
        chunk_size=args.chunk_size, plot=not args.no_plot, progress=not args.no_progress,
        echo=print))
