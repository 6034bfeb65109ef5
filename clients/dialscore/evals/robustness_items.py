"""The responses the robustness battery perturbs, each with the context it answers
(`ResponseItem`), read from MuTual or DECODE.

    MuTual   `items_from_mutual`: of each instance with a gold answer, the gold option as the
             response (`MutualInstance.option_turn`: its speaker marker becomes the turn's
             speaker) and the article's turns as the context; instances without an answer are
             left out.
    DECODE   `items_from_decode`: of each dialogue with at least two turns, the last turn as the
             response and the earlier turns as the context; shorter dialogues are left out.

Sampling. With `n` below the number of usable items, a sample of `n` of them is taken with
`random.Random(f"{seed}:sample")`, so it depends only on (seed, n, number of usable items), and
is kept in file order; with `n` None, or at least that number, every usable item is kept, in
file order.

Corpus. `read_response_items(path, n, seed, corpus)` returns (corpus name, items); with `corpus`
"auto" the name comes from `corpus_of(path)`: a folder is "mutual" (MuTual's official layout);
otherwise the first non-blank line, a JSON record, decides: "mutual" when it has both "article"
and "options", else "decode" when it has "turns"; any other record, or no record at all, raises
ValueError. A `corpus` other than "auto", "mutual" and "decode" raises ValueError too.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dialscore.evals.decode import DecodeDialogue, read_decode
from dialscore.evals.mutual import MutualInstance, read_mutual
from dialscore.types import Turn


@dataclass(frozen=True)
class ResponseItem:
    """A response to perturb and the context it answers."""

    id: str
    context: tuple[Turn, ...]
    response: Turn


def _sample(n_items: int, n: int | None, seed: int) -> list[int]:
    if n is None or n >= n_items:
        return list(range(n_items))
    return sorted(random.Random(f"{seed}:sample").sample(range(n_items), n))


def items_from_mutual(instances: Sequence[MutualInstance], n: int | None = None,
                      seed: int = 0) -> list[ResponseItem]:
    """The gold option of each labelled instance as the response (speaker marker removed), its
    article turns as the context; `n` picks a seeded sample, kept in file order."""
    labelled = [inst for inst in instances if inst.answer is not None]
    return [ResponseItem(id=inst.id, context=inst.context, response=inst.option_turn(inst.answer))
            for inst in (labelled[i] for i in _sample(len(labelled), n, seed))]


def items_from_decode(dialogues: Sequence[DecodeDialogue], n: int | None = None,
                      seed: int = 0) -> list[ResponseItem]:
    """The last turn of each dialogue as the response, the earlier turns as the context."""
    usable = [d for d in dialogues if len(d.turns) >= 2]
    return [ResponseItem(id=d.id, context=d.turns[:-1], response=d.last)
            for d in (usable[i] for i in _sample(len(usable), n, seed))]


def corpus_of(path: Path) -> str:
    """"mutual" or "decode", from the first record's fields (a folder is MuTual's official layout)."""
    if path.is_dir():
        return "mutual"
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                record = json.loads(line)
                if "article" in record and "options" in record:
                    return "mutual"
                if "turns" in record:
                    return "decode"
                break
    raise ValueError(f"{path}: neither MuTual (article, options) nor DECODE (turns) records")


def read_response_items(path: str | Path, n: int | None = None, seed: int = 0,
                        corpus: str = "auto") -> tuple[str, list[ResponseItem]]:
    """The responses to perturb and the corpus they came from: MuTual gold options or DECODE last
    turns (`corpus` "auto" tells them apart, see `corpus_of`), a seeded sample of `n`."""
    source = Path(path)
    kind = corpus_of(source) if corpus == "auto" else corpus
    if kind == "mutual":
        return kind, items_from_mutual(read_mutual(source), n=n, seed=seed)
    if kind == "decode":
        return kind, items_from_decode(read_decode(source), n=n, seed=seed)
    raise ValueError(f"corpus must be auto, mutual or decode, got {corpus!r}")
