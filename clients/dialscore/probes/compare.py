"""Paired comparison of two models on the same CEDAR pairs (the paper's Figures 5 and 6 compare
BART-base with BART-large, and models before and after fine-tuning).

**Matching.** A pair of model A and a pair of model B are the same probe pair when their
:attr:`~dialscore.probes.metrics.ScoredPair.probe_key` is equal: setting, dataset, dialogue id,
explanation index and corruption type (what identifies a probe pair whatever model scored it; the
row's ``pair_id`` names the model too, so it never matches across models). Both rows of a matched
pair must carry the same ``valid_text`` and ``corrupted_text`` (rows of one run always do: the
corruptions depend on the seed and the dialogue, never on the model), else ValueError names the
field; two rows of one model with the same key are a ValueError too. Pairs only one model scored
are left out.

**Figures**, over the n shared pairs of the m dialogues (dataset, dialogue_id) they come from:
``accuracy_a`` and ``accuracy_b`` are each model's share of pairs with NLL(valid) strictly below
NLL(corrupted); ``difference`` is ``accuracy_a - accuracy_b``. Its interval is the percentile
interval (2.5% and 97.5% quantiles, numpy's linear interpolation) of a paired dialogue-level
bootstrap: each of ``n_boot`` replicates draws m dialogues with replacement (numpy's PCG64 seeded
with ``seed``) and computes (A's hits - B's hits) / pairs over every shared pair of the drawn
dialogues, so both models are always judged on the same pairs. The two-sided p-value is that of
the bootstrap test of "no difference": twice the smaller of the shares of replicates with a
difference <= 0 and >= 0, at most 1. Needs numpy (the `reports` extra).

`dialscore probe compare RUN_DIR --models A B` runs it on a finished probe run: it reads the
run's ``pairs.jsonl``, compares per setting and per setting and category (logical, complete),
prints the table and writes ``compare-A-vs-B.json`` and ``.txt`` into the run folder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from dialscore.probes.corruptions import ALL_TYPES
from dialscore.probes.metrics import ScoredPair
from dialscore.probes.tables import sampling_note
from dialscore.reporting.atomic import atomic_write_text
from dialscore.reporting.rows import write_json
from dialscore.reporting.tables import render_grid

__all__ = ["GroupComparison", "NoSharedPairs", "PairedComparison", "compare_models", "compare_run",
           "format_comparison", "read_run_sampling", "read_scored_pairs", "write_comparison"]

#: :attr:`ScoredPair.probe_key`: (setting, dataset, dialogue_id, explanation_index, corruption).
ProbeKey = tuple[str, str, str, int, str]


class NoSharedPairs(ValueError):
    """The two models have no probe pair in common."""


@dataclass(frozen=True)
class PairedComparison:
    """Model A against model B on the ``n_pairs`` probe pairs both scored, from ``n_dialogues``
    dialogues: each accuracy (share of pairs won by the valid explanation), ``difference`` =
    ``accuracy_a - accuracy_b``, its percentile interval [``ci_low``, ``ci_high``] and the
    two-sided bootstrap p-value (module docstring)."""

    model_a: str
    model_b: str
    n_pairs: int
    n_dialogues: int
    accuracy_a: float
    accuracy_b: float
    difference: float
    ci_low: float
    ci_high: float
    p_value: float


def compare_models(pairs: Sequence[ScoredPair], model_a: str, model_b: str, seed: int = 0,
                   n_boot: int = 2000, level: float = 0.95) -> PairedComparison:
    """Compare `model_a` with `model_b` on the probe pairs both scored (see the module
    docstring). Raises :class:`NoSharedPairs` (a ValueError) when they share no pair, and
    ValueError when one model has two rows for one probe pair or a matched pair's texts differ
    between the models."""
    import numpy as np

    a, b = _rows_by_probe(pairs, model_a), _rows_by_probe(pairs, model_b)
    shared = sorted(set(a) & set(b))
    if not shared:
        raise NoSharedPairs(f"models {model_a!r} and {model_b!r} share no scored pair")
    for k in shared:
        for name in ("valid_text", "corrupted_text"):
            if getattr(a[k], name) != getattr(b[k], name):
                raise ValueError(
                    f"probe pair {_describe(k)} has another {name} for {model_a!r} "
                    f"({getattr(a[k], name)!r}) than for {model_b!r} ({getattr(b[k], name)!r}): "
                    "compare two models of one run (same data and seed)")
    index: dict[tuple[str, str], int] = {}
    for k in shared:
        index.setdefault((a[k].dataset, a[k].dialogue_id), len(index))
    n = np.zeros(len(index))
    hits_a = np.zeros(len(index))
    hits_b = np.zeros(len(index))
    for k in shared:
        c = index[(a[k].dataset, a[k].dialogue_id)]
        n[c] += 1
        hits_a[c] += a[k].correct
        hits_b[c] += b[k].correct
    rng = np.random.Generator(np.random.PCG64(seed))
    draws = rng.integers(0, len(index), size=(n_boot, len(index)))
    diffs = (hits_a[draws].sum(axis=1) - hits_b[draws].sum(axis=1)) / n[draws].sum(axis=1)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(diffs, [alpha, 1.0 - alpha])
    p = min(1.0, 2 * min(float((diffs <= 0).mean()), float((diffs >= 0).mean())))
    acc_a, acc_b = hits_a.sum() / n.sum(), hits_b.sum() / n.sum()
    return PairedComparison(model_a, model_b, len(shared), len(index), float(acc_a), float(acc_b),
                            float(acc_a - acc_b), float(lo), float(hi), p)


def _rows_by_probe(pairs: Sequence[ScoredPair], model: str) -> dict[ProbeKey, ScoredPair]:
    """The rows of `model` by probe key; ValueError when two rows share a key."""
    out: dict[ProbeKey, ScoredPair] = {}
    for p in pairs:
        if p.model != model:
            continue
        if p.probe_key in out:
            raise ValueError(f"model {model!r} has two rows for the probe pair "
                             f"{_describe(p.probe_key)} ({out[p.probe_key].pair_id!r} and "
                             f"{p.pair_id!r})")
        out[p.probe_key] = p
    return out


def _describe(key: ProbeKey) -> str:
    setting, dataset, dialogue, explanation, corruption = key
    return (f"(setting {setting!r}, dataset {dataset!r}, dialogue {dialogue!r}, explanation "
            f"{explanation}, corruption {corruption!r})")


# --- comparing two models of a finished probe run --------------------------------------------

#: What a probe run writes, one scored pair a line (see :mod:`dialscore.probes.report`).
PAIRS_FILE = "pairs.jsonl"
_PAIR_FIELDS = tuple(f.name for f in fields(ScoredPair))
_REQUIRED_FIELDS = tuple(f.name for f in fields(ScoredPair) if f.default is MISSING)


@dataclass(frozen=True)
class GroupComparison:
    """The paired comparison on one group of a run: a setting, with every category ("all") or
    one category (logical, complete)."""

    setting: str
    category: str
    comparison: PairedComparison

    def as_row(self) -> dict[str, object]:
        c = self.comparison
        return {"setting": self.setting, "category": self.category, "n_pairs": c.n_pairs,
                "n_dialogues": c.n_dialogues, "accuracy_a": c.accuracy_a,
                "accuracy_b": c.accuracy_b, "difference": c.difference, "ci_low": c.ci_low,
                "ci_high": c.ci_high, "p_value": c.p_value}


def read_scored_pairs(run_dir: str | Path) -> list[ScoredPair]:
    """The scored pairs of a probe run folder (its ``pairs.jsonl``, one
    :meth:`ScoredPair.to_dict` a line; extra keys such as ``delta`` are ignored, so files of
    every client version read alike). Raises FileNotFoundError naming the file when the folder
    holds no finished run, and ValueError naming the line and the fields when a line is not JSON
    or lacks a field."""
    path = Path(run_dir) / PAIRS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: compare needs the folder of a finished "
                                "`dialscore probe` run (its --out)")
    out: list[ScoredPair] = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {number}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}, line {number}: expected a JSON object")
            missing = [k for k in _REQUIRED_FIELDS if k not in row]
            if missing:
                raise ValueError(f"{path}, line {number}: missing field(s) {', '.join(missing)}")
            out.append(ScoredPair(**{k: row[k] for k in _PAIR_FIELDS if k in row}))
    return out


def compare_run(pairs: Sequence[ScoredPair], model_a: str, model_b: str, seed: int = 0,
                n_boot: int = 2000) -> list[GroupComparison]:
    """`compare_models` per setting (category "all"), then per setting and category, in the
    run's order of settings and categories; a group the two models share no pair in is left
    out. Raises ValueError naming the run's models when either model scored nothing, and the
    errors of :func:`compare_models` other than a group without shared pairs."""
    models = list(dict.fromkeys(p.model for p in pairs))
    for name in (model_a, model_b):
        if name not in models:
            raise ValueError(f"model {name!r} scored no pair in this run; it has "
                             f"{', '.join(models) or 'no model'}")
    out: list[GroupComparison] = []
    for setting in dict.fromkeys(p.setting for p in pairs):
        in_setting = [p for p in pairs if p.setting == setting]
        groups = [("all", in_setting)] + [
            (cat, [p for p in in_setting if p.category == cat])
            for cat in dict.fromkeys(p.category for p in in_setting)]
        for category, group in groups:
            try:
                out.append(GroupComparison(setting, category, compare_models(
                    group, model_a, model_b, seed=seed, n_boot=n_boot)))
            except NoSharedPairs:  # this group only: the other groups are still compared
                continue
    if not out:
        raise NoSharedPairs(f"models {model_a!r} and {model_b!r} share no scored pair")
    return out


def read_run_sampling(run_dir: str | Path) -> str | None:
    """How the run's pairs were sampled (``config.sampling`` of its ``report.json``;
    :data:`~dialscore.probes.corruptions.SAMPLINGS`): ``"all"`` for a report written before the
    option existed (every type was probed then), None without a readable report."""
    try:
        config = json.loads((Path(run_dir) / "report.json").read_text(encoding="utf-8"))["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(config.get("sampling", ALL_TYPES)) if isinstance(config, dict) else None


def format_comparison(groups: Sequence[GroupComparison], model_a: str, model_b: str,
                      n_boot: int, sampling: str | None = None) -> str:
    """The terminal table: accuracies, the difference A - B with its 95% interval, the p-value;
    then how the run sampled its pairs when `sampling` is known."""
    rows = [[g.setting, g.category, str(g.comparison.n_pairs), str(g.comparison.n_dialogues),
             f"{g.comparison.accuracy_a:.3f}", f"{g.comparison.accuracy_b:.3f}",
             f"{g.comparison.difference:+.3f}",
             f"[{g.comparison.ci_low:+.3f}, {g.comparison.ci_high:+.3f}]",
             f"{g.comparison.p_value:.4f}"] for g in groups]
    header = ["setting", "category", "pairs", "dialogues", f"acc {model_a}", f"acc {model_b}",
              "A - B", "95% CI", "p"]
    title = (f"Paired comparison, A = {model_a}, B = {model_b} (dialogue-level bootstrap, "
             f"{n_boot} resamples; p: two-sided test of no difference)")
    table = f"{title}\n{render_grid([header, *rows], header_rows=1, right=set(range(2, 9)))}"
    return table if sampling is None else f"{table}\nrun's {sampling_note(sampling)}"


def comparison_stem(model_a: str, model_b: str) -> str:
    """File name stem of a comparison, e.g. ``compare-dialogpt-medium-vs-bart-base``."""
    safe = [re.sub(r"[^A-Za-z0-9._-]+", "_", m) for m in (model_a, model_b)]
    return f"compare-{safe[0]}-vs-{safe[1]}"


def write_comparison(run_dir: str | Path, groups: Sequence[GroupComparison], model_a: str,
                     model_b: str, seed: int, n_boot: int, table: str,
                     sampling: str | None = None) -> dict[str, Path]:
    """Write ``<stem>.json`` (the settings, the run's `sampling` and one row per group) and
    ``<stem>.txt`` (the table) into the run folder, atomically; returns their paths."""
    out, stem = Path(run_dir), comparison_stem(model_a, model_b)
    doc = {"model_a": model_a, "model_b": model_b, "seed": seed, "n_boot": n_boot, "level": 0.95,
           "sampling": sampling, "difference": "accuracy_a - accuracy_b",
           "groups": [g.as_row() for g in groups]}
    return {"json": write_json(out / f"{stem}.json", doc),
            "table": atomic_write_text(out / f"{stem}.txt", table + "\n")}
