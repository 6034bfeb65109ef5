"""Input hygiene (issue 15 item 6, spec section 1): the exact token layout of every shipped dialogue
format, no lone space token next to a special token, and whole-turn left truncation.

Expected sequences are built from the stand-in tokenizers' own pieces (each text tokenized alone,
the tokenizer's special-token ids), never typed-in numbers. Only tokenizers are loaded here, except
in the last test (one small model).
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig, AutoTokenizer

from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.nll.engine.encoding import NLLEncoder, NLLItem

FAMILIES = ("dialogpt-medium", "topical-gpt2", "bart-base", "blenderbot-400m")
TURNS = ("how are you today?", "not much, just resting.", "why?")
KNOWLEDGE = "Emma is grateful."
TARGET = "I am fine."


@pytest.fixture(scope="module")
def tokenizers(stand_in_registry) -> dict[str, object]:
    return {name: AutoTokenizer.from_pretrained(stand_in_registry.get(name).source)
            for name in FAMILIES}


def encoder(stand_in_registry, tokenizers, name: str, **update) -> NLLEncoder:
    cfg: ModelConfig = stand_in_registry.get(name)
    fmt_update = {k: update.pop(k) for k in list(update) if k in cfg.format.model_fields}
    if fmt_update:
        update["format"] = cfg.format.model_copy(update=fmt_update)
    cfg = cfg.model_copy(update=update)
    start = (AutoConfig.from_pretrained(cfg.source).decoder_start_token_id
             if cfg.family == "seq2seq" else None)
    return NLLEncoder(cfg, tokenizers[name], start)


def alone(tok, text: str) -> list[int]:
    """`text` tokenized on its own, no special tokens."""
    return tok(text, add_special_tokens=False).input_ids


def lone_space(tok) -> int:
    """The id of the token that is a single space (``Ġ``)."""
    space = tok.convert_tokens_to_ids("Ġ")  # byte-level BPE holds every byte as a token
    assert space is not None and space != tok.unk_token_id
    return space


def expected_source(name: str, tok, turns, knowledge=None) -> list[int]:
    """The documented layout (services/dialscore_server/checkpoints/registry.py), from pieces."""
    eos, bos = tok.eos_token_id, tok.bos_token_id
    units = ([knowledge] if knowledge else []) + list(turns)
    if name in ("dialogpt-medium", "topical-gpt2"):    # t_1 <eos> ... t_n <eos>
        return [i for u in units for i in alone(tok, u) + [eos]]
    if name == "bart-base":                            # <s> t_1 </s> ... t_n </s>
        return [bos] + [i for u in units for i in alone(tok, u) + [eos]]
    space = lone_space(tok)                            # BlenderBot: t_1 Ġ t_2 ... t_n </s>
    out: list[int] = []
    for k, u in enumerate(units):
        out += ([space] if k else []) + alone(tok, u)
    return out + [eos]


def full_sequence(enc: NLLEncoder, item: NLLItem) -> list[int]:
    """Every id the model sees for `item`: source, then the decoder prefix (seq2seq) and target."""
    e = enc.encode(item)
    return list(e.source_ids) + list(enc.decoder_prefix) + list(e.target_ids)


def stray_spaces(tok, ids: list[int]) -> list[int]:
    """Positions of whitespace-only tokens (``Ġ``, ``Ċ``, ``ĠĠ``...) that touch a special token."""
    special = set(tok.all_special_ids)

    def blank(i: int) -> bool:
        text = tok.convert_tokens_to_string([tok.convert_ids_to_tokens(i)])
        return i not in special and text != "" and text.isspace()

    return [k for k, i in enumerate(ids) if blank(i) and (
        (k > 0 and ids[k - 1] in special) or (k + 1 < len(ids) and ids[k + 1] in special))]


def laid_out(enc: NLLEncoder, item: NLLItem) -> str:
    """What the model reads for `item`, as token strings: ``source | target`` (decoder-only) or
    ``encoder input || decoder prefix | target`` (encoder-decoder)."""
    e = enc.encode(item)
    words = enc.tokenizer.convert_ids_to_tokens
    source = " ".join(words(list(e.source_ids)))
    if enc.decoder_prefix:
        source += " || " + " ".join(words(list(enc.decoder_prefix)))
    return source + " | " + " ".join(words(list(e.target_ids)))


# ------------------------------------------------------------------------------- token layout
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("knowledge", [None, KNOWLEDGE])
def test_token_layout_is_exact(stand_in_registry, tokenizers, name, knowledge):
    tok = tokenizers[name]
    enc = encoder(stand_in_registry, tokenizers, name)
    e = enc.encode(NLLItem(target=TARGET, context=TURNS, knowledge=knowledge))
    assert list(e.source_ids) == expected_source(name, tok, TURNS, knowledge)
    assert list(e.target_ids) == alone(tok, TARGET) + [tok.eos_token_id]
    prefix = {"bart-base": [tok.eos_token_id, tok.bos_token_id],
              "blenderbot-400m": [tok.bos_token_id]}.get(name, [])
    assert list(enc.decoder_prefix) == prefix
    assert not e.truncated


@pytest.mark.parametrize("name", FAMILIES)
def test_first_word_convention(tokenizers, name):
    """GPT-2 and BART texts start with "word" (each segment encoded alone, no prefix space);
    BlenderBot's tokenizer adds the prefix space, so its texts start with "Ġword"."""
    tok = tokenizers[name]
    first = tok.convert_ids_to_tokens(alone(tok, "not much"))[0]
    assert first.startswith("Ġ") == (name == "blenderbot-400m")


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("position", ["before_history", "after_history"])
def test_no_lone_space_next_to_a_special_token(stand_in_registry, tokenizers, name, position):
    tok = tokenizers[name]
    enc = encoder(stand_in_registry, tokenizers, name, knowledge_position=position)
    eos = tok.eos_token
    padded = " \n " + TARGET + " \t\n "
    items = [NLLItem(target=TARGET, context=TURNS),
             NLLItem(target=TARGET, context=TURNS, knowledge=KNOWLEDGE),
             NLLItem(target=TARGET, context=(), knowledge=KNOWLEDGE),
             NLLItem(target=TARGET, context=()),
             NLLItem(target=TARGET, context=(" padded turn ", "\tanother\n"), knowledge=" K. "),
             NLLItem(target=padded, context=TURNS),
             NLLItem(target=padded, context=TURNS, knowledge=KNOWLEDGE),
             NLLItem(target=padded, context=()),
             NLLItem(target=" \n ", context=TURNS),
             NLLItem(target=padded, source=""),
             NLLItem(target=padded, source=f" {TURNS[0]} {eos} {TURNS[1]}\n{eos}\n"),
             NLLItem(target=padded, source=f"\n{TURNS[0]} \n")]
    for item in items:
        ids = full_sequence(enc, item)
        assert stray_spaces(tok, ids) == [], tok.convert_ids_to_tokens(ids)


def test_the_old_separators_made_stray_tokens_and_are_now_cleaned(stand_in_registry, tokenizers):
    """The formats shipped before this fix (BART " </s> ", TopicalChat " {eos}"), written in a
    configuration, give the clean layout; the text they used to produce has stray spaces."""
    bart, gpt2 = tokenizers["bart-base"], tokenizers["topical-gpt2"]
    old_text = " </s> ".join(TURNS)
    assert stray_spaces(bart, alone(bart, old_text)) != []
    enc = encoder(stand_in_registry, tokenizers, "bart-base",
                  turn_separator=" </s> ", knowledge_separator=" </s> ")
    e = enc.encode(NLLItem(target=TARGET, context=TURNS, knowledge=KNOWLEDGE))
    assert list(e.source_ids) == expected_source("bart-base", bart, TURNS, KNOWLEDGE)

    assert stray_spaces(gpt2, alone(gpt2, KNOWLEDGE + " <|endoftext|>")) != []
    enc = encoder(stand_in_registry, tokenizers, "topical-gpt2", knowledge_separator=" {eos}")
    e = enc.encode(NLLItem(target=TARGET, context=TURNS, knowledge=KNOWLEDGE))
    assert list(e.source_ids) == expected_source("topical-gpt2", gpt2, TURNS, KNOWLEDGE)


def test_dialogpt_layout_is_unchanged_for_clean_input(stand_in_registry, tokenizers):
    """DialoGPT input without edge whitespace: the same ids as before (the joined string
    tokenized in one call), hence the same NLL."""
    tok = tokenizers["dialogpt-medium"]
    e = encoder(stand_in_registry, tokenizers, "dialogpt-medium").encode(
        NLLItem(target=TARGET, context=TURNS))
    assert list(e.source_ids) == alone(tok, "".join(t + "<|endoftext|>" for t in TURNS))


# ----------------------------------------------------------------- edge whitespace, token by token
# Each family's layout of one context whose turns carry edge whitespace, then the target's tokens
# written with {I} for the family's first word ("I"; BlenderBot's prefix space makes it "ĠI") and
# {eos} for its eos token. Texts are chosen so that the stand-ins' 1,000-token vocabularies hold
# the same whole-word tokens as the real ones ("Ġam", "Ġfine", "ĠI").
EDGE_CONTEXT = (" how are you? ", "why?\n")
EDGE_KNOWLEDGE = " Emma is grateful.\n"
EDGE_LAYOUT = {   # family: (source [|| decoder prefix], first word, eos)
    "dialogpt-medium": ("how Ġare Ġyou ? <|endoftext|> why ? <|endoftext|>", "I", "<|endoftext|>"),
    "topical-gpt2": ("Emma Ġis Ġgrateful . <|endoftext|> how Ġare Ġyou ? <|endoftext|> why ? "
                     "<|endoftext|>", "I", "<|endoftext|>"),
    "bart-base": ("<s> how Ġare Ġyou ? </s> why ? </s> || </s> <s>", "I", "</s>"),
    "blenderbot-400m": ("Ġh o w Ġare Ġyou ? Ġ Ġw hy ? </s> || <s>", "ĠI", "</s>"),
}
EDGE_TARGETS = {
    "I am fine.": "{I} Ġam Ġfine . {eos}",
    "I am fine. ": "{I} Ġam Ġfine . {eos}",                   # trailing space
    "I am fine.\n": "{I} Ġam Ġfine . {eos}",                  # trailing newline
    "I am fine. \t\r\n": "{I} Ġam Ġfine . {eos}",             # space, tab, CR, LF
    "I am fine.\xa0": "{I} Ġam Ġfine . {eos}",                # no-break space
    " I am fine.": "{I} Ġam Ġfine . {eos}",                   # leading space
    "\nI am fine.": "{I} Ġam Ġfine . {eos}",                  # leading newline
    " \n I am fine. \n\n ": "{I} Ġam Ġfine . {eos}",          # both ends
    # near misses: whitespace inside the target is kept, and so is what is not whitespace
    "I am  fine.": "{I} Ġam Ġ Ġfine . {eos}",
    "I am\nfine.": "{I} Ġam Ċ f in e . {eos}",
    "I am fine.\u200b": "{I} Ġam Ġfine . âĢ ĭ {eos}",         # zero-width space: not whitespace
    " \n ": "{eos}",                                          # only whitespace: an empty reply
}


@pytest.mark.parametrize("name", FAMILIES)
def test_edge_whitespace_of_targets_token_by_token(stand_in_registry, tokenizers, name):
    """A target's leading and trailing whitespace (spaces, newlines, tabs, no-break spaces) is
    not tokenized: the target reads as the same text without it, in the family's first-word
    convention, right after the special token that precedes it and right before the eos. Inner
    whitespace and non-whitespace characters at the edges stay."""
    enc = encoder(stand_in_registry, tokenizers, name)
    source, first, eos = EDGE_LAYOUT[name]
    knowledge = EDGE_KNOWLEDGE if name == "topical-gpt2" else None
    for target, tokens in EDGE_TARGETS.items():
        item = NLLItem(target=target, context=EDGE_CONTEXT, knowledge=knowledge)
        assert laid_out(enc, item) == source + " | " + tokens.format(I=first, eos=eos), repr(target)


EDGE_RAW = {   # family: [(raw source, target, layout)]
    "dialogpt-medium": [
        # a special-token string written in a raw source is text: its characters, whitespace
        # around it kept; the source ends in text, so the target's leading space is kept
        ("how are you? <|endoftext|> why?\n<|endoftext|>\n", " I am fine. ",
         "how Ġare Ġyou ? Ġ < | end o f t ex t | > Ġw hy ? Ċ < | end o f t ex t | > Ċ | "
         "ĠI Ġam Ġfine . <|endoftext|>"),
        # after source text the leading space is the word boundary's and is kept (trailing: not)
        ("why?", " I am fine. ", "why ? | ĠI Ġam Ġfine . <|endoftext|>"),
        # a decoder-only source keeps its own edges: they touch no special token
        (" why? ", "I am fine.\n", "Ġw hy ? Ġ | I Ġam Ġfine . <|endoftext|>"),
        # an empty source is the bos alone: a special token before the target
        ("", "\nI am fine.", "<|endoftext|> | I Ġam Ġfine . <|endoftext|>"),
    ],
    "bart-base": [
        (" how are you? </s> why? \n", " I am fine.\n",   # edges stripped; "</s>" is text
         "<s> how Ġare Ġyou ? Ġ < / s > Ġw hy ? </s> || </s> <s> | I Ġam Ġfine . </s>"),
    ],
    "blenderbot-400m": [
        (" how are you?  why? \n", "\nI am fine. ",               # the two-space delimiter stays
         "Ġh o w Ġare Ġyou ? Ġ Ġw hy ? </s> || <s> | ĠI Ġam Ġfine . </s>"),
        ("how are you? </s>\nwhy?", " I am fine.",
         "Ġh o w Ġare Ġyou ? Ġ < / s > Ċ why ? </s> || <s> | ĠI Ġam Ġfine . </s>"),
    ],
}
EDGE_RAW["topical-gpt2"] = EDGE_RAW["dialogpt-medium"]


@pytest.mark.parametrize("name", FAMILIES)
def test_edge_whitespace_with_raw_sources_token_by_token(stand_in_registry, tokenizers, name):
    """A raw source is plain text, verbatim except for whitespace at an encoder input's ends (a
    special-token string in it is characters, and so is the whitespace around it); a target's
    leading whitespace is dropped after a special token and kept after source text
    (lm-evaluation-harness's word boundary)."""
    enc = encoder(stand_in_registry, tokenizers, name)
    for source, target, layout in EDGE_RAW[name]:
        assert laid_out(enc, NLLItem(target=target, source=source)) == layout, (source, target)


@pytest.mark.parametrize("name", FAMILIES)
def test_whitespace_only_target_without_eos_is_empty(stand_in_registry, tokenizers, name):
    from dialscore_server.nll.engine.encoding import EmptyTargetError

    enc = encoder(stand_in_registry, tokenizers, name, append_eos=False)
    with pytest.raises(EmptyTargetError):
        enc.encode(NLLItem(target=" \n\t ", context=TURNS))
    assert laid_out(enc, NLLItem(target="I am fine. ", context=TURNS)).endswith("Ġfine .")


# ---------------------------------------------------------------------------------- truncation
LONG = tuple(f"turn {k}: {s}" for k, s in enumerate(
    ["how are you today?", "not much, just resting.", "where do you live?",
     "I live in a small town.", "what is your favourite food?", "pizza, definitely."]))


def window_for(enc: NLLEncoder, name: str, keep: int) -> int:
    """A window that fits the newest `keep` whole turns of LONG plus one token, not one more."""
    tok = enc.tokenizer
    src = len(expected_source(name, tok, LONG[-keep:])) + 1
    target = len(alone(tok, TARGET)) + 1
    return src + target if enc.config.family == "causal" else src


@pytest.mark.parametrize("name", FAMILIES)
def test_whole_turn_truncation_is_the_default(stand_in_registry, tokenizers, name):
    tok = tokenizers[name]
    probe = encoder(stand_in_registry, tokenizers, name)
    assert probe.fmt.truncation == "turns"
    enc = encoder(stand_in_registry, tokenizers, name, max_length=window_for(probe, name, 3))
    e = enc.encode(NLLItem(target=TARGET, context=LONG))
    assert e.truncated
    assert list(e.source_ids) == expected_source(name, tok, LONG[-3:])  # three whole turns
    text = tok.decode(list(e.source_ids))
    assert "turn 3:" in text and "turn 2" not in text and "favourite" in text
    assert list(e.target_ids) == alone(tok, TARGET) + [tok.eos_token_id]


@pytest.mark.parametrize("name", FAMILIES)
def test_token_truncation_keeps_a_fragment(stand_in_registry, tokenizers, name):
    tok = tokenizers[name]
    probe = encoder(stand_in_registry, tokenizers, name)
    window = window_for(probe, name, 3)
    enc = encoder(stand_in_registry, tokenizers, name, max_length=window, truncation="tokens")
    e = enc.encode(NLLItem(target=TARGET, context=LONG))
    full = expected_source(name, tok, LONG)
    head = [tok.bos_token_id] if name == "bart-base" else []
    tail = [tok.eos_token_id] if name in ("bart-base", "blenderbot-400m") else []
    content = full[len(head):len(full) - len(tail)]
    room = (window - len(e.target_ids) if enc.config.family == "causal"
            else window - len(head) - len(tail))
    assert e.truncated
    assert list(e.source_ids) == head + content[-room:] + tail
    # One token more than the three whole turns: a fragment of the fourth newest is kept.
    assert len(e.source_ids) == len(expected_source(name, tok, LONG[-3:])) + 1


@pytest.mark.parametrize("name", ["dialogpt-medium", "bart-base"])
def test_knowledge_stays_pinned_under_whole_turn_truncation(stand_in_registry, tokenizers, name):
    tok = tokenizers[name]
    probe = encoder(stand_in_registry, tokenizers, name)
    window = window_for(probe, name, 2) + len(alone(tok, KNOWLEDGE)) + 1
    enc = encoder(stand_in_registry, tokenizers, name, max_length=window)
    e = enc.encode(NLLItem(target=TARGET, context=LONG, knowledge=KNOWLEDGE))
    assert e.truncated
    assert list(e.source_ids) == expected_source(name, tok, LONG[-2:], KNOWLEDGE)


@pytest.mark.parametrize("name", ["dialogpt-medium", "blenderbot-400m"])
def test_newest_turn_too_long_falls_back_to_a_token_cut(stand_in_registry, tokenizers, name):
    """When even the newest turn does not fit, its oldest tokens are cut (not all context dropped)."""
    tok = tokenizers[name]
    long_turn = " ".join(LONG)
    enc = encoder(stand_in_registry, tokenizers, name, max_length=16)
    e = enc.encode(NLLItem(target="ok", context=("hello there", long_turn)))
    newest = expected_source(name, tok, [long_turn])
    assert e.truncated
    if enc.config.family == "causal":
        assert list(e.source_ids) == newest[-(16 - len(e.target_ids)):]
    else:
        assert list(e.source_ids) == newest[:-1][-(16 - 1):] + [tok.eos_token_id]


def test_raw_source_is_cut_by_tokens(stand_in_registry, tokenizers):
    tok = tokenizers["dialogpt-medium"]
    source = "<|endoftext|>".join(LONG)   # plain text: the eos strings are characters
    e = encoder(stand_in_registry, tokenizers, "dialogpt-medium", max_length=20).encode(
        NLLItem(target="ok", source=source))
    plain = tok(source, add_special_tokens=False, split_special_tokens=True).input_ids
    assert e.truncated and list(e.source_ids) == plain[-(20 - len(e.target_ids)):]


def test_truncated_nll_scores_only_the_target(stand_in_registry):
    """A whole-turn-truncated item scores exactly as the same item sent without the dropped turns:
    same target tokens, same NLL; only the `truncated` flag differs."""
    from dialscore_server.checkpoints.loading import load_model
    from dialscore_server.checkpoints.standins import reinit_
    from dialscore_server.nll.engine.engine import NLLEngine

    loaded = load_model(stand_in_registry.get("dialogpt-medium"))
    reinit_(loaded.model, 0.3, seed=1)
    tok = loaded.tokenizer
    window = len(expected_source("dialogpt-medium", tok, LONG[-2:])) + len(alone(tok, TARGET)) + 2
    engine = NLLEngine(loaded.config.model_copy(update={"max_length": window}), loaded=loaded,
                       fast_kernels=False)
    cut, kept = engine.score([NLLItem(target=TARGET, context=LONG),
                              NLLItem(target=TARGET, context=LONG[-2:])])
    assert cut.truncated and not kept.truncated
    assert cut.token_ids == kept.token_ids == alone(tok, TARGET) + [tok.eos_token_id]
    assert cut.num_tokens == len(cut.token_ids) and cut.source_tokens == kept.source_tokens
    assert cut.nll == pytest.approx(kept.nll, abs=1e-5)
