"""The report's one HTML file: the page's stylesheet and script (tessera/report/static/) inlined, the
drawing's data and each kernel's panel as JSON script elements (a kernel's is parsed only when its box
is opened), and the static parts (summary, heaviest nodes, memory figures, tuning, machine) as HTML.
Nothing is fetched when the page is viewed."""
from __future__ import annotations

import html
import json
from importlib import resources


def _static(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def script_json(obj) -> str:
    """JSON safe inside a <script> element (no '</' can close it)."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def _e(x) -> str:
    return html.escape(str(x))


def _size(n) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def _ms(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _facts(rows) -> str:
    return "<table class='facts'>" + "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _hot_table(graph: dict, top: int = 12) -> str:
    boxes = [(i, b) for i, b in enumerate(graph["boxes"]) if b["ms"] is not None]
    boxes.sort(key=lambda ib: -ib[1]["ms"])
    if not boxes:
        return "<p class='note'>no node was measured</p>"
    total = graph["total_ms"] or 1.0
    rows = []
    for i, b in boxes[:top]:
        pct = 100 * b["ms"] / total
        rows.append(f"<tr class='hot' data-index='{i}'><td>{_e(b['node'])}</td><td>{_e(b['title'])}</td>"
                    f"<td class='num'>{b['ms']:.4g}</td><td class='num'>{pct:.1f}%</td>"
                    f"<td><span class='bar' style='width:{max(1, round(1.5 * pct))}px'></span>"
                    f"{' tuned' if b['tuned'] else ''}</td></tr>")
    return ("<table><tr><th>node</th><th>kernel</th><th class='num'>ms</th><th class='num'>share</th><th></th></tr>"
            + "".join(rows) + "</table>")


def _memory_html(m) -> str:
    if m is None:
        return "<p class='note'>no static memory plan: the model has a symbolic dimension, so the graph executor " \
               "allocates each run's tensors as it goes</p>"
    facts = [("planned arena (peak)", f"{_size(m['arena_bytes'])} in {m['storages']} storages ({m['strategy']}, "
                                      f"{m['alignment']}-byte alignment)"),
             ("sum of all intermediates", f"{_size(m['naive_bytes'])} ({len(m['tensors'])} tensors, one buffer each)"
                                          + (f": {m['naive_bytes'] / m['arena_bytes']:.2f}x the arena"
                                             if m['arena_bytes'] else "")),
             ("largest live set", f"{_size(m['live_bytes'])} (the lower bound of any placement)"),
             ("not in the arena", f"inputs {_size(m['input_bytes'])}, outputs {_size(m['output_bytes'])}, "
                                  f"constants {_size(m['constant_bytes'])}")]
    return (_facts(facts) + "<p class='note'>each rectangle a tensor: from the node that writes it to the last "
            "that reads it (x, in execution order), at its offset in the arena (y); one colour per storage "
            "(hover for names); the line: the bytes alive at each node</p><div id='memory-view'></div>")


def _tuning_html(t) -> str:
    if t is None:
        return ("<p class='note'>no tuning database given (<code>tessera report MODEL --db tune.jsonl</code> or "
                "<code>exe.report(path, database=...)</code> adds the tuning curve and per-task speedups)</p>")
    out = [f"<p>records of {_e(', '.join(t['databases']))} for <code>{_e(t['target'])}</code></p>"]
    if t["png"]:
        out.append(f"<img alt='tuning curve' style='max-width:100%' src='data:image/png;base64,{t['png']}'>")
    if t["note"]:
        out.append(f"<p class='note'>{_e(t['note'])}</p>")
    rows = []
    for r in t["tasks"]:
        pick = {"record": "tuned candidate", "default": "kept the default"}.get(r["pick"], "-")
        if r["in_model_ms"] is not None:
            pick += f" ({r['in_model_ms']:.4g} ms in the model)"
        speedup = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        rows.append(f"<tr><td>{_e(r['op'])}</td><td class='num'>{r['calls']}</td><td class='num'>{r['trials']}</td>"
                    f"<td class='num'>{r['errors']}</td><td class='num'>{_ms(r['default_ms'])}</td>"
                    f"<td class='num'>{_ms(r['best_ms'])}</td>"
                    f"<td class='num'>{speedup}</td>"
                    f"<td>{_e(pick)}</td></tr>")
    out.append("<table><tr><th>task</th><th class='num'>calls</th><th class='num'>trials</th><th class='num'>errors</th>"
               "<th class='num'>default ms</th><th class='num'>best ms</th><th class='num'>speedup</th>"
               "<th>in-model check</th></tr>" + "".join(rows) + "</table>")
    return "".join(out)


def render_page(title: str, summary: list, graph: dict, kernels: dict, heads: dict, memory, tuning, machine: list,
                code_css: str) -> str:
    """The whole page. kernels: kernel name -> its panel (kernels.kernel_details); heads: id -> (HTML,
    lines) of the C that precedes kernels (kernels.SharedHeads), each held once."""
    ids = {name: f"k{i}" for i, name in enumerate(kernels)}
    data = {"graph": graph, "memory": memory, "kernel_ids": ids}
    blobs = "".join(f"<script type='application/json' id='kernel-{ids[n]}'>{script_json(k)}</script>"
                    for n, k in kernels.items())
    blobs += "".join(f"<script type='application/json' id='head-{h}'>{script_json({'html': text, 'lines': lines})}"
                     f"</script>" for h, (text, lines) in heads.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{_static("report.css")}
{code_css}</style></head>
<body>
<header><h1>{_e(title)}</h1><div class="sub">tessera report: where the time goes, what the compiler did, whether tuning helped</div></header>
<nav><a href="#graph">graph</a><a href="#memory">memory plan</a><a href="#tuning">tuning</a><a href="#machine">machine</a></nav>
<section id="summary"><h2>Summary</h2>{_facts(summary)}<h2>Heaviest nodes</h2>{_hot_table(graph)}</section>
<section id="graph"><h2>Optimized graph ({len(graph["boxes"])} nodes)</h2>
<div id="graph-tools"><button id="zoom-out">&minus;</button><button id="zoom-in">+</button><button id="zoom-fit">fit</button>
<input id="find" size="24" placeholder="find a node or op (Enter: next)"> <span id="find-count" class="note"></span>
share of the measured latency: 0 <span id="legend"></span> most; a green border: a tuned kernel. Click a box for its kernel.</div>
<div id="graph-wrap"><div id="graph-view"></div><div id="kernel-panel"></div></div></section>
<section id="memory"><h2>Memory plan</h2>{_memory_html(memory)}</section>
<section id="tuning"><h2>Tuning</h2>{_tuning_html(tuning)}</section>
<section id="machine"><h2>Machine and target</h2>{_facts(machine)}</section>
<script type="application/json" id="report-data">{script_json(data)}</script>
{blobs}
<script>{_static("report.js")}</script>
</body></html>
"""


__all__ = ["render_page", "script_json"]
