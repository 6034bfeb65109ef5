"""`dialscore stand-ins build DIR`: write the offline stand-in checkpoints."""

from __future__ import annotations

import argparse
import time


def register(sub) -> None:
    p = sub.add_parser("stand-ins", help="build the offline random-weight stand-in checkpoints")
    inner = p.add_subparsers(dest="action", required=True)
    b = inner.add_parser("build", help="write one checkpoint per family under DIR")
    b.add_argument("dir", help="output folder (created)")
    b.add_argument("--seed", type=int, default=0)
    b.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    from dialscore_server.checkpoints.standins import build_stand_ins

    start = time.monotonic()
    paths = build_stand_ins(args.dir, seed=args.seed)
    for kind, path in paths.items():
        print(f"{kind:26s} {path}   (STAND-IN: random weights)")
    print(f"built in {time.monotonic() - start:.1f} s")
    return 0
