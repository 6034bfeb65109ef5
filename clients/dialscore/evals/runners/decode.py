"""DECODE contradiction detection against a running service: every metric, in each mode, on the
original dialogues and the A2T / RCT diagnostic sets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dialscore.evals.decode import DecodeDialogue, Prediction, read_decode, write_decode
from dialscore.evals.decode_metrics import DecodeMetrics, decode_metrics, side_by_side
from dialscore.evals.decode_transforms import a2t_set, rct_set
from dialscore.evals.detector_kind import comparable_row
from dialscore.evals.runners.detection_store import DurableDetection
from dialscore.evals.runners.selection import first
from dialscore.evals.scorers import DIALOGUE_CHUNK
from dialscore.evals.served import resolve_model, served_models
from dialscore.reporting.envelope import Echo, RunEnvelope, model_provenance, write_run_report
from dialscore.reporting.progress import progress_bar
from dialscore.reporting.rows import write_reports
from dialscore.reporting.run_lock import holds_out_dir
from dialscore.reporting.tables import format_table

if TYPE_CHECKING:
    from dialscore.client import AsyncDialscoreClient, DialscoreClient

__all__ = ["DECODE_MODES", "DIAGNOSTICS", "DecodeRun", "arun_decode", "run_decode"]

DECODE_MODES: tuple[str, ...] = ("structured", "unstructured")
DIAGNOSTICS: tuple[str, ...] = ("a2t", "rct")


@dataclass
class DecodeRun:
    """What `arun_decode` computed and wrote. `sets` maps "original", "a2t", "rct" to the
    dialogues evaluated; `predictions[set][mode]` and `metrics[set][mode]` follow them; `report`
    is the report.json written."""

    sets: dict[str, list[DecodeDialogue]]
    skipped: dict[str, int]
    predictions: dict[str, dict[str, list[Prediction]]]
    metrics: dict[str, dict[str, DecodeMetrics]]
    rows: list[dict[str, Any]]
    report: dict[str, Any]
    table: str
    files: dict[str, Path] = field(default_factory=dict)


def _rows(sets: dict[str, list[DecodeDialogue]], modes: Sequence[str],
          predictions: dict[str, dict[str, list[Prediction]]]) -> list[dict[str, Any]]:
    """One row per (set, dialogue): the gold label and evidence, then each mode's answer."""
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
    return rows


@holds_out_dir
async def arun_decode(client: AsyncDialscoreClient, path: str | Path,
                      out_dir: str | Path = "runs/eval", *, modes: Sequence[str] = DECODE_MODES,
                      threshold: float = 0.5, evidence_threshold: float | None = None,
                      diagnostics: Sequence[str] = DIAGNOSTICS, seed: int = 0,
                      model: str | None = None, chunk_size: int = DIALOGUE_CHUNK,
                      limit: int | None = None, detector_kind: str = "nli",
                      progress: bool = True, echo: Echo = None) -> DecodeRun:
    """Detect contradictions in a DECODE file in each mode and report every DECODE metric.

    The dialogues go to POST /v1/contradiction in chunks of `chunk_size` (lowered to the
    deployment's published max_dialogues; sent concurrently) with `threshold` and
    `evidence_threshold`; `model` names the classifier (default: the service's detector).
    `detector_kind` ("nli" or "decode-trained") is stated in the report with the paper row the
    figures compare with. `diagnostics` generates the A2T and RCT sets from the dialogues labelled contradiction with
    evidence (A2T donors drawn under `seed`), writes them as DECODE JSON Lines and evaluates them
    in every mode too; a file without evidence annotations yields empty sets, and the report
    gives the number of dialogues skipped. `limit` keeps the first dialogues. The run resumes:
    the service's answers are kept in ``decode-<mode>-<model>.detections.jsonl`` in `out_dir`
    (see :mod:`dialscore.evals.runners.detection_store`), and a run started again sends only the
    dialogues still missing; the folder is locked for the run.
    """
    bad = [m for m in modes if m not in DECODE_MODES]
    if bad or not modes:
        raise ValueError(f"modes must be some of {', '.join(DECODE_MODES)}, got {list(modes)}")
    kind_notes = [comparable_row(detector_kind, m) for m in modes]  # refuses an unknown kind
    bad = [d for d in diagnostics if d not in DIAGNOSTICS]
    if bad:
        raise ValueError(f"unknown diagnostic set(s) {bad}; choose from {', '.join(DIAGNOSTICS)}")
    envelope = RunEnvelope.start(
        "decode", path, client.base_url, modes=list(modes), threshold=threshold,
        evidence_threshold=evidence_threshold, model=model, diagnostics=list(diagnostics),
        seed=seed, limit=limit, chunk_size=chunk_size)
    read = read_decode(path)
    dialogues = first(read, limit, f"{path}: no DECODE dialogues to evaluate")
    served = await served_models(client)
    if model is not None:
        resolve_model(served, model, "classifier", "contradiction detection")
    out = Path(out_dir)
    files: dict[str, Path] = {}

    sets: dict[str, list[DecodeDialogue]] = {"original": list(dialogues)}
    skipped: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for name in diagnostics:
        result = a2t_set(dialogues, seed=seed) if name == "a2t" else rct_set(dialogues)
        skipped[name] = len(result.skipped)
        dropped[name] = len(result.dropped)
        if result.dialogues:
            sets[name] = list(result.dialogues)
            files[f"{name}_set"] = write_decode(out / f"decode-{name}.jsonl", result.dialogues)

    predictions: dict[str, dict[str, list[Prediction]]] = {s: {} for s in sets}
    metrics: dict[str, dict[str, DecodeMetrics]] = {s: {} for s in sets}
    classifier = model
    resume: dict[str, dict[str, dict[str, int]]] = {}  # set -> mode -> store counts
    for mode in modes:
        store = DurableDetection(out, served, mode=mode, threshold=threshold,
                                 evidence_threshold=evidence_threshold, model=model)
        for name, ds in sets.items():
            with progress_bar(len(ds), f"decode {name} {mode}", progress, unit="dialogue") as bar:
                results, named = await store.detect(client, [d.to_request() for d in ds],
                                                    chunk_size=chunk_size, bar=bar)
            classifier = named or classifier
            resume.setdefault(name, {})[mode] = store.resume_summary()
            preds = [Prediction.from_response(r.model_dump()) for r in results]
            predictions[name][mode] = preds
            metrics[name][mode] = decode_metrics(ds, preds,
                                                 returns_evidence=mode == "structured")

    rows = _rows(sets, modes, predictions)
    metric_rows = [{"set": s, "mode": m, **metrics[s][m].as_row()} for s in sets for m in modes]
    files.update(write_reports(out / "decode", rows))
    files.update({f"metrics_{k}": v for k, v in
                  write_reports(out / "decode-metrics", metric_rows).items()})

    table = format_table(side_by_side(metrics), title=f"DECODE contradiction detection: {path}")
    notes = [f"{name.upper()}: {len(sets.get(name, ()))} dialogue(s) generated, {skipped[name]} "
             "skipped (only contradictions with evidence annotations qualify), "
             f"{dropped[name]} dropped (no earlier turn by the last speaker left, as in the "
             "official RCT set)" for name in diagnostics]
    notes.append("evidence: strict_accuracy / evidence_* pool every dialogue and every gold turn; "
                 "*_paper keep the same-speaker candidate pairs of gold contradictions (Eq. 3); "
                 "n_other_speaker_gold_evidence = gold turns no structured detector can return; "
                 "n/a = the mode returns no evidence")
    notes += [f"{m}: {line}" for m, line in zip(modes, kind_notes)]
    table += "\n" + "\n".join(notes)
    envelope.models = model_provenance(served, [classifier])
    results_json = {
        "classifier": classifier, "dialogues_read": len(read), "detector_kind": detector_kind,
        "comparable_to": dict(zip(modes, kind_notes)),
        "diagnostics": {name: {"n": len(sets.get(name, ())), "skipped": skipped[name],
                               "dropped": dropped[name]}
                        for name in diagnostics},
        "metrics": {s: {m: metrics[s][m] for m in modes} for s in sets},
        "resume": resume,
    }
    files = write_run_report(envelope, results_json, table=table, table_path=out / "decode.txt",
                             report_path=out / "decode.report.json", files=files, echo=echo)
    return DecodeRun(sets, skipped, predictions, metrics, rows, envelope.report(results_json),
                     table, files)


def run_decode(client: DialscoreClient | str, path: str | Path, out_dir: str | Path = "runs/eval",
               *, concurrency: int | None = None, **kwargs: Any) -> DecodeRun:
    """`arun_decode` with a sync client or a URL (see :mod:`dialscore.sync_bridge`)."""
    from dialscore.sync_bridge import run_sync  # httpx: imported when a run starts, not for --help

    return run_sync(client, concurrency, "decode",
                    lambda ac: arun_decode(ac, path, out_dir, **kwargs))
