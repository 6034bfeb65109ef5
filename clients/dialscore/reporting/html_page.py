"""One self-contained HTML page: styles, script, data and images inline, nothing fetched.

:func:`render_page` takes :class:`Section` objects (one per run in a folder) and returns the page
as a string. Each section shows its provenance (key/value tables), its summary (the run's own
text tables, small HTML tables, PNG plots as ``data:`` URIs) and, when it has items, a browser of
them: rows embedded as JSON in a ``<script type="application/json">`` block, filtered, sorted and
shown one page of :data:`PAGE_SIZE` rows at a time by the plain script below, with a drill-down
panel for the row clicked. Nothing here depends on a run's kind except the drill-down, which the
script picks by the section's ``kind`` (probe, mutual, decode, robustness, compare; anything else
gets a key/value view of the row).

Limits: the whole page is parsed at once, so its size is what the browser can hold; a run of
20,000 probe pairs with per-token NLLs gives a page of about 10 MB that opens in well under a
second in Chromium (see docs/report.md). Only one page of rows is ever in the DOM.

The standard library only (``html``, ``json``, ``base64``): the client stays installable alone.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PAGE_SIZE", "Column", "Items", "Section", "png_data_uri", "render_page"]

#: Rows shown per page of an item list.
PAGE_SIZE = 25


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
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            # No request may leave the page, not even for a favicon.
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            f"img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
            f"<link rel=\"icon\" href=\"data:,\"><title>{_e(title)}</title><style>{CSS}</style>"
            f"</head><body><header><h1>{_e(title)}</h1><p>{_e(subtitle)}</p>{nav}</header>"
            f"<main>{body}</main><script>{SCRIPT}</script></body></html>\n")


CSS = """
:root{--fg:#1a1a1a;--muted:#4a4a4a;--line:#c8c8c8;--bg2:#f3f4f6;--accent:#0b5cad;--ok:#0a6b2c;--bad:#a4141b}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:#fff;margin:0}
header{background:#12263f;color:#fff;padding:12px 20px}
header h1{margin:0;font-size:20px;overflow-wrap:anywhere}
header p{margin:4px 0 0;color:#dfe7f1}
nav a{color:#fff;margin-right:14px}
main{padding:8px 20px 40px;max-width:1500px}
h2{border-bottom:2px solid var(--accent);padding-bottom:4px;overflow-wrap:anywhere}
h4{margin:12px 0 4px}
details>summary{cursor:pointer;font-weight:600;font-size:15px;margin:8px 0}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:4px 0 8px}
th,td{border:1px solid var(--line);padding:3px 7px;text-align:left;vertical-align:top}
th{background:var(--bg2)}
table.kv td{max-width:60ch;overflow-wrap:break-word}
table.num td{white-space:nowrap}
pre{background:var(--bg2);padding:8px;overflow-x:auto;font-size:12px;line-height:1.3}
figure{margin:8px 0;display:inline-block;max-width:100%}
figure img{max-width:min(100%,1000px);height:auto;border:1px solid var(--line)}
figcaption{color:var(--muted);font-size:12px}
.note{color:var(--muted)}
.controls{display:flex;flex-wrap:wrap;gap:8px 14px;align-items:end;margin:6px 0}
.controls label{display:flex;flex-direction:column;font-size:12px;color:var(--muted)}
.controls select,.controls input{font-size:13px;padding:2px 4px;max-width:22ch}
.list table{width:100%}
.list td{max-width:40ch;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.list tr.detail-row>td{max-width:none;white-space:normal;overflow:visible;padding:0 4px;background:#fff;cursor:default}
.list th{cursor:pointer;user-select:none;white-space:nowrap}
.list th.sorted{background:#dbe7f5}
.list tbody tr{cursor:pointer}
.list tbody tr:hover{background:#eef4fb}
.list tbody tr.open{background:#dbe7f5}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.yes{color:var(--ok);font-weight:600}.no{color:var(--bad);font-weight:600}
.pager{display:flex;gap:8px;align-items:center;margin:6px 0}
.pager button{padding:2px 10px}
.detail{border:2px solid var(--accent);border-radius:4px;padding:8px 12px;margin:10px 0;background:#fbfcfe}
.detail h4{margin-top:6px}
.turns{list-style:none;padding:0;margin:4px 0}
.turns li{padding:3px 6px;margin:2px 0;border-left:4px solid var(--line);overflow-wrap:anywhere}
.turns li.resp{border-left-color:var(--accent);background:#eef4fb}
.turns li.why{border-left-color:#7a4db3;font-style:italic}
.turns li.gold{border-left-color:#b86e00;background:#fff4e0}
.turns li.pred{outline:2px dashed var(--bad)}
.turns .who{font-weight:600;color:var(--muted);margin-right:6px}
.badge{display:inline-block;font-size:11px;padding:0 5px;border-radius:3px;margin-left:4px;color:#fff}
.badge.gold{background:#8a5300}.badge.pred{background:var(--bad)}.badge.best{background:var(--accent)}
.sides{display:grid;grid-template-columns:1fr 1fr;gap:12px}
@media (max-width:900px){.sides{grid-template-columns:1fr}}
.side{border:1px solid var(--line);padding:6px 8px;border-radius:4px;min-width:0}
.side .text{overflow-wrap:anywhere;margin:4px 0}
.heat{line-height:1.9;overflow-wrap:anywhere}
.heat span{white-space:pre-wrap;padding:1px 0;color:#111;box-shadow:inset -1px 0 0 #fff}
.legend{font-size:12px;color:var(--muted)}
.legend i{display:inline-block;width:90px;height:10px;vertical-align:middle;
 background:linear-gradient(90deg,hsl(10,90%,97%),hsl(10,90%,62%))}
"""

# The item browser: one instance per section with a data block. Plain ES2017, no library.
SCRIPT = r"""
(function(){
"use strict";
function el(tag, attrs, kids){
  var e = document.createElement(tag);
  if (attrs) for (var k in attrs){ if (k === "text") e.textContent = attrs[k]; else e.setAttribute(k, attrs[k]); }
  (kids || []).forEach(function(c){ if (c != null) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
  return e;
}
function fmt(v){
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(4);
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (Array.isArray(v)) return v.join(", ");
  return String(v);
}
function Browser(section, spec){
  var self = this;
  this.spec = spec; this.section = section;
  this.lookup = spec.lookup || {};
  this.S = this.lookup.strings || [];
  this.filters = {}; this.search = "";
  this.sortKey = spec.sort; this.desc = !!spec.desc; this.page = 0;
  var keys = spec.keys, textKeys = spec.textKeys, texts = spec.texts;
  spec.rows = spec.rows.map(function(a, i){
    var o = {};
    for (var j = 0; j < keys.length; j++){ var v = a[j]; o[keys[j]] = (textKeys[j] && v !== null) ? texts[v] : v; }
    Object.defineProperty(o, "_i", {value: i});
    return o;
  });
  var box = section.querySelector(".controls");
  spec.filters.forEach(function(key){
    var col = spec.columns.find(function(c){ return c.key === key; }) || {label: key};
    var seen = {};
    spec.rows.forEach(function(r){ seen[fmt(r[key])] = true; });
    var sel = el("select", {"data-filter": key}, [el("option", {value: "", text: "all"})]);
    Object.keys(seen).sort().forEach(function(v){ sel.appendChild(el("option", {value: v, text: v})); });
    sel.addEventListener("change", function(){ self.filters[key] = sel.value; self.page = 0; self.apply(); });
    box.appendChild(el("label", {}, [col.label, sel]));
  });
  var q = el("input", {type: "search", placeholder: "any column contains", "data-search": "1"});
  q.addEventListener("input", function(){ self.search = q.value.toLowerCase(); self.page = 0; self.apply(); });
  box.appendChild(el("label", {}, ["search", q]));
  this.apply();
}
Browser.prototype.apply = function(){
  var f = this.filters, search = this.search, key = this.sortKey, desc = this.desc, spec = this.spec;
  var idKey = spec.columns[0].key;
  this.view = spec.rows.filter(function(r){
    for (var k in f) if (f[k] && fmt(r[k]) !== f[k]) return false;
    if (search){
      var hay = spec.columns.map(function(c){ return fmt(r[c.key]); }).join(" ").toLowerCase();
      if (hay.indexOf(search) < 0) return false;
    }
    return true;
  });
  if (key){
    this.view.sort(function(a, b){
      var x = a[key], y = b[key];
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      var c = x < y ? -1 : x > y ? 1 : 0;
      return desc ? -c : c;
    });
  }
  this.render();
};
Browser.prototype.render = function(){
  var self = this, spec = this.spec, n = this.view.length, size = spec.pageSize;
  var pages = Math.max(1, Math.ceil(n / size));
  if (this.page >= pages) this.page = pages - 1;
  var start = this.page * size, rows = this.view.slice(start, start + size);
  this.section.querySelector(".count").textContent = "(" + n + " of " + spec.rows.length + ")";
  var head = el("tr", {}, spec.columns.map(function(c){
    var th = el("th", {"data-key": c.key, title: "sort by " + c.label,
                       "class": c.key === self.sortKey ? "sorted" : ""},
                [c.label + (c.key === self.sortKey ? (self.desc ? " \u25BC" : " \u25B2") : "")]);
    th.addEventListener("click", function(){
      if (self.sortKey === c.key) self.desc = !self.desc; else { self.sortKey = c.key; self.desc = !!c.num; }
      self.apply();
    });
    return th;
  }));
  var body = el("tbody");
  rows.forEach(function(r){
    var tr = el("tr", {"data-row": String(r._i)}, spec.columns.map(function(c){
      var v = r[c.key], td = el("td", {title: fmt(v), "data-key": c.key, text: fmt(v)});
      if (c.num) td.className = "n";
      if (typeof v === "boolean") td.className = v ? "yes" : "no";
      return td;
    }));
    tr.addEventListener("click", function(){
      var was = tr.classList.contains("open");
      self.section.querySelectorAll(".list tr.open").forEach(function(o){ o.classList.remove("open"); });
      self.section.querySelectorAll(".list tr.detail-row").forEach(function(o){ o.remove(); });
      if (was) return;
      tr.classList.add("open");
      var cell = el("td", {colspan: String(spec.columns.length)});
      tr.after(el("tr", {"class": "detail-row"}, [cell]));
      self.show(r, cell);
    });
    body.appendChild(tr);
  });
  var list = this.section.querySelector(".list");
  list.textContent = "";
  list.appendChild(el("div", {"class": "scroll"}, [el("table", {}, [el("thead", {}, [head]), body])]));
  var pager = this.section.querySelector(".pager");
  pager.textContent = "";
  var prev = el("button", {type: "button", "data-page": "prev", text: "\u2190 previous"});
  var next = el("button", {type: "button", "data-page": "next", text: "next \u2192"});
  prev.disabled = this.page === 0; next.disabled = this.page >= pages - 1;
  prev.addEventListener("click", function(){ self.page--; self.render(); });
  next.addEventListener("click", function(){ self.page++; self.render(); });
  pager.appendChild(prev);
  pager.appendChild(el("span", {"class": "pageinfo", text: "page " + (this.page + 1) + " of " + pages +
                                " \u00B7 rows " + (n ? start + 1 : 0) + "\u2013" + Math.min(n, start + size)}));
  pager.appendChild(next);
};
Browser.prototype.s = function(i){ return (typeof i === "number") ? this.S[i] : i; };
Browser.prototype.show = function(r, cell){
  var d = el("div", {"class": "detail"});
  cell.appendChild(d);
  var render = DETAIL[this.spec.kind] || DETAIL.generic;
  render.call(this, d, r);
  d.appendChild(kv(r, this.spec.columns));
  d.scrollIntoView({block: "nearest"});
  return d;
};
function kv(r, columns){
  var t = el("table", {"class": "kv"});
  columns.forEach(function(c){ t.appendChild(el("tr", {}, [el("th", {text: c.label}), el("td", {text: fmt(r[c.key])})])); });
  return el("details", {}, [el("summary", {text: "all fields of this row"}), t]);
}
function turns(list){ return el("ol", {"class": "turns"}, list); }
function turn(who, text, cls){ return el("li", {"class": cls || ""}, [el("span", {"class": "who", text: who}), text]); }
function heat(tokens, nlls, scale){
  var box = el("div", {"class": "heat"});
  tokens.forEach(function(t, i){
    var v = nlls[i], a = scale > 0 ? Math.min(1, Math.max(0, v / scale)) : 0;
    box.appendChild(el("span", {title: JSON.stringify(t) + "  NLL " + v.toFixed(3),
                                "data-nll": String(v),
                                style: "background:hsl(10,90%," + (97 - 35 * a).toFixed(1) + "%)",
                                text: t}));
  });
  return box;
}
var DETAIL = {};
DETAIL.generic = function(d, r){ d.appendChild(el("h4", {text: "Row"})); };
DETAIL.probe = function(d, r){
  var self = this, L = this.lookup, items = L.items || {};
  d.appendChild(el("h4", {text: r.model + " \u00B7 " + r.setting + " \u00B7 " + r.dataset + " " +
                          r.dialogue_id + " \u00B7 explanation " + r.explanation_index + " \u00B7 " +
                          r.corruption + " (" + r.category + ")"}));
  var v = items[r.valid_item], c = items[r.corrupted_item];
  var ctx = (v && L.contexts) ? (L.contexts[v.c] || []).map(function(i){ return self.s(i); }) : null;
  if (ctx){
    var hist = r.setting === "attribution" ? ctx.slice(0, ctx.length - 2) : ctx;
    var lis = hist.map(function(t, i){ return turn((i % 2 ? "B" : "A") + ":", t); });
    var resp = r.setting === "attribution" ? ctx[ctx.length - 2] : self.s(v.t);
    lis.push(turn("R:", resp, "resp"));
    if (r.setting === "attribution") lis.push(turn("why:", ctx[ctx.length - 1], "why"));
    d.appendChild(el("p", {"class": "note", text: r.setting === "inference" ?
      "Inference: NLL of the response R given each explanation and the history." :
      "Attribution: NLL of each explanation given the history, R and the why-turn."}));
    d.appendChild(turns(lis));
  } else {
    d.appendChild(el("p", {"class": "note", text: "The dialogue is not in this run's scores.jsonl."}));
  }
  var all = [];
  [v, c].forEach(function(x){ if (x && x.n) all = all.concat(x.n); });
  var scale = all.length ? Math.max.apply(null, all) : 0;
  function side(title, text, nll, item, cls){
    var kids = [el("h4", {text: title}), el("div", {"class": "text", text: text}),
                el("div", {}, ["mean NLL ", el("b", {"class": cls, text: nll.toFixed(4)})])];
    if (item && item.k){
      kids.push(el("div", {"class": "legend"}, ["per-token NLL of the " +
        (r.setting === "inference" ? "response R" : "explanation") + " (", el("i"),
        " 0 \u2026 " + scale.toFixed(2) + " nats; hover a token for its value)"]));
      kids.push(heat(item.k.map(function(i){ return self.s(i); }), item.n, scale));
    } else {
      kids.push(el("div", {"class": "legend", text: "no per-token NLLs recorded (run with --tokens)"}));
    }
    return el("div", {"class": "side"}, kids);
  }
  d.appendChild(el("div", {"class": "sides"}, [
    side("Valid explanation", r.valid_text, r.nll_valid, v, "nll-valid"),
    side("Corrupted explanation (" + r.corruption + ")", r.corrupted_text, r.nll_corrupted, c, "nll-corrupted")]));
  d.appendChild(el("p", {}, ["\u0394NLL = corrupted \u2212 valid = ",
    el("b", {"class": "delta", text: r.delta.toFixed(4)}), " \u2192 ",
    el("span", {"class": r.correct ? "yes" : "no", text: r.correct ? "correct (valid preferred)" : "wrong"})]));
};
DETAIL.mutual = function(d, r){
  var self = this, inst = (this.lookup.instances || {})[r.id];
  d.appendChild(el("h4", {text: "MuTual " + r.id + " \u00B7 gold " + fmt(r.gold) + " \u00B7 ranked " + r.ranked}));
  if (inst) d.appendChild(turns(inst.turns.map(function(t){ return turn(t[0] + ":", t[1]); })));
  else d.appendChild(el("p", {"class": "note", text: "The instance's text is not available (data file not found)."}));
  var t = el("table", {"class": "options"}, [el("tr", {}, [el("th", {text: "option"}), el("th", {text: "score"}),
    el("th", {text: "rank"}), el("th", {text: "text"})])]);
  (r.options || []).forEach(function(o, i){
    var badges = [];
    if (o.letter === r.gold) badges.push(el("span", {"class": "badge gold", text: "gold"}));
    if (r.ranked && r.ranked[0] === o.letter) badges.push(el("span", {"class": "badge best", text: "top"}));
    t.appendChild(el("tr", {"data-option": o.letter}, [el("td", {}, [o.letter].concat(badges)),
      el("td", {"class": "n score", text: fmt(o.score)}), el("td", {"class": "n", text: String(r.ranked.indexOf(o.letter) + 1)}),
      el("td", {text: inst ? inst.options[i] : ""})]));
  });
  d.appendChild(t);
};
DETAIL.decode = function(d, r){
  var dlg = ((this.lookup.dialogues || {})[r.set] || {})[r.id];
  d.appendChild(el("h4", {text: "DECODE " + r.set + " " + r.id + " \u00B7 mode " + r.mode +
    " \u00B7 gold " + (r.gold ? "contradiction" : "no contradiction") + " \u00B7 predicted " +
    (r.predicted ? "contradiction" : "no contradiction")}));
  var gold = r.gold_evidence || [], pred = r.evidence || [];
  if (!dlg){ d.appendChild(el("p", {"class": "note", text: "The dialogue's text is not available (data file not found)."})); return; }
  d.appendChild(el("p", {"class": "legend"}, [el("span", {"class": "badge gold", text: "gold evidence"}), " ",
    el("span", {"class": "badge pred", text: "predicted evidence"}), " \u00B7 the last turn is the one judged"]));
  d.appendChild(turns(dlg.map(function(t, i){
    var id = t[0], cls = [], badges = [];
    if (gold.indexOf(id) >= 0){ cls.push("gold"); badges.push(el("span", {"class": "badge gold", text: "gold"})); }
    if (pred.indexOf(id) >= 0){ cls.push("pred"); badges.push(el("span", {"class": "badge pred", text: "predicted"})); }
    if (i === dlg.length - 1) cls.push("resp");
    return el("li", {"class": cls.join(" "), "data-turn": String(id)},
      [el("span", {"class": "who", text: "#" + id + " (" + t[1] + "):"}), t[2]].concat(badges));
  })));
};
DETAIL.robustness = function(d, r){
  var rows = this.spec.rows.filter(function(x){ return x.id === r.id; });
  d.appendChild(el("h4", {text: "Response " + r.id}));
  var t = el("table", {}, [el("tr", {}, [el("th", {text: "variant"}), el("th", {text: "text"}),
    el("th", {text: "score"}), el("th", {text: "change"})])]);
  t.appendChild(el("tr", {}, [el("td", {text: "original"}), el("td", {text: r.response}),
    el("td", {"class": "n", text: fmt(r.original_score)}), el("td")]));
  rows.forEach(function(x){
    t.appendChild(el("tr", {"class": x === r ? "open" : "", "data-variant": x.kind}, [el("td", {text: x.kind}),
      el("td", {text: x.variant}), el("td", {"class": "n", text: fmt(x.variant_score)}),
      el("td", {"class": "n " + (x.delta < 0 ? "no" : x.delta > 0 ? "yes" : ""), text: fmt(x.delta)})]));
  });
  d.appendChild(t);
};
DETAIL.compare = function(d, r){
  d.appendChild(el("h4", {text: r.setting + " \u00B7 " + r.dataset + " " + r.dialogue_id + " \u00B7 explanation " +
    r.explanation_index + " \u00B7 " + r.corruption + " (" + r.category + ")"}));
  d.appendChild(el("p", {"class": "text", text: "valid: " + r.valid_text}));
  d.appendChild(el("p", {"class": "text", text: "corrupted: " + r.corrupted_text}));
};
document.querySelectorAll("section.run").forEach(function(section){
  var data = document.getElementById(section.id + "-data");
  if (data) section.browser = new Browser(section, JSON.parse(data.textContent));
});
window.dialscoreReportReady = true;
})();
"""
