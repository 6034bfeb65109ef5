"""Probe data: annotated dialogues for the CEDAR probes, one JSON object per line (JSON Lines).

Schema of one line (every field required, no others allowed; types are strict, so ``"true"`` is
not a boolean and ``1`` is not a string)::

    {
      "id": "dd-001",                      # unique in the file, non-blank
      "dataset": "DailyDialog",            # source dataset; the reports group by it. The paper's
                                           #   four: DailyDialog, EmpatheticDialogues, MuTual, SocialIQA
      "history": ["turn 1", "turn 2"],     # the turns before the response, oldest first (may be empty)
      "response": "the last turn",         # R: the turn the explanations explain
      "explanations": [                    # at least one
        {
          "dimension": "event",            # event | emotion | location | possession | attribute
          "antecedent": "I found a buyer for the house",
          "connective": "causes",          # causes | motivates | enables | causes/enables
          "consequent": "I am so happy",
          "valid": true                    # the human verification label
        }
      ]
    }

The explanation's text, as scored, is ``"<antecedent> <connective> <consequent>"``
(:attr:`Explanation.text`). Valid explanations are probed; invalid ones are the material of the
``incorrect`` corruption.

:func:`load_dialogues` validates every line with pydantic and raises one
:class:`ProbeDataError` that lists *every* problem, each with its line number and field path
(``line 7: explanations[2].connective: Input should be 'causes', ...``); blank lines are
ignored, nothing else is skipped. :func:`read_dialogues` returns the good dialogues and the
problems instead of raising.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

__all__ = ["CONNECTIVES", "DIMENSIONS", "Dialogue", "Explanation", "LineError", "ProbeDataError",
           "dump_dialogues", "load_dialogues", "read_dialogues"]

Dimension = Literal["event", "emotion", "location", "possession", "attribute"]
Connective = Literal["causes", "motivates", "enables", "causes/enables"]
DIMENSIONS: tuple[str, ...] = Dimension.__args__  # type: ignore[attr-defined]
CONNECTIVES: tuple[str, ...] = Connective.__args__  # type: ignore[attr-defined]


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty or blank")
    return text


Text = Annotated[str, AfterValidator(_not_blank)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Explanation(_Strict):
    """One commonsense explanation of the response: ``antecedent connective consequent``."""

    dimension: Dimension = Field(description="What the explanation is about.")
    antecedent: Text
    connective: Connective
    consequent: Text
    valid: bool = Field(description="True when human verification accepted the explanation.")

    @property
    def text(self) -> str:
        """The explanation as scored: ``"<antecedent> <connective> <consequent>"``."""
        return f"{self.antecedent.strip()} {self.connective} {self.consequent.strip()}"


class Dialogue(_Strict):
    """One annotated dialogue: history H, response R and explanations E."""

    id: Text
    dataset: Text
    history: list[Text] = Field(description="Turns before the response, oldest first.")
    response: Text
    explanations: Annotated[list[Explanation], Field(min_length=1)]


@dataclass(frozen=True)
class LineError:
    """One problem in a probe data file: the 1-based line, the field path (None for the whole
    line) and what is wrong."""

    line: int
    field: str | None
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field or '<line>'}: {self.message}"


class ProbeDataError(ValueError):
    """A probe data file with problems; ``errors`` lists every one of them."""

    def __init__(self, path: str | Path, errors: Sequence[LineError]):
        self.path = str(path)
        self.errors = list(errors)
        lines = len({e.line for e in self.errors})
        listing = "\n".join(f"  {e}" for e in self.errors)
        super().__init__(f"{self.path}: {len(self.errors)} problem(s) on {lines} line(s):\n{listing}")


def _field_path(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def read_dialogues(path: str | Path) -> tuple[list[Dialogue], list[LineError]]:
    """Parse a JSON Lines file: the valid dialogues and a list of every problem found."""
    dialogues: list[Dialogue] = []
    errors: list[LineError] = []
    first_seen: dict[str, int] = {}
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                errors.append(LineError(number, None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})"))
                continue
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append(LineError(number, None, f"not valid JSON: {exc.msg} (column {exc.colno})"))
                continue
            if not isinstance(obj, dict):
                errors.append(LineError(number, None, f"expected a JSON object, got {type(obj).__name__}"))
                continue
            try:
                dialogue = Dialogue.model_validate(obj)
            except ValidationError as exc:
                for err in exc.errors(include_url=False):
                    errors.append(LineError(number, _field_path(err["loc"]) or None, err["msg"]))
                continue
            if dialogue.id in first_seen:
                errors.append(LineError(number, "id", f"duplicate id {dialogue.id!r} "
                                                      f"(first on line {first_seen[dialogue.id]})"))
                continue
            first_seen[dialogue.id] = number
            dialogues.append(dialogue)
    if not dialogues and not errors:
        errors.append(LineError(0, None, "the file holds no dialogues"))
    return dialogues, errors


def load_dialogues(path: str | Path) -> list[Dialogue]:
    """Load and validate a probe data file; :class:`ProbeDataError` lists every problem."""
    dialogues, errors = read_dialogues(path)
    if errors:
        raise ProbeDataError(path, errors)
    return dialogues


def dump_dialogues(dialogues: Iterable[Dialogue], path: str | Path) -> None:
    """Write dialogues as JSON Lines (UTF-8, one object per line)."""
    with open(path, "w", encoding="utf-8") as fh:
        for d in dialogues:
            fh.write(json.dumps(d.model_dump(mode="json"), ensure_ascii=False) + "\n")
