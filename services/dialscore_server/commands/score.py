"""`dialscore score`: score a few dialogues in-process on a registered model (no server)."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    p = sub.add_parser("score", help="score JSON Lines items in-process and print per-token NLLs")
    p.add_argument("--stand-ins", default="artifacts/stand-ins",
                   help="stand-in folder (built when missing); ignored with --real")
    p.add_argument("--real", action="store_true", help="use the paper's checkpoints by hub id")
    p.add_argument("--model", default="dialogpt-medium")
    p.add_argument("--input", default="-", help='JSON Lines of {"context": [...], "target": ...}')
    p.set_defaults(func=_score)


def _score(args: argparse.Namespace) -> int:
    from dialscore_server.nll.engine.engine import NLLEngine
    from dialscore_server.nll.protocol import NLLItemIn
    from dialscore_server.checkpoints.registry import paper_registry, stand_in_registry
    from dialscore_server.checkpoints.standins import build_stand_ins

    if args.real:
        registry = paper_registry()
    else:
        build_stand_ins(args.stand_ins)
        registry = stand_in_registry(args.stand_ins)
    engine = NLLEngine(registry.get(args.model))
    stream = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")
    items = [NLLItemIn.model_validate_json(line).to_item() for line in stream if line.strip()]
    for item, res in zip(items, engine.score(items)):
        print(json.dumps({"target": item.target, "nll": round(res.nll, 4), "stand_in": engine.stand_in,
                          "tokens": engine.token_strings(res.token_ids),
                          "token_nlls": [round(x, 4) for x in res.token_nlls]}, ensure_ascii=False))
    return 0
