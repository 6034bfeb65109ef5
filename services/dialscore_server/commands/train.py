"""`dialscore train detector`: fine-tune a sequence-classification checkpoint as a DECODE
contradiction detector (see :mod:`dialscore_server.training.detector`).

    dialscore train detector --checkpoint roberta-large --data decode/train.jsonl \\
        --heldout decode/dev.jsonl --setting pairs --out checkpoints/roberta-decode
    dialscore train detector --checkpoint stand-ins/nli-contradiction-first --synthetic 400 \\
        --out /tmp/decode-standin        # a generated persona-fact set (tests, demos)

The output folder is a checkpoint the registry serves as is (family classifier, source = the
folder): its id2label names "contradiction", and dialscore_training.json records what it was
trained on. Exit status: 0 done, 1 data or checkpoint error.
"""

from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    p = sub.add_parser("train", help="train models served by dialscore",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    inner = p.add_subparsers(dest="what", required=True)
    d = inner.add_parser("detector", help="fine-tune a DECODE contradiction detector")
    d.add_argument("--checkpoint", required=True, help="a sequence-classification checkpoint")
    data = d.add_mutually_exclusive_group(required=True)
    data.add_argument("--data", help="DECODE-format JSON Lines to train on")
    data.add_argument("--synthetic", type=int, help="train on N generated dialogues instead")
    d.add_argument("--heldout", default=None, help="DECODE-format JSON Lines to score after training "
                                                   "(with --synthetic: a generated held-out set)")
    d.add_argument("--setting", choices=("pairs", "unstructured"), default="pairs",
                   help="pairs: utterance-based (the paper's structured detector); unstructured: "
                        "the whole history as premise")
    d.add_argument("--out", required=True, help="output folder (the trained checkpoint)")
    d.add_argument("--epochs", type=float, default=3.0)
    d.add_argument("--max-steps", type=int, default=-1, help="> 0 overrides --epochs")
    d.add_argument("--lr", type=float, default=2e-5, help="learning rate (2e-5)")
    d.add_argument("--batch-size", type=int, default=16)
    d.add_argument("--max-length", type=int, default=256)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=_detector)


def _detector(args: argparse.Namespace) -> int:
    from dialscore.evals.decode import read_decode

    from dialscore_server.training.detector import train_detector
    from dialscore_server.training.examples import detector_examples
    from dialscore_server.training.synthetic import contradiction_set

    try:
        if args.data:
            train, note = read_decode(args.data), args.data
            held = read_decode(args.heldout) if args.heldout else []
        else:
            train, note = contradiction_set(args.synthetic, args.seed), f"synthetic:{args.synthetic}"
            held = contradiction_set(max(args.synthetic // 2, 2), args.seed + 1)
        result = train_detector(
            args.checkpoint, detector_examples(train, args.setting), args.out,
            setting=args.setting, heldout=detector_examples(held, args.setting), epochs=args.epochs,
            max_steps=args.max_steps, learning_rate=args.lr, batch_size=args.batch_size,
            max_length=args.max_length, seed=args.seed, source_note=note)
    except (ValueError, OSError) as exc:
        print(f"dialscore train detector: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    acc = "-" if result.heldout_accuracy is None else f"{result.heldout_accuracy:.4f}"
    print(f"trained {result.steps} steps on {result.train_examples} examples; held-out accuracy "
          f"{acc} on {result.heldout_examples}; checkpoint: {result.out}")
    return 0
