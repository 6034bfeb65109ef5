"""The `dialscore` command.

Client commands (this distribution, they talk to a running service over HTTP)::

    dialscore probe --url URL ...       run the CEDAR probes against a service and write the report
    dialscore probe compare DIR --models A B
                                        paired bootstrap comparison of two models of a finished run
    dialscore models --url URL          list a service's models
    dialscore eval mutual|decode|robustness --url URL --data FILE ...
                                        MuTual, DECODE and robustness evaluations over a service
    dialscore perplexity --url URL --model M --data FILE
                                        per-turn and per-dialogue perplexity of dialogues
    dialscore report RUN_DIR            (re)write a run folder's self-contained report.html

Server commands appear when the server distribution (`dialscore-server`) is installed too; it
registers them under the ``dialscore.commands`` entry-point group (``serve``, ``demo``,
``stand-ins``, ``score``, ``train``, ``batch``). A client-only install lists none of them, so it
offers nothing it cannot run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

#: Entry-point group through which other distributions add subcommands. Each entry is a
#: ``register(subparsers)`` function that adds its command and sets ``func`` on its parser; the
#: function imports nothing heavy, so ``dialscore --help`` stays fast.
PLUGIN_GROUP = "dialscore.commands"

#: The client's own commands, as "module:function" entries of the same kind.
COMMANDS: tuple[str, ...] = (
    "dialscore.commands.probe:register",
    "dialscore.commands.models:register",
    "dialscore.commands.evaluate:register",
    "dialscore.commands.perplexity:register",
    "dialscore.commands.report:register",
)


def registrars() -> list[str]:
    """The "module:function" entry of every command: the client's, then the plugins' by name."""
    plugins = sorted(entry_points(group=PLUGIN_GROUP), key=lambda ep: ep.name)
    return list(COMMANDS) + [ep.value for ep in plugins]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dialscore", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for entry in registrars():
        module, func = entry.split(":")
        getattr(importlib.import_module(module), func)(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
