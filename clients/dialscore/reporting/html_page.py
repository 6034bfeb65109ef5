"""One self-contained HTML page: styles, script, data and images inline, nothing fetched.

:func:`render_page` takes :class:`Section` objects (one per run in a folder) and returns the page
as a string. Each section shows its provenance (key/value tables), its summary (the run's own
text tables, small HTML tables, PNG plots as ``data:`` URIs) and, when it has items, a browser of
them: rows embedded as JSON in a ``<script type="application/json">`` block, filtered, sorted and
shown one page of :data:`PAGE_SIZE` rows at a time by the page's script, with a drill-down
panel for the row clicked. Nothing here depends on a run's kind except the drill-down, which the
script picks by the section's ``kind`` (probe, mutual, decode, robustness, compare; anything else
gets a key/value view of the row).

The stylesheet and the script are files of the package, inlined into every page:
dialscore/reporting/page_assets/report.css and dialscore/reporting/page_assets/report.js (the
item browser, one instance per section with a data block; plain ES2017, no library). They are
read with :mod:`importlib.resources` on the first render, so they work from a wheel or a zip too;
clients/pyproject.toml ships them as package data.

Limits: the whole page is parsed at once, so its size is what the browser can hold; a run of
20,000 probe pairs with per-token NLLs gives a page of about 10 MB that opens in well under a
second in Chromium (see docs/report.md). Only one page of rows is ever in the DOM.

The standard library only (``html``, ``json``, ``base64``, ``importlib.resources``): the client
stays installable alone.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

__all__ = ["PAGE_SIZE", "Column", "Items", "Section", "png_data_uri", "render_page"]

#: Rows shown per page of an item list.
PAGE_SIZE = 25


@functools.lru_cache(maxsize=None)
def _asset(name: str) -> str:
    """The text of ``page_assets/<name>`` as the page embeds it: between one newline before and
    one after (a file's own leading or trailing blank lines are not part of the page)."""
    text = files(__package__).joinpath("page_assets").joinpath(name).read_text(encoding="utf-8")
    return "\n" + text.strip("\n") + "\n"


@dataclass(frozen=True)
class Column:
    """A column of an item list: the row key, its header, and whether it holds numbers."""

    key: str
    label: str
    numeric: bool = False


@dataclass
class Items:
    """The browsable rows of a section.

    ``rows``: plain JSON objects; ``filters``: the keys offered as drop-down filters (their
    distinct values); ``sort``: the key sorted on at first (descending when ``descending``);
    ``lookup``: shared data the drill-down reads (dialogues, per-token NLLs, a string table).
    """

    columns: Sequence[Column]
    rows: Sequence[Mapping[str, Any]]
    filters: Sequence[str] = ()
    sort: str | None = None
    descending: bool = False
    lookup: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass
class Section:
    """One run's part of the page."""

    id: str
    title: str
    kind: str
    provenance: Sequence[tuple[str, Sequence[Sequence[str]], Sequence[str]]] = ()  # (caption, rows, header)
    texts: Sequence[tuple[str, str]] = ()      # (caption, preformatted text)
    tables: Sequence[tuple[str, Sequence[str], Sequence[Sequence[Any]]]] = ()  # (caption, header, rows)
    images: Sequence[tuple[str, str]] = ()     # (caption, data URI)
    items: Items | None = None
    notes: Sequence[str] = ()
    links: Sequence[tuple[str, str]] = ()  # (label, file name beside the page): sibling pages


def png_data_uri(path: str | Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return _e(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    thead = f"<thead><tr>{head}</tr></thead>" if any(header) else ""
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return (f'<div class="scroll"><table class="{cls}">{thead}'
            f"<tbody>{body}</tbody></table></div>")


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities as None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _packed(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows as arrays under one list of keys, the values of all-text keys as indices into one
    table of distinct texts (a run repeats its model, setting and explanation texts across many
    rows): about half the size of the rows as objects. The script unpacks them once."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    text = [all(isinstance(r.get(k), (str, type(None))) for r in rows) for k in keys]
    index: dict[str, int] = {}

    def pack(value: Any, is_text: bool) -> Any:
        if not is_text or value is None:
            return value
        i = index.get(value)
        if i is None:
            i = index[value] = len(index)
        return i

    packed = [[pack(r.get(k), t) for k, t in zip(keys, text)] for r in rows]
    return {"keys": keys, "textKeys": text, "texts": list(index), "rows": packed}


def _json_script(element_id: str, value: Any) -> str:
    # No "<" at all inside the element, so no text can end it early or open a comment in it:
    # "<" appears only inside JSON strings, where \u003c means the same.
    text = json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c")
    return f'<script type="application/json" id="{_e(element_id)}">{text}</script>'


def _section(s: Section) -> str:
    parts = [f'<section class="run" id="{_e(s.id)}" data-kind="{_e(s.kind)}">',
             f"<h2>{_e(s.title)}</h2>"]
    parts += [f'<p class="note">{_e(n)}</p>' for n in s.notes]
    if s.links:
        parts.append('<p class="note">See also: ' + ", ".join(
            f'<a href="{_e(href)}">{_e(label)}</a>' for label, href in s.links) + "</p>")
    if s.provenance:
        parts.append('<details open class="prov"><summary>Provenance</summary>')
        for caption, rows, header in s.provenance:
            if len(rows) > 8:  # a long settings list stays one click away
                parts.append(f'<details class="long"><summary>{_e(caption)} ({len(rows)})</summary>'
                             + _table(header, rows, "kv") + "</details>")
            else:
                parts.append(f"<h4>{_e(caption)}</h4>" + _table(header, rows, "kv"))
        parts.append("</details>")
    if s.tables or s.texts or s.images:
        parts.append('<details open class="summary"><summary>Summary</summary>')
        for caption, header, rows in s.tables:
            parts.append(f"<h4>{_e(caption)}</h4>" + _table(header, rows, "num"))
        for caption, text in s.texts:
            parts.append(f"<h4>{_e(caption)}</h4><pre>{_e(text)}</pre>")
        for caption, uri in s.images:
            parts.append(f'<figure><img alt="{_e(caption)}" src="{uri}"><figcaption>{_e(caption)}'
                         "</figcaption></figure>")
        parts.append("</details>")
    if s.items is not None:
        it = s.items
        spec = {"kind": s.kind, "columns": [{"key": c.key, "label": c.label, "num": c.numeric}
                                            for c in it.columns],
                "filters": list(it.filters), "sort": it.sort, "desc": it.descending,
                "pageSize": PAGE_SIZE, **_packed(it.rows), "lookup": dict(it.lookup)}
        parts.append('<h3>Items <span class="count"></span></h3>')
        if it.note:
            parts.append(f'<p class="note">{_e(it.note)}</p>')
        parts.append('<div class="browser"><div class="controls"></div><div class="list"></div>'
                     '<div class="pager"></div></div>')
        parts.append(_json_script(f"{s.id}-data", spec))
    parts.append("</section>")
    return "\n".join(parts)


def render_page(title: str, sections: Sequence[Section], subtitle: str = "") -> str:
    nav = ""
    if len(sections) > 1:
        nav = "<nav>" + " ".join(f'<a href="#{_e(s.id)}">{_e(s.title)}</a>' for s in sections) + "</nav>"
    body = "\n".join(_section(s) for s in sections)
    css, script = _asset("report.css"), _asset("report.js")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            # No request may leave the page, not even for a favicon.
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            f"img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
            f"<link rel=\"icon\" href=\"data:,\"><title>{_e(title)}</title><style>{css}</style>"
            f"</head><body><header><h1>{_e(title)}</h1><p>{_e(subtitle)}</p>{nav}</header>"
            f"<main>{body}</main><script>{script}</script></body></html>\n")

