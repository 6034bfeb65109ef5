"""From an NLL item to the token ids the NLL engine scores: formatting, tokenization, truncation.

:class:`NLLEncoder` implements the token layout of :mod:`dialscore_server.nll.engine.engine`'s contract
for one model: dialogue turns and knowledge are laid out with the model's
:class:`~dialscore.model_card.DialogueFormat` (:class:`~dialscore_server.nll.engine.layout.SourceLayout`:
no lone whitespace token next to a special token) as text and special-token pieces; a raw source
is one text piece, verbatim but for whitespace at an encoder input's ends
(:meth:`~dialscore_server.nll.engine.layout.SourceLayout.raw_source`). **Every text a caller gives
is plain text**: turns, knowledge, raw sources and targets are tokenized with special-token strings
read as characters (:mod:`dialscore_server.checkpoints.plain_text`), so ``"</s>"`` in a target is
scored as ``<``, ``/s``, ``>``, never as the eos; only the special tokens the format inserts
(separators, bos, eos, the decoder prefix) are special ids. The target is tokenized on
its own, without special tokens, after its edge whitespace is removed where it would touch a
special token or end the input (:func:`~dialscore_server.nll.engine.layout.target_text`: trailing
whitespace always; leading whitespace when the target follows a special token: every
encoder-decoder target, and a decoder-only target after a source that ends with a special token or
is empty), and gets the eos token when the format says ``append_eos``. Sources that do not fit the
window are shortened from the left as the format's ``truncation`` says: whole oldest turns
(``turns``, the default) or oldest tokens (``tokens``); the pinned knowledge goes last; targets are
never cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dialscore_server.checkpoints.plain_text import text_ids, texts_ids
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contract.errors import InputError
from dialscore_server.nll.engine.layout import Pieces, SourceLayout, Special, pieces, target_text


class TargetTooLongError(InputError):
    """The target alone does not fit the model's window (targets are never truncated)."""


class EmptyTargetError(InputError):
    """The target produced no token to score (empty or only whitespace, and no eos appended)."""


@dataclass(frozen=True)
class NLLItem:
    """One thing to score: either dialogue turns (`context`, optional `knowledge`) or a raw `source`.

    `context` turns are formatted with the model's :class:`~dialscore.model_card.DialogueFormat`;
    a raw `source` is used verbatim but for whitespace touching a special token. An empty
    `context` (or empty `source`) is valid; so is an empty (or whitespace-only) `target` when the
    format appends the eos, which is then the only scored token.
    """

    target: str
    context: tuple[str, ...] | None = None
    knowledge: str | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        if self.source is not None and (self.context is not None or self.knowledge is not None):
            raise InputError("give either `source` or `context`/`knowledge`, not both", "source")


@dataclass(frozen=True)
class EncodedItem:
    """An item after tokenization and truncation: what the forward pass consumes.

    `source_ids` is the full encoder input (seq2seq) or the conditioning prefix (causal);
    `target_ids` are exactly the scored tokens. `truncated` is true when the source was shortened
    to fit: oldest whole turns dropped and/or tokens cut from the left. `top_k` > 0 asks for the
    `top_k` most probable tokens (and so the greedy one) at every scored position besides the
    target's log-probability (:class:`~dialscore_server.nll.engine.projection.Alternatives`); /v1/nll
    items leave it 0.
    """

    source_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    truncated: bool
    top_k: int = 0

    @property
    def cost(self) -> int:
        return len(self.source_ids) + len(self.target_ids)


class NLLEncoder:
    """Encodes :class:`NLLItem` for one causal or seq2seq model.

    Args:
        config: the registry entry (family, window ``max_length``, dialogue ``format``).
        tokenizer: the model's Hugging Face tokenizer.
        decoder_start_token_id: seq2seq only: the model's first decoder input token.

    Attributes: ``eos_id``; ``bos_id`` (the tokenizer's bos, else its eos: a causal item with an
    empty source is conditioned on it alone); ``decoder_prefix``, the unscored decoder inputs
    before the target (seq2seq: ``decoder_start_token_id`` [+ bos when the format says
    ``target_bos``]; causal: empty).
    """

    def __init__(self, config: ModelConfig, tokenizer: Any,
                 decoder_start_token_id: int | None = None):
        self.config = config
        self.tokenizer = tokenizer
        self.fmt = config.format
        self.layout = SourceLayout(self.fmt, tokenizer)
        self.eos_id: int = tokenizer.eos_token_id
        self.bos_id: int = (tokenizer.bos_token_id if tokenizer.bos_token_id is not None
                            else tokenizer.eos_token_id)
        if config.family == "seq2seq":
            start = decoder_start_token_id
            self.decoder_prefix: tuple[int, ...] = (
                (start, self.bos_id) if self.fmt.target_bos else (start,)
            )
        else:
            self.decoder_prefix = ()

    # ----------------------------------------------------------------------------- formatting
    def format_parts(self, item: NLLItem) -> tuple[Pieces, Pieces]:
        """The item's source as (pinned knowledge pieces, truncatable history pieces); see
        :meth:`~dialscore_server.nll.engine.layout.SourceLayout.parts`. A raw `source` is all
        history (:meth:`~dialscore_server.nll.engine.layout.SourceLayout.raw_source`)."""
        if item.source is not None:
            return (), self.layout.raw_source(item.source,
                                              encoder_input=self.config.family == "seq2seq")
        return self.layout.parts(item.context or (), item.knowledge)

    def target_text(self, item: NLLItem, parts: tuple[Pieces, Pieces] | None = None) -> str:
        """The item's target text as it is tokenized (`parts`: the item's
        :meth:`format_parts`, when already known): trailing whitespace removed; leading
        whitespace removed when the target follows a special token, which is always the case for
        an encoder-decoder model (the decoder prefix) and, for a decoder-only model, when the
        source ends with a special token the format inserted (every shipped format's dialogue
        items) or is empty (the bos alone); a special-token string at the end of a raw source is
        text. Leading whitespace after source text is kept: it is the space at the word
        boundary (source ``"hello"``, target ``" world"``)."""
        if self.config.family == "seq2seq":
            return target_text(item.target, after_special=True)
        source = pieces(*(parts if parts is not None else self.format_parts(item)))
        return target_text(item.target,
                           after_special=not source or self.layout.ends_with_special(source))

    def _ids(self, text: str) -> list[int]:
        return text_ids(self.tokenizer, text)

    def ids(self, source: Pieces) -> list[int]:
        """The token ids of source pieces: each text piece as plain text, all of them in one
        tokenizer call (:func:`~dialscore_server.checkpoints.plain_text.texts_ids`), each
        :class:`~dialscore_server.nll.engine.layout.Special` as its id."""
        normal = pieces(source)
        texts = iter(texts_ids(self.tokenizer, [p for p in normal if not isinstance(p, Special)]))
        out: list[int] = []
        for piece in normal:
            if isinstance(piece, Special):
                out.append(self.tokenizer.convert_tokens_to_ids(piece.token))
            else:
                out += next(texts)
        return out

    def _source_ids(self, pinned: Pieces, body: Pieces) -> tuple[list[int], list[int]]:
        """(pinned ids, body ids) whose concatenation is the tokenization of the whole source.

        The source is tokenized as a whole, so tokens at the pinned/body boundary are those of the
        whole text (for a plain-text knowledge separator such as BlenderBot's two spaces, tokenizing
        the parts apart would add a space token); the pinned part is the longest prefix that the
        pinned pieces alone tokenize to."""
        whole = self.ids(pieces(pinned, body))
        if not pinned:
            return [], whole
        alone = self.ids(pinned)
        n = 0
        while n < min(len(alone), len(whole)) and alone[n] == whole[n]:
            n += 1
        return whole[:n], whole[n:]

    def _fit_source(self, item: NLLItem, parts: tuple[Pieces, Pieces], room: int
                    ) -> tuple[list[int], bool]:
        """The source's token ids (of the item's :meth:`format_parts` `parts`) in at most `room`
        tokens, and whether anything was removed.

        ``turns`` truncation drops the fewest oldest turns that make the rest fit (the source of
        the kept turns is tokenized afresh: exactly the source of an item sent without the dropped
        turns); when even the newest turn does not fit, that source is cut by tokens. ``tokens``
        truncation, and raw sources, cut by tokens (:func:`cut_left`)."""
        pinned, body = self._source_ids(*parts)
        if len(pinned) + len(body) <= max(room, 0):
            return pinned + body, False
        turns = item.context or ()
        if item.source is not None or self.fmt.truncation == "tokens" or len(turns) < 2:
            return cut_left(pinned, body, room)

        memo: dict[int, tuple[list[int], list[int]]] = {}

        def kept(k: int) -> tuple[list[int], list[int]]:  # the source without the k oldest turns
            if k not in memo:
                memo[k] = self._source_ids(*self.layout.parts(turns[k:], item.knowledge))
            return memo[k]

        def fits(k: int) -> bool:
            return sum(map(len, kept(k))) <= room

        # Token counts shrink as turns are dropped, so the fewest drops that fit is a bisection
        # over k in 1..n-1 (k = 0 is known not to fit).
        lo, hi = 1, len(turns) - 1
        if not fits(hi):
            return cut_left(*kept(hi), room)
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid + 1
        p, b = kept(lo)
        return p + b, True

    def tokenize(self, text: str) -> list[int]:
        """`text` as token ids, verbatim: no special tokens added, no formatting, special-token
        strings in it read as characters."""
        return self._ids(text)

    # ----------------------------------------------------------------------------- encoding
    def encode(self, item: NLLItem) -> EncodedItem:
        """Tokenize and truncate one item; raise :class:`InputError` if it cannot be scored
        (:class:`EmptyTargetError`, :class:`TargetTooLongError`, `param` ``target``)."""
        parts = self.format_parts(item)
        target = self._ids(self.target_text(item, parts))
        if self.fmt.append_eos:
            target.append(self.eos_id)
        if not target:
            raise EmptyTargetError("target is empty or only whitespace: there is no token to score",
                                   "target")
        limit = self.config.max_length
        if self.config.family == "causal":
            if len(target) > limit - 1:
                raise TargetTooLongError(
                    f"target has {len(target)} tokens; model {self.config.name!r} fits at most "
                    f"{limit - 1} target tokens (window {limit}, one token of context); targets are "
                    "never truncated", "target")
            src, truncated = self._fit_source(item, parts, limit - len(target))
            if not src:
                src = [self.bos_id]
            return EncodedItem(tuple(src), tuple(target), truncated)
        # seq2seq: encoder and decoder windows are separate.
        if len(target) + len(self.decoder_prefix) - 1 > limit:
            raise TargetTooLongError(
                f"target has {len(target)} tokens; model {self.config.name!r}'s decoder fits at most "
                f"{limit - len(self.decoder_prefix) + 1}; targets are never truncated", "target")
        head = [self.bos_id] if self.fmt.source_bos else []
        tail = [self.eos_id] if self.fmt.source_eos else []
        content, truncated = self._fit_source(item, parts, limit - len(head) - len(tail))
        src = head + content + tail or [self.eos_id]
        return EncodedItem(tuple(src), tuple(target), truncated)


def cut_left(pinned: list[int], body: list[int], room: int) -> tuple[list[int], bool]:
    """Keep the last `room` tokens of pinned + body, cutting the body's oldest tokens first:
    (kept tokens, whether anything was cut)."""
    room = max(room, 0)
    if len(pinned) + len(body) <= room:
        return pinned + body, False
    if len(pinned) <= room:
        return pinned + body[len(body) - (room - len(pinned)):], True
    return pinned[len(pinned) - room:], True
