"""The per-node profile of a compiled model: `exe.profile(...)` times every step with a C timer and
returns a ProfileReport (str() is the table). The graph executor times each kernel on its own (its
C timer loop, warm caches); the ahead-of-time module times each node inside its one entry
(PREFIX_run_profiled: the real order and cache state of a call) and adds what lies outside the
kernels: the rest of the entry, and the Python call around it."""
from __future__ import annotations


class ProfileRow:
    """One node's time; tuned: its kernel runs a schedule from a tuning record (marked "*" in the table)."""

    __slots__ = ("op", "node", "input_shapes", "output_shapes", "ms", "tuned")

    def __init__(self, op, node, input_shapes, output_shapes, ms, tuned: bool = False):
        self.op, self.node, self.input_shapes, self.output_shapes, self.ms = op, node, input_shapes, output_shapes, ms
        self.tuned = bool(tuned)

    def as_dict(self) -> dict:
        return {"op": self.op, "node": self.node, "input_shapes": self.input_shapes,
                "output_shapes": self.output_shapes, "ms": self.ms, "tuned": self.tuned}


class ProfileReport:
    """Per-node times (ms, median of the C timer's repeats) in execution order; str() is the table,
    headed by the model's inputs and outputs under their public names.

    inputs / outputs: (public name, type text) per graph input / output. call_ms: the whole call's
    time over the same calls as the rows (the nodes plus the parts outside), when measured; outside:
    (what, detail, ms) parts of the time outside the kernels, listed under the total.
    """

    def __init__(self, graph_name: str, rows: list, inputs=(), outputs=(), call_ms=None, outside=(),
                 source: str = "per node, C timer median"):
        self.graph_name, self.rows = graph_name, list(rows)
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.call_ms, self.outside, self.source = call_ms, list(outside), source

    @property
    def outside_ms(self):
        """The whole call's time minus the nodes' (None when the call was not timed)."""
        return None if self.call_ms is None else self.call_ms - self.total_ms

    @property
    def total_ms(self) -> float:
        return sum(r.ms for r in self.rows)

    def by_op(self) -> dict:
        """op -> total ms over its nodes."""
        out: dict = {}
        for r in self.rows:
            out[r.op] = out.get(r.op, 0.0) + r.ms
        return out

    def __str__(self):
        total = self.call_ms or self.total_ms or 1e-30
        head = ("op", "node", "shapes", "ms", "%")
        cells = []
        for r in self.rows:
            shapes = ", ".join(_fmt_shape(s) for s in r.input_shapes) + " -> " + \
                ", ".join(_fmt_shape(s) for s in r.output_shapes)
            cells.append((r.op + (" *" if r.tuned else ""), r.node, shapes, _ms(r.ms), f"{100 * r.ms / total:.1f}"))
        cells.append(("total", "", f"{len(self.rows)} nodes", _ms(self.total_ms), f"{100 * self.total_ms / total:.1f}"))
        tail = []
        if self.call_ms is not None:
            tail.append(("outside the kernels", "", "whole call - nodes", _ms(self.outside_ms),
                         f"{100 * self.outside_ms / total:.1f}"))
            tail.extend((f"  {what}", "", detail, _ms(ms), f"{100 * ms / total:.1f}") for what, detail, ms in self.outside)
            tail.append(("whole call", "", "", _ms(self.call_ms), "100.0"))
        cells.extend(tail)
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
        lines = [f"profile of graph {self.graph_name!r} ({self.source})"]
        for label, items in (("inputs", self.inputs), ("outputs", self.outputs)):
            if items:
                lines.append(f"{label}: " + ", ".join(f"{name!r}: {t}" for name, t in items))
        fmt = lambda row: "  ".join(  # noqa: E731
            c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
        lines.append(fmt(head))
        lines.append("  ".join("-" * w for w in widths))
        body = len(self.rows)
        lines.extend(fmt(c) for c in cells[:body])
        lines.append("  ".join("-" * w for w in widths))
        lines.extend(fmt(c) for c in cells[body:])
        tuned = sum(1 for r in self.rows if r.tuned)
        if tuned:
            lines.append(f"* tuned schedule (a tuning record): {tuned} of {len(self.rows)} nodes")
        return "\n".join(lines)

    __repr__ = __str__


def _ms(x: float) -> str:
    return f"{x:.1f}" if x >= 100 else f"{x:.3f}" if x >= 1 else f"{x:.5f}"


def _fmt_shape(s) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


__all__ = ["ProfileRow", "ProfileReport"]
