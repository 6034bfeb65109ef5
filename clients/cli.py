"""The `dialscore` command. Each feature module registers its own subcommand here.

    dialscore demo                      the main job, on the embedded default (stand-ins, local Ray)
    dialscore stand-ins build DIR       build the offline stand-in checkpoints
    dialscore score --model NAME ...    score dialogues in-process (no server)
    dialscore probe --url URL ...       run the CEDAR probes against a running service
    dialscore models --url URL          list a running service's models
    dialscore eval mutual|decode|robustness --url URL --data FILE ...
                                        MuTual, DECODE and robustness evaluations over a service
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# "module:function" entries; each function takes the subparsers object and adds its command(s),
# setting `func` on its parser. Imported lazily so `dialscore --help` stays fast.
COMMANDS: tuple[str, ...] = (
    "clients.commands.standins:register",
    "clients.commands.score:register",
    "clients.commands.demo:register",
    "clients.commands.probe:register",
    "clients.commands.models:register",
    "clients.commands.evaluate:register",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dialscore", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for entry in COMMANDS:
        module, func = entry.split(":")
        getattr(importlib.import_module(module), func)(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
