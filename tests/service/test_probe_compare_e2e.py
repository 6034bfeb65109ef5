"""`dialscore probe` for two models over the real Serve app, then `dialscore probe compare` on the
run it wrote: the pairs of the two models are matched (a run's pair ids name the model, so they
never match), and the paired figures equal a hand computation from the run's own pairs.

Two dialogues keep the computation by hand exact: the dialogue-level bootstrap draws {1, 1},
{2, 2} (chance 1/4 each) or {1, 2} (chance 1/2), so its replicates take three values, each
holding at least a quarter of them; the 2.5% and 97.5% quantiles are then the smallest and the
largest of the three, and the p-value is twice the chance of the smaller side of 0 (estimated
from 4000 replicates: within 0.05, 3.6 standard errors).
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from dialscore.cli import main
from dialscore.probes import SAMPLE_DATA
from dialscore.probes.data import dump_dialogues, load_dialogues

pytestmark = pytest.mark.serve

MODELS = ("dialogpt-medium", "bart-base")  # the shared app's causal and seq2seq stand-ins


def _exact_bootstrap(pairs: list[dict]) -> tuple[float, float, float, float]:
    """(A - B, interval low, interval high, p) of two dialogues' pairs, by enumeration."""
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # dialogue -> [n, A, B]
    for a in pairs:
        h = hits[a["dialogue_id"]]
        h[0] += 1
        h[1] += a["correct_a"]
        h[2] += a["correct_b"]
    (n1, a1, b1), (n2, a2, b2) = hits.values()
    both = (a1 - b1 + a2 - b2) / (n1 + n2)
    support: dict[float, float] = defaultdict(float)  # replicate value -> its chance
    support[(a1 - b1) / n1] += 0.25
    support[(a2 - b2) / n2] += 0.25
    support[both] += 0.5
    below = sum(p for v, p in support.items() if v <= 0)
    above = sum(p for v, p in support.items() if v >= 0)
    return both, min(support), max(support), min(1.0, 2 * min(below, above))


def test_probe_then_compare_two_served_models(served, tmp_path, capsys):
    data = tmp_path / "two.jsonl"
    dump_dialogues([d for d in load_dialogues(SAMPLE_DATA) if d.id in ("dd-01", "ed-01")], data)
    run_dir = tmp_path / "run"
    assert main(["probe", "--url", served.url, "--data", str(data), "--models", ",".join(MODELS),
                 "--out", str(run_dir), "--no-plots", "--no-progress", "--bootstrap", "50"]) == 0
    rows = [json.loads(line) for line in (run_dir / "pairs.jsonl").read_text().splitlines()]
    by_model = {m: {(r["setting"], r["dialogue_id"], r["explanation_index"], r["corruption"]): r
                    for r in rows if r["model"] == m} for m in MODELS}
    assert set(by_model[MODELS[0]]) == set(by_model[MODELS[1]])
    assert not {r["pair_id"] for r in rows if r["model"] == MODELS[0]} & {
        r["pair_id"] for r in rows if r["model"] == MODELS[1]}

    capsys.readouterr()
    assert main(["probe", "compare", str(run_dir), "--models", *MODELS, "--n-boot", "4000"]) == 0
    doc = json.loads((run_dir / f"compare-{MODELS[0]}-vs-{MODELS[1]}.json").read_text())
    assert doc["sampling"] == "all"
    groups = {(g["setting"], g["category"]): g for g in doc["groups"]}
    assert set(groups) == {(s, c) for s in ("inference", "attribution")
                           for c in ("all", "logical", "complete")}
    for (setting, category), g in groups.items():
        pairs = [{"dialogue_id": k[1], "correct_a": a["correct"],
                  "correct_b": by_model[MODELS[1]][k]["correct"]}
                 for k, a in by_model[MODELS[0]].items()
                 if k[0] == setting and category in ("all", a["category"])]
        n = len(pairs)
        assert (g["n_pairs"], g["n_dialogues"]) == (n, 2)
        assert g["accuracy_a"] == pytest.approx(sum(p["correct_a"] for p in pairs) / n)
        assert g["accuracy_b"] == pytest.approx(sum(p["correct_b"] for p in pairs) / n)
        diff, low, high, p = _exact_bootstrap(pairs)
        assert g["difference"] == pytest.approx(diff)
        assert (g["ci_low"], g["ci_high"]) == (pytest.approx(low), pytest.approx(high))
        assert g["p_value"] == pytest.approx(p, abs=0.05), (setting, category, g)
