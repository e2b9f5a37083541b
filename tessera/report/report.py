"""write_report: one self-contained HTML page about a compiled model (what tessera.compile returns):
its optimized graph as a picture coloured by measured time, each kernel's tensor expression, loop
program, trace and generated C, the memory plan as a timeline, the tuning (with a database), and
the machine. `exe.report(path)` and `tessera report MODEL -o report.html` call it."""
from __future__ import annotations

import datetime
import os
import time

from ..errors import TesseraError
from ..executor.compiled import compiled_of
from ..graph.ir import FUSED_OP
from .graph_view import graph_view
from .highlight import Highlighter
from .inputs import sample_inputs
from .kernels import SharedHeads, kernel_details
from .machine import machine_info
from .memory import memory_view
from .page import render_page
from .tuning import tuning_view


def profile_times(exe, inputs, number: int, repeat: int):
    """(node name -> ms, the ProfileReport) of exe on inputs (per node, C timers)."""
    prof = exe.profile(inputs, number=number, repeat=repeat, show=False)
    return {r.node: r.ms for r in prof.rows}, prof


def build_report(exe, database=None, inputs=None, records=None, profile: bool = True, number: int = 5,
                 repeat: int = 3, title: str | None = None) -> str:
    """The report's HTML (see write_report)."""
    t0 = time.perf_counter()
    compiled = compiled_of(exe)
    graph, plan, kernels = compiled.graph, compiled.plan, compiled.kernels
    target = compiled.target
    ms_of, prof = {}, None
    if profile:
        ms_of, prof = profile_times(exe, sample_inputs(exe) if inputs is None else inputs, number, repeat)
    kernel_of = {s.name: s.kernel for s in plan.steps}
    nodes_of: dict = {}
    for s in plan.steps:
        nodes_of.setdefault(s.kernel, []).append(s.name)
    tuned_of = {n: getattr(kernels.get(k), "tuned", False) for n, k in kernel_of.items()}
    g = graph_view(graph, kernel_of, ms_of, tuned_of)
    hl = Highlighter()
    heads = SharedHeads(hl)
    panels = {name: kernel_details(name, k, nodes_of.get(name, []), ms_of, records, hl, heads)
              for name, k in kernels.items()}
    memory = memory_view(getattr(exe, "memory_plan", None), graph)
    tuning = tuning_view(database, kernels, plan.steps, target, f"{graph.name} on {target}") \
        if database is not None else None
    fused = sum(1 for n in graph.nodes if n.op == FUSED_OP)
    summary = [("model", graph.name), ("target", str(target)),
               ("executor", f"{getattr(exe, 'kind', '') or type(exe).__name__}, opt level {getattr(exe, 'opt_level', '?')}"),
               ("graph", f"{len(graph.nodes)} nodes ({fused} fused groups), {len(kernels)} kernels, "
                         f"{len(graph.constants)} constants"),
               ("inputs", ", ".join(f"{n}: {v.type}" for n, v in zip(graph.input_names, graph.inputs))),
               ("outputs", ", ".join(f"{n}: {v.type}" for n, v in zip(graph.output_names, graph.outputs)))]
    if prof is not None:
        line = f"{prof.total_ms:.4g} ms in the kernels ({prof.source})"
        if prof.call_ms is not None:
            line += f"; whole call {prof.call_ms:.4g} ms"
        summary.append(("measured latency", line))
    else:
        summary.append(("measured latency", "not measured (profile=False)"))
    summary.append(("tuning", getattr(exe, "tuning", "") or "-"))
    if hl.plain:
        summary.append(("highlighting", f"{hl.plain} code listings shown as plain text"
                                        + ("" if hl.available else " (install pygments to colour them)")))
    summary.append(("generated", f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} in "
                                 f"{time.perf_counter() - t0:.1f} s"))
    return render_page(title or f"{graph.name} on {target}", summary, g, panels, heads.highlighted, memory, tuning,
                       machine_info(target), hl.css())


def write_report(exe, path, database=None, inputs=None, records=None, profile: bool = True, number: int = 5,
                 repeat: int = 3, title: str | None = None) -> str:
    """Write the report of `exe` (the executor tessera.compile returns, compiled in this process) to
    `path`, one HTML file that needs no network to view; returns the path.

    database: the tuning database(s) the model was compiled with (a path, an autotune.Database or a
    list): adds the tuning curve and the per-task table. inputs: what to profile on (default: seeded
    random inputs of the model's types). records: the autotune.ApplyHistoryBest tessera.compile used
    (it says which record scheduled each kernel; tessera.compile passes its own). profile=False leaves
    the times out (no run)."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(os.path.dirname(path)):
        raise TesseraError(f"report: folder {os.path.dirname(path)} does not exist")
    text = build_report(exe, database, inputs, records, profile, number, repeat, title)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise TesseraError(f"report: cannot write {path}: {e}") from None
    return path


__all__ = ["build_report", "profile_times", "write_report"]
