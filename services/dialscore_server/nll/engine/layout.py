"""Where whitespace may sit in the model input, so that byte-level BPE makes no stray token:
dialogue turns and a knowledge sentence as source text, raw sources, and the edges of a target.

In byte-level BPE (GPT-2, BART, RoBERTa, BlenderBot) whitespace written next to a special token
(``" </s> "``, ``" <|endoftext|>"``, ``"fine. </s>"``, ``"\\n<s>"``) does not merge with anything:
it becomes a lone whitespace token (``Ġ``, ``Ċ``...) that the model never saw there in training.
:class:`SourceLayout` therefore

* resolves a separator's ``{eos}``/``{bos}`` placeholders and drops the whitespace that touches a
  special token in it (``" </s> "`` → ``"</s>"``), so configurations written with spaces around
  special tokens are read as they were meant;
* strips whitespace at both ends of every turn and of the knowledge sentence (a trailing space in a
  turn would otherwise be a lone token before the next separator);
* places a separator only between two units (turns, knowledge), plus one after the last unit
  when the format says ``separator_after_last`` (the target then follows a separator);
* keeps a raw source verbatim except for whitespace that touches a special token: around a
  special token written in it, and at both of its ends for an encoder input (:meth:`raw_source`);
* removes a target's trailing whitespace always, and its leading whitespace where the target
  follows a special token (:func:`target_text`).

The fast tokenizers split text on special tokens before byte-level pre-tokenization, so each
text that follows a special token is tokenized exactly as that text alone: no leading ``Ġ``
(GPT-2, BART), or the tokenizer's own prefix space (BlenderBot, ``add_prefix_space``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from dialscore.model_card import DialogueFormat


def special_tokens(tokenizer: Any) -> list[str]:
    """The tokenizer's special-token strings (eos, bos, pad, added special tokens...)."""
    return sorted({t for t in getattr(tokenizer, "all_special_tokens", []) if t}, key=len,
                  reverse=True)


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
        specials = special_tokens(tokenizer)
        # Longest first, so that a special token containing another is matched whole.
        self._specials = tuple(specials)
        self._around_special = (
            re.compile(r"\s*(" + "|".join(map(re.escape, specials)) + r")\s*") if specials else None)
        self.turn_separator = self.clean_separator(fmt.turn_separator)
        self.knowledge_separator = self.clean_separator(fmt.knowledge_separator)

    def clean_separator(self, separator: str) -> str:
        """`separator` with placeholders resolved and whitespace touching a special token removed."""
        text = separator.replace("{eos}", self._eos).replace("{bos}", self._bos)
        if self._around_special is None:
            return text
        return self._around_special.sub(r"\1", text)

    def raw_source(self, text: str, *, encoder_input: bool) -> str:
        """A raw source as the model reads it: verbatim, except that whitespace touching a special
        token written in it is removed (``"a <|endoftext|> b"`` → ``"a<|endoftext|>b"``) and, for an
        `encoder_input` (whose ends meet the format's bos/eos, or BlenderBot's prefix space), so
        is whitespace at both ends. A decoder-only source keeps its edges: nothing precedes it,
        and at its end the caller decides where the word boundary's space goes (see
        :func:`target_text`)."""
        if self._around_special is not None:
            text = self._around_special.sub(r"\1", text)
        return text.strip() if encoder_input else text

    def ends_with_special(self, text: str) -> bool:
        """True when `text` ends with one of the tokenizer's special-token strings."""
        return bool(self._specials) and text.endswith(self._specials)

    def parts(self, turns: Sequence[str], knowledge: str | None) -> tuple[str, str]:
        """(pinned text, truncatable text) of a dialogue.

        Units are the turns (oldest first) and, when given and non-empty, the knowledge sentence:
        before the turns (``knowledge_position`` ``before_history``, the default) or after them.
        Consecutive units are joined by ``turn_separator``, except that the knowledge sentence and
        its neighbouring turn are joined by ``knowledge_separator``; with ``separator_after_last``
        the last unit is followed by its separator too. The pinned text is the knowledge sentence
        and the separator after it when the knowledge comes first; otherwise it is empty and the
        knowledge, being the newest text, stays in the truncatable text (a left cut reaches it
        last).
        """
        clean = [t.strip() for t in turns]
        k = knowledge.strip() if knowledge else ""
        after_last = self.fmt.separator_after_last
        if k and self.fmt.knowledge_position == "before_history":
            if not clean:
                return k + (self.knowledge_separator if after_last else ""), ""
            return (k + self.knowledge_separator,
                    self.turn_separator.join(clean) + (self.turn_separator if after_last else ""))
        if k:
            text = self.turn_separator.join(clean) + self.knowledge_separator + k if clean else k
            return "", text + (self.knowledge_separator if after_last else "")
        return "", self.turn_separator.join(clean) + (self.turn_separator if after_last and clean else "")


def target_text(target: str, *, after_special: bool) -> str:
    """The text of a target as it is tokenized: trailing whitespace removed (it would be a lone
    whitespace token before the appended eos, or the last token of the sequence), and leading
    whitespace removed too when the target follows a special token (`after_special`), where it
    would be a lone whitespace token after it. Inner whitespace is kept. "Whitespace" is what
    :meth:`str.strip` removes (spaces, tabs, newlines, carriage returns, no-break spaces...)."""
    target = target.rstrip()
    return target.lstrip() if after_special else target
