"""How well the battery's named-entity tagger finds entities: token-level precision and recall
on hand-labelled utterances.

The `no_entities` variant removes the tokens the linguistic backend marks as named entities, and
the synonym variant leaves them alone. The backend's entities are a heuristic (proper-noun tags,
see :mod:`dialscore.evals.linguistic`), not a trained recogniser, so its accuracy is measured:

    python -m dialscore.evals.entity_check tests/client/data/entities_labelled.txt

Labelled file: one utterance a line, each named-entity token inside square brackets
("i met [john] [smith] in [paris] ."); blank lines and lines starting with "#" are skipped. The
utterance is split with the battery's own `tokenize`, so the figures are about the tokens the
variants see. A token counts as a true positive when it is labelled and flagged, a false positive
when flagged only, a false negative when labelled only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dialscore.evals.linguistic import LinguisticBackend, default_backend
from dialscore.evals.robustness import tokenize

__all__ = ["EntityScores", "LabelledUtterance", "by_case", "errors", "parse_labelled",
           "read_labelled", "score_entities"]


@dataclass(frozen=True)
class LabelledUtterance:
    """An utterance's tokens (as `tokenize` splits its text) and which are named entities."""

    text: str
    tokens: tuple[str, ...]
    entity: tuple[bool, ...]


def parse_labelled(line: str) -> LabelledUtterance:
    """One labelled line (see the module docstring). Raises ValueError on unbalanced or nested
    brackets, or when removing the brackets changes how the text splits into tokens."""
    tokens: list[str] = []
    flags: list[bool] = []
    inside = False
    for _, tok in tokenize(line):
        if tok in ("[", "]"):
            if inside == (tok == "["):
                raise ValueError(f"unbalanced or nested brackets in {line!r}")
            inside = tok == "["
            continue
        tokens.append(tok)
        flags.append(inside)
    if inside:
        raise ValueError(f"unclosed bracket in {line!r}")
    text = line.replace("[", "").replace("]", "")
    if [tok for _, tok in tokenize(text)] != tokens:
        raise ValueError(f"brackets split a token in {line!r}")
    return LabelledUtterance(text, tuple(tokens), tuple(flags))


def read_labelled(path: str | Path) -> list[LabelledUtterance]:
    """Every labelled utterance of a file, in order."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [parse_labelled(line.strip()) for line in lines
            if line.strip() and not line.lstrip().startswith("#")]


@dataclass(frozen=True)
class EntityScores:
    """Token-level counts and rates; a rate is None when its denominator is 0."""

    utterances: int
    tokens: int
    true_positives: int
    false_positives: int
    false_negatives: int

    @property
    def precision(self) -> float | None:
        flagged = self.true_positives + self.false_positives
        return self.true_positives / flagged if flagged else None

    @property
    def recall(self) -> float | None:
        labelled = self.true_positives + self.false_negatives
        return self.true_positives / labelled if labelled else None

    @property
    def f1(self) -> float | None:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p is not None and r is not None and p + r > 0 else None


def score_entities(utterances: Iterable[LabelledUtterance],
                   backend: LinguisticBackend | None = None) -> EntityScores:
    """Compare `backend.entities` (default: `default_backend()`) with the labels, token by token."""
    backend = backend if backend is not None else default_backend()
    n = tokens = tp = fp = fn = 0
    for utt in utterances:
        flagged = backend.entities(list(utt.tokens))
        n += 1
        tokens += len(utt.tokens)
        for gold, got in zip(utt.entity, flagged, strict=True):
            tp += gold and got
            fp += got and not gold
            fn += gold and not got
    return EntityScores(n, tokens, tp, fp, fn)


def errors(utterances: Iterable[LabelledUtterance],
           backend: LinguisticBackend | None = None) -> list[tuple[str, str, str]]:
    """(utterance, token, "missed" or "spurious") for every token the backend gets wrong."""
    backend = backend if backend is not None else default_backend()
    out = []
    for utt in utterances:
        for tok, gold, got in zip(utt.tokens, utt.entity, backend.entities(list(utt.tokens))):
            if gold != got:
                out.append((utt.text, tok, "missed" if gold else "spurious"))
    return out


def by_case(utterances: Iterable[LabelledUtterance]) -> dict[str, list[LabelledUtterance]]:
    """The utterances split into "cased" (any upper-case letter) and "lower-cased" (none, like
    MuTual), the two conditions the tagger handles differently."""
    groups: dict[str, list[LabelledUtterance]] = {"cased": [], "lower-cased": []}
    for utt in utterances:
        groups["lower-cased" if utt.text == utt.text.lower() else "cased"].append(utt)
    return groups


def _rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="labelled utterances (see the module docstring)")
    parser.add_argument("--errors", action="store_true", help="list every wrong token")
    args = parser.parse_args(argv)
    utterances = read_labelled(args.path)
    backend = default_backend()
    print(backend.name)
    for label, group in {"all": utterances, **by_case(utterances)}.items():
        s = score_entities(group, backend)
        print(f"  {label:12} {s.utterances} utterances, {s.tokens} tokens, "
              f"{s.true_positives + s.false_negatives} entity tokens: precision "
              f"{_rate(s.precision)}, recall {_rate(s.recall)}, F1 {_rate(s.f1)} "
              f"(tp {s.true_positives}, fp {s.false_positives}, fn {s.false_negatives})")
    if args.errors:
        for text, tok, kind in errors(utterances, backend):
            print(f"  {kind:8} {tok!r:14} in {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
