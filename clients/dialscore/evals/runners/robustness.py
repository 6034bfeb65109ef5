"""The ADEM-style robustness battery against a running service: perturb responses, score the
originals and their variants with any scorer, compare."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dialscore.evals.robustness import (
    CATEGORIES, KINDS, SynonymVariant, mean_share, mutual_style, perturb_all, synonym_replacements,
)
from dialscore.evals.robustness_items import ResponseItem, read_response_items
from dialscore.evals.robustness_stats import VariantStats, variant_stats
from dialscore.evals.runners.score_store import durable_scorer
from dialscore.evals.scorers import SCORERS, ReplyCandidates, file_tag, make_scorer
from dialscore.evals.served import served_models
from dialscore.reporting.envelope import Echo, RunEnvelope, model_provenance, write_run_report
from dialscore.reporting.plots import NO_PLOTS_NOTE, plots_available
from dialscore.reporting.rows import write_reports
from dialscore.reporting.run_lock import holds_out_dir
from dialscore.reporting.tables import format_table

if TYPE_CHECKING:
    from dialscore.client import AsyncDialscoreClient, DialscoreClient

__all__ = ["ROBUSTNESS_SCORERS", "RobustnessRun", "arun_robustness", "run_robustness"]

ROBUSTNESS_SCORERS: tuple[str, ...] = SCORERS
STAT_COLUMNS = ["kind", "category", "n", "n_missing", "mean", "std", "within_1sd", "pearson",
                "spearman", "beat_share", "tie_share"]


@dataclass
class RobustnessRun:
    """What `arun_robustness` computed and wrote. `scores[i]` maps "original" and each variant
    kind to the score of item i's response (None: empty variant, not scored); `report` is the
    report.json written."""

    corpus: str
    items: list[ResponseItem]
    variants: dict[str, list[str]]
    scores: list[dict[str, float | None]]
    stats: dict[str, VariantStats]
    rows: list[dict[str, Any]]
    report: dict[str, Any]
    table: str
    files: dict[str, Path] = field(default_factory=dict)
    #: The share of eligible content words the synonym variant replaced (`mean_share`'s keys);
    #: None when the synonym variant was not requested.
    synonym_share: dict[str, Any] | None = None


def synonym_share_note(share: dict[str, Any]) -> str:
    """One line for the report table, e.g. "synonyms: 73.4% of eligible content words replaced
    (mean over 200 responses; 767 of 1043 pooled)"."""
    mean = share["mean_item_share"]
    if mean is None:
        return "synonyms: no eligible content word in any response"
    return (f"synonyms: {100 * mean:.1f}% of eligible content words replaced (mean over "
            f"{share['items_with_eligible']} responses; {share['replaced']} of "
            f"{share['eligible']} pooled)")


def _pair_rows(items: Sequence[ResponseItem], kinds: Sequence[str], variants: dict[str, list[str]],
               scores: Sequence[dict[str, float | None]],
               replaced: Sequence[SynonymVariant] | None = None) -> list[dict[str, Any]]:
    """One row per (response, variant): both texts, both scores and their difference; a synonym
    row also gives the share of the response's eligible content words it replaced
    (`replaced_share`, None on other rows and when no word was eligible)."""
    rows = []
    for k, it in enumerate(items):
        for kind in kinds:
            o, v = scores[k]["original"], scores[k][kind]
            share = replaced[k].share if kind == "synonyms" and replaced is not None else None
            rows.append({"id": it.id, "kind": kind, "category": CATEGORIES[kind],
                         "response": it.response.text, "variant": variants[kind][k],
                         "original_score": o, "variant_score": v,
                         "delta": None if o is None or v is None else v - o,
                         "replaced_share": share})
    return rows


@holds_out_dir
async def arun_robustness(client: AsyncDialscoreClient, path: str | Path, scorer: str = "nll",
                          model: str | None = None, n: int | None = None, seed: int = 0,
                          out_dir: str | Path = "runs/eval", *, kinds: Sequence[str] = KINDS,
                          corpus: str = "auto", nll_model: str | None = None,
                          mode: str = "structured", chunk_size: int = 64, plot: bool = True,
                          progress: bool = True, echo: Echo = None) -> RobustnessRun:
    """Perturb responses with every variant in `kinds`, score originals and variants, compare.

    `path`: MuTual (the gold option of each labelled instance answers its article) or DECODE (the
    last turn answers the earlier ones); `corpus` forces which. `n` picks a seeded sample of the
    responses (default: all); `seed` drives the sample and the random variants. MuTual's generic
    replies are lower-cased and tokenised like the corpus. The variants are made before any
    request: the kinds that need the linguistic backend fail first when the `evals` extra is
    missing.

    `scorer` (see :mod:`dialscore.evals.scorers`), each response and its variants being the
    candidates, said by the response's speaker, in reply to its context:
    - "nll": -NLL under the dialogue model `model`, in requests of at most `chunk_size` items;
    - "contradiction": 1 - P(contradiction) of the context + response dialogue (the response the
      last turn) in `mode`; `model` names the classifier (default: the service's detector);
    - "rerank": the reranker's score, one request per response with the original and its
      distinct variants as the candidates; `model` names the classifier, `nll_model` adds an
      NLL term.
    Empty variants (e.g. a response made only of stopwords) are not scored: they count as
    missing. Without matplotlib no PNG is written and `echo` gets a note instead. The run
    resumes: scores are kept in ``robustness-<scorer>-<models>.scores.jsonl`` in `out_dir` (see
    :mod:`dialscore.evals.runners.score_store`); the folder is locked for the run.
    """
    if scorer not in ROBUSTNESS_SCORERS:
        raise ValueError(f"unknown robustness scorer {scorer!r}; choose from "
                         f"{', '.join(ROBUSTNESS_SCORERS)}")
    kinds = list(kinds)
    envelope = RunEnvelope.start(
        "robustness", path, client.base_url, corpus=corpus, scorer=scorer, model=model,
        nll_model=nll_model, mode=mode if scorer == "contradiction" else None, n=n, seed=seed,
        kinds=kinds, chunk_size=chunk_size, plot=plot)
    corpus_kind, items = read_response_items(path, n=n, seed=seed, corpus=corpus)
    if not items:
        raise ValueError(f"{path}: no responses to perturb (MuTual needs gold answers; DECODE "
                         "dialogues need two turns)")
    variants = perturb_all([it.response.text for it in items], kinds, seed=seed,
                           generic_style=mutual_style if corpus_kind == "mutual" else None)
    share, replaced = None, None
    if "synonyms" in kinds:
        # Recomputed with the same per-item RNG as perturb_all, so the counts are of the very
        # texts scored (checked, since a drift would make the reported share about other text).
        replaced = synonym_replacements([it.response.text for it in items], seed=seed)
        if [r.text for r in replaced] != variants["synonyms"]:
            raise RuntimeError("synonym counts do not match the synonym variants")
        share = mean_share(replaced)
    served = await served_models(client)
    scoring = durable_scorer(
        make_scorer(scorer, served, model=model, nll_model=nll_model, mode=mode,
                    chunk_size=chunk_size),
        served, out_dir, "robustness", model=model, nll_model=nll_model,
        mode=mode if scorer == "contradiction" else None)

    # Per item: the distinct non-empty texts among the original and its variants are the
    # candidates; each key ("original" or a kind) points at its text's candidate.
    jobs, slots = [], []
    for k, it in enumerate(items):
        row = {"original": it.response.text, **{kind: variants[kind][k] for kind in kinds}}
        texts = list(dict.fromkeys(t for t in row.values() if t.strip()))
        jobs.append(ReplyCandidates(it.context, tuple(texts), it.response.speaker, it.response.id))
        slots.append({key: texts.index(t) for key, t in row.items() if t.strip()})
    got = await scoring.score(client, jobs, label="robustness", progress=progress)
    scores: list[dict[str, float | None]] = [
        {key: (got[k][slots[k][key]].value if key in slots[k] else None)
         for key in ("original", *kinds)} for k in range(len(items))]
    used = scoring.models_used()

    original = [s["original"] for s in scores]
    stats = {kind: variant_stats(original, [s[kind] for s in scores], kind) for kind in kinds}
    reference = variant_stats(original, original, "original")
    pair_rows = _pair_rows(items, kinds, variants, scores, replaced)
    stat_rows = [{**reference.as_row(), "category": "reference", "pearson": None,
                  "spearman": None, "beat_share": None, "tie_share": None}]
    stat_rows += [stats[kind].as_row() for kind in kinds]

    out = Path(out_dir)
    stem = f"robustness-{file_tag(scorer, *used)}"
    files = dict(write_reports(out / stem, pair_rows))
    files.update({f"variants_{k}": v for k, v in
                  write_reports(out / f"{stem}-variants", stat_rows).items()})
    model_label = "+".join(u for u in used if u) or "default"
    if plot and plots_available():
        from dialscore.evals.robustness_plot import plot_variants

        title = f"{scorer} scorer ({model_label}) on {len(items)} {corpus_kind} responses"
        if share is not None and share["mean_item_share"] is not None:
            title += f"; synonyms replaced {100 * share['mean_item_share']:.0f}% of content words"
        files["plot"] = plot_variants(stats, reference, title, out / f"{stem}.png")
    elif plot and echo is not None:
        echo(NO_PLOTS_NOTE)
    table = format_table(stat_rows, STAT_COLUMNS,
                         title=f"Robustness battery: {scorer} scorer ({model_label}), "
                               f"{len(items)} {corpus_kind} responses from {path}")
    if share is not None:
        table = f"{table}\n{synonym_share_note(share)}"
    envelope.models = model_provenance(served, used)
    results = {"corpus": corpus_kind, "n_items": len(items), "kinds": kinds,
               "original": reference, "variants": stats, "synonym_share": share,
               "resume": scoring.resume_summary()}
    files = write_run_report(envelope, results, table=table, table_path=out / f"{stem}.txt",
                             report_path=out / f"{stem}.report.json", files=files, echo=echo)
    return RobustnessRun(corpus_kind, items, variants, scores, stats, pair_rows,
                         envelope.report(results), table, files, share)


def run_robustness(client: DialscoreClient | str, path: str | Path, scorer: str = "nll",
                   model: str | None = None, n: int | None = None, seed: int = 0,
                   out_dir: str | Path = "runs/eval", *, concurrency: int | None = None,
                   **kwargs: Any) -> RobustnessRun:
    """`arun_robustness` with a sync client or a URL (see :mod:`dialscore.sync_bridge`)."""
    from dialscore.sync_bridge import run_sync  # httpx: imported when a run starts, not for --help

    return run_sync(client, concurrency, "robustness",
                    lambda ac: arun_robustness(ac, path, scorer, model, n, seed, out_dir, **kwargs))
