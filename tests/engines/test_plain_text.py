"""User text is text (issue 28, point 4): a special-token string written in a target, a turn, a
knowledge sentence, a raw source, a completions text prompt or a contradiction turn is tokenized as
its characters, in every model family; only the special tokens the format inserts are special ids.

The check per family is the near-miss comparison: the special string (``</s>``) and its near
miss with a space before the last character (``</s >``) give the same sequence of special ids
(none of them at a user-text position) and the near miss has exactly one token more, its space.
Expected ids come from the stand-in tokenizers called as usual on the near miss (which holds no
special string), never from the option under test.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from transformers import AutoConfig, AutoTokenizer

from dialscore_server.checkpoints.loading import load_model
from dialscore_server.nll.engine.encoding import NLLEncoder, NLLItem
from dialscore_server.nll.engine.engine import NLLEngine

FAMILIES = ("dialogpt-medium", "topical-gpt2", "bart-base", "blenderbot-400m")


@pytest.fixture(scope="module")
def encoders(stand_in_registry) -> dict[str, NLLEncoder]:
    """Each family's encoder over a tokenizer loaded as usual (no plain-text default), so the
    encoder's own calls are what makes user text plain."""
    out = {}
    for name in FAMILIES:
        cfg = stand_in_registry.get(name)
        start = (AutoConfig.from_pretrained(cfg.source).decoder_start_token_id
                 if cfg.family == "seq2seq" else None)
        out[name] = NLLEncoder(cfg, AutoTokenizer.from_pretrained(cfg.source), start)
    return out


def specials_of(tok) -> list[str]:
    """The family's special-token strings (GPT-2: ``<|endoftext|>``; BART and BlenderBot:
    ``<s>``, ``</s>``, ``<unk>``, ``<pad>``, ``<mask>``)."""
    return sorted(set(tok.all_special_tokens))


def near_miss(special: str) -> str:
    """``</s>`` → ``</s >``: the same characters and a space, which no tokenizer reads as special."""
    return special[:-1] + " " + special[-1]


def sequence(enc: NLLEncoder, item: NLLItem) -> list[int]:
    """Every id the model sees for `item`: source, decoder prefix (seq2seq), target."""
    e = enc.encode(item)
    return list(e.source_ids) + list(enc.decoder_prefix) + list(e.target_ids)


def assert_plain(tok, with_special: list[int], with_near_miss: list[int]) -> None:
    """The near-miss comparison: the same special ids in the same order, one token more."""
    special = set(tok.all_special_ids)
    assert [i for i in with_special if i in special] == [i for i in with_near_miss if i in special]
    assert len(with_special) == len(with_near_miss) - 1, (
        tok.convert_ids_to_tokens(with_special), tok.convert_ids_to_tokens(with_near_miss))


PLACES: dict[str, Callable[[str], NLLItem]] = {
    "target": lambda text: NLLItem(target=text, context=("hello there", "how are you?")),
    "first turn": lambda text: NLLItem(target="I am fine.", context=(text, "how are you?")),
    "last turn": lambda text: NLLItem(target="I am fine.", context=("hello there", text)),
    "knowledge": lambda text: NLLItem(target="I am fine.", context=("hello there",), knowledge=text),
    "raw source": lambda text: NLLItem(target="I am fine.", source=f"hello {text} there"),
    "empty context target": lambda text: NLLItem(target=text, context=()),
}


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("place", PLACES)
def test_special_strings_in_user_text_are_characters(encoders, name, place):
    enc = encoders[name]
    tok = enc.tokenizer
    make = PLACES[place]
    for special in specials_of(tok):
        assert_plain(tok, sequence(enc, make(special)), sequence(enc, make(near_miss(special))))


@pytest.mark.parametrize("name", FAMILIES)
def test_a_special_string_target_scores_its_characters_token_by_token(encoders, name):
    """The target's own tokens: the near miss's tokens without its space, then the real eos."""
    enc = encoders[name]
    tok = enc.tokenizer
    space = tok.convert_tokens_to_ids("Ġ")
    for special in specials_of(tok):
        e = enc.encode(PLACES["target"](special))
        user = list(e.target_ids[:-1])
        assert e.target_ids[-1] == tok.eos_token_id
        near = tok(near_miss(special), add_special_tokens=False).input_ids
        assert near == user[:-1] + [space] + user[-1:], tok.convert_ids_to_tokens(near)
        assert not set(user) & set(tok.all_special_ids)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_formats_own_special_tokens_stay_special(encoders, name):
    """Separators, bos and eos the format inserts are still special ids: as many as for any
    other text (the layout itself is pinned token by token in test_layout.py)."""
    enc = encoders[name]
    tok = enc.tokenizer
    special = set(tok.all_special_ids)
    turns = ("hello there", "how are you?", "fine")
    seq = sequence(enc, NLLItem(target="I am fine.", context=turns))
    per_family = {"dialogpt-medium": 3 + 1, "topical-gpt2": 3 + 1,     # eos after each turn + target eos
                  "bart-base": 1 + 3 + 2 + 1,                           # <s>, 3 </s>, </s> <s>, eos
                  "blenderbot-400m": 1 + 1 + 1}                         # </s>, <s>, eos
    assert sum(1 for i in seq if i in special) == per_family[name]


# ----------------------------------------------------------------------- engines as served
@pytest.fixture(scope="module")
def gpt2_engine(stand_in_registry) -> NLLEngine:
    return NLLEngine(stand_in_registry.get("dialogpt-medium"), fast_kernels=False)


@pytest.mark.parametrize("name", ["dialogpt-medium", "bart-base", "blenderbot-400m"])
def test_loaded_tokenizers_read_special_strings_as_text_by_default(stand_in_registry, name):
    """load_model makes plain text the tokenizer's default, so any other caller of the served
    tokenizer follows the same rule."""
    tok = load_model(stand_in_registry.get(name)).tokenizer
    for special in specials_of(tok):
        assert not set(tok(special, add_special_tokens=False).input_ids) & set(tok.all_special_ids)


def test_scored_special_string_target_has_as_many_tokens_as_its_characters(gpt2_engine):
    eos = "<|endoftext|>"
    forged, near = gpt2_engine.score([NLLItem(target=eos, context=("hello",)),
                                      NLLItem(target=near_miss(eos), context=("hello",))])
    assert forged.num_tokens == near.num_tokens - 1 > 2
    assert "".join(gpt2_engine.token_strings(forged.token_ids)) == eos + eos  # text, then the eos
    assert forged.token_ids.count(gpt2_engine.encoder.eos_id) == 1


def test_completions_text_prompts_are_plain_text_and_id_prompts_are_kept(gpt2_engine):
    eos_id = gpt2_engine.encoder.eos_id
    text = gpt2_engine.encode_prompt("<|endoftext|>hello", append_next=False, top_k=0)
    ids = list(text.source_ids + text.target_ids)
    near = gpt2_engine.encode_prompt("<|endoftext| >hello", append_next=False, top_k=0)
    assert eos_id not in ids and len(ids) == len(near.source_ids + near.target_ids) - 1
    given = gpt2_engine.encode_prompt([eos_id, *ids[:3]], append_next=False, top_k=0)
    assert list(given.source_ids + given.target_ids) == [eos_id, *ids[:3]]


def test_contradiction_turns_are_plain_text(stand_in_registry):
    from dialscore_server.contradiction.engine.classifier import NLIPairClassifier

    clf = NLIPairClassifier(stand_in_registry.get("roberta-large-mnli"), num_threads=1)
    tok = clf.tokenizer
    template = list(clf.encode([("", "")])[0].input_ids)  # the pair's own special tokens alone
    special = set(tok.all_special_ids)
    assert template and set(template) <= special
    for s in specials_of(tok):
        forged, near = clf.encode([(f"I said {s}", s), (f"I said {near_miss(s)}", near_miss(s))])
        assert [i for i in forged.input_ids if i in special] == template
        assert len(forged.input_ids) == len(near.input_ids) - 2
