"""MuTual / MuTual-plus response selection against a running service: rank, export, report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dialscore.evals.mutual import (
    LETTERS, MutualInstance, MutualMetrics, Ranking, chance_levels, evaluate_mutual, read_mutual,
    split_speaker, write_ranked,
)
from dialscore.evals.runners.score_store import durable_scorer
from dialscore.evals.runners.selection import first
from dialscore.evals.scorers import ReplyCandidates, file_tag, make_scorer
from dialscore.evals.served import served_models
from dialscore.reporting.envelope import Echo, RunEnvelope, model_provenance, write_run_report
from dialscore.reporting.rows import write_reports
from dialscore.reporting.run_lock import holds_out_dir
from dialscore.reporting.tables import format_table

if TYPE_CHECKING:
    from dialscore.client import AsyncDialscoreClient, DialscoreClient

__all__ = ["MUTUAL_SCORERS", "MutualRun", "arun_mutual", "run_mutual"]

MUTUAL_SCORERS: tuple[str, ...] = ("nll", "rerank")


@dataclass
class MutualRun:
    """What `arun_mutual` computed and wrote; `report` is the report.json written."""

    instances: list[MutualInstance]
    scores: list[list[float]]
    rankings: list[Ranking]
    metrics: MutualMetrics
    rows: list[dict[str, Any]]
    report: dict[str, Any]
    table: str
    files: dict[str, Path] = field(default_factory=dict)


def _jobs(instances: list[MutualInstance]) -> tuple[list[ReplyCandidates], list[tuple[int, list[int]]]]:
    """One job per instance and option speaker marker (first-seen order): the options without
    their marker, said by it; and each job's (instance index, option indices)."""
    jobs, owners = [], []
    for k, inst in enumerate(instances):
        groups: dict[str | None, list[int]] = {}
        for i, option in enumerate(inst.options):
            groups.setdefault(split_speaker(option)[0], []).append(i)
        for speaker, indices in groups.items():
            texts = tuple(split_speaker(inst.options[i])[1] for i in indices)
            jobs.append(ReplyCandidates(inst.context, texts, speaker))
            owners.append((k, indices))
    return jobs, owners


@holds_out_dir
async def arun_mutual(client: AsyncDialscoreClient, path: str | Path, scorer: str = "nll",
                      model: str | None = None, out_dir: str | Path = "runs/eval", *,
                      nll_model: str | None = None, limit: int | None = None, chunk_size: int = 64,
                      progress: bool = True, echo: Echo = None) -> MutualRun:
    """Rank every MuTual instance's options with `scorer` and write the report.

    `scorer` (see :mod:`dialscore.evals.scorers`), the context being the article's turns:
    - "nll": -NLL of each option (its speaker marker removed) under the dialogue model `model`
      (required), in requests of at most `chunk_size` items; the rows add each option's NLL.
    - "rerank": POST /v1/rerank's score of each option, said by the options' speaker (so it is
      checked against that speaker's earlier turns); options with different speaker markers go
      as one request per speaker. `model` names the classifier (default: the service's
      detector); `nll_model` adds a dialogue model's NLL with the service's default weight; the
      rows add each option's P(contradiction).

    `limit` keeps the first instances only. Instances without a gold answer are ranked and
    exported but not scored (`metrics.n_unscored`). The run resumes: scores are kept in
    ``mutual-<scorer>-<models>.scores.jsonl`` in `out_dir` (see
    :mod:`dialscore.evals.runners.score_store`), and a run started again scores only what is
    missing; the folder is locked for the run.
    """
    if scorer not in MUTUAL_SCORERS:
        raise ValueError(f"unknown MuTual scorer {scorer!r}; choose from {', '.join(MUTUAL_SCORERS)}")
    envelope = RunEnvelope.start("mutual", path, client.base_url, scorer=scorer, model=model,
                                 nll_model=nll_model, limit=limit, chunk_size=chunk_size)
    read = read_mutual(path)
    instances = first(read, limit, f"{path}: no MuTual instances to evaluate")
    served = await served_models(client)
    scoring = durable_scorer(
        make_scorer(scorer, served, model=model, nll_model=nll_model, chunk_size=chunk_size),
        served, out_dir, "mutual", model=model, nll_model=nll_model, mode=None)
    jobs, owners = _jobs(instances)
    got = await scoring.score(client, jobs, label="mutual", progress=progress)

    scores = [[math.nan] * len(inst.options) for inst in instances]
    details: list[list[float | None]] = [[None] * len(inst.options) for inst in instances]
    truncated = [False] * len(instances)
    for (k, indices), job_scores in zip(owners, got):
        for i, s in zip(indices, job_scores):
            scores[k][i], details[k][i] = s.value, s.detail
            truncated[k] = truncated[k] or s.truncated
    used = scoring.models_used()

    rankings, metrics = evaluate_mutual(instances, scores)
    rows = []
    n_tied = 0
    for k, (inst, ranking, row_scores) in enumerate(zip(instances, rankings, scores)):
        gold = inst.answer
        tied = gold is not None and sum(s == row_scores[gold] for s in row_scores) > 1
        n_tied += tied
        row: dict[str, Any] = {"id": inst.id, "gold": inst.answer_letter,
                               "ranked": "".join(ranking.letters()), "gold_rank": ranking.gold_rank,
                               "reciprocal_rank": None if gold is None else 1 / ranking.gold_rank,
                               "gold_tied": tied if gold is not None else None}
        row.update({f"score_{LETTERS[i]}": row_scores[i] for i in range(len(inst.options))})
        row.update({f"{scoring.detail_name}_{LETTERS[i]}": details[k][i]
                    for i in range(len(inst.options))})
        rows.append(row)

    out = Path(out_dir)
    stem = f"mutual-{file_tag(scorer, *used)}"
    files = {"ranked": write_ranked(out / f"{stem}.ranked.txt", [i.id for i in instances], rankings)}
    files.update(write_reports(out / stem, rows))
    chance = chance_levels([len(i.options) for i in instances if i.answer is not None])
    summary = {"scorer": scorer, "model": "+".join(u for u in used if u), **metrics.as_row(),
               "gold_tied": n_tied, "chance_R@1": chance["R@1"]}
    table = format_table([summary], title=f"MuTual response selection: {path}")
    if metrics.n_unscored:
        table += (f"\n{metrics.n_unscored} instance(s) without a gold answer were ranked and "
                  "exported, not scored")
    if n_tied:
        table += f"\n{n_tied} gold option(s) tied with another option (ties count against the gold)"
    envelope.models = model_provenance(served, used)
    results = {"instances_read": len(read), "metrics": metrics.as_row(), "chance": chance,
               "gold_tied": n_tied, "instances_truncated": sum(truncated),
               "resume": scoring.resume_summary()}
    files = write_run_report(envelope, results, table=table, table_path=out / f"{stem}.txt",
                             report_path=out / f"{stem}.report.json", files=files, echo=echo)
    return MutualRun(instances, scores, rankings, metrics, rows, envelope.report(results), table,
                     files)


def run_mutual(client: DialscoreClient | str, path: str | Path, scorer: str = "nll",
               model: str | None = None, out_dir: str | Path = "runs/eval", *,
               concurrency: int | None = None, **kwargs: Any) -> MutualRun:
    """`arun_mutual` with a sync client or a URL (see :mod:`dialscore.sync_bridge`)."""
    from dialscore.sync_bridge import run_sync  # httpx: imported when a run starts, not for --help

    return run_sync(client, concurrency, "mutual",
                    lambda ac: arun_mutual(ac, path, scorer, model, out_dir, **kwargs))
