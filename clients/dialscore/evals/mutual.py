"""MuTual and MuTual-plus response selection: readers, ranking, metrics and the official export.

Data. An instance has an `id`, an `article` (the dialogue context, speakers marked "m :" and
"f :"), four `options` (each starting with its speaker marker) and `answers`, the gold letter
(A-D), blank on the test split. Two layouts are read:

- the official one: a folder holding one JSON object per file (`dev/dev_1.txt`, ...), returned
  in natural `id` order (dev_2 before dev_10), whatever the file names or listing order;
- JSON Lines: one object per line, returned in file order.

MuTual-plus has the same layout (one option per instance is replaced by a safe response such as
"could you repeat that?"); nothing here treats it differently.

Context turns. `parse_article` splits the article at every speaker marker: a marker is the letter
`m` or `f`, then a space and a colon, standing as its own tokens (preceded by the start of the
text or whitespace and followed by whitespace or the end). Each marker opens a turn that runs to
the next marker; the turn's `speaker` is the letter and its `text` is stripped of surrounding
spaces. Text before the first marker, if any, becomes a turn with speaker "". Turn ids are 0, 1,
2, ... in order. The MuTual text is lower-cased and tokenised ("do n't", "i 'm"); it is kept as is.

Ranking. `rank_options(scores, gold)` sorts options by score, higher first. The sign convention
is the caller's: pass a reranker's score as is and an NLL negated (lower NLL = better). Ties are
broken deterministically and against the gold option: among equal scores every other option ranks
before the gold one, and the others keep their option order. A NaN score is an error.

    >>> r = rank_options([0.2, 0.9, 0.9, 0.1], gold=2)
    >>> r.letters(), r.gold_rank
    (('B', 'C', 'A', 'D'), 2)
    >>> format_ranked("dev_1", r)
    'dev_1\\tB\\tC\\tA\\tD'

Metrics over instances with a gold answer: R@1 (gold first), R@2 (gold in the top two) and MRR
(mean of 1 / gold rank). Instances without one are ranked and exported but not scored;
`MutualMetrics.n_unscored` counts them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dialscore.types import Turn
from dialscore.reporting.atomic import atomic_write_text

LETTERS = "ABCDEFGHIJ"
# A speaker marker standing as its own tokens: "m :" or "f :".
_MARKER = re.compile(r"(?:^|(?<=\s))([mf]) :(?=\s|$)")
_NATURAL = re.compile(r"(\d+)")
_OFFICIAL_SUFFIXES = (".txt", ".json")


@dataclass(frozen=True)
class MutualInstance:
    """One MuTual instance. `answer` is the gold option's index, or None (test split)."""

    id: str
    article: str
    options: tuple[str, ...]
    answer: int | None

    @property
    def context(self) -> tuple[Turn, ...]:
        """The article split into speaker turns (see the module docstring)."""
        return parse_article(self.article)

    def option_turn(self, index: int) -> Turn:
        """Option `index` as a turn: its marker becomes the speaker; its id follows the context."""
        speaker, text = split_speaker(self.options[index])
        return Turn(id=len(self.context), speaker=speaker or "", text=text)

    @property
    def answer_letter(self) -> str | None:
        return None if self.answer is None else LETTERS[self.answer]


def parse_article(article: str) -> tuple[Turn, ...]:
    """Split a MuTual article into turns at its "m :" / "f :" markers."""
    turns: list[Turn] = []
    matches = list(_MARKER.finditer(article))
    head = article[: matches[0].start()] if matches else article
    if head.strip():
        turns.append(Turn(id=0, speaker="", text=head.strip()))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(article)
        turns.append(Turn(id=len(turns), speaker=m.group(1), text=article[m.end():end].strip()))
    return tuple(turns)


def split_speaker(text: str) -> tuple[str | None, str]:
    """("m", "hello .") from "m : hello ."; (None, text) when the text has no leading marker."""
    m = _MARKER.match(text)
    if not m:
        return None, text.strip()
    return m.group(1), text[m.end():].strip()


def _natural_key(identifier: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in _NATURAL.split(identifier))


def _instance(obj: dict, where: str) -> MutualInstance:
    try:
        ident, article, options = str(obj["id"]), obj["article"], obj["options"]
    except KeyError as exc:
        raise ValueError(f"{where}: missing field {exc.args[0]!r}") from None
    if not isinstance(options, list) or not options or len(options) > len(LETTERS):
        raise ValueError(f"{where}: `options` must be a list of 1..{len(LETTERS)} strings")
    raw = obj.get("answers", "")
    raw = raw[0] if isinstance(raw, list) and len(raw) == 1 else raw
    raw = (raw or "").strip() if isinstance(raw, str) else raw
    if raw in ("", None):
        answer = None
    elif isinstance(raw, str) and len(raw) == 1 and raw.upper() in LETTERS[: len(options)]:
        answer = LETTERS.index(raw.upper())
    else:
        raise ValueError(f"{where}: `answers` must be a letter among the options or blank, "
                         f"got {raw!r}")
    return MutualInstance(id=ident, article=str(article),
                          options=tuple(str(o) for o in options), answer=answer)


def read_mutual(path: str | Path) -> list[MutualInstance]:
    """Read a MuTual split: a folder of one-JSON-per-file instances, or a JSON Lines file.

    The folder layout comes back in natural id order; JSON Lines in file order. Duplicate ids
    are an error.
    """
    source = Path(path)
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.is_file()
                       and p.suffix in _OFFICIAL_SUFFIXES and not p.name.startswith("."))
        if not files:
            raise ValueError(f"{source}: no instance files (*.txt or *.json)")
        instances = [_instance(json.loads(p.read_text(encoding="utf-8")), str(p)) for p in files]
        instances.sort(key=lambda inst: _natural_key(inst.id))
    elif source.is_file():
        instances = []
        with source.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    instances.append(_instance(json.loads(line), f"{source}:{number}"))
    else:
        raise FileNotFoundError(f"{source}: no such file or folder")
    seen: set[str] = set()
    for inst in instances:
        if inst.id in seen:
            raise ValueError(f"{source}: duplicate id {inst.id!r}")
        seen.add(inst.id)
    return instances


@dataclass(frozen=True)
class Ranking:
    """Options best first. `gold_rank` is 1-based; both gold fields are None without a gold."""

    order: tuple[int, ...]
    scores: tuple[float, ...]
    gold: int | None = None

    @property
    def gold_rank(self) -> int | None:
        return None if self.gold is None else self.order.index(self.gold) + 1

    def letters(self) -> tuple[str, ...]:
        return tuple(LETTERS[i] for i in self.order)


def rank_options(scores: Sequence[float], gold: int | None = None) -> Ranking:
    """Rank options by score, higher = better, ties broken against `gold`, then by option order.

    Pass NLLs negated. Raises ValueError on NaN scores or a gold index out of range.
    """
    values = tuple(float(s) for s in scores)
    if not values:
        raise ValueError("no scores to rank")
    if any(math.isnan(v) for v in values):
        raise ValueError(f"NaN among the scores {values}")
    if gold is not None and not 0 <= gold < len(values):
        raise ValueError(f"gold index {gold} out of range for {len(values)} options")
    order = sorted(range(len(values)), key=lambda i: (-values[i], i == gold, i))
    return Ranking(order=tuple(order), scores=values, gold=gold)


@dataclass(frozen=True)
class MutualMetrics:
    """R@1, R@2 and MRR over the `n_scored` instances with a gold answer (None without any)."""

    n: int
    n_scored: int
    n_unscored: int
    r_at_1: float | None
    r_at_2: float | None
    mrr: float | None

    def as_row(self) -> dict[str, object]:
        return {"n": self.n, "n_scored": self.n_scored, "n_unscored": self.n_unscored,
                "R@1": self.r_at_1, "R@2": self.r_at_2, "MRR": self.mrr}


def recall_at(rankings: Iterable[Ranking], k: int) -> float | None:
    """Share of gold-labelled rankings with the gold option in the top `k`."""
    ranks = [r.gold_rank for r in rankings if r.gold is not None]
    return sum(rank <= k for rank in ranks) / len(ranks) if ranks else None


def mutual_metrics(rankings: Sequence[Ranking]) -> MutualMetrics:
    """R@1, R@2 and MRR over the rankings that have a gold option; the rest are counted."""
    ranks = [r.gold_rank for r in rankings if r.gold is not None]
    n_scored = len(ranks)
    return MutualMetrics(
        n=len(rankings), n_scored=n_scored, n_unscored=len(rankings) - n_scored,
        r_at_1=recall_at(rankings, 1), r_at_2=recall_at(rankings, 2),
        mrr=sum(1.0 / rank for rank in ranks) / n_scored if n_scored else None,
    )


def evaluate_mutual(instances: Sequence[MutualInstance],
                    scores: Sequence[Sequence[float]]) -> tuple[list[Ranking], MutualMetrics]:
    """Rank every instance's options by its scores (higher = better) and compute the metrics."""
    if len(instances) != len(scores):
        raise ValueError(f"{len(instances)} instances but {len(scores)} score lists")
    rankings = []
    for inst, row in zip(instances, scores):
        if len(row) != len(inst.options):
            raise ValueError(f"{inst.id}: {len(inst.options)} options but {len(row)} scores")
        rankings.append(rank_options(row, inst.answer))
    return rankings, mutual_metrics(rankings)


def chance_levels(n_options: Sequence[int]) -> dict[str, float | None]:
    """R@1, R@2 and MRR of a uniformly random ranking, averaged over instances with these option
    counts (None for no instances)."""
    if not n_options:
        return {"R@1": None, "R@2": None, "MRR": None}
    k = list(n_options)
    return {"R@1": sum(1 / n for n in k) / len(k),
            "R@2": sum(min(2, n) / n for n in k) / len(k),
            "MRR": sum(sum(1 / r for r in range(1, n + 1)) / n for n in k) / len(k)}


def format_ranked(instance_id: str, ranking: Ranking) -> str:
    """One line of the official export: the id, then the letters best first, tab-separated."""
    return "\t".join((instance_id, *ranking.letters()))


def write_ranked(path: str | Path, ids: Sequence[str], rankings: Sequence[Ranking]) -> Path:
    """Write the official ranked-letters file (one line per instance), atomically."""
    if len(ids) != len(rankings):
        raise ValueError(f"{len(ids)} ids but {len(rankings)} rankings")
    lines = [format_ranked(i, r) + "\n" for i, r in zip(ids, rankings)]
    return atomic_write_text(path, "".join(lines))
