"""CEDAR's one-corruption-per-explanation draw (``sampling="one-per-explanation"``) beside the
default of every type: one pair per valid explanation, drawn (seeded) among the types it allows,
the very pair the default makes for that type; the protocol recorded in the run's report."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from dialscore.cli import main
from dialscore.client import DialscoreClient
from dialscore.probes import SAMPLE_DATA as SAMPLE
from dialscore.probes.corruptions import (
    ALL_TYPES, CORRUPTIONS, ONE_PER_EXPLANATION, corrupt_dialogues,
)
from dialscore.probes.data import Dialogue, Explanation, dump_dialogues, load_dialogues
from dialscore.probes.run import run_probes
from contract_fake import ContractFake

ONE = ONE_PER_EXPLANATION
FAST = {"progress": False, "plots": False, "n_boot": 100}


def _valid(dialogues):
    return [(d.id, i) for d in dialogues for i, e in enumerate(d.explanations) if e.valid]


def test_one_pair_per_valid_explanation_each_a_pair_of_the_default():
    dialogues = load_dialogues(SAMPLE)
    every = corrupt_dialogues(dialogues, seed=3)
    one = corrupt_dialogues(dialogues, seed=3, sampling=ONE)
    assert (every.sampling, one.sampling) == (ALL_TYPES, ONE)
    assert [(p.dialogue_id, p.explanation_index) for p in one.pairs] == _valid(dialogues)
    assert len(one.pairs) == 156 and len(every.pairs) == 896
    assert set(one.pairs) <= set(every.pairs)
    assert len({p.corruption for p in one.pairs}) == 6
    # The same types lack material; here they are left out of the draw.
    assert one.skipped == every.skipped == Counter(
        {("incorrect", "no invalid explanation in the dialogue"): 40})


def test_the_draw_is_seeded_and_depends_on_the_instance_alone():
    dialogues = load_dialogues(SAMPLE)
    a = corrupt_dialogues(dialogues, seed=5, sampling=ONE)
    assert a.pairs == corrupt_dialogues(dialogues, seed=5, sampling=ONE).pairs
    assert a.pairs == corrupt_dialogues(dialogues, seed=5, corruptions=list(reversed(CORRUPTIONS)),
                                        sampling=ONE).pairs
    subset = corrupt_dialogues(list(reversed(dialogues[3:9])), seed=5, sampling=ONE)
    drawn = {(p.dialogue_id, p.explanation_index): p for p in a.pairs}
    assert all(drawn[(p.dialogue_id, p.explanation_index)] == p for p in subset.pairs)
    other = corrupt_dialogues(dialogues, seed=6, sampling=ONE)
    assert sum(p.corruption != q.corruption for p, q in zip(a.pairs, other.pairs)) > 100


def test_the_draw_is_uniform_over_the_types_an_explanation_allows():
    dialogues = load_dialogues(SAMPLE)
    without_invalid = {d.id for d in dialogues if all(e.valid for e in d.explanations)}
    n_without = sum(d in without_invalid for d, _ in _valid(dialogues))           # 40
    n_with = len(_valid(dialogues)) - n_without                                   # 116
    counts: Counter = Counter()
    for seed in range(40):
        for p in corrupt_dialogues(dialogues, seed=seed, sampling=ONE).pairs:
            assert not (p.corruption == "incorrect" and p.dialogue_id in without_invalid)
            counts[p.corruption] += 1
    # An explanation with an invalid sibling draws each of 6 types with chance 1/6; one without
    # draws each of the other 5 with chance 1/5.
    expected = {c: 40 * (n_with / 6 + (0 if c == "incorrect" else n_without / 5))
                for c in CORRUPTIONS}
    assert sum(counts.values()) == 40 * 156
    assert all(abs(counts[c] - expected[c]) < 0.1 * expected[c] for c in CORRUPTIONS), counts


def test_an_explanation_allowing_no_type_gets_no_pair_and_is_counted():
    house = Dialogue(id="d", dataset="DailyDialog", history=["Did you sell it?"],
                     response="Yes!", explanations=[Explanation(
                         dimension="event", antecedent="I found a buyer", connective="causes",
                         consequent="I am happy", valid=True)])
    out = corrupt_dialogues([house], seed=0, corruptions=["incorrect"], sampling=ONE)
    assert out.pairs == []
    assert out.skipped == Counter({("incorrect", "no invalid explanation in the dialogue"): 1,
                                   ("*", "explanation allows no corruption type"): 1})
    with pytest.raises(ValueError, match="unknown sampling 'one'; expected one of all, "
                                         "one-per-explanation"):
        corrupt_dialogues([house], seed=0, sampling="one")


@pytest.fixture()
def small_data(tmp_path):
    path = tmp_path / "small.jsonl"
    dump_dialogues([d for d in load_dialogues(SAMPLE) if d.id.endswith(("-01", "-05"))], path)
    return path


def test_a_run_records_its_sampling_and_both_models_get_the_same_draw(small_data, tmp_path,
                                                                      capsys):
    n_valid = len(_valid(load_dialogues(small_data)))
    server = ContractFake()
    out = tmp_path / "run"
    with DialscoreClient("http://fake", transport=server.transport()) as client:
        every = run_probes(client, small_data, ["fake-gpt", "fake-bart"], ["inference"], seed=2,
                           out_dir=out, **FAST)
        sent = len(server.nll_items)
        one = run_probes(client, small_data, ["fake-gpt", "fake-bart"], ["inference"], seed=2,
                         out_dir=out, sampling=ONE, **FAST)
    # A subset of the run before it: every item was stored already.
    assert len(server.nll_items) == sent and one.config["items_scored_now"] == 0
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["sampling"] == ONE and every.config["sampling"] == ALL_TYPES
    assert "one corruption per valid explanation" in report["sampling"]
    tables = (out / "tables.txt").read_text()
    assert "(CEDAR's protocol; seed 2)" in tables
    assert "Corruption types left out of an explanation's draw (no material)" in tables
    drawn = {m: sorted((p.dialogue_id, p.explanation_index, p.corruption)
                       for p in one.pairs if p.model == m) for m in ("fake-gpt", "fake-bart")}
    assert drawn["fake-gpt"] == drawn["fake-bart"] and len(drawn["fake-gpt"]) == n_valid
    # The comparison pairs them all and names the run's protocol.
    assert main(["probe", "compare", str(out), "--models", "fake-gpt", "fake-bart",
                 "--n-boot", "200"]) == 0
    printed = capsys.readouterr().out
    assert "run's pairs: one corruption per valid explanation" in printed
    doc = json.loads((out / "compare-fake-gpt-vs-fake-bart.json").read_text())
    assert doc["sampling"] == ONE and doc["groups"][0]["n_pairs"] == n_valid
