"""`dialscore demo`: the main job on the embedded default (stand-in checkpoints, this machine).

Builds the stand-ins when missing and scores a few example dialogues with every stand-in
dialogue model, printing each target token's NLL. Stand-in weights are random: the numbers show
the pipeline working, not a model's judgement.
"""

from __future__ import annotations

import argparse

EXAMPLES: list[dict] = [
    {"context": ["Hi! How was your weekend?", "Great, I found a buyer for the house."],
     "target": "That's wonderful, you must be so happy!"},
    {"context": [], "target": "Hello there."},
    {"context": ["Tu aimes le café ? ☕"], "target": "Oui, beaucoup 😀"},
    {"context": ["why are you so happy?"], "knowledge": "I found a buyer for the house causes I am so happy",
     "target": "because I sold the house."},
]


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the main job on the embedded default (stand-ins)")
    p.add_argument("--stand-ins", default="artifacts/stand-ins")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from services.nll.engine import NLLEngine, NLLItem
    from services.registry import stand_in_registry
    from services.standins import build_stand_ins

    build_stand_ins(args.stand_ins)
    print("NOTE: these are STAND-IN checkpoints with random weights: NLLs are near log(vocab) and "
          "say nothing about dialogue quality. Point the registry at the real hub ids for real scores.")
    registry = stand_in_registry(args.stand_ins)
    for config in registry:
        if config.family == "classifier":
            continue
        engine = NLLEngine(config)
        items = [NLLItem(target=e["target"], context=tuple(e["context"]), knowledge=e.get("knowledge"))
                 for e in EXAMPLES]
        print(f"\n== {config.name}  ({config.family}, stand-in={engine.stand_in}, source={config.source})")
        for item, res in zip(items, engine.score(items)):
            pieces = " ".join(f"{t!r}:{n:.2f}" for t, n in
                              zip(engine.token_strings(res.token_ids), res.token_nlls))
            print(f"  {item.target!r}  mean NLL {res.nll:.3f} over {res.num_tokens} tokens"
                  f"{' (source truncated)' if res.truncated else ''}\n    {pieces}")
    return 0
