"""The report of a probe run and the files it writes.

Files (:func:`write_outputs`, each through the atomic writer of :mod:`dialscore.reporting`):
``pairs.csv`` and ``pairs.jsonl`` (one row per scored pair, so any figure can be recomputed),
``summary.csv`` (one row per group), ``tables.txt`` (the terminal tables), ``report.json`` (the
run envelope of :mod:`dialscore.reporting.envelope`, whose models carry their format choices,
then the skips, groups and the metrics' definitions), and, when matplotlib is installed,
``corruptions.png`` (per-corruption breakdown, like the paper's Figure 7) and ``models.png``
(model comparison per dataset and category, like Figures 5/6).

The metrics are :mod:`dialscore.probes.metrics`', the tables :mod:`dialscore.probes.tables`' and
the plots :mod:`dialscore.probes.plots`'.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dialscore.probes.corruptions import ALL_TYPES, CATEGORY
from dialscore.probes.metrics import GROUP_COLUMNS, PAIR_COLUMNS, GroupMetrics, ScoredPair
from dialscore.probes.plots import plot_corruptions, plot_models
from dialscore.probes.tables import format_tables, sampling_note
from dialscore.reporting.atomic import remove_stale_temporaries
from dialscore.reporting.envelope import Echo, RunEnvelope, write_run_report
from dialscore.reporting.plots import NO_PLOTS_NOTE, plots_available
from dialscore.reporting.rows import write_csv, write_jsonl

__all__ = ["PLOT_FILES", "Report", "write_outputs"]


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
