"""The run envelope: what produced a report, recorded the same way by the probe and every evaluation.

Every ``report.json`` (the probe's ``report.json``, an evaluation's ``NAME.report.json``) is an
object that opens with the envelope's keys, then the run's results::

    run             what ran: "probe", "mutual", "decode" or "robustness"
    client_version  the version of the `dialscore` distribution that wrote the report
    config          the configuration: `data` (the path read, "<in memory>" for data given as
                    objects), `data_sha256` (see :func:`data_checksum`; None for in-memory data),
                    `server` (the service's URL) and every option the run was given
    models          {name: provenance} of the served models the run used, from GET /v1/models
                    (:meth:`~dialscore.model_card.ModelCard.provenance`: family, source,
                    revision, stand_in, dtype, max_length, format); a name the service did not
                    report maps to {"name": name, "reported": false}
    started_at      when the run started, ISO 8601 in UTC to the second
    finished_at     when the report was written, same format
    elapsed_s       seconds between the two, on the monotonic clock, to the millisecond
    files           {kind: path} of every file the run wrote, the report itself included
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dialscore.reporting.atomic import atomic_write_text
from dialscore.reporting.rows import write_json

if TYPE_CHECKING:
    from dialscore.model_card import ModelCard

__all__ = ["Echo", "RunEnvelope", "client_version", "data_checksum", "model_provenance", "utc_now",
           "write_run_report"]

#: Where a run prints its table and a closing line (e.g. `print`); None: print nothing.
Echo = Callable[[str], object] | None

IN_MEMORY = "<in memory>"


def utc_now() -> str:
    """The current time, ISO 8601 in UTC to the second (``2025-01-31T12:00:00+00:00``)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def client_version() -> str:
    """The installed `dialscore` distribution's version, or "unknown" when run from a tree
    that is not installed."""
    try:
        return version("dialscore")
    except PackageNotFoundError:
        return "unknown"


def data_checksum(path: str | Path) -> str:
    """The SHA-256 (hex) of a file's bytes; for a folder (MuTual's official layout), of its
    files' names and bytes in name order (each name followed by a NUL byte, then its bytes)."""
    source = Path(path)
    digest = hashlib.sha256()
    files = sorted(p for p in source.iterdir() if p.is_file()) if source.is_dir() else [source]
    for p in files:
        if source.is_dir():
            digest.update(p.name.encode() + b"\0")
        with open(p, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def model_provenance(served: Mapping[str, ModelCard],
                     names: Sequence[str | None]) -> dict[str, dict[str, Any]]:
    """{name: provenance} of the models in `names` (None and repeats skipped), as `served`
    (GET /v1/models by name) reports them."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name is None or name in out:
            continue
        card = served.get(name)
        out[name] = card.provenance() if card is not None else {"name": name, "reported": False}
    return out


@dataclass(kw_only=True)
class RunEnvelope:
    """The envelope of one run (see the module docstring). Create it when the run starts; call
    :meth:`finish` with the files written just before the report is written."""

    run: str
    config: dict[str, Any] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    started_at: str = field(default_factory=utc_now)
    finished_at: str | None = None
    elapsed_s: float | None = None
    files: dict[str, str] = field(default_factory=dict)
    client_version: str = field(default_factory=client_version)
    _clock: float = field(default_factory=time.monotonic, repr=False, compare=False)

    @classmethod
    def start(cls, run: str, data: str | Path | None, server: str, **options: Any) -> RunEnvelope:
        """The envelope of a run starting now on `data` (a path, or None for data given as
        objects) against the service at `server`; `options` complete the configuration."""
        return cls(run=run, config={**cls.data_config(data), "server": server, **options})

    @staticmethod
    def data_config(data: str | Path | None) -> dict[str, Any]:
        """The `data` and `data_sha256` entries of a configuration, for a path or (None) data
        given as objects."""
        if data is None:
            return {"data": IN_MEMORY, "data_sha256": None}
        return {"data": str(data), "data_sha256": data_checksum(data)}

    def finish(self, files: Mapping[str, str | Path]) -> None:
        """Stamp the end time and the elapsed seconds, and record `files` ({kind: path})."""
        self.finished_at = utc_now()
        self.elapsed_s = round(time.monotonic() - self._clock, 3)
        self.files = {kind: str(path) for kind, path in files.items()}

    def to_json(self) -> dict[str, Any]:
        """The envelope's keys, in the order a report starts with them."""
        return {"run": self.run, "client_version": self.client_version, "config": self.config,
                "models": self.models, "started_at": self.started_at,
                "finished_at": self.finished_at, "elapsed_s": self.elapsed_s,
                "files": self.files}

    def report(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """The report: the envelope's keys, then `results`, which may not redefine any of them."""
        head = self.to_json()
        clash = sorted(set(head) & set(results))
        if clash:
            raise ValueError(f"results may not redefine the envelope's keys {clash}")
        return {**head, **results}


def write_run_report(envelope: RunEnvelope, results: Mapping[str, Any], *, table: str,
                     table_path: Path, report_path: Path, files: Mapping[str, Path],
                     echo: Echo = None) -> dict[str, Path]:
    """Close a run: write the terminal `table` to `table_path` (file kind "table"), finish the
    envelope, write :meth:`RunEnvelope.report` of `results` to `report_path` (kind "report") and
    echo the table and a line naming the files. Then (re)write the folder's ``report.html``
    (:mod:`dialscore.reporting.html_runs`) from the files now there, including this report: it
    is neither listed in report.json, which it reads, nor returned. Returns every file written
    but the page, `files` first.

    A page that cannot be built does not fail the run (its results are written by then): the
    reason is echoed, and ``dialscore report DIR`` writes it later."""
    envelope.report(results)  # refuse a clash before anything is written
    written = dict(files)
    written["table"] = atomic_write_text(table_path, table.rstrip("\n") + "\n")
    written["report"] = report_path
    envelope.finish(written)
    write_json(report_path, envelope.report(results))
    page, page_error = None, None
    try:
        from dialscore.reporting.html_runs import write_report_html

        page = write_report_html(report_path.parent)["html"]
    except Exception as exc:  # noqa: BLE001 - the run's results are safe; say why, go on
        page_error = (f"report.html not written ({type(exc).__name__}: {exc}); "
                      f"run `dialscore report {report_path.parent}`")
    if echo is not None:
        echo(table.rstrip("\n"))
        shown = [*written.values(), *([page] if page else [])]
        names = ", ".join(sorted(path.name for path in shown))
        echo(f"wrote {names} to {report_path.parent} ({envelope.elapsed_s:.1f} s)")
        if page_error:
            echo(page_error)
    return written
