"""`dialscore probe compare`: two models of a finished probe run compared from its pairs.jsonl,
through the CLI entry point: on a generated run whose differences are known, and end to end on a
run of two models through the contract fake, against a hand computation."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest


from dialscore.cli import build_parser, main
from dialscore.client import DialscoreClient
from dialscore.probes.compare import compare_models, read_scored_pairs
from dialscore.probes.data import Dialogue, Explanation, dump_dialogues
from dialscore.probes.metrics import ScoredPair
from dialscore.probes.run import run_probes
from contract_fake import ContractFake


def _pair(model: str, setting: str, dialogue: int, k: int, category: str,
          correct: bool) -> ScoredPair:
    corruption = "swapped" if category == "logical" else "shuffle"
    return ScoredPair(pair_id=f"{model}|{setting}|d{dialogue}|e{k}|{corruption}", model=model,
                      setting=setting, dataset="DD",
                      dialogue_id=f"d{dialogue}", explanation_index=k, dimension="event",
                      corruption=corruption,
                      category=category, valid_text="v", corrupted_text="c", nll_valid=1.0,
                      nll_corrupted=2.0 if correct else 0.5)


def _run_dir(tmp_path):
    """30 dialogues x 2 pairs (one logical, one complete) per setting. Inference: "big" always
    right, "small" wrong on the logical pair of every third dialogue (accuracies 1.0 and 50/60).
    Attribution: both right on the same pairs (no difference)."""
    pairs = []
    for d in range(30):
        for k, category in enumerate(("logical", "complete")):
            pairs.append(_pair("big", "inference", d, k, category, True))
            pairs.append(_pair("small", "inference", d, k, category,
                               not (category == "logical" and d % 3 == 0)))
            for model in ("big", "small"):
                pairs.append(_pair(model, "attribution", d, k, category, d % 2 == 0))
    rows = [{**asdict(p), "delta": p.delta, "correct": p.correct} for p in pairs]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path, pairs


def test_compare_command_prints_and_writes_the_paired_comparison(tmp_path, capsys):
    run_dir, pairs = _run_dir(tmp_path)
    assert read_scored_pairs(run_dir) == pairs
    code = main(["probe", "compare", str(run_dir), "--models", "big", "small", "--seed", "3",
                 "--n-boot", "500"])
    assert code == 0
    out = capsys.readouterr().out
    doc = json.loads((run_dir / "compare-big-vs-small.json").read_text())
    assert (doc["model_a"], doc["model_b"], doc["seed"], doc["n_boot"]) == ("big", "small", 3, 500)
    rows = {(g["setting"], g["category"]): g for g in doc["groups"]}
    assert list(rows) == [("inference", "all"), ("inference", "logical"),
                          ("inference", "complete"), ("attribution", "all"),
                          ("attribution", "logical"), ("attribution", "complete")]
    inf = rows[("inference", "all")]
    assert (inf["n_pairs"], inf["n_dialogues"]) == (60, 30)
    assert inf["accuracy_a"] == 1.0 and inf["accuracy_b"] == pytest.approx(50 / 60)
    assert inf["difference"] == pytest.approx(10 / 60)
    assert 0 < inf["ci_low"] < 10 / 60 < inf["ci_high"] and inf["p_value"] < 0.01
    # Same bootstrap as the library call on the setting's pairs.
    want = compare_models([p for p in pairs if p.setting == "inference"], "big", "small",
                          seed=3, n_boot=500)
    assert (inf["ci_low"], inf["ci_high"], inf["p_value"]) == (want.ci_low, want.ci_high,
                                                               want.p_value)
    assert rows[("inference", "complete")]["difference"] == 0
    att = rows[("attribution", "all")]
    assert att["difference"] == 0 and att["p_value"] == 1.0 and att["accuracy_a"] == 0.5
    # The printed table is the one written beside the run.
    table = (run_dir / "compare-big-vs-small.txt").read_text().strip()
    assert table in out and "+0.167" in table and "A = big, B = small" in table


def test_probe_without_a_subcommand_still_runs_the_probes():
    args = build_parser().parse_args(["probe", "--models", "a,b", "--seed", "2"])
    assert args.func.__name__ == "_probe" and args.models == ["a", "b"] and args.seed == 2


def test_compare_command_errors(tmp_path, capsys):
    assert main(["probe", "compare", str(tmp_path), "--models", "big", "small"]) == 1
    assert "pairs.jsonl not found" in capsys.readouterr().err
    run_dir, _ = _run_dir(tmp_path)
    assert main(["probe", "compare", str(run_dir), "--models", "big", "nope"]) == 1
    assert "'nope' scored no pair in this run; it has big, small" in capsys.readouterr().err
    assert not list(run_dir.glob("compare-*"))


# --- end to end: the probes of two models through the service's contract, then the command ---

SHOP = Dialogue(id="x-1", dataset="DailyDialog", history=["Is the shop open?", "Until six."],
                response="Then I'll hurry.", explanations=[
                    Explanation(dimension="event", antecedent="The shop closing soon",
                                connective="causes", consequent="the speaker hurries", valid=True),
                    Explanation(dimension="emotion", antecedent="Rain", connective="enables",
                                consequent="joy", valid=False)])
MATCH = Dialogue(id="x-2", dataset="DailyDialog", history=["Did you win?"],
                 response="We lost by a goal.", explanations=[
                     Explanation(dimension="emotion", antecedent="Losing the game",
                                 connective="causes", consequent="the team is sad", valid=True)])


def _scorer(model: str, item: dict) -> float:
    """NLL 1.0 for the preferred explanation, 3.0 for the other. The explanation is the
    knowledge (inference) or the target (attribution); the dialogue is told by its first turn.
    Inference: fake-gpt prefers the valid explanation everywhere, fake-bart only in x-2.
    Attribution: both prefer it in x-1 and the corruption in x-2."""
    explanation = item.get("knowledge") or item["target"]
    valid = explanation in (SHOP.explanations[0].text, MATCH.explanations[0].text)
    in_shop = item["context"][0] == SHOP.history[0]
    if "knowledge" in item:
        right = model == "fake-gpt" or not in_shop
    else:
        right = in_shop
    return 1.0 if valid == right else 3.0


def test_probes_of_two_models_then_compare_match_a_hand_computation(tmp_path, capsys):
    """x-1 gives 6 pairs per model and setting (3 logical, 3 complete); x-2, without an invalid
    explanation, 5 (2 logical: `incorrect` is skipped; 3 complete).

    Inference, all pairs: A = fake-gpt wins 6 + 5, B = fake-bart 0 + 5 of 6 + 5 pairs:
    accuracies 1 and 5/11, A - B = 6/11. The dialogue-level bootstrap draws two dialogues with
    replacement: {x-1, x-1} (chance 1/4) gives (12 - 0) / 12 = 1, {x-2, x-2} (1/4) gives
    (10 - 10) / 10 = 0, {x-1, x-2} (1/2) gives (11 - 5) / 11 = 6/11. Each extreme holds a quarter
    of the replicates, so the 2.5% and 97.5% quantiles are exactly 0 and 1; the replicates
    <= 0 have chance 1/4 and those >= 0 chance 1, so p = 2 * 1/4 = 0.5 (estimated from the
    replicates: within 0.05 at 4000 of them, 3.6 standard errors).
    Logical: 3 + 2 pairs; A wins 3 + 2, B 0 + 2: A - B = 3/5, support {1, 0, 3/5}, same interval
    and p. Complete: 3 + 3 pairs; A - B = 1/2, support {1, 0, 1/2}, same interval and p.
    Attribution: both win x-1's 6 and lose x-2's 5: every replicate is 0, interval [0, 0], p = 1.
    """
    data = tmp_path / "two.jsonl"
    dump_dialogues([SHOP, MATCH], data)
    run_dir = tmp_path / "run"
    with DialscoreClient("http://fake", transport=ContractFake(scorer=_scorer).transport()) as c:
        run_probes(c, data, ["fake-gpt", "fake-bart"], ["inference", "attribution"], seed=0,
                   out_dir=run_dir, progress=False, plots=False, n_boot=100)
    rows = [json.loads(line) for line in (run_dir / "pairs.jsonl").read_text().splitlines()]
    ids = {m: {r["pair_id"] for r in rows if r["model"] == m} for m in ("fake-gpt", "fake-bart")}
    assert len(ids["fake-gpt"]) == 22 and not ids["fake-gpt"] & ids["fake-bart"]  # ids name the model

    assert main(["probe", "compare", str(run_dir), "--models", "fake-gpt", "fake-bart",
                 "--seed", "0", "--n-boot", "4000"]) == 0
    printed = capsys.readouterr().out
    doc = json.loads((run_dir / "compare-fake-gpt-vs-fake-bart.json").read_text())
    got = {(g["setting"], g["category"]): g for g in doc["groups"]}
    want = {("inference", "all"): (11, 1.0, 5 / 11, 6 / 11),
            ("inference", "logical"): (5, 1.0, 2 / 5, 3 / 5),
            ("inference", "complete"): (6, 1.0, 1 / 2, 1 / 2),
            ("attribution", "all"): (11, 6 / 11, 6 / 11, 0.0),
            ("attribution", "logical"): (5, 3 / 5, 3 / 5, 0.0),
            ("attribution", "complete"): (6, 1 / 2, 1 / 2, 0.0)}
    assert list(got) == list(want)
    for key, (n, acc_a, acc_b, diff) in want.items():
        g = got[key]
        assert (g["n_pairs"], g["n_dialogues"]) == (n, 2), key
        assert g["accuracy_a"] == pytest.approx(acc_a) and g["accuracy_b"] == pytest.approx(acc_b)
        assert g["difference"] == pytest.approx(diff), key
        if key[0] == "inference":
            assert (g["ci_low"], g["ci_high"]) == (0.0, 1.0), key
            assert g["p_value"] == pytest.approx(0.5, abs=0.05), key
        else:
            assert (g["ci_low"], g["ci_high"], g["p_value"]) == (0.0, 0.0, 1.0), key
    assert doc["sampling"] == "all" and "run's pairs: every corruption type" in printed
    assert "+0.545" in printed and "[+0.000, +1.000]" in printed


def _scored(model: str, key: tuple, correct: bool, **texts) -> ScoredPair:
    setting, dialogue, index, corruption = key
    return ScoredPair(pair_id=f"{model}|{setting}|{dialogue}|e{index}|{corruption}", model=model,
                      setting=setting, dataset="DD", dialogue_id=dialogue,
                      explanation_index=index, dimension="event", corruption=corruption,
                      category="logical", valid_text=texts.get("valid", "v"),
                      corrupted_text=texts.get("corrupted", "c"), nll_valid=1.0,
                      nll_corrupted=2.0 if correct else 0.5)


def test_pairs_match_on_what_identifies_the_probe_and_must_agree():
    keys = [("inference", "d1", 0, "swapped"), ("inference", "d1", 0, "negation"),
            ("inference", "d1", 1, "swapped"), ("inference", "d2", 0, "swapped")]
    a = [_scored("a", k, True) for k in keys]
    b = [_scored("b", k, i % 2 == 0) for i, k in enumerate(keys)]
    c = compare_models(a + b, "a", "b", n_boot=200)
    assert (c.n_pairs, c.n_dialogues, c.accuracy_b) == (4, 2, 0.5)
    # Another explanation, corruption, dialogue or setting is another probe pair.
    for other in [("inference", "d1", 2, "swapped"), ("inference", "d1", 0, "reversed"),
                  ("inference", "d3", 0, "swapped"), ("attribution", "d1", 0, "swapped")]:
        with pytest.raises(ValueError, match="share no scored pair"):
            compare_models([a[0], _scored("b", other, True)], "a", "b")
    with pytest.raises(ValueError, match="another corrupted_text for 'a' \\('c'\\) than for 'b'"):
        compare_models([a[0], _scored("b", keys[0], True, corrupted="c2")], "a", "b")
    with pytest.raises(ValueError, match="model 'a' has two rows for the probe pair"):
        compare_models(a + [a[0]] + b, "a", "b")


def test_a_pairs_file_missing_a_field_is_refused_naming_it(tmp_path, capsys):
    run_dir, _ = _run_dir(tmp_path)
    lines = (run_dir / "pairs.jsonl").read_text().splitlines()
    row = json.loads(lines[3])
    del row["explanation_index"], row["corruption"]
    lines[3] = json.dumps(row)
    (run_dir / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["probe", "compare", str(run_dir), "--models", "big", "small"]) == 1
    assert "pairs.jsonl, line 4: missing field(s) explanation_index, corruption" in (
        capsys.readouterr().err)
