"""Where whitespace may sit in the model input, so that byte-level BPE makes no stray token:
dialogue turns and a knowledge sentence as source pieces, raw sources, and the edges of a target;
and which special tokens are the format's own.

**User text is text.** A source is a sequence of pieces (:data:`Pieces`): text and
:class:`Special` tokens. Only the format's separators (``{eos}``, ``{bos}`` and special-token
strings written in a configured separator) become :class:`Special` pieces; turns, knowledge, raw
sources and targets are text pieces whatever they contain, and are tokenized with special-token
strings read as characters (:mod:`dialscore_server.checkpoints.plain_text`). So a turn
``"<|endoftext|>"`` is the characters ``<``, ``|``... never GPT-2's eos, and cannot forge a turn
boundary.

In byte-level BPE (GPT-2, BART, RoBERTa, BlenderBot) whitespace written next to a special token
(``" </s> "``, ``" <|endoftext|>"``, ``"fine. </s>"``, ``"\\n<s>"``) does not merge with anything:
it becomes a lone whitespace token (``Ġ``, ``Ċ``...) that the model never saw there in training.
:class:`SourceLayout` therefore

* resolves a separator's ``{eos}``/``{bos}`` placeholders, splits it into text and special
  pieces, and drops the whitespace that touches a special token in it (``" </s> "`` → ``</s>``),
  so configurations written with spaces around special tokens are read as they were meant;
* strips whitespace at both ends of every turn and of the knowledge sentence (a trailing space in a
  turn would otherwise be a lone token before the next separator);
* places a separator only between two units (turns, knowledge), plus one after the last unit
  when the format says ``separator_after_last`` (the target then follows a separator);
* keeps a raw source verbatim, as one text piece, except for whitespace at both of its ends for
  an encoder input (:meth:`SourceLayout.raw_source`);
* removes a target's trailing whitespace always, and its leading whitespace where the target
  follows a special token (:func:`target_text`).

Each text piece is tokenized on its own (adjacent text pieces joined first), as the fast
tokenizers tokenize the text between two special tokens of one string: no leading ``Ġ`` (GPT-2,
BART), or the tokenizer's own prefix space (BlenderBot, ``add_prefix_space``). So the pieces give
the ids that the format's string, tokenized in one call, gave before user text was made plain.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

from dialscore.model_card import DialogueFormat


def special_tokens(tokenizer: Any) -> list[str]:
    """The tokenizer's special-token strings (eos, bos, pad, added special tokens...)."""
    return sorted({t for t in getattr(tokenizer, "all_special_tokens", []) if t}, key=len,
                  reverse=True)


@dataclass(frozen=True)
class Special:
    """A special token the format inserts (its string, e.g. ``"</s>"``): tokenized as its id."""

    token: str


#: A source as the model reads it: text pieces (tokenized as plain text) and special tokens.
#: Normalised by :func:`pieces`: no empty text piece, no two text pieces in a row.
Pieces = tuple[Union[str, Special], ...]


def pieces(*parts: str | Special | Pieces) -> Pieces:
    """`parts` (pieces, or piece sequences) joined: adjacent texts merged, empty texts dropped."""
    out: list[str | Special] = []
    for part in parts:
        for p in (part if isinstance(part, tuple) else (part,)):
            if isinstance(p, str):
                if not p:
                    continue
                if out and isinstance(out[-1], str):
                    out[-1] += p
                    continue
            out.append(p)
    return tuple(out)


def join(separator: Pieces, units: Sequence[str]) -> Pieces:
    """`units` (text) with `separator` between consecutive ones."""
    out: list[str | Special | Pieces] = []
    for k, unit in enumerate(units):
        if k:
            out.append(separator)
        out.append(unit)
    return pieces(*out)


class SourceLayout:
    """The source text of a dialogue for one model's format and tokenizer.

    Args:
        fmt: the model's dialogue format.
        tokenizer: the model's tokenizer (its eos/bos strings resolve the placeholders).
    """

    def __init__(self, fmt: DialogueFormat, tokenizer: Any):
        self.fmt = fmt
        self._eos = tokenizer.eos_token or ""
        self._bos = tokenizer.bos_token or ""
        # Longest first, so that a special token containing another is matched whole.
        specials = special_tokens(tokenizer)
        self._around_special = (
            re.compile(r"\s*(" + "|".join(map(re.escape, specials)) + r")\s*") if specials else None)
        self.turn_separator = self.clean_separator(fmt.turn_separator)
        self.knowledge_separator = self.clean_separator(fmt.knowledge_separator)

    def clean_separator(self, separator: str) -> Pieces:
        """`separator` (configuration, not user text) with placeholders resolved, split into text
        and :class:`Special` pieces, whitespace touching a special token removed."""
        text = separator.replace("{eos}", self._eos).replace("{bos}", self._bos)
        if self._around_special is None:
            return pieces(text)
        # re.split with one group: text, special, text, special, ..., text.
        split = self._around_special.split(text)
        return pieces(*(Special(p) if k % 2 else p for k, p in enumerate(split)))

    def raw_source(self, text: str, *, encoder_input: bool) -> Pieces:
        """A raw source as the model reads it: one text piece, verbatim (a special-token string
        written in it is text like any other), except that for an `encoder_input` (whose ends
        meet the format's bos/eos, or BlenderBot's prefix space) whitespace at both ends is
        removed. A decoder-only source keeps its edges: nothing precedes it, and at its end the
        caller decides where the word boundary's space goes (see :func:`target_text`)."""
        return pieces(text.strip() if encoder_input else text)

    @staticmethod
    def ends_with_special(source: Pieces) -> bool:
        """True when `source`'s last piece is a special token."""
        return bool(source) and isinstance(source[-1], Special)

    def parts(self, turns: Sequence[str], knowledge: str | None) -> tuple[Pieces, Pieces]:
        """(pinned pieces, truncatable pieces) of a dialogue.

        Units are the turns (oldest first) and, when given and non-empty, the knowledge sentence:
        before the turns (``knowledge_position`` ``before_history``, the default) or after them.
        Consecutive units are joined by ``turn_separator``, except that the knowledge sentence and
        its neighbouring turn are joined by ``knowledge_separator``; with ``separator_after_last``
        the last unit is followed by its separator too. The pinned text is the knowledge sentence
        and the separator after it when the knowledge comes first; otherwise it is empty and the
        knowledge, being the newest text, stays in the truncatable pieces (a left cut reaches it
        last). Turns and knowledge are text pieces, whatever they contain.
        """
        clean = [t.strip() for t in turns]
        k = knowledge.strip() if knowledge else ""
        after_last = self.fmt.separator_after_last
        turn_sep, knowledge_sep = self.turn_separator, self.knowledge_separator
        history = join(turn_sep, clean)
        if k and self.fmt.knowledge_position == "before_history":
            if not clean:
                return pieces(k, knowledge_sep if after_last else ()), ()
            return pieces(k, knowledge_sep), pieces(history, turn_sep if after_last else ())
        if k:
            text = pieces(history, knowledge_sep, k) if clean else pieces(k)
            return (), pieces(text, knowledge_sep if after_last else ())
        return (), pieces(history, turn_sep if after_last and clean else ())


def target_text(target: str, *, after_special: bool) -> str:
    """The text of a target as it is tokenized: trailing whitespace removed (it would be a lone
    whitespace token before the appended eos, or the last token of the sequence), and leading
    whitespace removed too when the target follows a special token (`after_special`), where it
    would be a lone whitespace token after it. Inner whitespace is kept. "Whitespace" is what
    :meth:`str.strip` removes (spaces, tabs, newlines, carriage returns, no-break spaces...)."""
    target = target.rstrip()
    return target.lstrip() if after_special else target
