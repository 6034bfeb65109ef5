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
