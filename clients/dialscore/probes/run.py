"""The CEDAR probe runner: build every item, score it over HTTP, compare, report.

The pairs and the items they need are :mod:`dialscore.probes.plan`'s (:func:`plan_probes`:
every pair of every model and setting, identical items kept once under a stable id). The items
are scored in chunks of at most ``chunk_size`` items (lowered to the deployment's published
``max_items``) sent concurrently by the client, with a progress bar when tqdm is installed.

**Resume.** Each scored item is appended to ``<out>/scores.jsonl`` as soon as its chunk returns
(one write per chunk, flushed and fsynced), under its item id
(:func:`~dialscore.probes.plan.item_id`). A re-run with the same inputs reads the file and
sends only the items it lacks, so a run that dies halfway resumes instead of restarting; a
server whose model changed (another revision or format) gets its items scored afresh. A torn
last line (a crash mid-write), or a line that parses but is not a valid row (``"nll": null``), is
ignored and its items re-scored. The output folder is locked for the run
(:class:`~dialscore.reporting.run_lock.RunLock`): a second run on it fails at once.

**As a batch job.** :func:`awrite_probe_batch` writes the items still to score as `dialscore
batch` input lines (:mod:`dialscore.batch_file`) instead of sending them; the job (the server's
command, on Ray Data) scores them with the service's engines; :func:`arun_probes` with
``batch_output=`` then takes each chunk's scores from the job's output file and finishes the run
as usual. The service is still asked for its model cards (``GET /v1/models``), which decide the
item ids and formats.

Entry points: :func:`arun_probes` (an async client), the one implementation, and
:func:`run_probes` (a sync client or a URL), which runs it to completion
(:mod:`dialscore.sync_bridge`); both return a :class:`~dialscore.probes.report.Report` whose
files are written into ``out_dir``.
"""

from __future__ import annotations

import difflib
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dialscore.batch_file import BatchAnswers, BatchRecorder
from dialscore.client import AsyncDialscoreClient, DialscoreClient
from dialscore.sync_bridge import run_sync
from dialscore.extras import REPORTS, require
from dialscore.model_card import ModelCard
from dialscore.probes.corruptions import ALL_TYPES, CORRUPTIONS
from dialscore.probes.data import Dialogue, load_dialogues
from dialscore.probes.metrics import ScoredPair, summarize
from dialscore.probes.plan import SETTINGS, ProbeItem, ProbePlan, format_choices, plan_probes
from dialscore.probes.report import Report, write_outputs
from dialscore.reporting.envelope import Echo, RunEnvelope
from dialscore.reporting.resume_store import ResumeStore
from dialscore.reporting.progress import Bar, NoBar, progress_bar
from dialscore.reporting.run_lock import RunLock
from dialscore.types import NLLResult

__all__ = ["SCORES_FILE", "ScoreStore", "arun_probes", "awrite_probe_batch", "run_probes",
           "write_probe_batch"]

SCORES_FILE = "scores.jsonl"


class ScoreStore(ResumeStore):
    """A probe run's resume store, ``<out>/scores.jsonl``
    (:class:`~dialscore.reporting.resume_store.ResumeStore`): one row per scored item under its
    ``"id"``, which hashes the model's provenance, so no settings are kept. A row is usable with a
    finite number ``nll`` (not a boolean) and an integer ``num_tokens`` of at least 1."""

    def __init__(self, path: str | Path):
        super().__init__(path, key="id", valid=_valid_score)


def _valid_score(row: dict[str, Any]) -> bool:
    nll, n = row.get("nll"), row.get("num_tokens")
    if isinstance(nll, bool) or not isinstance(nll, (int, float)) or not math.isfinite(nll):
        return False
    return not isinstance(n, bool) and isinstance(n, int) and n >= 1


def _score_row(item: ProbeItem, result: NLLResult) -> dict[str, Any]:
    row = {"id": item.id, "model": item.model, "setting": item.setting, "nll": result.nll,
           "num_tokens": result.num_tokens, "truncated": result.truncated,
           "context": list(item.context), "knowledge": item.knowledge, "target": item.target}
    if result.tokens is not None and result.token_nlls is not None:
        row["tokens"], row["token_nlls"] = result.tokens, result.token_nlls
    return row


def _resolve_models(available: Sequence[ModelCard], wanted: Sequence[str] | str | None) -> list[ModelCard]:
    by_name = {m.name: m for m in available}
    if wanted is None:
        chosen = [m for m in available if m.family != "classifier"]
        if not chosen:
            raise ValueError("the server serves no dialogue model (only classifiers)")
        return chosen
    names = [n.strip() for n in wanted.split(",")] if isinstance(wanted, str) else list(wanted)
    out = []
    for name in names:
        if name not in by_name:
            close = difflib.get_close_matches(name, list(by_name), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"model {name!r} is not served{hint} (served: {', '.join(by_name)})")
        if by_name[name].family == "classifier":
            raise ValueError(f"model {name!r} is an NLI classifier; probes need a dialogue model")
        out.append(by_name[name])
    return out


@dataclass
class _Run:
    """One probe run's state: what to score, what is stored, where it goes."""

    dialogues: list[Dialogue]
    models: list[ModelCard]
    plan: ProbePlan
    store: ScoreStore
    envelope: RunEnvelope
    out_dir: Path
    progress: bool
    bar: Bar = field(default_factory=NoBar)
    lock: RunLock | None = None

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    @property
    def config(self) -> dict[str, Any]:
        return self.envelope.config

    @property
    def scores(self) -> dict[str, dict[str, Any]]:
        """Every usable stored row by item id: those read at the start and those appended since."""
        return self.store.rows

    def pending(self, model: str) -> list[ProbeItem]:
        return [item for _, item in self.store.missing((i.id, i) for i in self.plan.items_of(model))]

    def open_bar(self) -> None:
        total = sum(len(self.pending(m.name)) for m in self.models)
        self.config["items_reused"] = len(self.plan.items) - total
        self.config["items_scored_now"] = total
        self.bar = progress_bar(total, "scoring", self.progress)

    def on_chunk(self, pending: list[ProbeItem]) -> Callable[[int, list[NLLResult]], None]:
        def save(offset: int, results: list[NLLResult]) -> None:
            rows = [_score_row(item, res) for item, res in zip(pending[offset:], results)]
            self.store.append(rows)
            self.bar.update(len(rows))
        return save

    def close_bar(self) -> None:
        self.bar.close()
        self.bar = NoBar()


def _prepare(data: str | Path | Sequence[Dialogue], available: Sequence[ModelCard],
             models: Sequence[str] | str | None, settings: Sequence[str] | str, seed: int,
             out_dir: str | Path, corruptions: Sequence[str], sampling: str, chunk_size: int,
             n_boot: int, base_url: str, progress: bool, tokens: bool = True) -> _Run:
    if isinstance(settings, str):
        settings = [s.strip() for s in settings.split(",") if s.strip()]
    path = data if isinstance(data, (str, Path)) else None
    dialogues = load_dialogues(path) if path is not None else list(data)
    chosen = _resolve_models(available, models)
    plan = plan_probes(dialogues, chosen, settings, seed, corruptions, sampling)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lock = RunLock(out).acquire()  # released by _Run.release (or when the process ends)
    store = ScoreStore(out / SCORES_FILE)
    store.load()
    envelope = RunEnvelope.start(
        "probe", path, base_url, models=[m.name for m in chosen], settings=list(settings),
        seed=seed, corruptions=list(corruptions), sampling=sampling, chunk_size=chunk_size,
        n_boot=n_boot, tokens=tokens,
        n_dialogues=len(dialogues),
        dialogues_per_dataset=dict(sorted(Counter(d.dataset for d in dialogues).items())),
        pairs=len(plan.pairs), items=len(plan.items), items_before_dedup=plan.n_item_refs,
        torn_score_lines_ignored=store.invalid)
    return _Run(dialogues, chosen, plan, store, envelope, out, progress, lock=lock)


def _require_reports() -> None:
    """Stop before any request when numpy is missing: the report's confidence intervals need it
    (without tqdm the run shows no progress bar; without matplotlib it writes no PNG)."""
    require(("numpy",), REPORTS, "the probe report's bootstrap confidence intervals")


def _finish(run: _Run, n_boot: int, plots: bool, echo: Echo) -> Report:
    run.close_bar()
    pairs: list[ScoredPair] = []
    for pp in run.plan.pairs:
        v, c = run.scores[pp.valid_id], run.scores[pp.corrupted_id]
        p = pp.pair
        pairs.append(ScoredPair(
            pair_id=pp.pair_id, model=pp.model, setting=pp.setting, dataset=p.dataset,
            dialogue_id=p.dialogue_id, explanation_index=p.explanation_index, dimension=p.dimension,
            corruption=p.corruption, category=p.category, valid_text=p.valid_text,
            corrupted_text=p.corrupted_text, nll_valid=float(v["nll"]), nll_corrupted=float(c["nll"]),
            truncated=bool(v.get("truncated")) or bool(c.get("truncated")),
            valid_item=pp.valid_id, corrupted_item=pp.corrupted_id))
    seed = int(run.config["seed"])
    run.config["truncated_pairs"] = sum(p.truncated for p in pairs)
    run.envelope.models = {m.name: {**m.provenance(), "format_choices": format_choices(m)}
                           for m in run.models}
    report = Report.of_run(run.envelope, pairs=pairs,
                           groups=summarize(pairs, seed=seed, n_boot=n_boot),
                           skipped=run.plan.corruptions.skipped_rows())
    write_outputs(report, run.out_dir, plots=plots, echo=echo)
    return report


async def arun_probes(client: AsyncDialscoreClient, data_path: str | Path | Sequence[Dialogue],
                      models: Sequence[str] | str | None = None,
                      settings: Sequence[str] | str = SETTINGS, seed: int = 0,
                      out_dir: str | Path = "runs/probe", *, chunk_size: int = 64,
                      corruptions: Sequence[str] = CORRUPTIONS, sampling: str = ALL_TYPES,
                      n_boot: int = 1000,
                      plots: bool = True, progress: bool = True, tokens: bool = True,
                      echo: Echo = None, batch_output: str | Path | None = None) -> Report:
    """Run the CEDAR probes against a served model set and write the report into ``out_dir``.

    ``data_path``: a JSON Lines file (:mod:`dialscore.probes.data`) or loaded dialogues.
    ``models``: names (or a comma-separated string); None = every dialogue model the server
    serves. ``settings``: ``inference`` and/or ``attribution``. ``sampling``: ``"all"``
    (every corruption type of each valid explanation) or ``"one-per-explanation"`` (CEDAR's
    seeded draw; :mod:`dialscore.probes.corruptions`), recorded as ``config.sampling`` in
    report.json and stated in the tables. Items already in
    ``out_dir/scores.jsonl`` are not sent again. ``echo`` (e.g. ``print``) receives the tables.
    ``tokens`` (default True) asks /v1/nll for each item's tokens and per-token NLLs and keeps
    them in ``scores.jsonl`` for the HTML report's heat maps: the server computes them anyway,
    and the targets are single turns or explanations, so it costs a larger response and store
    (about 3x), not model time. Rows resumed from a run without them stay without them.

    ``batch_output``: take the scores from the output file of a `dialscore batch` job run on the
    file :func:`awrite_probe_batch` wrote with the same arguments, instead of sending requests
    (:class:`~dialscore.batch_file.BatchAnswers`; the client still answers ``models`` and
    ``limits``); a chunk the file does not answer raises
    :class:`~dialscore.batch_file.BatchOutputError` after the chunks before it are stored.

    Needs numpy (the `reports` extra) for the confidence intervals: without it
    :class:`~dialscore.extras.MissingExtra` is raised before any request.
    """
    _require_reports()
    run = _prepare(data_path, await client.models(), models, settings, seed, out_dir, corruptions,
                   sampling, chunk_size, n_boot, client.base_url, progress, tokens)
    scorer: Any = client if batch_output is None else BatchAnswers(client, batch_output)
    try:
        await client.limits()  # read once: nll_many then keeps its chunks within them
        run.open_bar()
        for info in run.models:
            pending = run.pending(info.name)
            if pending:
                await scorer.nll_many(info.name, [i.payload() for i in pending],
                                      chunk_size=chunk_size, return_tokens=tokens,
                                      on_chunk=run.on_chunk(pending))
        run.close_bar()
        return _finish(run, n_boot, plots, echo)
    finally:
        run.close_bar()
        run.release()


async def awrite_probe_batch(client: AsyncDialscoreClient,
                             data_path: str | Path | Sequence[Dialogue], batch_path: str | Path,
                             models: Sequence[str] | str | None = None,
                             settings: Sequence[str] | str = SETTINGS, seed: int = 0,
                             out_dir: str | Path = "runs/probe", *, chunk_size: int = 64,
                             corruptions: Sequence[str] = CORRUPTIONS, sampling: str = ALL_TYPES,
                             tokens: bool = True) -> dict[str, int]:
    """Write the items :func:`arun_probes` would score now (those not already in
    ``out_dir/scores.jsonl``) to `batch_path` as `dialscore batch` input lines, one line per
    chunk of `chunk_size` items; score nothing. Then run the job and call :func:`arun_probes`
    with the same arguments and ``batch_output=`` its output file. Returns the counts of
    ``lines`` and ``items`` written."""
    run = _prepare(data_path, await client.models(), models, settings, seed, out_dir, corruptions,
                   sampling, chunk_size, 0, client.base_url, False, tokens)
    try:
        with open(batch_path, "w", encoding="utf-8") as stream:
            recorder = BatchRecorder(stream)
            for info in run.models:
                pending = run.pending(info.name)
                if pending:
                    await recorder.nll_many(info.name, [i.payload() for i in pending],
                                            chunk_size=chunk_size, return_tokens=tokens)
        return {"lines": recorder.lines, "items": recorder.items}
    finally:
        run.release()


def write_probe_batch(client: DialscoreClient | str, data_path: str | Path | Sequence[Dialogue],
                      batch_path: str | Path, models: Sequence[str] | str | None = None,
                      settings: Sequence[str] | str = SETTINGS, seed: int = 0,
                      out_dir: str | Path = "runs/probe", **kwargs: Any) -> dict[str, int]:
    """:func:`awrite_probe_batch` with a sync client or a URL."""
    return run_sync(client, None, "probes",
                    lambda ac: awrite_probe_batch(ac, data_path, batch_path, models, settings,
                                                  seed, out_dir, **kwargs))


def run_probes(client: DialscoreClient | str, data_path: str | Path | Sequence[Dialogue],
               models: Sequence[str] | str | None = None,
               settings: Sequence[str] | str = SETTINGS, seed: int = 0,
               out_dir: str | Path = "runs/probe", *, concurrency: int | None = None,
               **kwargs: Any) -> Report:
    """:func:`arun_probes` with a sync client or a URL (same arguments and outputs; see
    :mod:`dialscore.sync_bridge` for the async client it runs on and `concurrency`)."""
    return run_sync(client, concurrency, "probes",
                    lambda ac: arun_probes(ac, data_path, models, settings, seed, out_dir, **kwargs))
