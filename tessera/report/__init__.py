"""The report page of a compiled model: one self-contained HTML file (no network when viewed) that
answers "where does the time go, what did the compiler do to my model, did tuning help?".

    exe = tessera.compile(graph, params, target="c", database="tune.jsonl")
    exe.report("report.html")                                  # or: tessera report MODEL -o report.html
    tessera.report.write_report(exe, "report.html", database="tune.jsonl")

One concern per file: layout.py (grandalf's layered layout, computed here so the page only draws),
graph_view.py (boxes, edges, times), kernels.py (each kernel's panel), highlight.py (Pygments),
memory.py (the plan's timeline), tuning.py (curve and tasks from the database), machine.py,
inputs.py (what to profile on), page.py (the HTML; static/ holds its stylesheet and script) and
report.py (write_report). It sits above the executors and the tuner and below the command line.
"""
from .report import build_report, write_report

__all__ = ["build_report", "write_report"]
