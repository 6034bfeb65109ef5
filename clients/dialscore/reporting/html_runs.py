"""``report.html`` of a run folder, built from the files the runs wrote there and nothing else.

:func:`write_report_html` reads every run report of a folder (the probe's ``report.json``, an
evaluation's ``NAME.report.json``) and writes one page, ``report.html``, with a section per run
(:mod:`dialscore.reporting.html_page`), and ``compare-A-vs-B.html`` beside each
``compare-A-vs-B.json`` that ``dialscore probe compare`` wrote. What each section reads:

    probe       report.json, tables.txt, pairs.jsonl, scores.jsonl (dialogue, NLLs and the
                per-token NLLs when the run kept them), corruptions.png, models.png
    mutual      mutual-TAG.report.json, .json rows, .txt table; the options' text from the data
                file named in the report (config.data), when it is still there
    decode      decode.report.json, decode.json rows, decode-metrics.json, decode.txt; the turns
                from config.data and the decode-a2t/-rct.jsonl sets of the folder
    robustness  robustness-TAG.report.json, .json rows, -variants.json, .txt table, .png
    other       any NAME.report.json with NAME.json rows (decode-human-bot): rows, table, plots

Only the texts of MuTual and DECODE live outside the folder (the runs keep ids, not texts): when
the data file has moved, those drill-downs show the scores without the text, and say so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dialscore.reporting.atomic import atomic_write_text
from dialscore.reporting.html_page import Column, Items, Section, png_data_uri, render_page

__all__ = ["REPORT_HTML", "build_sections", "write_report_html"]

REPORT_HTML = "report.html"


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line of a resume store
                if isinstance(row, dict):
                    yield row


def _in_folder(run_dir: Path, recorded: str | None) -> Path | None:
    """A file the report names, looked up in the run folder (paths are recorded as the run saw
    them, so the folder may have moved since)."""
    if not recorded:
        return None
    path = run_dir / Path(recorded).name
    return path if path.is_file() else None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _provenance(report: Mapping[str, Any]) -> list[tuple[str, list[list[str]], list[str]]]:
    run = [["run", report.get("run")], ["started", report.get("started_at")],
           ["finished", report.get("finished_at")], ["elapsed (s)", report.get("elapsed_s")],
           ["client version", report.get("client_version")]]
    config = report.get("config") or {}
    seed = config.get("seed")
    if seed is not None:
        run.append(["seed", seed])
    models = []
    for name, m in (report.get("models") or {}).items():
        fmt = m.get("format_choices") or {}
        stand_in = m.get("stand_in")
        models.append([name, m.get("family"), m.get("source"), m.get("revision"),
                       "stand-in" if stand_in else ("real" if stand_in is False else "?"),
                       m.get("dtype"), m.get("max_length"), fmt.get("why_turn", ""),
                       fmt.get("explanation_placement", "")])
    out = [("Run", [[k, _text(v)] for k, v in run], ["", ""])]
    if models:
        out.append(("Models", [[_text(c) if c is not None else "" for c in row] for row in models],
                    ["model", "family", "source", "revision", "stand-in or real", "dtype",
                     "max length", "why turn", "explanation placement"]))
    out.append(("Settings", [[k, _text(v)] for k, v in config.items()], ["setting", "value"]))
    return out


def _common(run_dir: Path, report: Mapping[str, Any], section: Section) -> Section:
    files = report.get("files") or {}
    table = _in_folder(run_dir, files.get("table"))
    if table is not None:
        section.texts = [*section.texts, ("Tables", table.read_text(encoding="utf-8"))]
    pngs = [p for p in (_in_folder(run_dir, f) for f in files.values() if str(f).endswith(".png")) if p]
    section.images = [*section.images, *[(p.name, png_data_uri(p)) for p in pngs]]
    section.provenance = _provenance(report)
    return section


class _Strings:
    """A string table: repeated texts (contexts, tokens) are embedded once."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.values)
            self.values.append(s)
        return i


# ----------------------------------------------------------------------------------- probe

PROBE_COLUMNS = (Column("model", "model"), Column("setting", "setting"), Column("dataset", "dataset"),
                 Column("dialogue_id", "dialogue"), Column("corruption", "corruption"),
                 Column("category", "category"), Column("nll_valid", "NLL valid", True),
                 Column("nll_corrupted", "NLL corrupted", True), Column("delta", "ΔNLL", True),
                 Column("correct", "correct"))


def _probe_section(run_dir: Path, report: Mapping[str, Any]) -> Section:
    pairs = list(_read_jsonl(run_dir / "pairs.jsonl")) if (run_dir / "pairs.jsonl").is_file() else []
    wanted = {p.get(k) for p in pairs for k in ("valid_item", "corrupted_item")} - {None, ""}
    strings, contexts = _Strings(), _Strings()
    context_rows: list[list[int]] = []
    items: dict[str, dict[str, Any]] = {}
    scores = run_dir / "scores.jsonl"
    if wanted and scores.is_file():
        for row in _read_jsonl(scores):
            iid = row.get("id")
            if iid not in wanted or iid in items:
                continue
            ctx = json.dumps(row.get("context") or [])
            ci = contexts(ctx)
            if ci == len(context_rows):
                context_rows.append([strings(t) for t in row.get("context") or []])
            item: dict[str, Any] = {"c": ci, "t": strings(row.get("target", ""))}
            if row.get("tokens") and row.get("token_nlls"):
                item["k"] = [strings(t) for t in row["tokens"]]
                item["n"] = [round(float(x), 4) for x in row["token_nlls"]]
            items[iid] = item
    rows = []
    for p in pairs:
        rows.append({k: p.get(k) for k in (
            "model", "setting", "dataset", "dialogue_id", "corruption", "category", "nll_valid",
            "nll_corrupted", "delta", "correct", "explanation_index", "dimension", "valid_text",
            "corrupted_text", "truncated", "pair_id", "valid_item", "corrupted_item")})
    tokens = sum("k" in i for i in items.values())
    note = ("Click a row for the dialogue, both explanations and their per-token NLLs. "
            f"{len(items)} scored items embedded, {tokens} with per-token NLLs.")
    if pairs and not wanted:
        note = "This run's pairs.jsonl names no scored items (an older client): no dialogue or tokens."
    section = Section("probe", "CEDAR probes", "probe", items=Items(
        PROBE_COLUMNS, rows, filters=("model", "setting", "dataset", "corruption", "category", "correct"),
        sort="delta", descending=False,
        lookup={"strings": strings.values, "contexts": context_rows, "items": items}, note=note))
    section = _common(run_dir, report, section)
    for name in ("corruptions.png", "models.png"):
        if (run_dir / name).is_file() and name not in {n for n, _ in section.images}:
            section.images = [*section.images, (name, png_data_uri(run_dir / name))]
    compares = sorted(run_dir.glob("compare-*.json"))
    section.links = [(f"comparison {p.stem[len('compare-'):]}", p.with_suffix(".html").name)
                     for p in compares]
    return section


# ----------------------------------------------------------------------------------- mutual

def _mutual_section(run_dir: Path, report: Mapping[str, Any], stem: str) -> Section:
    rows_path = run_dir / f"{stem}.json"
    raw = _read_json(rows_path) if rows_path.is_file() else []
    lookup: dict[str, Any] = {"instances": {}}
    data = (report.get("config") or {}).get("data")
    notes = []
    if data and Path(data).exists():
        try:
            from dialscore.evals.mutual import read_mutual

            lookup["instances"] = {i.id: {"turns": [[str(t.speaker), t.text] for t in i.context],
                                          "options": list(i.options)} for i in read_mutual(data)}
        except (ValueError, OSError) as exc:
            notes.append(f"data file {data} not read ({exc}): options shown without text")
    else:
        notes.append(f"data file {data} not found: options shown without their text")
    rows = []
    for r in raw:
        letters = sorted(k[len("score_"):] for k in r if k.startswith("score_"))
        options = [{"letter": x, "score": r.get(f"score_{x}")} for x in letters]
        scores = {o["letter"]: o["score"] for o in options if o["score"] is not None}
        ranked = r.get("ranked") or ""
        margin = None
        gold = r.get("gold")
        if gold in scores and len(scores) > 1 and ranked:
            higher_better = scores[ranked[0]] >= scores[ranked[-1]]
            best_other = (max if higher_better else min)(v for k, v in scores.items() if k != gold)
            margin = (scores[gold] - best_other) * (1 if higher_better else -1)
        rows.append({"id": r.get("id"), "gold": gold, "ranked": ranked,
                     "gold_rank": r.get("gold_rank"), "correct": r.get("gold_rank") == 1 if gold else None,
                     "margin": margin, "options": options})
    cols = (Column("id", "instance"), Column("gold", "gold"), Column("ranked", "ranking"),
            Column("gold_rank", "gold rank", True), Column("correct", "correct"),
            Column("margin", "gold − best other", True))
    section = Section(stem, f"MuTual: {stem}", "mutual", notes=notes, items=Items(
        cols, rows, filters=("gold", "gold_rank", "correct"), sort="margin", lookup=lookup,
        note="margin: the gold option's score minus the best other option's, oriented so that "
             "positive means the gold option is preferred."))
    metrics = report.get("metrics") or {}
    if metrics:
        section.tables = [("Metrics", list(metrics), [list(metrics.values())])]
    return _common(run_dir, report, section)


# ----------------------------------------------------------------------------------- decode

def _decode_turns(dialogues: Sequence[Any]) -> dict[str, list[list[Any]]]:
    return {d.id: [[t.id if t.id is not None else k, str(t.speaker), t.text]
                   for k, t in enumerate(d.turns)] for d in dialogues}


def _decode_section(run_dir: Path, report: Mapping[str, Any]) -> Section:
    raw = _read_json(run_dir / "decode.json") if (run_dir / "decode.json").is_file() else []
    modes = sorted({k[:-len("_predicted")] for r in raw for k in r if k.endswith("_predicted")})
    dialogues: dict[str, dict[str, Any]] = {}
    notes = []
    from dialscore.evals.decode import read_decode

    data = (report.get("config") or {}).get("data")
    try:
        if data and Path(data).is_file():
            dialogues["original"] = _decode_turns(read_decode(data))
        else:
            notes.append(f"data file {data} not found: dialogues shown without their turns")
        for name in ("a2t", "rct"):
            if (run_dir / f"decode-{name}.jsonl").is_file():
                dialogues[name] = _decode_turns(read_decode(run_dir / f"decode-{name}.jsonl"))
    except (ValueError, OSError, KeyError) as exc:
        notes.append(f"DECODE texts not read ({exc})")
    rows = []
    for r in raw:
        for m in modes:
            pred = r.get(f"{m}_predicted")
            rows.append({"set": r.get("set"), "id": r.get("id"), "mode": m, "group": r.get("group"),
                         "gold": r.get("gold"), "predicted": pred,
                         "probability": r.get(f"{m}_probability"),
                         "correct": None if pred is None else pred == r.get("gold"),
                         "gold_evidence": r.get("gold_evidence") or [],
                         "evidence": r.get(f"{m}_evidence") or []})
    cols = (Column("id", "dialogue"), Column("set", "set"), Column("mode", "mode"),
            Column("group", "group"), Column("gold", "gold contradiction"),
            Column("predicted", "predicted"), Column("probability", "probability", True),
            Column("correct", "correct"), Column("gold_evidence", "gold evidence"),
            Column("evidence", "predicted evidence"))
    section = Section("decode", "DECODE contradiction detection", "decode", notes=notes, items=Items(
        cols, rows, filters=("set", "mode", "group", "gold", "correct"), sort="probability",
        descending=True, lookup={"dialogues": dialogues}))
    section.tables = _records_table("Metrics", run_dir / "decode-metrics.json")
    return _common(run_dir, report, section)


def _records_table(title: str, path: Path) -> list[tuple[str, list[str], list[list[Any]]]]:
    """The JSON list of records at `path` as one table titled `title` (columns: the first
    record's keys), or no table when the file is absent or empty."""
    records = _read_json(path) if path.is_file() else []
    if not records:
        return []
    header = list(records[0])
    return [(title, header, [[r.get(h) for h in header] for r in records])]


# ----------------------------------------------------------------------------------- robustness

def _robustness_section(run_dir: Path, report: Mapping[str, Any], stem: str) -> Section:
    rows_path = run_dir / f"{stem}.json"
    raw = _read_json(rows_path) if rows_path.is_file() else []
    cols = (Column("id", "response"), Column("kind", "variant"), Column("category", "category"),
            Column("original_score", "original score", True),
            Column("variant_score", "variant score", True), Column("delta", "change", True),
            Column("replaced_share", "replaced share", True))
    section = Section(stem, f"Robustness: {stem}", "robustness", items=Items(
        cols, raw, filters=("kind", "category"), sort="delta",
        note="change = variant score − original score; click a row for the original and every "
             "variant of that response."))
    section.tables = _records_table("Variants", run_dir / f"{stem}-variants.json")
    return _common(run_dir, report, section)


# ----------------------------------------------------------------------------------- generic

def _generic_section(run_dir: Path, report: Mapping[str, Any], stem: str) -> Section:
    rows_path = run_dir / f"{stem}.json"
    raw = _read_json(rows_path) if rows_path.is_file() else []
    raw = raw if isinstance(raw, list) else []
    keys = list(dict.fromkeys(k for r in raw[:100] if isinstance(r, dict) for k in r))
    scalar = [k for k in keys if all(not isinstance(r.get(k), (dict, list)) for r in raw[:100])]
    numeric = {k for k in scalar if any(isinstance(r.get(k), float) for r in raw[:100])}
    filters = [k for k in scalar if k not in numeric
               and len({_text(r.get(k)) for r in raw}) <= 30]
    cols = [Column(k, k, k in numeric) for k in scalar]
    items = Items(cols, raw, filters=filters, sort=next(iter(numeric), None)) if cols else None
    section = Section(stem, f"{report.get('run', 'run')}: {stem}", "generic", items=items)
    return _common(run_dir, report, section)


# ----------------------------------------------------------------------------------- compare

def _compare_section(run_dir: Path, path: Path) -> Section:
    doc = _read_json(path)
    a, b = doc.get("model_a"), doc.get("model_b")
    groups = doc.get("groups") or []
    header = ["setting", "category", "n_pairs", "n_dialogues", f"accuracy {a}", f"accuracy {b}",
              "difference A − B", "95% CI low", "95% CI high", "p"]
    table = [[g.get(k) for k in ("setting", "category", "n_pairs", "n_dialogues", "accuracy_a",
                                 "accuracy_b", "difference", "ci_low", "ci_high", "p_value")]
             for g in groups]
    pairs = list(_read_jsonl(run_dir / "pairs.jsonl")) if (run_dir / "pairs.jsonl").is_file() else []
    key = ("setting", "dataset", "dialogue_id", "explanation_index", "corruption")
    by_b = {tuple(p.get(k) for k in key): p for p in pairs if p.get("model") == b}
    rows = []
    for p in pairs:
        if p.get("model") != a:
            continue
        q = by_b.get(tuple(p.get(k) for k in key))
        if q is None:
            continue
        rows.append({"setting": p["setting"], "dataset": p["dataset"], "dialogue_id": p["dialogue_id"],
                     "explanation_index": p["explanation_index"], "corruption": p["corruption"],
                     "category": p["category"], "delta_a": p["delta"], "delta_b": q["delta"],
                     "difference": p["delta"] - q["delta"], "correct_a": p["correct"],
                     "correct_b": q["correct"], "agree": p["correct"] == q["correct"],
                     "valid_text": p["valid_text"], "corrupted_text": p["corrupted_text"]})
    cols = (Column("dialogue_id", "dialogue"), Column("setting", "setting"), Column("dataset", "dataset"),
            Column("corruption", "corruption"), Column("category", "category"),
            Column("delta_a", f"ΔNLL {a}", True), Column("delta_b", f"ΔNLL {b}", True),
            Column("difference", "ΔNLL A − B", True), Column("correct_a", f"correct {a}"),
            Column("correct_b", f"correct {b}"), Column("agree", "agree"))
    prov = [("Comparison", [["model A", a], ["model B", b], ["seed", doc.get("seed")],
                            ["bootstrap resamples", doc.get("n_boot")], ["level", doc.get("level")],
                            ["sampling", doc.get("sampling")], ["difference", doc.get("difference")]],
             ["", ""])]
    txt = path.with_suffix(".txt")
    return Section("compare", f"{a} vs {b}", "compare", provenance=prov,
                   tables=[("Paired differences per setting and category", header, table)],
                   texts=[("Table", txt.read_text(encoding="utf-8"))] if txt.is_file() else [],
                   items=Items(cols, rows, filters=("setting", "dataset", "corruption", "category",
                                                    "correct_a", "correct_b", "agree"),
                               sort="difference",
                               note="Pairs both models scored, matched on (setting, dataset, "
                                    "dialogue, explanation, corruption)."))


# ----------------------------------------------------------------------------------- folder

_MUTUAL = re.compile(r"^(mutual-.+)\.report\.json$")
_ROBUSTNESS = re.compile(r"^(robustness-.+)\.report\.json$")


def build_sections(run_dir: str | Path) -> list[Section]:
    """One section per run report in `run_dir`, the probe's first, the others by file name."""
    run_dir = Path(run_dir)
    sections = []
    if (run_dir / "report.json").is_file():
        report = _read_json(run_dir / "report.json")
        if report.get("run") == "probe":
            sections.append(_probe_section(run_dir, report))
    for path in sorted(run_dir.glob("*.report.json")):
        report, name = _read_json(path), path.name
        stem = name[:-len(".report.json")]
        if m := _MUTUAL.match(name):
            sections.append(_mutual_section(run_dir, report, m.group(1)))
        elif name == "decode.report.json":
            sections.append(_decode_section(run_dir, report))
        elif m := _ROBUSTNESS.match(name):
            sections.append(_robustness_section(run_dir, report, m.group(1)))
        else:
            sections.append(_generic_section(run_dir, report, stem))
    return sections


def write_report_html(run_dir: str | Path) -> dict[str, Path]:
    """Write ``report.html`` (when the folder holds a run report) and ``compare-*.html`` (one per
    comparison) into `run_dir` from its files; returns ``{kind: path}``, the page of a comparison
    under its file stem. Raises FileNotFoundError when the folder holds neither."""
    run_dir = Path(run_dir)
    sections = build_sections(run_dir)
    compares = sorted(run_dir.glob("compare-*.json"))
    if not sections and not compares:
        raise FileNotFoundError(f"{run_dir}: no report.json, NAME.report.json or compare-*.json: "
                                "not the folder of a finished run")
    out: dict[str, Path] = {}
    if sections:
        out["html"] = atomic_write_text(run_dir / REPORT_HTML, render_page(
            f"dialscore report: {run_dir.resolve().name}", sections,
            "Generated from the run's own files; self-contained, works offline."))
    for path in compares:
        section = _compare_section(run_dir, path)
        out[path.stem] = atomic_write_text(path.with_suffix(".html"), render_page(
            f"dialscore compare: {section.title}", [section], f"Run folder {run_dir.resolve().name}"))
    return out
