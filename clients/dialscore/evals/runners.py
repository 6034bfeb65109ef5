"""The evaluation runners: MuTual, DECODE and the robustness battery, against a running service.

Each runner reads a data file, scores it through the HTTP client with progress bars, computes the
metrics with the pure functions of this package and writes its report into `out_dir`, every file
atomically (`dialscore.reporting`). The file names carry the evaluation and a tag (the scorer and
model), so runs of several scorers can share one folder:

    mutual      mutual-TAG.ranked.txt       the official export: id, then the letters best first
                mutual-TAG.csv / .json      one row per instance: gold, ranking, gold rank, scores
    decode      decode.csv / .json          one row per (set, dialogue): gold and each mode's answer
                decode-metrics.csv / .json  one row per (set, mode): every DECODE metric
                decode-a2t.jsonl, decode-rct.jsonl   the diagnostic sets generated (when any)
    robustness  robustness-TAG.csv / .json            one row per (response, variant)
                robustness-TAG-variants.csv / .json   the statistics of each variant
                robustness-TAG.png                    mean score per variant (+- 1 SD), share beating
                                                      the original
    every one   NAME.report.json   configuration, data checksum, metrics, the served models'
                                   provenance (source, revision, stand_in from GET /v1/models),
                                   timings and the list of files
                NAME.txt           the terminal table (also passed to `echo`)

Scores are "higher = better" everywhere: the reranker's score as is, NLLs negated (the target's
mean NLL in nats per token, given the context turns' texts, speakers dropped), and for the
contradiction scorer 1 - P(contradiction) of the dialogue context + response.

Requests. NLL items go through `nll_many` (all options or variants of all instances in one job,
chunks sent concurrently, identical items scored once); contradiction dialogues in chunks of at
most `chunk_size` (512 by default, the service takes 1024) sent concurrently; reranking one
request per instance (per option speaker, see `arun_mutual`), all in flight at once up to the
client's `max_concurrency`.

Entry points: the coroutines `arun_mutual`, `arun_decode` and `arun_robustness` take an
`AsyncDialscoreClient`; `run_mutual`, `run_decode` and `run_robustness` take a `DialscoreClient`
(or a URL) and run the coroutine on an async client with the same URL, headers, timeout and retry
policy and `concurrency` requests in flight (default: the client's `max_concurrency`; 16 for a
URL). A transport injected into the sync client is not carried over: pass an async client with
that transport to the coroutine instead.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import difflib
import hashlib
import io
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dialscore.evals.decode import (
    DecodeDialogue, DecodeMetrics, Prediction, a2t_set, decode_metrics, read_decode, rct_set,
    write_decode,
)
from dialscore.types import Turn
from dialscore.evals.mutual import (
    LETTERS, MutualInstance, MutualMetrics, Ranking, evaluate_mutual, read_mutual, split_speaker,
    write_ranked,
)
from dialscore.reporting.atomic import atomic_write_bytes, atomic_write_text
from dialscore.reporting.rows import write_json, write_reports
from dialscore.reporting.tables import format_table
from dialscore.evals.robustness import (
    CATEGORIES, KINDS, ResponseItem, VariantStats, items_from_decode, items_from_mutual,
    mutual_style, perturb_all, variant_stats,
)

if TYPE_CHECKING:  # the client (httpx, pydantic) is imported when a runner runs: `--help` stays fast
    from dialscore.client import AsyncDialscoreClient, DialscoreClient
    from dialscore.model_card import ModelCard
    from dialscore.types import ContradictionResult, NLLResult, RerankResponse

__all__ = [
    "MUTUAL_SCORERS", "ROBUSTNESS_SCORERS", "DECODE_MODES", "DIAGNOSTICS",
    "MutualRun", "DecodeRun", "RobustnessRun",
    "arun_mutual", "arun_decode", "arun_robustness", "run_mutual", "run_decode", "run_robustness",
    "read_response_items",
]

MUTUAL_SCORERS: tuple[str, ...] = ("nll", "rerank")
ROBUSTNESS_SCORERS: tuple[str, ...] = ("nll", "contradiction", "rerank")
DECODE_MODES: tuple[str, ...] = ("structured", "unstructured")
DIAGNOSTICS: tuple[str, ...] = ("a2t", "rct")
#: The service takes at most 1024 dialogues per POST /v1/contradiction; half keeps requests short.
DECODE_CHUNK = 512
#: The service takes at most 256 candidates per rerank request.
MAX_CANDIDATES = 256

Echo = Callable[[str], Any] | None


# --- shared helpers ---------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _bar(total: int, desc: str, enabled: bool, unit: str = "item"):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True,
                disable=not enabled or total == 0)


def _tag(*parts: str | None) -> str:
    """A file-name-safe tag from the scorer and model names."""
    text = "-".join(p for p in parts if p)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text) or "run"


def data_checksum(path: str | Path) -> str:
    """SHA-256 of a file, or of a folder's files (names and contents, in name order)."""
    source = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in source.iterdir() if p.is_file()) if source.is_dir() else [source]
    for p in files:
        if source.is_dir():
            h.update(p.name.encode() + b"\0")
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


async def _served(client: AsyncDialscoreClient) -> dict[str, ModelCard]:
    return {m.name: m for m in await client.models()}


def _resolve(served: Mapping[str, ModelCard], name: str | None, kind: str, purpose: str) -> ModelCard:
    """The served model `name`, checked to be a classifier (kind "classifier") or a dialogue model."""
    wanted = [m for m, info in served.items() if (info.family == "classifier") == (kind == "classifier")]
    what = "an NLI classifier" if kind == "classifier" else "a dialogue (NLL) model"
    if name is None:
        raise ValueError(f"{purpose} needs {what}; served: {', '.join(wanted) or 'none'}")
    if name not in served:
        close = difflib.get_close_matches(name, list(served), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"model {name!r} is not served{hint} (served: {', '.join(served)})")
    if name not in wanted:
        raise ValueError(f"{purpose} needs {what}, and {name!r} is a {served[name].family} model "
                         f"(suitable: {', '.join(wanted) or 'none'})")
    return served[name]


def _provenance(served: Mapping[str, ModelCard], names: Sequence[str | None]) -> dict[str, Any]:
    """{name: provenance} of the models used, as GET /v1/models reports them."""
    out: dict[str, Any] = {}
    for name in names:
        if name is None or name in out:
            continue
        info = served.get(name)
        out[name] = info.provenance() if info is not None else {"name": name, "reported": False}
    return out


def _finish(name: str, out_dir: Path, report: dict[str, Any], table: str, files: dict[str, Path],
            started: float, echo: Echo) -> dict[str, Path]:
    """Write NAME.txt and NAME.report.json (with timings and the file list); echo the table."""
    files = dict(files)
    files["table"] = atomic_write_text(out_dir / f"{name}.txt", table + "\n")
    files["report"] = out_dir / f"{name}.report.json"
    report["finished_at"] = _now()
    report["elapsed_s"] = round(time.monotonic() - started, 3)
    report["files"] = {k: str(v) for k, v in files.items()}
    write_json(files["report"], report)
    if echo is not None:
        echo(table)
        echo(f"wrote {len(files)} files to {out_dir} ({report['elapsed_s']:.1f} s)")
    return files


# --- scoring primitives -----------------------------------------------------------------------


async def _nll_scores(client: AsyncDialscoreClient, model: str,
                      jobs: Sequence[tuple[Sequence[str], str]], chunk_size: int,
                      bar) -> list[NLLResult]:
    """NLL of each (context texts, target), identical jobs scored once; results in job order."""
    index: dict[tuple[tuple[str, ...], str], int] = {}
    unique: list[dict[str, Any]] = []
    slots = []
    for context, target in jobs:
        key = (tuple(context), target)
        if key not in index:
            index[key] = len(unique)
            unique.append({"context": list(context), "target": target})
        slots.append(index[key])
    if bar is not None:
        bar.reset(total=len(unique))

    def done(offset: int, results: list[NLLResult]) -> None:
        if bar is not None:
            bar.update(len(results))

    results = await client.nll_many(model, unique, chunk_size=chunk_size, on_chunk=done)
    return [results[s] for s in slots]


async def _detect(client: AsyncDialscoreClient, dialogues: Sequence[Mapping[str, Any]], *,
                  mode: str, threshold: float | None, evidence_threshold: float | None,
                  model: str | None, chunk_size: int, bar) -> tuple[list[ContradictionResult], str | None]:
    """POST /v1/contradiction in concurrent chunks; results in dialogue order, and the classifier
    the service named."""
    if not 1 <= chunk_size <= 1024:
        raise ValueError("chunk_size must be within 1..1024 dialogues (the service's limit)")
    chunks = [(i, list(dialogues[i:i + chunk_size])) for i in range(0, len(dialogues), chunk_size)]
    out: list[ContradictionResult | None] = [None] * len(dialogues)
    used: list[str | None] = [model]

    async def one(offset: int, chunk: list[Mapping[str, Any]]) -> None:
        resp = await client.contradiction(chunk, model=model, mode=mode, threshold=threshold,
                                          evidence_threshold=evidence_threshold)
        if len(resp.results) != len(chunk):
            raise ValueError(f"the service answered {len(resp.results)} results for "
                             f"{len(chunk)} dialogues")
        out[offset:offset + len(chunk)] = resp.results
        used[0] = resp.model or used[0]
        if bar is not None:
            bar.update(len(chunk))

    await _gather(one(o, c) for o, c in chunks)
    return out, used[0]  # type: ignore[return-value]


async def _gather(coros) -> list[Any]:
    """Run coroutines concurrently (the client's semaphore bounds the requests in flight); on the
    first error cancel the rest and raise it."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(frozen=True)
class _RerankJob:
    context: tuple[Turn, ...]
    candidates: tuple[str, ...]
    speaker: str | None


async def _rerank(client: AsyncDialscoreClient, jobs: Sequence[_RerankJob], *,
                  model: str | None, nll_model: str | None, bar,
                  ) -> tuple[list[list[float]], list[list[float | None]], RerankResponse | None]:
    """One rerank request per job (candidates split into requests of at most 256): each job's
    scores and contradiction probabilities in candidate order, and one response (for provenance)."""
    scores: list[list[float]] = [[math.nan] * len(j.candidates) for j in jobs]
    probs: list[list[float | None]] = [[None] * len(j.candidates) for j in jobs]
    sample: list[RerankResponse | None] = [None]
    extra = {k: v for k, v in (("model", model),) if v is not None}

    async def one(k: int, job: _RerankJob) -> None:
        context = [t.to_json() for t in job.context]
        for start in range(0, len(job.candidates), MAX_CANDIDATES):
            part = job.candidates[start:start + MAX_CANDIDATES]
            body = dict(extra)
            if job.speaker is not None:
                body["speaker"] = job.speaker
            resp = await client.rerank(context, part, nll_model=nll_model, extra_body=body)
            got = sorted(r.index for r in resp.results)
            if got != list(range(len(part))):
                raise ValueError(f"rerank answered indices {got} for {len(part)} candidates")
            for r in resp.results:
                scores[k][start + r.index] = r.score
                probs[k][start + r.index] = r.contradiction_probability
            sample[0] = sample[0] or resp
        if bar is not None:
            bar.update(1)

    await _gather(one(k, j) for k, j in enumerate(jobs))
    return scores, probs, sample[0]


def _run_sync(client: DialscoreClient | str, concurrency: int | None, name: str,
              make: Callable[[AsyncDialscoreClient], Awaitable[Any]]) -> Any:
    """Run a runner coroutine on an async client mirroring `client` (see the module docstring)."""
    from dialscore.client import AsyncDialscoreClient

    if isinstance(client, AsyncDialscoreClient):
        raise TypeError(f"run_{name} takes a DialscoreClient or a URL; use `await arun_{name}(...)` "
                        "with an AsyncDialscoreClient")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(f"run_{name} was called inside a running event loop; use "
                           f"`await arun_{name}(...)`")

    async def main() -> Any:
        if isinstance(client, str):
            mirror = AsyncDialscoreClient(client, max_concurrency=concurrency or 16)
        else:
            mirror = AsyncDialscoreClient(client.base_url, token="", timeout=client.timeout,
                                          retry=client.retry, headers=client.headers,
                                          max_concurrency=concurrency or client.max_concurrency)
        async with mirror:
            return await make(mirror)

    return asyncio.run(main())


# --- MuTual -----------------------------------------------------------------------------------


@dataclass
class MutualRun:
    """What `arun_mutual` computed and wrote."""

    instances: list[MutualInstance]
    scores: list[list[float]]
    rankings: list[Ranking]
    metrics: MutualMetrics
    rows: list[dict[str, Any]]
    report: dict[str, Any]
    table: str
    files: dict[str, Path] = field(default_factory=dict)


def _option_jobs(inst: MutualInstance) -> list[tuple[str | None, list[int]]]:
    """The option indices grouped by their speaker marker, in first-seen order."""
    groups: dict[str | None, list[int]] = {}
    for i, option in enumerate(inst.options):
        groups.setdefault(split_speaker(option)[0], []).append(i)
    return list(groups.items())


def chance_levels(n_options: Sequence[int]) -> dict[str, float | None]:
    """R@1, R@2 and MRR of a random ranking, averaged over instances with these option counts."""
    if not n_options:
        return {"R@1": None, "R@2": None, "MRR": None}
    k = list(n_options)
    return {"R@1": sum(1 / n for n in k) / len(k),
            "R@2": sum(min(2, n) / n for n in k) / len(k),
            "MRR": sum(sum(1 / r for r in range(1, n + 1)) / n for n in k) / len(k)}


async def arun_mutual(client: AsyncDialscoreClient, path: str | Path, scorer: str = "nll",
                      model: str | None = None, out_dir: str | Path = "runs/eval", *,
                      nll_model: str | None = None, limit: int | None = None, chunk_size: int = 64,
                      progress: bool = True, echo: Echo = None) -> MutualRun:
    """Rank every MuTual instance's options with `scorer` and write the report.

    `scorer`:
    - "nll": the mean NLL of each option (its speaker marker removed) given the article's turn
      texts under the dialogue model `model` (required); score = -NLL.
    - "rerank": POST /v1/rerank's score of each option (context = the article's turns with their
      speakers "m"/"f"; the candidates are said by the options' speaker, so they are checked
      against that speaker's earlier turns). Options with different speaker markers are sent as
      one request per speaker. `model` names the classifier (default: the service's detector);
      `nll_model` adds a dialogue model's NLL to the score with the service's default weight.

    `limit` keeps the first instances only. Instances without a gold answer are ranked and
    exported but not scored (`metrics.n_unscored`).
    """
    if scorer not in MUTUAL_SCORERS:
        raise ValueError(f"unknown MuTual scorer {scorer!r}; choose from {', '.join(MUTUAL_SCORERS)}")
    started, started_at = time.monotonic(), _now()
    instances = read_mutual(path)
    n_read = len(instances)
    if limit is not None:
        instances = instances[:limit]
    if not instances:
        raise ValueError(f"{path}: no MuTual instances to evaluate")
    served = await _served(client)
    out = Path(out_dir)
    extra_cols: dict[str, list[list[Any]]] = {}
    n_truncated = 0
    used: list[str | None]

    if scorer == "nll":
        info = _resolve(served, model, "dialogue", "the nll scorer")
        jobs, spans = [], []
        for inst in instances:
            context = [t.text for t in inst.context]
            spans.append((len(jobs), len(inst.options)))
            jobs.extend((context, split_speaker(o)[1]) for o in inst.options)
        with _bar(len(jobs), f"mutual nll {info.name}", progress) as bar:
            results = await _nll_scores(client, info.name, jobs, chunk_size, bar)
        nlls = [[r.nll for r in results[s:s + k]] for s, k in spans]
        scores = [[-v for v in row] for row in nlls]
        extra_cols["nll"] = nlls
        n_truncated = sum(any(r.truncated for r in results[s:s + k]) for s, k in spans)
        used = [info.name]
        tag = _tag("nll", info.name)
    else:
        classifier = _resolve(served, model, "classifier", "the rerank scorer").name \
            if model is not None else None
        if nll_model is not None:
            _resolve(served, nll_model, "dialogue", "--nll-model")
        jobs_r: list[_RerankJob] = []
        owners: list[tuple[int, list[int]]] = []
        for k, inst in enumerate(instances):
            for speaker, indices in _option_jobs(inst):
                jobs_r.append(_RerankJob(inst.context,
                                         tuple(split_speaker(inst.options[i])[1] for i in indices),
                                         speaker))
                owners.append((k, indices))
        with _bar(len(jobs_r), "mutual rerank", progress, unit="request") as bar:
            got, probs, sample = await _rerank(client, jobs_r, model=classifier,
                                               nll_model=nll_model, bar=bar)
        scores = [[math.nan] * len(inst.options) for inst in instances]
        contra: list[list[Any]] = [[None] * len(inst.options) for inst in instances]
        for (k, indices), row, prow in zip(owners, got, probs):
            for i, s, p in zip(indices, row, prow):
                scores[k][i], contra[k][i] = s, p
        extra_cols["contradiction"] = contra
        classifier = (sample.model if sample is not None else None) or classifier
        used = [classifier, nll_model]
        tag = _tag("rerank", classifier, nll_model)

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
        for i in range(len(inst.options)):
            row[f"score_{LETTERS[i]}"] = row_scores[i]
        for name, values in extra_cols.items():
            for i in range(len(inst.options)):
                row[f"{name}_{LETTERS[i]}"] = values[k][i]
        rows.append(row)

    stem = f"mutual-{tag}"
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
    report: dict[str, Any] = {
        "evaluation": "mutual", "data": str(path), "data_sha256": data_checksum(path),
        "server": client.base_url, "scorer": scorer, "model": model, "nll_model": nll_model,
        "instances_read": n_read, "limit": limit, "chunk_size": chunk_size,
        "metrics": metrics.as_row(), "chance": chance, "gold_tied": n_tied,
        "instances_truncated": n_truncated,
        "models": _provenance(served, used), "started_at": started_at,
    }
    files = _finish(stem, out, report, table, files, started, echo)
    return MutualRun(instances, scores, rankings, metrics, rows, report, table, files)


def run_mutual(client: DialscoreClient | str, path: str | Path, scorer: str = "nll",
               model: str | None = None, out_dir: str | Path = "runs/eval", *,
               concurrency: int | None = None, **kwargs: Any) -> MutualRun:
    """`arun_mutual` with a sync client or a URL (see the module docstring)."""
    return _run_sync(client, concurrency, "mutual",
                     lambda ac: arun_mutual(ac, path, scorer, model, out_dir, **kwargs))


# --- DECODE -----------------------------------------------------------------------------------


@dataclass
class DecodeRun:
    """What `arun_decode` computed and wrote. `sets` maps "original", "a2t", "rct" to the
    dialogues evaluated; `predictions[set][mode]` and `metrics[set][mode]` follow them."""

    sets: dict[str, list[DecodeDialogue]]
    skipped: dict[str, int]
    predictions: dict[str, dict[str, list[Prediction]]]
    metrics: dict[str, dict[str, DecodeMetrics]]
    rows: list[dict[str, Any]]
    report: dict[str, Any]
    table: str
    files: dict[str, Path] = field(default_factory=dict)


_METRIC_ORDER = ("n", "n_gold_contradiction", "n_predicted_contradiction", "accuracy",
                 "strict_accuracy", "evidence_precision", "evidence_recall", "evidence_f1",
                 "precision", "recall", "f1", "roc_auc", "fire_rate")


def side_by_side(metrics: Mapping[str, Mapping[str, DecodeMetrics]]) -> list[dict[str, Any]]:
    """One row per metric, one column per "set/mode": structured and unstructured side by side."""
    columns = [(s, m) for s, by_mode in metrics.items() for m in by_mode]
    names = list(_METRIC_ORDER)
    for s, m in columns:
        for key in metrics[s][m].as_row():
            if key not in names:
                names.append(key)
    return [{"metric": name, **{f"{s}/{m}": metrics[s][m].as_row().get(name) for s, m in columns}}
            for name in names]


async def arun_decode(client: AsyncDialscoreClient, path: str | Path,
                      out_dir: str | Path = "runs/eval", *, modes: Sequence[str] = DECODE_MODES,
                      threshold: float = 0.5, evidence_threshold: float | None = None,
                      diagnostics: Sequence[str] = DIAGNOSTICS, seed: int = 0,
                      model: str | None = None, chunk_size: int = DECODE_CHUNK,
                      limit: int | None = None, progress: bool = True,
                      echo: Echo = None) -> DecodeRun:
    """Detect contradictions in a DECODE file in each mode and report every DECODE metric.

    The dialogues go to POST /v1/contradiction in chunks of `chunk_size` (sent concurrently) with
    `threshold` and `evidence_threshold`; `model` names the classifier (default: the service's
    detector). `diagnostics` generates the A2T and RCT sets from the dialogues labelled
    contradiction with evidence (A2T donors drawn under `seed`), writes them as DECODE JSON Lines
    and evaluates them in every mode too; a file without evidence annotations yields empty sets,
    and the report gives the number of dialogues skipped. `limit` keeps the first dialogues.
    """
    bad = [m for m in modes if m not in DECODE_MODES]
    if bad or not modes:
        raise ValueError(f"modes must be some of {', '.join(DECODE_MODES)}, got {list(modes)}")
    bad = [d for d in diagnostics if d not in DIAGNOSTICS]
    if bad:
        raise ValueError(f"unknown diagnostic set(s) {bad}; choose from {', '.join(DIAGNOSTICS)}")
    started, started_at = time.monotonic(), _now()
    dialogues = read_decode(path)
    n_read = len(dialogues)
    if limit is not None:
        dialogues = dialogues[:limit]
    if not dialogues:
        raise ValueError(f"{path}: no DECODE dialogues to evaluate")
    served = await _served(client)
    if model is not None:
        _resolve(served, model, "classifier", "contradiction detection")
    out = Path(out_dir)
    files: dict[str, Path] = {}

    sets: dict[str, list[DecodeDialogue]] = {"original": list(dialogues)}
    skipped: dict[str, int] = {}
    for name in diagnostics:
        result = a2t_set(dialogues, seed=seed) if name == "a2t" else rct_set(dialogues)
        skipped[name] = len(result.skipped)
        if result.dialogues:
            sets[name] = list(result.dialogues)
            files[f"{name}_set"] = write_decode(out / f"decode-{name}.jsonl", result.dialogues)

    predictions: dict[str, dict[str, list[Prediction]]] = {s: {} for s in sets}
    metrics: dict[str, dict[str, DecodeMetrics]] = {s: {} for s in sets}
    classifier = model
    for mode in modes:
        for name, ds in sets.items():
            with _bar(len(ds), f"decode {name} {mode}", progress, unit="dialogue") as bar:
                results, used = await _detect(
                    client, [d.to_request() for d in ds], mode=mode, threshold=threshold,
                    evidence_threshold=evidence_threshold, model=model, chunk_size=chunk_size,
                    bar=bar)
            classifier = used or classifier
            preds = [Prediction.from_response(r.model_dump()) for r in results]
            predictions[name][mode] = preds
            metrics[name][mode] = decode_metrics(ds, preds)

    rows: list[dict[str, Any]] = []
    for name, ds in sets.items():
        for k, d in enumerate(ds):
            row: dict[str, Any] = {"set": name, "id": d.id, "group": d.group, "turns": len(d.turns),
                                   "gold": d.is_contradiction, "gold_evidence": sorted(d.evidence)}
            for mode in modes:
                p = predictions[name][mode][k]
                row[f"{mode}_predicted"] = p.is_contradiction
                row[f"{mode}_probability"] = p.probability
                row[f"{mode}_evidence"] = sorted(p.evidence)
            rows.append(row)
    metric_rows = [{"set": s, "mode": m, **metrics[s][m].as_row()}
                   for s in sets for m in modes]
    files.update(write_reports(out / "decode", rows))
    files.update({f"metrics_{k}": v for k, v in
                  write_reports(out / "decode-metrics", metric_rows).items()})

    table = format_table(side_by_side(metrics), title=f"DECODE contradiction detection: {path}")
    notes = []
    for name in diagnostics:
        made = len(sets.get(name, ()))
        notes.append(f"{name.upper()}: {made} dialogue(s) generated, {skipped[name]} skipped "
                     "(only contradictions with evidence annotations qualify)")
    if notes:
        table += "\n" + "\n".join(notes)
    report: dict[str, Any] = {
        "evaluation": "decode", "data": str(path), "data_sha256": data_checksum(path),
        "server": client.base_url, "modes": list(modes), "threshold": threshold,
        "evidence_threshold": evidence_threshold, "classifier": classifier, "seed": seed,
        "dialogues_read": n_read, "limit": limit, "chunk_size": chunk_size,
        "diagnostics": {name: {"n": len(sets.get(name, ())), "skipped": skipped[name]}
                        for name in diagnostics},
        "metrics": {s: {m: metrics[s][m] for m in modes} for s in sets},
        "models": _provenance(served, [classifier]), "started_at": started_at,
    }
    files = _finish("decode", out, report, table, files, started, echo)
    return DecodeRun(sets, skipped, predictions, metrics, rows, report, table, files)


def run_decode(client: DialscoreClient | str, path: str | Path, out_dir: str | Path = "runs/eval",
               *, concurrency: int | None = None, **kwargs: Any) -> DecodeRun:
    """`arun_decode` with a sync client or a URL (see the module docstring)."""
    return _run_sync(client, concurrency, "decode",
                     lambda ac: arun_decode(ac, path, out_dir, **kwargs))


# --- robustness battery -----------------------------------------------------------------------


@dataclass
class RobustnessRun:
    """What `arun_robustness` computed and wrote. `scores[i]` maps "original" and each variant
    kind to the score of item i's response (None: empty variant, not scored)."""

    corpus: str
    items: list[ResponseItem]
    variants: dict[str, list[str]]
    scores: list[dict[str, float | None]]
    stats: dict[str, VariantStats]
    rows: list[dict[str, Any]]
    report: dict[str, Any]
    table: str
    files: dict[str, Path] = field(default_factory=dict)


def _corpus_of(path: Path) -> str:
    """"mutual" or "decode", from the first record's fields (a folder is MuTual's official layout)."""
    import json

    if path.is_dir():
        return "mutual"
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                record = json.loads(line)
                if "article" in record and "options" in record:
                    return "mutual"
                if "turns" in record:
                    return "decode"
                break
    raise ValueError(f"{path}: neither MuTual (article, options) nor DECODE (turns) records")


def read_response_items(path: str | Path, n: int | None = None, seed: int = 0,
                        corpus: str = "auto") -> tuple[str, list[ResponseItem]]:
    """The responses to perturb: MuTual gold options or DECODE last turns, a seeded sample of `n`."""
    source = Path(path)
    kind = _corpus_of(source) if corpus == "auto" else corpus
    if kind == "mutual":
        return kind, items_from_mutual(read_mutual(source), n=n, seed=seed)
    if kind == "decode":
        return kind, items_from_decode(read_decode(source), n=n, seed=seed)
    raise ValueError(f"corpus must be auto, mutual or decode, got {corpus!r}")


def _plot(stats: Mapping[str, VariantStats], original: VariantStats, title: str) -> bytes:
    """Two panels: mean score per variant (a point with 1-SD whiskers, coloured by category)
    against the originals' mean and 1-SD band; the share of pairs where the variant beat the
    original."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    colors = {"slight": "tab:green", "simplified": "tab:olive", "unnatural": "tab:red",
              "generic": "tab:purple"}
    kinds = list(stats)
    fig = Figure(figsize=(max(8.0, 0.6 * len(kinds) + 3), 7.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    x = list(range(len(kinds)))
    means = [stats[k].mean if stats[k].mean is not None else math.nan for k in kinds]
    sds = [stats[k].std if stats[k].std is not None else 0.0 for k in kinds]
    col = [colors.get(stats[k].category or "", "grey") for k in kinds]
    if original.mean is not None:
        top.axhline(original.mean, color="black", linewidth=1, label="original mean")
        top.axhspan(original.mean - (original.std or 0), original.mean + (original.std or 0),
                    color="grey", alpha=0.2, label="original +- 1 SD")
    # Points, not bars: scores may be negative (negated NLLs), so a bar from 0 means nothing.
    for xi, m, sd, c in zip(x, means, sds, col):
        top.errorbar([xi], [m], yerr=[sd], fmt="o", color=c, ecolor=c, capsize=4, markersize=7)
    top.set_ylabel("mean score (higher = better)")
    top.set_title(title, fontsize=10)
    top.legend(fontsize=8)
    beat = [stats[k].beat_share if stats[k].beat_share is not None else math.nan for k in kinds]
    bottom.bar(x, beat, color=col)
    bottom.axhline(0.5, color="grey", linestyle="--", linewidth=1)
    bottom.set_ylim(0, 1.05)
    bottom.set_ylabel("share beating the original")
    bottom.set_xticks(x)
    bottom.set_xticklabels([f"{k}\n({stats[k].category})" for k in kinds], rotation=35,
                           ha="right", fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


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
    replies are lower-cased and tokenised like the corpus.

    `scorer`, higher = better:
    - "nll": -NLL of the response given the context turn texts, under the dialogue model `model`;
    - "contradiction": 1 - P(contradiction) of the context + response dialogue (the response is
      the last turn, by its speaker) in `mode`; `model` names the classifier (default: the
      service's detector); dialogues in chunks of at most 512;
    - "rerank": the reranker's score of each text as a candidate reply (one request per response,
      the original and its variants as the candidates, said by the response's speaker); `model`
      names the classifier, `nll_model` adds an NLL term.
    Empty variants (e.g. a response made only of stopwords) are not scored: they count as missing.
    """
    if scorer not in ROBUSTNESS_SCORERS:
        raise ValueError(f"unknown robustness scorer {scorer!r}; choose from "
                         f"{', '.join(ROBUSTNESS_SCORERS)}")
    started, started_at = time.monotonic(), _now()
    kinds = list(kinds)
    corpus_kind, items = read_response_items(path, n=n, seed=seed, corpus=corpus)
    if not items:
        raise ValueError(f"{path}: no responses to perturb (MuTual needs gold answers; DECODE "
                         "dialogues need two turns)")
    served = await _served(client)
    out = Path(out_dir)
    variants = perturb_all([it.response.text for it in items], kinds, seed=seed,
                           generic_style=mutual_style if corpus_kind == "mutual" else None)
    texts: list[dict[str, str]] = []  # per item: {"original": text, kind: variant} (non-empty)
    for k, it in enumerate(items):
        row = {"original": it.response.text}
        row.update({kind: variants[kind][k] for kind in kinds})
        texts.append({key: t for key, t in row.items() if t.strip()})
    scores: list[dict[str, float | None]] = [
        {key: None for key in ("original", *kinds)} for _ in items]

    if scorer == "nll":
        info = _resolve(served, model, "dialogue", "the nll scorer")
        jobs, where = [], []
        for k, (it, row) in enumerate(zip(items, texts)):
            context = [t.text for t in it.context]
            for key, text in row.items():
                jobs.append((context, text))
                where.append((k, key))
        with _bar(len(jobs), f"robustness nll {info.name}", progress) as bar:
            results = await _nll_scores(client, info.name, jobs, chunk_size, bar)
        for (k, key), r in zip(where, results):
            scores[k][key] = -r.nll
        used = [info.name]
        tag = _tag("nll", info.name)
    elif scorer == "contradiction":
        if model is not None:
            _resolve(served, model, "classifier", "the contradiction scorer")
        index: dict[tuple, int] = {}
        dialogues: list[dict[str, Any]] = []
        where = []
        for k, (it, row) in enumerate(zip(items, texts)):
            for key, text in row.items():
                turns = [*(t.to_json() for t in it.context),
                         {"id": it.response.id, "speaker": it.response.speaker, "text": text}]
                sig = (it.id, text)
                if sig not in index:
                    index[sig] = len(dialogues)
                    dialogues.append({"turns": turns})
                where.append((k, key, index[sig]))
        with _bar(len(dialogues), "robustness contradiction", progress, unit="dialogue") as bar:
            results_c, classifier = await _detect(
                client, dialogues, mode=mode, threshold=None, evidence_threshold=None, model=model,
                chunk_size=DECODE_CHUNK, bar=bar)
        for k, key, j in where:
            scores[k][key] = 1.0 - results_c[j].probability
        used = [classifier or model]
        tag = _tag("contradiction", used[0])
    else:
        if model is not None:
            _resolve(served, model, "classifier", "the rerank scorer")
        if nll_model is not None:
            _resolve(served, nll_model, "dialogue", "--nll-model")
        jobs_r, keys = [], []
        for it, row in zip(items, texts):
            unique = list(dict.fromkeys(row.values()))
            jobs_r.append(_RerankJob(it.context, tuple(unique), it.response.speaker or None))
            keys.append({key: unique.index(text) for key, text in row.items()})
        with _bar(len(jobs_r), "robustness rerank", progress, unit="request") as bar:
            got, _, sample = await _rerank(client, jobs_r, model=model, nll_model=nll_model, bar=bar)
        for k, (row_scores, mapping) in enumerate(zip(got, keys)):
            for key, j in mapping.items():
                scores[k][key] = row_scores[j]
        used = [(sample.model if sample is not None else None) or model, nll_model]
        tag = _tag("rerank", used[0], nll_model)

    original = [s["original"] for s in scores]
    stats = {kind: variant_stats(original, [s[kind] for s in scores], kind) for kind in kinds}
    reference = variant_stats(original, original, "original")
    pair_rows: list[dict[str, Any]] = []
    for k, it in enumerate(items):
        for kind in kinds:
            o, v = scores[k]["original"], scores[k][kind]
            pair_rows.append({"id": it.id, "kind": kind, "category": CATEGORIES[kind],
                              "response": it.response.text, "variant": variants[kind][k],
                              "original_score": o, "variant_score": v,
                              "delta": None if o is None or v is None else v - o})
    stat_rows = [{**reference.as_row(), "category": "reference", "pearson": None,
                  "spearman": None, "beat_share": None, "tie_share": None}]
    stat_rows += [stats[kind].as_row() for kind in kinds]

    stem = f"robustness-{tag}"
    files = dict(write_reports(out / stem, pair_rows))
    files.update({f"variants_{k}": v for k, v in
                  write_reports(out / f"{stem}-variants", stat_rows).items()})
    model_label = "+".join(u for u in used if u) or "default"
    if plot:
        files["plot"] = atomic_write_bytes(out / f"{stem}.png", _plot(
            stats, reference, f"{scorer} scorer ({model_label}) on {len(items)} {corpus_kind} "
            "responses"))
    columns = ["kind", "category", "n", "n_missing", "mean", "std", "within_1sd", "pearson",
               "spearman", "beat_share", "tie_share"]
    table = format_table(stat_rows, columns,
                         title=f"Robustness battery: {scorer} scorer ({model_label}), "
                               f"{len(items)} {corpus_kind} responses from {path}")
    report: dict[str, Any] = {
        "evaluation": "robustness", "data": str(path), "data_sha256": data_checksum(path),
        "corpus": corpus_kind, "server": client.base_url, "scorer": scorer, "model": model,
        "nll_model": nll_model, "mode": mode if scorer == "contradiction" else None,
        "n_requested": n, "n_items": len(items), "seed": seed, "kinds": kinds,
        "original": reference, "variants": stats,
        "models": _provenance(served, used), "started_at": started_at,
    }
    files = _finish(stem, out, report, table, files, started, echo)
    return RobustnessRun(corpus_kind, items, variants, scores, stats, pair_rows, report, table,
                         files)


def run_robustness(client: DialscoreClient | str, path: str | Path, scorer: str = "nll",
                   model: str | None = None, n: int | None = None, seed: int = 0,
                   out_dir: str | Path = "runs/eval", *, concurrency: int | None = None,
                   **kwargs: Any) -> RobustnessRun:
    """`arun_robustness` with a sync client or a URL (see the module docstring)."""
    return _run_sync(client, concurrency, "robustness",
                     lambda ac: arun_robustness(ac, path, scorer, model, n, seed, out_dir, **kwargs))
