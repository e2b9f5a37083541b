"""What the report shows of each kernel when its box is clicked: the tensor expression (the
unscheduled PrimFunc te.create_prim_func made), the loop program after scheduling (`script()`) and the
schedule's trace, the generated C, its measured time over the nodes that run it, and whether a tuning
record scheduled it (which database, the record's time) or the default schedule did."""
from __future__ import annotations

import re
from pathlib import Path

from ..autotune.workload import workload_key
from ..tir.schedule import Schedule
from .highlight import Highlighter


def _program(prim):
    """The scheduled PrimFunc of a kernel's `prim` (a tir.Schedule or a PrimFunc)."""
    return prim.mod if isinstance(prim, Schedule) else prim


def schedule_origin(kernel, records) -> str:
    """How the kernel was scheduled, in words: a tuning record (its database and time), or the default
    schedule and why. records: the autotune.ApplyHistoryBest tessera.compile looked records up in
    (None: none were used)."""
    if getattr(kernel, "host", False):
        return "runs on the host (its output shapes depend on its input values): no generated code"
    key = (records.key_of(kernel.func) or workload_key(kernel.func)) if records is not None else None
    if key is not None and getattr(kernel, "tuned", False) and key in records.used:
        secs, where = records.used[key]
        return f"tuned: the fastest record of workload {key} in {Path(where).name} ({secs * 1e3:.4g} ms measured alone)"
    if getattr(kernel, "tuned", False):
        return "tuned: scheduled by a tuning record"
    if key is not None and key in records.defaults:
        return f"default schedule: the fastest record of workload {key} is the default schedule itself"
    if key is not None and key in records.kept:
        return (f"default schedule: kept by the tuner's in-model check in {Path(records.kept[key]).name} "
                f"(no candidate beat it inside the model)")
    if key is not None and key in records.used:
        secs, where = records.used[key]
        return (f"default schedule: the record from {Path(where).name} did not build, so the default runs "
                f"(workload {key})")
    if records is None:
        return "default schedule (no tuning records were used)"
    return "default schedule (no tuning record for this workload and target)"


class SharedHeads:
    """The parts of generated C that precede the kernels (headers, runtime helpers, intrinsics): many
    kernels share one, so the page holds each once. `id_of(text)` -> its id ("h0", "h1", ...);
    `highlighted` -> {id: (HTML, lines)}."""

    def __init__(self, hl: Highlighter):
        self._hl, self._ids, self.highlighted = hl, {}, {}

    def id_of(self, text: str) -> str:
        got = self._ids.get(text)
        if got is None:
            got = self._ids[text] = f"h{len(self._ids)}"
            self.highlighted[got] = (self._hl(text, "c"), text.count("\n"))
        return got


def kernel_details(name: str, kernel, nodes: list, ms_of: dict, records, hl: Highlighter,
                   heads: SharedHeads) -> dict:
    """One kernel's panel (JSON-ready): name, op, nodes running it and their times, how it was
    scheduled, and its code as highlighted HTML: te, script, trace, c (the kernel's own code; c_head:
    the id of what precedes it in heads, or "")."""
    times = [ms_of[n] for n in nodes if n in ms_of]
    out = {"name": name, "op": kernel.op, "nodes": list(nodes), "ms": times,
           "total_ms": sum(times) if times else None, "origin": schedule_origin(kernel, records),
           "tuned": bool(getattr(kernel, "tuned", False))}
    if getattr(kernel, "host", False):
        out.update(te="", script="", trace="", c="", c_head="")
        return out
    func = kernel.func
    out["te"] = hl(func.script(), "python")
    prim = kernel.prim
    out["script"] = hl(_program(prim).script(), "python")
    out["trace"] = hl(str(prim.trace), "python") if isinstance(prim, Schedule) else ""
    src = getattr(kernel, "source", None)
    head, body = split_source(src.text, [f.name for f in src.functions]) if src is not None else ("", "")
    out["c"] = hl(body, "c")
    out["c_head"] = heads.id_of(head) if head else ""
    return out


def split_source(text: str, names: list) -> tuple:
    """(what precedes the kernel: headers, runtime helpers, intrinsics; the kernel's own code) of a
    generated translation unit: split at the start of the first line naming one of its functions."""
    starts = [m.start() for m in (re.search(r"^.*\b" + re.escape(n) + r"\w*\b", text, re.M) for n in names) if m]
    if not starts:
        return "", text
    at = min(starts)
    return text[:at], text[at:]


__all__ = ["SharedHeads", "kernel_details", "schedule_origin", "split_source"]
