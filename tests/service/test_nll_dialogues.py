"""POST /v1/nll/dialogues on the served app: every scored turn has exactly the numbers of its
/v1/nll item (``context: turns[:k], knowledge, target: turns[k]``) sent alone, for a decoder-only
(dialogpt-medium's stand-in) and an encoder-decoder model (bart-base's), truncation included;
the per-dialogue NLL is the token-weighted mean of its turns'; speaker and index selections
return exactly the selected turns; bad input is a 4xx naming the dialogue field.
"""

from __future__ import annotations

import httpx
import pytest

from dialscore_server.contract.limits import Limits
from dialscore_server.nll.dialogues.protocol import NLLDialoguesRequest
from dialscore_server.nll.dialogues.serving import item_param
from dialscore_server.nll.protocol import NLLRequest

pytestmark = pytest.mark.serve

L = Limits()  # the served app uses the defaults

WORDS = ("the river keeps its quiet promise while seven lanterns drift past the old mill and "
         "nobody remembers why the baker sings at dawn ")
#: About 600 characters a turn: six of them overflow the stand-ins' 512-token window, one alone fits.
LONG_TURN = [(WORDS * 6)[i * 7:i * 7 + 600] for i in range(6)]

DIALOGUES = [
    {"turns": ["Hi! How was your weekend?", "Great, I went hiking.", "Where did you go?",
               "Up the ridge behind the lake."]},
    {"turns": ["Do you like dogs?", "I love them.", "What breed?", "A collie, she is old now.",
               "Old dogs are the best."],
     "knowledge": "Collies are herding dogs from Scotland."},
    {"turns": LONG_TURN},
    {"turns": ["I am tall.", "Nice.", "I am short.", "Odd.", "I am both."],
     "speakers": ["a", "b", "a", "b", "a"], "speaker": "b"},
    {"turns": ["One.", "Two.", "Three.", "Four."], "score_turns": [3, 0]},
]
SELECTED = [[0, 1, 2, 3], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5], [1, 3], [0, 3]]
TOL = 1e-4


def per_item(url: str, model: str, dialogue: dict, k: int) -> tuple[dict, dict]:
    """Turn k of `dialogue` as its own POST /v1/nll request: (result, usage)."""
    item = {"context": dialogue["turns"][:k], "target": dialogue["turns"][k]}
    if "knowledge" in dialogue:
        item["knowledge"] = dialogue["knowledge"]
    r = httpx.post(f"{url}/v1/nll", json={"model": model, "items": [item], "return_tokens": True},
                   timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    return body["results"][0], body["usage"]


@pytest.mark.parametrize("model", ["dialogpt-medium", "bart-base"])
def test_every_turn_has_the_numbers_of_its_per_item_request(served, model):
    r = httpx.post(f"{served.url}/v1/nll/dialogues",
                   json={"model": model, "dialogues": DIALOGUES, "return_tokens": True}, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == model and len(body["results"]) == len(DIALOGUES)
    source_tokens = target_tokens = 0
    truncated = []
    for dialogue, want, got in zip(DIALOGUES, SELECTED, body["results"]):
        assert [t["turn"] for t in got["turns"]] == want  # exactly the selected turns, in order
        for turn in got["turns"]:
            expected, usage = per_item(served.url, model, dialogue, turn["turn"])
            source_tokens += usage["source_tokens"]
            target_tokens += usage["target_tokens"]
            assert turn["num_tokens"] == expected["num_tokens"]
            assert turn["tokens"] == expected["tokens"]
            assert turn["truncated"] == expected["truncated"]
            assert turn["nll"] == pytest.approx(expected["nll"], abs=TOL)
            assert turn["token_nlls"] == pytest.approx(expected["token_nlls"], abs=TOL)
            truncated.append(turn["truncated"])
        n = sum(t["num_tokens"] for t in got["turns"])
        assert got["num_tokens"] == n
        assert got["nll"] == pytest.approx(sum(t["nll"] * t["num_tokens"] for t in got["turns"]) / n,
                                           rel=1e-9)
        assert got["nll"] == pytest.approx(
            sum(x for t in got["turns"] for x in t["token_nlls"]) / n, abs=1e-6)
    assert body["usage"] == {"source_tokens": source_tokens, "target_tokens": target_tokens}
    # The long dialogue does not fit the 512-token window: its later turns lose whole oldest turns.
    long_flags = [t["truncated"] for t in body["results"][2]["turns"]]
    assert long_flags[0] is False and long_flags[-1] is True, long_flags
    assert sum(truncated) == sum(long_flags)


def test_without_return_tokens_there_are_no_token_lists(served):
    r = httpx.post(f"{served.url}/v1/nll/dialogues",
                   json={"model": "dialogpt-medium", "dialogues": DIALOGUES[:1]}, timeout=120)
    assert r.status_code == 200, r.text
    for turn in r.json()["results"][0]["turns"]:
        assert turn["token_nlls"] is None and turn["tokens"] is None


def test_a_bulk_priority_is_served_in_the_bulk_lane(served):
    r = httpx.post(f"{served.url}/v1/nll/dialogues",
                   json={"model": "dialogpt-medium", "dialogues": DIALOGUES[:1], "priority": 1},
                   timeout=120)
    assert r.status_code == 200, r.text
    assert r.headers["x-dialscore-lane"] == "bulk"


ERRORS = [
    ("no turns", [{"turns": []}], 422, "dialogues[0].turns"),
    ("no dialogues", [], 422, "dialogues"),
    ("an empty scored turn", [{"turns": ["a", "", "b"]}], 422, "dialogues[0].turns[1]"),
    ("index outside", [{"turns": ["a", "b"]}, {"turns": ["a"], "score_turns": [0, 1]}], 422,
     "dialogues[1].score_turns[1]"),
    ("negative index", [{"turns": ["a"], "score_turns": [-1]}], 422, "dialogues[0].score_turns[0]"),
    ("index twice", [{"turns": ["a", "b"], "score_turns": [1, 1]}], 422,
     "dialogues[0].score_turns[1]"),
    ("speaker and indices", [{"turns": ["a"], "speakers": ["x"], "speaker": "x",
                              "score_turns": [0]}], 422, "dialogues[0].score_turns"),
    ("speaker nobody is", [{"turns": ["a", "b"], "speakers": ["x", "y"], "speaker": "z"}], 422,
     "dialogues[0].speaker"),
    ("speaker 1 is not '1'", [{"turns": ["a"], "speakers": [1], "speaker": "1"}], 422,
     "dialogues[0].speaker"),
    ("speaker without speakers", [{"turns": ["a"], "speaker": "x"}], 422, "dialogues[0].speaker"),
    ("speakers one short", [{"turns": ["a", "b"], "speakers": ["x"]}], 422, "dialogues[0].speakers"),
    ("an empty turn scored by index", [{"turns": ["", "b"], "score_turns": [1, 0]}], 422,
     "dialogues[0].turns[0]"),
    ("a turn that is not text", [{"turns": ["a", 5]}], 422, "dialogues[0].turns[1]"),
    ("unknown field", [{"turns": ["a"], "speeker": "x"}], 422, "dialogues[0].speeker"),
    ("turn over max_text_chars", [{"turns": ["a"]}, {"turns": ["a", "x" * (L.max_text_chars + 1)]}],
     413, "dialogues[1].turns[1]"),
    ("knowledge over max_text_chars", [{"turns": ["a"], "knowledge": "x" * (L.max_text_chars + 1)}],
     413, "dialogues[0].knowledge"),
    ("turns over max_turns", [{"turns": ["a"] * (L.max_turns + 1)}], 413, "dialogues[0].turns"),
    ("scored turns over max_items", [{"turns": ["a"] * 205}] * 5, 413, "dialogues"),
    ("tokens over max_request_tokens", [{"turns": ["x" * 1100] * 200}] * 2, 413, "dialogues"),
]


@pytest.mark.parametrize("dialogues,status,param", [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_bad_input_is_a_4xx_naming_the_field(served, dialogues, status, param):
    # An unknown model: each error shows its check runs before the model is looked up.
    r = httpx.post(f"{served.url}/v1/nll/dialogues", json={"model": "nope", "dialogues": dialogues},
                   timeout=60)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_at_the_item_limit_the_request_reaches_the_model_lookup(served):
    # 8 x 128 turns: max_items scored turns, costing 8 x (2 + 4 + ... + 256) tokens, within limits.
    r = httpx.post(f"{served.url}/v1/nll/dialogues",
                   json={"model": "nope", "dialogues": [{"turns": ["a"] * 128}] * 8}, timeout=60)
    assert r.status_code == 404, r.text


@pytest.mark.parametrize("model", ["dialogpt-medium", "bart-base"])
def test_a_turn_that_alone_does_not_fit_is_a_422_naming_it(served, model):
    too_long = WORDS * 40  # well over 512 tokens
    dialogues = [{"turns": ["Hi.", "Hello."]},
                 {"turns": ["Hi.", "Tell me a story.", too_long, "Thanks."]}]
    r = httpx.post(f"{served.url}/v1/nll/dialogues", json={"model": model, "dialogues": dialogues},
                   timeout=120)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == "dialogues[1].turns[2]", r.text


# --------------------------------------------------------------------------- without the app

def test_the_cost_is_that_of_the_expanded_nll_items():
    """The units-of-work rule: a dialogues request costs what its items cost as POST /v1/nll."""
    small = Limits(max_item_tokens=64)
    for limits in (L, small):
        body = NLLDialoguesRequest.model_validate({"model": "m", "dialogues": [
            *DIALOGUES, {"turns": ["é" * 30, "", "ok"], "knowledge": "", "score_turns": [0, 2]}]})
        chosen = body.selections(limits)
        items = [{"target": it.target, "context": list(it.context or ()),
                  **({"knowledge": it.knowledge} if it.knowledge is not None else {})}
                 for it in body.to_items(chosen)]
        assert body.tokens(chosen, limits) == NLLRequest.model_validate(
            {"model": "m", "items": items}).tokens(limits)


def test_the_items_are_the_turns_given_the_turns_before_them():
    body = NLLDialoguesRequest.model_validate({"model": "m", "dialogues": DIALOGUES[1:2] + DIALOGUES[3:]})
    chosen = body.selections(L)
    assert chosen == [[0, 1, 2, 3, 4], [1, 3], [0, 3]]
    items = body.to_items(chosen)
    d = DIALOGUES[1]
    assert [(it.context, it.knowledge, it.target) for it in items[:5]] == [
        (tuple(d["turns"][:k]), d["knowledge"], d["turns"][k]) for k in range(5)]
    assert items[0].context == ()  # the first turn: no history
    assert [it.target for it in items[5:]] == ["Nice.", "Odd.", "One.", "Four."]


def test_item_errors_are_named_by_the_dialogue_field():
    chosen = [[0, 1, 2], [1, 3]]
    assert item_param("items[0].target", chosen) == "dialogues[0].turns[0]"
    assert item_param("items[4].target", chosen) == "dialogues[1].turns[3]"
    assert item_param("items[3].context[0]", chosen) == "dialogues[1].turns[0]"
    assert item_param("items[3].knowledge", chosen) == "dialogues[1].knowledge"
    assert item_param("items[2]", chosen) == "dialogues[0].turns[2]"
    assert item_param("model", chosen) == "model"
    assert item_param(None, chosen) is None
