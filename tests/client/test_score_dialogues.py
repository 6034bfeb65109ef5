"""The client's POST /v1/nll/dialogues (``score_dialogues``, sync and async) and the perplexity
evaluation built on it (`dialscore perplexity`), against the contract fake: every scored turn is
the /v1/nll item of the turns before it, the per-dialogue NLL is the token-weighted mean, and
errors name the caller's field."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from contract_fake import ContractFake
from dialscore import errors
from dialscore.client import AsyncDialscoreClient, DialscoreClient, RetryPolicy
from dialscore.evals.perplexity import DialogueIn, read_dialogues, score_perplexity
from dialscore.types import NLLDialogue


def nll_of(model: str, item: dict) -> float:
    """The fake's NLL of an item: depends on the history's length and the target."""
    return 1.0 + len(item.get("context", [])) + len(item["target"]) / 100


def fake(**kw) -> ContractFake:
    return ContractFake(scorer=nll_of, **kw)


DIALOGUES = [
    ["Hi!", "Hello there.", "How are you today?"],
    NLLDialogue(turns=("a b", "c", "d e f", "g"), knowledge="K.", speakers=("x", "y", "x", "y"),
                speaker="y"),
    {"turns": ["One.", "Two words.", "Three."], "score_turns": [2, 0]},
]
EXPECTED_TURNS = [[0, 1, 2], [1, 3], [0, 2]]


def expected_items() -> list[dict]:
    out = []
    for d, turns in zip([DIALOGUES[0], list(DIALOGUES[1].turns), DIALOGUES[2]["turns"]],
                        EXPECTED_TURNS):
        for k in turns:
            item = {"context": list(d[:k]), "target": d[k]}
            if d == list(DIALOGUES[1].turns):
                item["knowledge"] = "K."
            out.append(item)
    return out


def check(response, service: ContractFake) -> None:
    assert service.bodies["/v1/nll/dialogues"][0]["dialogues"][0] == {"turns": DIALOGUES[0]}
    assert service.bodies["/v1/nll/dialogues"][0]["dialogues"][1] == {
        "turns": ["a b", "c", "d e f", "g"], "knowledge": "K.", "speaker": "y",
        "speakers": ["x", "y", "x", "y"]}
    items = expected_items()
    assert [i for _, i in service.nll_items] == items
    assert [[t.turn for t in r.turns] for r in response.results] == EXPECTED_TURNS
    flat = [t for r in response.results for t in r.turns]
    assert [t.nll for t in flat] == pytest.approx([nll_of("fake-gpt", i) for i in items])
    for r in response.results:
        n = sum(t.num_tokens for t in r.turns)
        assert r.num_tokens == n
        assert r.nll == pytest.approx(sum(t.nll * t.num_tokens for t in r.turns) / n)
    assert response.model == "fake-gpt"


def test_sync_score_dialogues_scores_each_turn_given_the_turns_before_it():
    service = fake()
    with DialscoreClient("http://fake", transport=service.transport()) as client:
        check(client.score_dialogues("fake-gpt", DIALOGUES), service)


def test_async_score_dialogues_is_the_same():
    service = fake()

    async def go():
        async with AsyncDialscoreClient("http://fake", transport=service.transport()) as client:
            return await client.score_dialogues("fake-gpt", DIALOGUES, return_tokens=True)

    response = asyncio.run(go())
    check(response, service)
    assert all(t.tokens and t.token_nlls for r in response.results for t in r.turns)


@pytest.mark.parametrize("dialogue,param", [
    ({"turns": ["a"], "score_turns": [1]}, "dialogues[1].score_turns[0]"),
    ({"turns": ["a"], "speakers": ["x"], "speaker": "z"}, "dialogues[1].speaker"),
    ({"turns": ["a"], "speaker": "z"}, "dialogues[1].speaker"),
    ({"turns": []}, "dialogues[1].turns"),
])
def test_bad_dialogues_raise_an_invalid_request_naming_the_field(dialogue, param):
    service = fake()
    with DialscoreClient("http://fake", transport=service.transport(),
                         retry=RetryPolicy(max_attempts=1)) as client:
        with pytest.raises(errors.InvalidRequestError) as info:
            client.score_dialogues("fake-gpt", [["ok"], dialogue])
    assert info.value.param == param


def test_too_many_scored_turns_is_a_413_naming_dialogues():
    service = fake(limits={"max_items": 4})
    with DialscoreClient("http://fake", transport=service.transport(),
                         retry=RetryPolicy(max_attempts=1)) as client:
        with pytest.raises(errors.PayloadTooLargeError) as info:
            client.score_dialogues("fake-gpt", [["a", "b", "c"], ["d", "e"]])
    assert info.value.param == "dialogues"


def test_a_dialogue_is_a_list_of_turns_not_one_string():
    with DialscoreClient("http://fake", transport=fake().transport()) as client:
        with pytest.raises(TypeError):
            client.score_dialogues("fake-gpt", ["just one string"])


# --------------------------------------------------------------------------- perplexity

def test_perplexity_sends_whole_dialogues_within_max_items_and_weighs_by_tokens():
    service = fake(limits={"max_items": 5})
    dialogues = [DialogueIn(f"d{i}", tuple(f"turn {j} of {i}" for j in range(2 + i % 3)))
                 for i in range(7)]

    async def go():
        async with AsyncDialscoreClient("http://fake", transport=service.transport()) as client:
            return await score_perplexity(client, "fake-gpt", dialogues, chunk_turns=100)

    result = asyncio.run(go())
    sent = service.bodies["/v1/nll/dialogues"]
    assert all(sum(len(d["turns"]) for d in body["dialogues"]) <= 5 for body in sent)
    assert sorted(d["turns"][0] for body in sent for d in body["dialogues"]) == sorted(
        d.turns[0] for d in dialogues)  # every dialogue once, whole
    assert [d.id for d in result.dialogues] == [d.id for d in dialogues]
    for d, got in zip(dialogues, result.dialogues):
        assert [t.turn for t in got.turns] == list(range(len(d.turns)))
        want = [nll_of("fake-gpt", {"context": list(d.turns[:k]), "target": d.turns[k]})
                for k in range(len(d.turns))]
        assert [t.nll for t in got.turns] == pytest.approx(want)
        assert got.perplexity == pytest.approx(math.exp(got.nll))
    tokens = [(t.nll, t.num_tokens) for d in result.dialogues for t in d.turns]
    assert result.nll == pytest.approx(sum(a * n for a, n in tokens) / sum(n for _, n in tokens))
    assert result.truncated_turns == 0 and result.skipped == []


def test_perplexity_of_one_speaker_skips_dialogues_without_them_and_names_input_indices():
    service = fake()
    dialogues = [DialogueIn("a", ("Hi.", "Hello."), ("user", "bot")),
                 DialogueIn("b", ("Hi.",), ("user",)),
                 DialogueIn("c", ("Hi.", ""), ("user", "bot"))]

    async def go(ds):
        async with AsyncDialscoreClient("http://fake", transport=service.transport(),
                                        retry=RetryPolicy(max_attempts=1)) as client:
            return await score_perplexity(client, "fake-gpt", ds, speaker="bot")

    result = asyncio.run(go(dialogues[:2]))
    assert [d.id for d in result.dialogues] == ["a"] and result.skipped == ["b"]
    assert [t.turn for t in result.dialogues[0].turns] == [1]
    with pytest.raises(errors.InvalidRequestError) as info:
        asyncio.run(go(dialogues))
    assert info.value.param == "dialogues[2].turns[1]"  # the input's index, "b" skipped
    with pytest.raises(ValueError, match="no speakers"):
        asyncio.run(go([DialogueIn("p", ("Hi.",))]))


def test_read_dialogues(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "x", "turns": ["a", "b"], "knowledge": "k"}) + "\n\n"
                    + json.dumps({"turns": [{"speaker": 1, "text": "a"}]}) + "\n")
    assert read_dialogues(path) == [DialogueIn("x", ("a", "b"), None, "k"),
                                    DialogueIn("3", ("a",), (1,), None)]
    for bad in ({"turns": []}, {"turns": ["a", {"speaker": 1, "text": "b"}]}, {"turns": ["a"], "x": 1},
                {"id": 5, "turns": ["a"]}, [1]):
        path.write_text(json.dumps(bad) + "\n")
        with pytest.raises(ValueError, match=":1:"):
            read_dialogues(path)


def test_cli_perplexity(tmp_path, monkeypatch, capsys):
    from dialscore.cli import main
    from dialscore.commands import service_args

    service = fake()
    monkeypatch.setattr(service_args, "async_client_from_args",
                        lambda args: AsyncDialscoreClient("http://fake", transport=service.transport()))
    data, out = tmp_path / "d.jsonl", tmp_path / "ppl.jsonl"
    data.write_text("".join(json.dumps({"id": f"d{i}", "turns": ["Hi.", "Hello there."]}) + "\n"
                            for i in range(3)))
    assert main(["perplexity", "--model", "fake-gpt", "--data", str(data), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fake-gpt: perplexity" in printed and "3 dialogues, 6 turns" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["d0", "d1", "d2"]
    assert rows[0]["perplexity"] == pytest.approx(math.exp(rows[0]["nll"]))
    assert [t["turn"] for t in rows[0]["turns"]] == [0, 1]
    assert main(["perplexity", "--model", "nope", "--data", str(data)]) == 1
    assert "dialscore perplexity:" in capsys.readouterr().err
