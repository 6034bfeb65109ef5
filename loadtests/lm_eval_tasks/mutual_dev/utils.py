"""doc_to_text and doc_to_target of the `mutual_dev` task (mutual_dev.yaml): lm-eval imports this
file by its path, so it needs nothing but the standard library."""

from __future__ import annotations

import re

#: A speaker marker standing as its own tokens, "m :" or "f :" (dialscore.evals.mutual's rule).
_MARKER = re.compile(r"(?:^|(?<=\s))([mf]) :(?=\s|$)")


def turns(article: str) -> list[str]:
    """The article's turns, each "m : text" / "f : text", split at every speaker marker; text
    before the first marker, if any, is a turn of its own."""
    marks = list(_MARKER.finditer(article))
    out = [article[: marks[0].start()].strip()] if marks else [article.strip()]
    out = [t for t in out if t]
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(article)
        out.append(f"{m.group(1)} : {article[m.end():end].strip()}")
    return out


def doc_to_text(doc: dict) -> str:
    """The dialogue so far, one turn per line (the choice follows on the next line)."""
    return "\n".join(turns(doc["article"]))


def doc_to_target(doc: dict) -> int:
    """The gold option's index (answers "A"-"D")."""
    return "ABCD".index(doc["answers"].strip())
