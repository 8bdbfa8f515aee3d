"""`conductor trace view`: a trace as one self-contained HTML sequence diagram.

The page carries the trace as JSON and draws it with inline CSS and JS (no
network): one lifeline per component, one arrow per message, request and
response paired, filters by session and method, and the full payload of a
clicked arrow. Only the rows in view are in the DOM, so traces of tens of
thousands of messages stay fluid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

__all__ = ["TraceError", "read_trace", "render"]


class TraceError(Exception):
    """The trace file cannot be read (message is for the user)."""


def read_trace(path: Path) -> list[dict[str, Any]]:
    events = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror or exc})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise TraceError(f"{path}, line {number}: not a JSON object") from None
        if not isinstance(event, dict) or "from" not in event or "to" not in event:
            raise TraceError(f"{path}, line {number}: not a trace event (no 'from'/'to')")
        events.append(event)
    return events


def render(events: list[dict[str, Any]], title: str) -> str:
    data = orjson.dumps(events).decode().replace("</", "<\\/")
    return _PAGE.replace("__TITLE__", _escape(title)).replace("__DATA__", data)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>__TITLE__</title>
<style>
:root { --row: 24px; --head: 34px; font: 13px/1.4 system-ui, sans-serif; color: #1d2330; }
body { margin: 0; display: grid; grid-template-rows: auto 1fr; height: 100vh; }
header { display: flex; gap: 12px; align-items: center; padding: 8px 12px; background: #f3f5f9;
         border-bottom: 1px solid #d8dde8; }
header h1 { font-size: 14px; margin: 0 12px 0 0; }
header select, header input { font: inherit; padding: 2px 6px; }
#count { color: #5a6275; margin-left: auto; }
main { display: grid; grid-template-columns: 1fr 38%; min-height: 0; }
#diagram { position: relative; overflow: auto; min-height: 0; }
#heads { position: sticky; top: 0; height: var(--head); background: #fff; z-index: 2;
         border-bottom: 1px solid #d8dde8; }
.head { position: absolute; top: 6px; transform: translateX(-50%); padding: 2px 8px;
        background: #e8edf7; border: 1px solid #b9c4dc; border-radius: 4px; white-space: nowrap; }
#canvas { position: relative; }
.lifeline { position: absolute; top: 0; bottom: 0; width: 0; border-left: 1px dashed #b9c4dc; }
.arrow { position: absolute; height: var(--row); cursor: pointer; }
.arrow .line { position: absolute; top: 15px; left: 0; right: 0; border-top: 1.5px solid #3d63b8; }
.arrow.response .line { border-top-style: dashed; border-color: #2f8a57; }
.arrow.notification .line { border-color: #8a6d2f; }
.arrow.error .line { border-color: #c0392b; }
.arrow .tip { position: absolute; top: 11px; width: 0; height: 0; border: 5px solid transparent; }
.arrow.right .tip { right: -2px; border-left: 7px solid #3d63b8; border-right: 0; }
.arrow.left .tip { left: -2px; border-right: 7px solid #3d63b8; border-left: 0; }
.arrow .label { position: absolute; top: 0; left: 6px; right: 6px; overflow: hidden; white-space: nowrap;
                text-overflow: ellipsis; font-size: 11.5px; text-align: center; }
.arrow .ts { position: absolute; top: 0; font-size: 10px; color: #8a91a3; }
.arrow.selected .label { font-weight: 600; color: #0b3d91; }
.arrow.partner .label { text-decoration: underline; }
.arrow.selected .line, .arrow.partner .line { border-top-width: 3px; }
#panel { border-left: 1px solid #d8dde8; overflow: auto; padding: 10px 12px; min-height: 0; }
#panel h2 { font-size: 13px; margin: 0 0 6px; }
#panel pre { white-space: pre-wrap; word-break: break-word; background: #f7f8fb; padding: 8px;
             border: 1px solid #e3e6ee; font-size: 12px; }
#panel button { font: inherit; }
.hint { color: #5a6275; }
</style></head>
<body>
<header>
  <h1>__TITLE__</h1>
  <label>Session <select id="session"><option value="">all</option></select></label>
  <label>Method <input id="method" placeholder="e.g. session/prompt" size="24"></label>
  <span id="count"></span>
</header>
<main>
  <div id="diagram"><div id="heads"></div><div id="canvas"></div></div>
  <aside id="panel"><p class="hint">Click an arrow to see the whole message.</p></aside>
</main>
<script type="application/json" id="trace">__DATA__</script>
<script>
"use strict";
const EVENTS = JSON.parse(document.getElementById("trace").textContent);
const ROW = 24, COLUMN = 190, MARGIN = 90;
const diagram = document.getElementById("diagram");
const canvas = document.getElementById("canvas");
const heads = document.getElementById("heads");
const panel = document.getElementById("panel");

// Lifelines in order of appearance (initialize walks the chain from the editor to the agent).
const names = [];
const see = n => { if (!names.includes(n)) names.push(n); };
see("editor");
EVENTS.forEach(e => { see(e.from); see(e.to); });
const conductorAt = names.indexOf("conductor");
if (conductorAt > 0) { names.splice(conductorAt, 1); names.push("conductor"); }
const x = n => MARGIN + names.indexOf(n) * COLUMN;
const width = MARGIN * 2 + (names.length - 1) * COLUMN;

// Pair each request with its response on the same hop: (from, to, id) <-> (to, from, id).
const partner = new Map();
const open = new Map();
EVENTS.forEach((e, i) => {
  e.index = i;
  if (e.type === "request") open.set(e.from + "\u0000" + e.to + "\u0000" + JSON.stringify(e.id), i);
  else if (e.type === "response") {
    const key = e.to + "\u0000" + e.from + "\u0000" + JSON.stringify(e.id);
    if (open.has(key)) { const j = open.get(key); partner.set(i, j); partner.set(j, i); open.delete(key); }
  }
});

const sessions = [...new Set(EVENTS.map(e => e.session).filter(Boolean))];
const select = document.getElementById("session");
sessions.forEach(s => { const o = document.createElement("option"); o.value = s; o.textContent = s; select.appendChild(o); });

heads.style.width = canvas.style.width = width + "px";
names.forEach(n => {
  const h = document.createElement("div");
  h.className = "head"; h.textContent = n; h.dataset.name = n; h.style.left = x(n) + "px";
  heads.appendChild(h);
});

let shown = EVENTS;
let selected = null;

function label(e) {
  if (e.type === "response") {
    const p = partner.get(e.index);
    const what = p !== undefined ? EVENTS[p].method : "response";
    return (e.is_error ? "error: " : "") + what + (e.id !== null && e.id !== undefined ? " #" + e.id : "");
  }
  return e.method + (e.type === "request" ? " #" + e.id : "");
}

function applyFilters() {
  const s = select.value, m = document.getElementById("method").value.trim();
  shown = EVENTS.filter(e => {
    if (s && e.session !== s) return false;
    if (!m) return true;
    const method = e.type === "response" && partner.has(e.index) ? EVENTS[partner.get(e.index)].method : e.method;
    return (method || "").includes(m);
  });
  document.getElementById("count").textContent = shown.length + " of " + EVENTS.length + " messages";
  canvas.style.height = (shown.length * ROW + 20) + "px";
  canvas.querySelectorAll(".lifeline").forEach(l => l.remove());
  names.forEach(n => {
    const l = document.createElement("div"); l.className = "lifeline"; l.dataset.name = n;
    l.style.left = x(n) + "px"; canvas.appendChild(l);
  });
  draw();
}

function draw() {
  canvas.querySelectorAll(".arrow").forEach(a => a.remove());
  const top = Math.max(0, Math.floor(diagram.scrollTop / ROW) - 10);
  const bottom = Math.min(shown.length, top + Math.ceil(diagram.clientHeight / ROW) + 20);
  for (let row = top; row < bottom; row++) {
    const e = shown[row];
    const a = document.createElement("div");
    const from = x(e.from), to = x(e.to);
    const isError = e.type === "response" && e.is_error;
    a.className = "arrow " + e.type + (isError ? " error" : "") + (to >= from ? " right" : " left");
    if (selected === e.index) a.classList.add("selected");
    if (selected !== null && partner.get(selected) === e.index) a.classList.add("partner");
    a.dataset.index = e.index; a.dataset.from = e.from; a.dataset.to = e.to;
    a.style.top = (row * ROW + 4) + "px";
    a.style.left = Math.min(from, to) + "px";
    a.style.width = Math.max(Math.abs(to - from), 24) + "px";
    a.innerHTML = '<div class="line"></div><div class="tip"></div><div class="label"></div><div class="ts"></div>';
    a.querySelector(".label").textContent = label(e);
    const ts = a.querySelector(".ts"); ts.textContent = (e.ts ?? 0).toFixed(3) + "s";
    ts.style.left = (-Math.min(from, to) + 4) + "px";
    a.addEventListener("click", () => choose(e.index));
    canvas.appendChild(a);
  }
}

function choose(index) {
  selected = index;
  const e = EVENTS[index];
  const body = e.type === "response" ? e.payload : e.params;
  panel.innerHTML = "";
  const h = document.createElement("h2");
  h.textContent = e.type + " " + e.from + " \u2192 " + e.to + " \u00b7 " + label(e);
  panel.appendChild(h);
  const meta = document.createElement("p"); meta.className = "hint";
  meta.textContent = "at " + (e.ts ?? 0).toFixed(6) + "s" + (e.session ? " \u00b7 session " + e.session : "") +
                     (e.batch ? " \u00b7 batch " + e.batch : "");
  panel.appendChild(meta);
  if (partner.has(index)) {
    const b = document.createElement("button");
    b.textContent = e.type === "request" ? "Go to its response" : "Go to its request";
    b.addEventListener("click", () => reveal(partner.get(index)));
    panel.appendChild(b);
  }
  const pre = document.createElement("pre"); pre.id = "payload";
  pre.textContent = JSON.stringify(body, null, 2);
  panel.appendChild(pre);
  draw();
}

function reveal(index) {
  const row = shown.findIndex(e => e.index === index);
  if (row >= 0) diagram.scrollTop = Math.max(0, row * ROW - diagram.clientHeight / 2);
  choose(index);
}

diagram.addEventListener("scroll", () => requestAnimationFrame(draw));
select.addEventListener("change", applyFilters);
document.getElementById("method").addEventListener("input", applyFilters);
window.addEventListener("resize", draw);
applyFilters();
</script>
</body></html>
"""
