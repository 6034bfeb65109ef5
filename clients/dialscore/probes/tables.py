"""The terminal tables of a probe run: per setting, the paper's Table 1/2 layout of
"accuracy / mean ΔNLL" cells, then one row per corruption with its count and 95% CI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dialscore.probes.corruptions import ALL_TYPES, CATEGORY, CORRUPTIONS, ONE_PER_EXPLANATION
from dialscore.probes.metrics import CATEGORIES, GroupMetrics, ordered_datasets
from dialscore.reporting.tables import render_grid

__all__ = ["SETTING_TITLES", "format_tables", "sampling_note"]

SETTING_TITLES = {"inference": "Inference probing: NLL(R | E, H)",
                  "attribution": "Attribution probing: NLL(E | H, R, why)"}


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
