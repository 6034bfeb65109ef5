"""`dialscore perplexity`: per-turn and per-dialogue perplexity of a JSON Lines file of dialogues
under a served dialogue model (POST /v1/nll/dialogues; :mod:`dialscore.evals.perplexity`).

    dialscore perplexity --url http://127.0.0.1:8000 --model dialogpt-medium --data dialogues.jsonl \\
        [--speaker bot] [--out perplexity.jsonl]

Prints the corpus perplexity (exp of the token-weighted mean NLL over every scored turn), the
counts of dialogues, turns, tokens and truncated turns; with --out, writes one JSON line per
dialogue: its id, nll, perplexity, num_tokens and turns (turn, nll, perplexity, num_tokens,
truncated). Exit status: 0 done, 1 service or data error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys


def register(sub) -> None:
    from dialscore.commands.service_args import add_server_args

    p = sub.add_parser("perplexity", help="per-turn and per-dialogue perplexity of a JSONL of "
                       "dialogues (POST /v1/nll/dialogues)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(p, concurrency=4, priority="bulk")
    p.add_argument("--model", required=True, help="the dialogue model (GET /v1/models)")
    p.add_argument("--data", required=True, help="JSON Lines, one dialogue per line: "
                   '{"id"?, "turns": [text, ...] or [{"speaker", "text"}, ...], "knowledge"?}')
    p.add_argument("--speaker", default=None,
                   help="score only this speaker's turns (turn objects needed); the others stay "
                   "the history")
    p.add_argument("--out", default=None, help="write one JSON line per dialogue here")
    p.add_argument("--chunk-turns", type=int, default=256,
                   help="scored turns per request (default 256; lowered to the service's max_items)")
    p.set_defaults(func=_perplexity)


def _perplexity(args: argparse.Namespace) -> int:
    from dialscore.commands import service_args
    from dialscore.errors import DialscoreError
    from dialscore.evals.perplexity import read_dialogues, score_perplexity

    async def main():
        async with service_args.async_client_from_args(args) as client:
            return await score_perplexity(client, args.model, read_dialogues(args.data),
                                          speaker=args.speaker, chunk_turns=args.chunk_turns)

    try:
        result = asyncio.run(main())
    except (DialscoreError, ValueError, OSError) as exc:
        print(f"dialscore perplexity: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            for d in result.dialogues:
                f.write(json.dumps(d.to_json(), ensure_ascii=False) + "\n")
    turns = sum(len(d.turns) for d in result.dialogues)
    print(f"{result.model}: perplexity {result.perplexity:.3f} (NLL {result.nll:.4f} nats/token) "
          f"over {len(result.dialogues)} dialogues, {turns} turns, {result.num_tokens} tokens; "
          f"{result.truncated_turns} turns with a truncated history"
          + (f"; {len(result.skipped)} dialogues without a turn of {args.speaker!r} skipped"
             if result.skipped else ""))
    return 0
