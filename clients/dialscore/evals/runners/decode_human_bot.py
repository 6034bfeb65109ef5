"""DECODE's human-bot analyses against a running service: every utterance of annotated
human-bot logs (:mod:`dialscore.evals.human_bot_log`) scored against its own preceding context
(resumable), then Table 7's P/R/F1/AUC, Figure 3's fire rates on five groups, each printed with
its size (an empty group as "empty", with a note), and Figure 4's per-bot correlation and
scatter plot."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dialscore.evals.decode import Prediction
from dialscore.evals.decode_human_bot import MIN_BOT_UTTERANCES, HumanBotMetrics, human_bot_metrics
from dialscore.evals.human_bot_log import HumanBotLog, HumanBotUtterance, read_human_bot
from dialscore.evals.detector_kind import comparable_row
from dialscore.evals.runners.decode import DECODE_MODES
from dialscore.evals.runners.selection import first
from dialscore.evals.scorers import DIALOGUE_CHUNK, detect
from dialscore.evals.served import resolve_model, served_models
from dialscore.reporting.envelope import Echo, RunEnvelope, model_provenance, write_run_report
from dialscore.reporting.plots import NO_PLOTS_NOTE, plots_available
from dialscore.reporting.progress import progress_bar
from dialscore.reporting.resume_store import ResumeStore
from dialscore.reporting.rows import write_reports
from dialscore.reporting.tables import format_table

if TYPE_CHECKING:
    from dialscore.client import AsyncDialscoreClient

__all__ = ["HumanBotRun", "arun_decode_human_bot"]

#: Utterances scored between two appends to the resume store.
STORE_EVERY = 256


def _valid_prediction(row: dict[str, Any]) -> bool:
    probability = row.get("probability")
    return (isinstance(row.get("is_contradiction"), bool) and not isinstance(probability, bool)
            and isinstance(probability, (int, float)))


def _reading_note(log: HumanBotLog, n_utterances: int) -> str:
    """What reading the log found: records, conversations, merged copies, utterances."""
    return (f"{log.records} record(s) of {log.conversations} conversation(s) "
            f"({log.copies} truncated cop(ies) merged: {log.turns_in_several_copies} turn(s) in "
            f"several copies, {log.turns_with_differing_marks} with differing marks); "
            f"{n_utterances} utterance(s) with context ({log.first_turns_skipped} first turn(s) "
            f"skipped, no context); agreement = {' + '.join(log.count_fields)}")


@dataclass
class HumanBotRun:
    utterances: list[HumanBotUtterance]
    predictions: list[Prediction]
    metrics: HumanBotMetrics
    scored_now: int
    report: dict[str, Any]
    table: str
    files: dict[str, Path] = field(default_factory=dict)


async def arun_decode_human_bot(client: AsyncDialscoreClient, path: str | Path,
                                out_dir: str | Path = "runs/eval", *, mode: str = "structured",
                                threshold: float = 0.5, model: str | None = None,
                                min_utterances: int = MIN_BOT_UTTERANCES,
                                annotator_key: str | None = None,
                                chunk_size: int = DIALOGUE_CHUNK, limit: int | None = None,
                                detector_kind: str = "nli", plot: bool = True, progress: bool = True,
                                echo: Echo = None) -> HumanBotRun:
    """Score every utterance of the human-bot logs at `path` (see
    :mod:`dialscore.evals.decode_human_bot`) with POST /v1/contradiction in `mode` and report.

    Resumable: predictions are appended to OUT/decode-human-bot-MODE.predictions.jsonl (a
    :class:`~dialscore.reporting.resume_store.ResumeStore`, one row per utterance under its
    ``"id"``) every :data:`STORE_EVERY` utterances, and a rerun sends only the utterances not
    stored yet (a store holding rows of another mode, threshold or model is refused). `limit`
    keeps the first utterances. A log without the agreement fields (or with a bad value) is a
    ValueError naming them, raised before any request. `detector_kind` ("nli" or
    "decode-trained") is stated with the
    comparable paper figures. The PNG needs matplotlib; without it `echo` gets a note.
    """
    if mode not in DECODE_MODES:
        raise ValueError(f"mode must be one of {', '.join(DECODE_MODES)}, got {mode!r}")
    kind_note = comparable_row(detector_kind, mode, "human-bot")
    envelope = RunEnvelope.start("decode-human-bot", path, client.base_url, mode=mode,
                                 threshold=threshold, model=model, min_utterances=min_utterances,
                                 annotator_key=annotator_key, limit=limit, chunk_size=chunk_size)
    log = read_human_bot(path, annotator_key)
    utterances = first(list(log.utterances), limit, f"{path}: no utterance with context to evaluate")
    served = await served_models(client)
    if model is not None:
        resolve_model(served, model, "classifier", "contradiction detection")
    out = Path(out_dir)
    store = ResumeStore(out / f"decode-human-bot-{mode}.predictions.jsonl",
                        settings={"mode": mode, "threshold": threshold, "model": model},
                        valid=_valid_prediction)
    store.load()
    if store.stale:
        raise ValueError(f"{store.path} holds predictions made with {store.stale_settings}, not "
                         f"{store.settings}: choose another output folder")
    todo = store.missing((u.id, u) for u in utterances)
    classifier = model
    with progress_bar(len(todo), f"decode human-bot {mode}", progress, unit="utterance") as bar:
        async def compute(batch: list[HumanBotUtterance]) -> list[dict[str, Any]]:
            nonlocal classifier
            results, named = await detect(
                client, [u.dialogue.to_request() for u in batch], mode=mode, threshold=threshold,
                evidence_threshold=None, model=model, chunk_size=chunk_size, bar=bar)
            classifier = named or classifier
            return [{"is_contradiction": r.is_contradiction, "probability": r.probability,
                     "classifier": classifier} for r in results]

        await store.fill(todo, STORE_EVERY, compute)
    stored = store.rows
    classifier = classifier or next((r.get("classifier") for r in stored.values()
                                     if r.get("classifier")), None)
    predictions = [Prediction(bool(stored[u.id]["is_contradiction"]),
                              float(stored[u.id]["probability"])) for u in utterances]
    metrics = human_bot_metrics(utterances, predictions, min_utterances)

    files: dict[str, Path] = {"predictions": store.path}
    rows = [{"id": u.id, "bot": u.bot, "human": u.is_human, "marked": u.marked,
             "annotators": u.annotators, "context_turns": len(u.dialogue.turns) - 1,
             "predicted": p.is_contradiction, "probability": p.probability}
            for u, p in zip(utterances, predictions)]
    files.update(write_reports(out / f"decode-human-bot-{mode}", rows))
    bot_rows = [b.__dict__ for b in metrics.per_bot]
    files.update({f"bots_{k}": v for k, v in
                  write_reports(out / f"decode-human-bot-{mode}-bots", bot_rows).items()})
    table = format_table(metrics.as_rows(),
                         title=f"DECODE human-bot analyses ({mode}, {classifier}): {path}")
    notes = [*metrics.group_notes(), _reading_note(log, len(utterances)),
             f"{len(utterances) - len(todo)} utterance(s) resumed from {store.path.name}",
             "per-bot (n, mean score, marked rate): " + "; ".join(
                 f"{b.bot} ({b.n}, {b.mean_score:.3f}, {b.marked_rate:.3f})" for b in metrics.per_bot),
             f"bots with fewer than {min_utterances} bot utterances (left out of r): "
             + (", ".join(metrics.bots_too_few) or "none"), kind_note]
    if plot and plots_available():
        from dialscore.evals.decode_human_bot_plot import plot_bots

        files["plot"] = plot_bots(metrics.per_bot, metrics.pearson_r,
                                  f"DECODE human-bot: {classifier} ({mode})",
                                  out / f"decode-human-bot-{mode}.png")
    elif plot:
        notes.append(NO_PLOTS_NOTE)
    table += "\n" + "\n".join(notes)
    envelope.models = model_provenance(served, [classifier])
    results_json = {"classifier": classifier, "detector_kind": detector_kind,
                    "comparable_to": kind_note, "records_read": log.records,
                    "conversations": log.conversations, "truncated_copies": log.copies,
                    "turns_in_several_copies": log.turns_in_several_copies,
                    "turns_with_differing_marks": log.turns_with_differing_marks,
                    "agreement_fields": list(log.count_fields),
                    "first_turns_skipped": log.first_turns_skipped,
                    "resumed": len(utterances) - len(todo), "empty_groups": list(metrics.empty_groups()),
                    "metrics": metrics}
    files = write_run_report(envelope, results_json, table=table,
                             table_path=out / f"decode-human-bot-{mode}.txt",
                             report_path=out / f"decode-human-bot-{mode}.report.json",
                             files=files, echo=echo)
    return HumanBotRun(utterances, predictions, metrics, len(todo),
                       envelope.report(results_json), table, files)
