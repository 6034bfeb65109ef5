"""Metrics, tables, files and plots of a probe run.

Metrics (spec section 2), per group of scored pairs:

* **accuracy**: the share of pairs where the valid explanation's NLL is *strictly* lower than the
  corrupted one's (a tie is a miss); chance is 0.5.
* **mean ΔNLL**: the mean of ``NLL(corrupted) - NLL(valid)``; positive means the model prefers
  the valid explanation.
* **95% CI of the accuracy**: percentile bootstrap that resamples *dialogues* (with
  replacement, ``n_boot`` times, default 1000; a dialogue is (dataset, dialogue_id)) and takes
  every pair of each drawn dialogue, from a generator seeded with the run's seed and the group's
  key, so a report is reproducible. Pairs are not independent (the pairs of one explanation share
  its NLL, the explanations of one dialogue share its history), so resampling pairs would give
  intervals 1.2-1.4 times too narrow. :mod:`dialscore.probes.compare` compares two models on the
  same pairs with the same dialogue-level bootstrap.

Groups: model x setting x dataset x category, and model x setting x dataset x corruption, each
also with ``dataset == "all"`` (every dataset pooled). A category group has
``corruption == "all"``.

Files (:func:`write_outputs`, each through the atomic writer of :mod:`dialscore.reporting`):
``pairs.csv`` and ``pairs.jsonl`` (one row per scored pair, so any figure can be recomputed),
``summary.csv`` (one row per group), ``tables.txt`` (the terminal tables), ``report.json`` (the
run envelope of :mod:`dialscore.reporting.envelope`, whose models carry their format choices,
then the skips, groups and the metrics' definitions), and, when matplotlib is installed,
``corruptions.png`` (per-corruption breakdown, like the paper's Figure 7) and ``models.png``
(model comparison per dataset and category, like Figures 5/6).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from dialscore.probes.corruptions import ALL_TYPES, CATEGORY, CORRUPTIONS, ONE_PER_EXPLANATION
from dialscore.reporting.atomic import remove_stale_temporaries
from dialscore.reporting.envelope import Echo, RunEnvelope, write_run_report
from dialscore.reporting.plots import NO_PLOTS_NOTE, new_figure, plots_available, save_png
from dialscore.reporting.rows import write_csv, write_jsonl
from dialscore.reporting.tables import render_grid

__all__ = ["PAPER_DATASETS", "GroupMetrics", "Report", "ScoredPair", "accuracy", "bootstrap_ci",
           "cluster_bootstrap_ci",
           "format_tables", "mean_delta", "plot_corruptions", "plot_models", "sampling_note",
           "summarize", "write_outputs"]

PAPER_DATASETS: tuple[str, ...] = ("DailyDialog", "EmpatheticDialogues", "MuTual", "SocialIQA")
CATEGORIES: tuple[str, ...] = ("logical", "complete")
SETTING_TITLES = {"inference": "Inference probing: NLL(R | E, H)",
                  "attribution": "Attribution probing: NLL(E | H, R, why)"}


@dataclass(frozen=True)
class ScoredPair:
    """A valid explanation and a corruption of it, both scored by one model in one setting.

    ``pair_id`` names the row within its run (``model|setting|dialogue_id|e<index>|corruption``,
    so it differs between models); :attr:`probe_key` names the probe pair itself, the same for
    every model that scored it."""

    pair_id: str
    model: str
    setting: str
    dataset: str
    dialogue_id: str
    explanation_index: int
    dimension: str
    corruption: str
    category: str
    valid_text: str
    corrupted_text: str
    nll_valid: float
    nll_corrupted: float
    #: True when the source of either item was shortened from the left to fit the model's window
    #: (whole oldest turns dropped, or tokens cut: the model format's `truncation`).
    truncated: bool = False
    #: The ids of the two scored items in the run's ``scores.jsonl`` (its dialogue, target and,
    #: when kept, per-token NLLs; the HTML report's drill-down reads them); "" when unknown.
    valid_item: str = ""
    corrupted_item: str = ""

    @property
    def probe_key(self) -> tuple[str, str, str, int, str]:
        """What identifies the probe pair whatever model scored it: ``(setting, dataset,
        dialogue_id, explanation_index, corruption)``. Two models' rows with the same key
        compare the same valid explanation with the same corruption type in the same setting."""
        return (self.setting, self.dataset, self.dialogue_id, self.explanation_index,
                self.corruption)

    @property
    def delta(self) -> float:
        """NLL(corrupted) - NLL(valid): positive when the model prefers the valid explanation."""
        return self.nll_corrupted - self.nll_valid

    @property
    def correct(self) -> bool:
        """The valid explanation got strictly lower NLL (ties are misses)."""
        return self.nll_valid < self.nll_corrupted

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "delta": self.delta, "correct": self.correct}


PAIR_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ScoredPair)) + ("delta", "correct")


def accuracy(pairs: Sequence[ScoredPair]) -> float | None:
    """Share of pairs with the valid NLL strictly lower; None for no pairs."""
    return sum(p.correct for p in pairs) / len(pairs) if pairs else None


def mean_delta(pairs: Sequence[ScoredPair]) -> float | None:
    """Mean of NLL(corrupted) - NLL(valid); None for no pairs."""
    return sum(p.delta for p in pairs) / len(pairs) if pairs else None


def _group_seed(seed: int, key: Sequence[str]) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps([seed, *key]).encode()).digest()[:8], "big")


def cluster_bootstrap_ci(outcomes: Sequence[bool], clusters: Sequence[Any], seed: int,
                         n_boot: int = 1000, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the pooled mean of 0/1 outcomes, resampling whole
    clusters (e.g. dialogues) with replacement: each replicate draws as many clusters as there
    are and takes the share of successes among all their outcomes. None for no outcomes. Needs
    numpy (the `reports` extra)."""
    if len(outcomes) != len(clusters):
        raise ValueError(f"{len(outcomes)} outcomes but {len(clusters)} cluster labels")
    if not outcomes:
        return None
    import numpy as np

    index: dict[Any, int] = {}
    for c in clusters:
        index.setdefault(c, len(index))
    sizes = np.zeros(len(index))
    hits = np.zeros(len(index))
    for o, c in zip(outcomes, clusters):
        sizes[index[c]] += 1
        hits[index[c]] += bool(o)
    rng = np.random.Generator(np.random.PCG64(seed))
    draws = rng.integers(0, len(index), size=(n_boot, len(index)))
    means = hits[draws].sum(axis=1) / sizes[draws].sum(axis=1)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def bootstrap_ci(outcomes: Sequence[bool], seed: int, n_boot: int = 1000,
                 level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of 0/1 outcomes treated as independent (the
    pair-level interval; reports use :func:`cluster_bootstrap_ci`); None for no outcomes.

    Resampling n outcomes with replacement and counting successes is a Binomial(n, k/n) draw, so
    that is what is drawn (the same distribution, without materialising the resamples). Needs
    numpy (the `reports` extra)."""
    n = len(outcomes)
    if n == 0:
        return None
    import numpy as np

    k = sum(bool(o) for o in outcomes)
    rng = np.random.Generator(np.random.PCG64(seed))
    means = rng.binomial(n, k / n, size=n_boot) / n
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


@dataclass(frozen=True)
class GroupMetrics:
    model: str
    setting: str
    dataset: str          # a dataset name, or "all"
    category: str         # logical | complete
    corruption: str       # a corruption type, or "all" for a category group
    n: int
    correct: int
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    mean_delta: float | None
    ties: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


GROUP_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(GroupMetrics))


def _metrics(key: tuple[str, str, str, str, str], pairs: Sequence[ScoredPair], seed: int,
             n_boot: int) -> GroupMetrics:
    ci = cluster_bootstrap_ci([p.correct for p in pairs], [(p.dataset, p.dialogue_id) for p in pairs],
                              _group_seed(seed, key), n_boot)
    return GroupMetrics(*key, n=len(pairs), correct=sum(p.correct for p in pairs),
                        accuracy=accuracy(pairs), ci_low=ci[0] if ci else None,
                        ci_high=ci[1] if ci else None, mean_delta=mean_delta(pairs),
                        ties=sum(p.nll_valid == p.nll_corrupted for p in pairs))


def summarize(pairs: Iterable[ScoredPair], seed: int = 0, n_boot: int = 1000) -> list[GroupMetrics]:
    """Metrics per model x setting x (dataset | all) x (category | corruption), sorted."""
    buckets: dict[tuple[str, str, str, str, str], list[ScoredPair]] = defaultdict(list)
    for p in pairs:
        for dataset in (p.dataset, "all"):
            buckets[(p.model, p.setting, dataset, p.category, "all")].append(p)
            buckets[(p.model, p.setting, dataset, p.category, p.corruption)].append(p)
    return [_metrics(key, buckets[key], seed, n_boot) for key in sorted(buckets, key=_group_order)]


def _dataset_order(name: str) -> tuple[int, str]:
    if name == "all":
        return (2, "")
    return (0, f"{PAPER_DATASETS.index(name):02d}") if name in PAPER_DATASETS else (1, name)


def _group_order(key: tuple[str, str, str, str, str]) -> tuple:
    model, setting, dataset, category, corruption = key
    return (setting != "inference", setting, model, _dataset_order(dataset),
            CATEGORIES.index(category) if category in CATEGORIES else 9,
            -1 if corruption == "all" else CORRUPTIONS.index(corruption))


def ordered_datasets(names: Iterable[str]) -> list[str]:
    return sorted(set(names) - {"all"}, key=_dataset_order)


# ----------------------------------------------------------------------------------- Report

@dataclass(kw_only=True)
class Report(RunEnvelope):
    """The outcome of a probe run: its envelope (configuration, models, timings, files), the
    scored pairs, their metrics, and the skips.

    ``models`` maps each model name to its provenance as the server reported it (source,
    revision, stand_in, ...) plus ``format_choices``, the format choices used
    (``explanation_placement``, ``why_turn``, ``reported_by_server``). ``skipped`` lists the
    corruptions that could not be made, with counts. ``config`` also counts what the run sent
    and reused (``items``, ``items_reused``, ``items_scored_now``, ...).
    """

    run: str = "probe"
    pairs: list[ScoredPair]
    groups: list[GroupMetrics]
    skipped: list[dict[str, Any]] = field(default_factory=list)
    out_dir: Path | None = None

    @classmethod
    def of_run(cls, envelope: RunEnvelope, **results: Any) -> Report:
        """The report of the run that `envelope` opened (its start time and clock kept)."""
        return cls(**{f.name: getattr(envelope, f.name) for f in fields(RunEnvelope)}, **results)

    def metrics(self, model: str, setting: str, *, dataset: str = "all", category: str | None = None,
                corruption: str = "all") -> GroupMetrics:
        """One group's metrics, e.g. ``report.metrics("m", "attribution", category="complete")``.
        Give a ``corruption`` or a ``category`` (a corruption implies its category)."""
        if corruption != "all":
            category = CATEGORY[corruption]
        if category is None:
            raise ValueError("give a category (logical, complete) or a corruption")
        for g in self.groups:
            if (g.model, g.setting, g.dataset, g.category, g.corruption) == (
                    model, setting, dataset, category, corruption):
                return g
        raise KeyError(f"no pairs for {model}/{setting}/{dataset}/{category}/{corruption}")

    def table(self) -> str:
        """The terminal tables (paper Table 1/2 layout, then per corruption)."""
        return format_tables(self.groups, self.models, self.skipped,
                             sampling=self.config.get("sampling", ALL_TYPES),
                             seed=self.config.get("seed"))

    def results(self) -> dict[str, Any]:
        """What report.json holds after the envelope: skips, groups, the metrics' definitions."""
        return {"skipped": self.skipped, "groups": [g.to_dict() for g in self.groups],
                "sampling": sampling_note(self.config.get("sampling", ALL_TYPES),
                                          self.config.get("seed")),
                "metrics": {"accuracy": "share of pairs with NLL(valid) < NLL(corrupted); ties are misses",
                            "mean_delta": "mean of NLL(corrupted) - NLL(valid)",
                            "ci": "95% percentile bootstrap of the accuracy, resampling dialogues",
                            "n_boot": self.config.get("n_boot")}}


# ----------------------------------------------------------------------------------- tables

def _cell(g: GroupMetrics | None) -> str:
    if g is None or g.accuracy is None:
        return "-"
    return f"{g.accuracy:.2f} / {g.mean_delta:+.2f}"


def _format_note(models: Mapping[str, Mapping[str, Any]], setting: str) -> str:
    notes = []
    for name, info in models.items():
        fmt = info.get("format_choices", {})
        assumed = "" if fmt.get("reported_by_server", True) else " [format not reported: default]"
        if setting == "inference":
            notes.append(f"{name}: explanation {fmt.get('explanation_placement', '?').replace('_', ' ')}"
                         f"{assumed}")
        else:
            notes.append(f"{name}: why turn {fmt.get('why_turn', '?')!r}{assumed}")
    return "; ".join(notes)


def sampling_note(sampling: str, seed: int | None = None) -> str:
    """One line saying how a run's pairs were sampled (:data:`~dialscore.probes.corruptions.SAMPLINGS`)
    and, for a draw, with which seed (left out when None)."""
    if sampling == ONE_PER_EXPLANATION:
        seeded = "" if seed is None else f"; seed {seed}"
        return ("pairs: one corruption per valid explanation, its type drawn uniformly among the "
                f"types the explanation allows (CEDAR's protocol{seeded})")
    if sampling == ALL_TYPES:
        return ("pairs: every corruption type of each valid explanation (the default; CEDAR "
                "draws one type per explanation: --sampling one-per-explanation)")
    return f"pairs: sampling {sampling!r}"


def format_tables(groups: Sequence[GroupMetrics], models: Mapping[str, Mapping[str, Any]] | None = None,
                  skipped: Sequence[Mapping[str, Any]] = (), *, sampling: str = ALL_TYPES,
                  seed: int | None = None) -> str:
    """Plain-text tables: per setting, models x (category, then dataset) with "accuracy / ΔNLL"
    cells (the paper's Table 1/2 nesting), the pooled "all datasets" columns last, then a long
    table per corruption with counts and 95% CIs; then a line naming the `sampling` of the pairs
    and one listing the corruptions that could not be made."""
    models = models or {}
    index = {(g.model, g.setting, g.dataset, g.category, g.corruption): g for g in groups}
    out: list[str] = []
    stand_ins = sorted(n for n, m in models.items() if m.get("stand_in"))
    if stand_ins:
        out.append(f"NOTE: STAND-IN models with random weights: {', '.join(stand_ins)}. Expect "
                   "chance-level accuracy (about 0.5) and ΔNLL near 0 from them: their numbers show "
                   "the pipeline working, not a model's commonsense.\n")
    settings = sorted({g.setting for g in groups}, key=lambda s: (s != "inference", s))
    for setting in settings:
        names = sorted({g.model for g in groups if g.setting == setting})
        datasets = ordered_datasets(g.dataset for g in groups if g.setting == setting)
        out.append(f"{SETTING_TITLES.get(setting, setting)} -- accuracy / mean ΔNLL")
        note = _format_note({n: models[n] for n in names if n in models}, setting)
        if note:
            out.append(f"({note})")
        # The paper's nesting: category, then dataset; the pooled columns come last, as an extra.
        columns = [(cat, ds, cat if i == 0 else "", ds) for cat in CATEGORIES
                   for i, ds in enumerate(datasets)]
        columns += [(cat, "all", "pooled (all datasets)" if i == 0 else "", cat)
                    for i, cat in enumerate(CATEGORIES)]
        top, sub, counts = ["model"], [""], ["(pairs)"]
        body = []
        for cat, ds, head, subhead in columns:
            top.append(head)
            sub.append(subhead)
            ns = {index[k].n for k in index if k[1:] == (setting, ds, cat, "all")}
            counts.append(("n=" + str(ns.pop()) if len(ns) == 1 else "n varies") if ns else "-")
        for name in names:
            body.append([name] + [_cell(index.get((name, setting, ds, cat, "all")))
                                  for cat, ds, _, _ in columns])
        out.append(render_grid([top, sub] + body + [counts], header_rows=2))
        out.append("")
        out.append(f"{SETTING_TITLES.get(setting, setting)} -- per corruption, all datasets")
        rows = [["model", "corruption", "category", "n", "accuracy", "95% CI", "mean ΔNLL", "ties"]]
        for name in names:
            for c in CORRUPTIONS:
                g = index.get((name, setting, "all", CATEGORY[c], c))
                if g is None or g.accuracy is None:
                    continue
                rows.append([name, c, g.category, str(g.n), f"{g.accuracy:.3f}",
                             f"[{g.ci_low:.2f}, {g.ci_high:.2f}]", f"{g.mean_delta:+.3f}", str(g.ties)])
        out.append(render_grid(rows, header_rows=1, right={3, 4, 6, 7}))
        out.append("")
    if groups:
        out.append(sampling_note(sampling, seed))
    if skipped:
        head = ("Corruption types left out of an explanation's draw (no material)"
                if sampling == ONE_PER_EXPLANATION else "Skipped corruptions (no material; not scored)")
        out.append(f"{head}: " + "; ".join(
            f"{s['corruption']}: {s['reason']} x{s['count']}" for s in skipped))
    return "\n".join(out).rstrip() + "\n"


# ----------------------------------------------------------------------------------- files

PLOT_FILES = {"corruptions_png": "corruptions.png", "models_png": "models.png"}


def write_outputs(report: Report, out_dir: str | Path, *, plots: bool = True,
                  echo: Echo = None) -> dict[str, str]:
    """Write the report's files into ``out_dir`` (see the module docstring), report.json last,
    and echo the tables; returns ``{kind: path}``. Temporary files that a killed earlier write
    left for any of these names are removed first."""
    out = Path(out_dir)
    files = {"pairs_csv": out / "pairs.csv", "pairs_jsonl": out / "pairs.jsonl",
             "summary_csv": out / "summary.csv"}
    tables, report_json = out / "tables.txt", out / "report.json"
    remove_stale_temporaries(out, [p.name for p in [*files.values(), tables, report_json]]
                             + list(PLOT_FILES.values()))
    pair_rows = [p.to_dict() for p in report.pairs]
    write_csv(files["pairs_csv"], pair_rows, PAIR_COLUMNS)
    write_jsonl(files["pairs_jsonl"], pair_rows)
    write_csv(files["summary_csv"], [g.to_dict() for g in report.groups], GROUP_COLUMNS)
    if plots and report.pairs:
        if plots_available():
            files.update({kind: out / name for kind, name in PLOT_FILES.items()})
            plot_corruptions(report.groups, files["corruptions_png"], report.models)
            plot_models(report.groups, files["models_png"], report.models)
        elif echo is not None:
            echo(NO_PLOTS_NOTE)
    report.out_dir = out
    write_run_report(report, report.results(), table=report.table(), table_path=tables,
                     report_path=report_json, files=files, echo=echo)
    return report.files


# ----------------------------------------------------------------------------------- plots

def _bars(ax, labels: Sequence[str], series: Mapping[str, Sequence[GroupMetrics | None]],
          title: str) -> None:
    """Grouped accuracy bars with 95% CI whiskers and the chance line."""
    n_series = max(1, len(series))
    width = 0.8 / n_series
    x = range(len(labels))
    for k, (name, gs) in enumerate(series.items()):
        acc = [g.accuracy if g and g.accuracy is not None else math.nan for g in gs]
        lo = [a - g.ci_low if g and g.ci_low is not None else 0.0 for a, g in zip(acc, gs)]
        hi = [g.ci_high - a if g and g.ci_high is not None else 0.0 for a, g in zip(acc, gs)]
        ax.bar([xi - 0.4 + width * (k + 0.5) for xi in x], acc, width, yerr=[lo, hi], capsize=2,
               label=name)
    ax.axhline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy")
    ax.set_title(title, fontsize=10)


def _figure(n_rows: int, n_cols: int):
    fig = new_figure(4.2 * n_cols + 1, 3.2 * n_rows + 0.6)
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    return fig, axes


def _label(name: str, models: Mapping[str, Mapping[str, Any]] | None) -> str:
    return f"{name} (stand-in)" if models and models.get(name, {}).get("stand_in") else name


def plot_corruptions(groups: Sequence[GroupMetrics], path: str | Path,
                     models: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Per-corruption accuracy (all datasets), one panel per setting, one bar per model
    (like the paper's Figure 7)."""
    index = {(g.model, g.setting, g.dataset, g.corruption): g for g in groups}
    settings = sorted({g.setting for g in groups}, key=lambda s: (s != "inference", s))
    fig, axes = _figure(1, len(settings))
    for ax, setting in zip(axes[0], settings):
        names = sorted({g.model for g in groups if g.setting == setting})
        series = {_label(n, models): [index.get((n, setting, "all", c)) for c in CORRUPTIONS]
                  for n in names}
        _bars(ax, [f"{c}\n({CATEGORY[c]})" for c in CORRUPTIONS], series, f"{setting}: by corruption")
    axes[0][0].legend(fontsize=7)
    save_png(fig, path)


def plot_models(groups: Sequence[GroupMetrics], path: str | Path,
                models: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Model comparison: accuracy per dataset, one panel per setting x category
    (like the paper's Figures 5/6)."""
    index = {(g.model, g.setting, g.dataset, g.category, g.corruption): g for g in groups}
    settings = sorted({g.setting for g in groups}, key=lambda s: (s != "inference", s))
    datasets = ordered_datasets(g.dataset for g in groups) + ["all"]
    fig, axes = _figure(len(settings), len(CATEGORIES))
    for r, setting in enumerate(settings):
        names = sorted({g.model for g in groups if g.setting == setting})
        for c, cat in enumerate(CATEGORIES):
            series = {_label(n, models): [index.get((n, setting, ds, cat, "all")) for ds in datasets]
                      for n in names}
            _bars(axes[r][c], datasets, series, f"{setting}, {cat} corruptions")
    axes[0][0].legend(fontsize=7)
    save_png(fig, path)

