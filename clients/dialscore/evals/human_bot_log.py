"""DECODE's annotated human-bot logs, read as spec section 3 describes them, and their expansion
into one dialogue per utterance.

**Fields.** A record (one JSON object a line) has `turns` (each with `turn_id`, `agent_id`,
`text` and an `auxiliary`), `agents` (`agents[agent_id].is_human` says which speaker is human)
and an `auxiliary` whose `original_model` names the bot (``"(unknown)"`` when absent). Every bot
turn's `auxiliary` carries:

* `contradiction`: ``true`` when the turn was labelled a contradiction (the positive class);
  ``null`` or ``false`` otherwise;
* `original_verifier_contradiction_count` and `new_verifier_contradiction_count`
  (:data:`VERIFIER_COUNT_FIELDS`): how many verifiers of each round agreed that the turn
  contradicts, each an integer >= 0 (``null`` counts as 0).

A turn's **agreement** (:attr:`HumanBotUtterance.annotators`) is the sum of the two counts, 0 to
:data:`MAX_AGREEMENT` (3). It is read whatever `contradiction` says: a turn with a count but no
``contradiction: true`` (one annotator marked it, the others did not) has its agreement but is
not a positive. Human turns need none of these fields (a human turn's agreement is its counts
when present, else 0). A file in which no turn carries either count is refused with a ValueError
naming both fields; so is a bot turn that lacks one of the three fields in every copy of it, or
holds a value of another type (a boolean, a string, a negative number), or sums above 3.
`annotator_key` replaces the two counts by one field for other formats (an integer, or a list
whose truthy entries are counted), under the same rules except the bound of 3 (an utterance with
more joins no "@n" group).

**Truncated copies.** DECODE names the truncated copies of one conversation
``"<conversation id>#truncated#<K>"``: records are copies of one conversation when their
`conversation_id` is equal once everything from ``#truncated#`` on is removed (a record without
`conversation_id` is its own conversation, named by its `record_id`, else its position). Within a
conversation a turn is identified by its `turn_id`; every copy holding a turn id must give it the
same speaker, text and humanity, and all copies the same bot, else ValueError. A turn held by
several copies is one utterance whose marks are merged: positive when any copy says
``contradiction: true``; each count is the largest any copy gives (a copy without it, or with
``null``, gives none). :attr:`HumanBotLog.turns_in_several_copies` and
:attr:`HumanBotLog.turns_with_differing_marks` count what was merged.

**Expansion.** The turns of a conversation are kept in the order their ids first appear. Every
turn after the first becomes its own DECODE dialogue: the turns up to and including it, labelled
with its merged mark (so the detector sees each utterance against its own preceding context, not
only each record's last turn), id ``"<conversation>@<turn id>"``. First turns have no context and
are skipped (counted).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dialscore.evals.decode import DecodeDialogue
from dialscore.types import Turn

__all__ = ["CONTRADICTION_FIELD", "MAX_AGREEMENT", "TRUNCATED_MARK", "UNKNOWN_BOT",
           "VERIFIER_COUNT_FIELDS", "HumanBotLog", "HumanBotUtterance", "conversation_of",
           "expand_human_bot", "read_human_bot"]

#: The turn auxiliary's label: ``true`` marks a contradiction (the positive class).
CONTRADICTION_FIELD = "contradiction"
#: The turn auxiliary's two verifier counts; their sum is the turn's agreement.
VERIFIER_COUNT_FIELDS: tuple[str, str] = ("original_verifier_contradiction_count",
                                          "new_verifier_contradiction_count")
#: The most annotators that can agree on one turn.
MAX_AGREEMENT = 3
#: What separates a conversation id from a truncated copy's number.
TRUNCATED_MARK = "#truncated#"
UNKNOWN_BOT = "(unknown)"


@dataclass(frozen=True)
class HumanBotUtterance:
    """One utterance with its preceding context: `dialogue` ends with it and is labelled with its
    merged mark (`marked`: ``contradiction: true`` in some copy); `annotators` is its agreement,
    the number of annotators who agreed that it contradicts (the summed verifier counts, 0 to 3)."""

    id: str
    dialogue: DecodeDialogue
    bot: str
    is_human: bool
    marked: bool
    annotators: int


@dataclass(frozen=True)
class HumanBotLog:
    """A human-bot log expanded: the utterances with context, and what reading them took."""

    utterances: tuple[HumanBotUtterance, ...]
    records: int
    conversations: int
    #: First turns of conversations, which have no context and are not utterances here.
    first_turns_skipped: int
    #: Records that are truncated copies of a conversation already read.
    copies: int
    #: Turns held by more than one copy (their marks merged).
    turns_in_several_copies: int
    #: Of those, turns whose copies gave different marks or counts.
    turns_with_differing_marks: int
    #: The fields the agreement was read from.
    count_fields: tuple[str, ...] = VERIFIER_COUNT_FIELDS


def conversation_of(record: Mapping[str, Any], index: int) -> str:
    """The conversation a record is a copy of: its `conversation_id` without the
    ``#truncated#K`` suffix; else its `record_id`; else ``"record <index>"``."""
    cid = record.get("conversation_id")
    if cid not in (None, ""):
        return str(cid).split(TRUNCATED_MARK, 1)[0]
    rid = record.get("record_id")
    return str(rid) if rid not in (None, "") else f"record {index}"


@dataclass
class _Marks:
    """A turn's marks, merged over the copies that hold it."""

    marked: bool = False
    labelled: bool = False  # some copy carries `contradiction`
    present: set[str] = field(default_factory=set)        # count fields some copy carries
    counts: dict[str, int] = field(default_factory=dict)  # field -> largest value seen
    seen: list[tuple[bool, tuple[int | None, ...]]] = field(default_factory=list)

    def add(self, marked: bool, labelled: bool, counts: Mapping[str, int | None],
            count_fields: Sequence[str]) -> None:
        self.marked |= marked
        self.labelled |= labelled
        self.present.update(counts)
        for name, value in counts.items():
            if value is not None:
                self.counts[name] = max(value, self.counts.get(name, 0))
        self.seen.append((marked, tuple(counts.get(f) for f in count_fields)))

    @property
    def differing(self) -> bool:
        return len(set(self.seen)) > 1


@dataclass
class _Conversation:
    """One conversation merged over its copies: its turns by id, in the order the ids first
    appear, each with its speaker's humanity, its merged marks and where it was first read."""

    name: str
    bot: str
    first_record: int
    turns: dict[int, tuple[Turn, bool, _Marks, str]] = field(default_factory=dict)


def _count(value: Any, where: str, name: str, as_list: bool) -> int | None:
    """A count field's value: None for null; an int >= 0 (or, for an `annotator_key`, a list
    whose truthy entries are counted); else ValueError naming the field."""
    if value is None:
        return None
    if as_list and isinstance(value, list):
        return sum(bool(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: auxiliary.{name} must be a non-negative integer or null, "
                         f"got {value!r}")
    return value


def _is_human(agents: Any, speaker: str, where: str) -> bool:
    if not isinstance(agents, Mapping):
        raise ValueError(f"{where}: a human-bot record needs `agents` saying which speaker is human")
    agent = agents.get(speaker)
    if not isinstance(agent, Mapping) or "is_human" not in agent:
        raise ValueError(f"{where}: `agents` has no `is_human` for speaker {speaker!r}")
    return bool(agent["is_human"])


def _parse_turn(raw: Any, where: str) -> Turn:
    try:
        return Turn(id=int(raw["turn_id"]), speaker=str(raw["agent_id"]), text=str(raw["text"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: each turn needs `turn_id`, `agent_id` and `text` ({exc})") from None


def _read_marks(aux: Mapping[str, Any], where: str, count_fields: Sequence[str],
                as_list: bool) -> tuple[bool, bool, dict[str, int | None]]:
    """(marked, carries `contradiction`, {count field present: value or None})."""
    label = aux.get(CONTRADICTION_FIELD)
    if label not in (True, False, None):
        raise ValueError(f"{where}: auxiliary.{CONTRADICTION_FIELD} must be true, false or null, "
                         f"got {label!r}")
    counts = {name: _count(aux[name], where, name, as_list) for name in count_fields if name in aux}
    return label is True, CONTRADICTION_FIELD in aux, counts


def expand_human_bot(records: Iterable[Mapping[str, Any]], annotator_key: str | None = None,
                     source: str = "the log") -> HumanBotLog:
    """Every utterance with context, as its own dialogue (see the module docstring). `source`
    names the data in error messages. Raises ValueError naming the fields a log lacks."""
    count_fields: tuple[str, ...] = (annotator_key,) if annotator_key else VERIFIER_COUNT_FIELDS
    conversations, n_records, copies = _merge_copies(records, count_fields,
                                                     annotator_key is not None, source)
    utterances: list[HumanBotUtterance] = []
    skipped = several = differing = 0
    for conv in conversations.values():
        turns = [turn for turn, _, _, _ in conv.turns.values()]
        for i, (turn, human, marks, where) in enumerate(conv.turns.values()):
            several += len(marks.seen) > 1
            differing += marks.differing
            lacking = ([] if marks.labelled else [CONTRADICTION_FIELD]) + [
                f for f in count_fields if f not in marks.present]
            if lacking and not human:
                raise ValueError(
                    f"{where}: the bot turn's auxiliary lacks {', '.join(lacking)} (in every "
                    f"copy); every bot turn of a human-bot log carries "
                    f"{', '.join((CONTRADICTION_FIELD, *count_fields))}")
            agreement = sum(marks.counts.get(f, 0) for f in count_fields)
            if agreement > MAX_AGREEMENT and not annotator_key:
                raise ValueError(f"{where}: {' + '.join(count_fields)} = {agreement}; at most "
                                 f"{MAX_AGREEMENT} annotators judge a turn")
            if i == 0:
                skipped += 1
                continue
            uid = f"{conv.name}@{turn.id}"
            dialogue = DecodeDialogue(id=uid, index=len(utterances), turns=tuple(turns[:i + 1]),
                                      is_contradiction=marks.marked, group=conv.bot,
                                      conversation=conv.name)
            utterances.append(HumanBotUtterance(id=uid, dialogue=dialogue, bot=conv.bot,
                                                is_human=human, marked=marks.marked,
                                                annotators=agreement))
    return HumanBotLog(tuple(utterances), n_records, len(conversations), skipped, copies, several,
                       differing, count_fields)


def _merge_copies(records: Iterable[Mapping[str, Any]], count_fields: tuple[str, ...],
                  as_list: bool, source: str) -> tuple[dict[str, _Conversation], int, int]:
    """The conversations of `records`, each merged over its copies (module docstring); the
    number of records and of records that were copies. ValueError when copies disagree, or when
    no turn carries any of `count_fields`."""
    conversations: dict[str, _Conversation] = {}
    n_records = copies = 0
    any_count = False
    for index, record in enumerate(records):
        n_records += 1
        if not isinstance(record, Mapping):
            raise ValueError(f"{source}, record {index}: expected a JSON object")
        aux = record.get("auxiliary") if isinstance(record.get("auxiliary"), Mapping) else {}
        bot = str(aux.get("original_model") or UNKNOWN_BOT)
        name = conversation_of(record, index)
        conv = conversations.get(name)
        if conv is None:
            conv = conversations[name] = _Conversation(name, bot, index)
        else:
            copies += 1
            if conv.bot != bot:
                raise ValueError(
                    f"{source}, record {index}: a copy of conversation {name!r} (first in record "
                    f"{conv.first_record}) names another bot in auxiliary.original_model "
                    f"({bot!r}, not {conv.bot!r})")
        ids_here: set[int] = set()
        for raw in record.get("turns") or []:
            turn = _parse_turn(raw, f"{source}, record {index}")
            where = f"{source}, record {index}, turn {turn.id}"
            if turn.id in ids_here:
                raise ValueError(f"{where}: turn id {turn.id} occurs twice in the record")
            ids_here.add(turn.id)
            human = _is_human(record.get("agents"), str(turn.speaker), where)
            taux = raw.get("auxiliary") if isinstance(raw.get("auxiliary"), Mapping) else {}
            marked, labelled, counts = _read_marks(taux, where, count_fields, as_list)
            any_count |= bool(counts)
            if turn.id not in conv.turns:
                conv.turns[turn.id] = (turn, human, _Marks(), where)
            known, known_human, marks, first_where = conv.turns[turn.id]
            if (known.speaker, known.text, known_human) != (turn.speaker, turn.text, human):
                raise ValueError(
                    f"{where}: conversation {name!r} has turn {turn.id} already ({first_where}) "
                    "with another speaker, text or humanity: records whose conversation_id "
                    f"differs only after {TRUNCATED_MARK!r} must be copies of one conversation")
            marks.add(marked, labelled, counts, count_fields)
    if n_records and not any_count:
        raise ValueError(
            f"{source}: no turn's auxiliary has {' or '.join(count_fields)}: "
            + ("not a log in that format" if as_list else
               "this is not one of DECODE's annotated human-bot logs, which carry both counts "
               f"and {CONTRADICTION_FIELD!r} on every turn (for another format, name the field "
               "that counts the annotators with --annotator-key)"))
    return conversations, n_records, copies


def read_human_bot(path: str | Path, annotator_key: str | None = None) -> HumanBotLog:
    """:func:`expand_human_bot` of a JSON Lines file (blank lines ignored; a line that is not
    JSON is a ValueError naming it)."""
    records = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {number}: not valid JSON ({exc.msg})") from None
    return expand_human_bot(records, annotator_key, source=str(path))
