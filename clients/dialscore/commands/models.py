"""`dialscore models`: list the models a running service serves, with provenance and format."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    from dialscore.commands.service_args import add_server_args

    p = sub.add_parser("models", help="list a service's models (GET /v1/models)")
    add_server_args(p)
    p.add_argument("--json", action="store_true", help="print the raw model list as JSON")
    p.set_defaults(func=_models)


def _models(args: argparse.Namespace) -> int:
    from dialscore.commands import service_args
    from dialscore.errors import DialscoreError
    from dialscore.reporting.tables import render_grid

    try:
        with service_args.client_from_args(args) as client:
            models = client.models()
    except DialscoreError as exc:
        print(f"dialscore models: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([m.model_dump(mode="json") for m in models], indent=2, ensure_ascii=False))
        return 0
    rows = [["name", "family", "source", "revision", "stand-in", "dtype", "device", "max_len",
             "explanation", "why turn"]]
    for m in models:
        fmt = m.format
        rows.append([m.name, m.family, str(m.source), str(m.revision), "YES" if m.stand_in else "no",
                     str(m.dtype), str(m.device), str(m.max_length),
                     fmt.knowledge_position if fmt else "(not reported)",
                     repr(fmt.why_turn) if fmt else "(not reported)"])
    print(render_grid(rows, header_rows=1))
    if any(m.stand_in for m in models):
        print("\nstand-in = random weights: scores show the pipeline working, not a model's judgement.")
    return 0
