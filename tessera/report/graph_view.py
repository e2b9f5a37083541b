"""The optimized graph as the report draws it: one box per node (a fused group lists its ops), a
small box per graph input and output, edges labelled with their tensors' types, each node's
measured time and share of the latency, and the drawing's coordinates (layout.py)."""
from __future__ import annotations

from ..graph.ir import FUSED_OP
from .layout import layered_layout

MAX_OPS_SHOWN = 6           # ops listed in a fused box; more are counted
CHAR_W, LINE_H, PAD = 6.6, 14, 8
MIN_W, MAX_W = 96, 300
IO_H = 24


def type_text(t) -> str:
    """A tensor type as the edge labels show it: float32[1, 3, 224, 224] -> f32[1,3,224,224]."""
    dt = str(getattr(t, "dtype", "?"))
    short = {"float": "f", "int": "i", "uint": "u", "bfloat": "bf", "bool": "bool"}
    for long, s in short.items():
        if dt.startswith(long) and dt[len(long):].isdigit():
            dt = s + dt[len(long):]
            break
    shape = getattr(t, "shape", None)
    return dt if shape is None else f"{dt}[{','.join(str(d) for d in shape)}]"


def duration_text(ms: float) -> str:
    """A measured time as people read it: 0.0452 -> '45.2 us', 3.21 -> '3.21 ms'."""
    if ms < 1e-3:
        return f"{ms * 1e6:.3g} ns"
    if ms < 1:
        return f"{ms * 1e3:.3g} us"
    return f"{ms:.3g} ms" if ms < 1000 else f"{ms / 1e3:.3g} s"


def node_ops(node) -> list:
    """The ops a node runs: a fused group's body, in order; else its own op."""
    if node.op == FUSED_OP:
        return [n.op for n in node.attrs["function"].body.nodes]
    return [node.op]


def _box_size(lines: list) -> tuple:
    w = max(MIN_W, min(MAX_W, PAD * 2 + CHAR_W * max(len(s) for s in lines)))
    return round(w, 1), PAD * 2 + LINE_H * len(lines)


def _clip(s: str, n: int = 44) -> str:
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def graph_view(graph, kernel_of: dict, ms_of: dict, tuned_of: dict) -> dict:
    """The drawing's data (JSON-ready): boxes, io, edges, the layout's extent and total time.

    kernel_of / ms_of / tuned_of: node name -> kernel name / measured ms (absent: not measured) /
    whether its kernel runs a tuned schedule."""
    total = sum(ms_of.values()) or 0.0
    boxes, sizes, edges, io = [], {}, [], []
    producer = {}
    for i, n in enumerate(graph.nodes):
        bid = f"n{i}"
        ops = node_ops(n)
        title = n.attrs["function"].name if n.op == FUSED_OP else n.op
        shown = [_clip(op) for op in ops[:MAX_OPS_SHOWN]] if n.op == FUSED_OP else []
        if len(ops) > MAX_OPS_SHOWN:
            shown.append(f"+{len(ops) - MAX_OPS_SHOWN} more")
        ms = ms_of.get(n.name)
        foot = f"{duration_text(ms)} ({100 * ms / total:.1f}%)" if ms is not None and total else "not measured"
        lines = [_clip(title)] + shown + [foot]
        sizes[bid] = _box_size(lines)
        boxes.append({"id": bid, "node": n.name, "op": n.op, "title": _clip(title), "ops": ops, "shown": shown,
                      "foot": foot, "kernel": kernel_of.get(n.name), "ms": ms,
                      "share": (ms / total) if ms is not None and total else None,
                      "tuned": bool(tuned_of.get(n.name)),
                      "outputs": [type_text(o.type) for o in n.outputs]})
        for o in n.outputs:
            producer[o] = bid
    for name, v in zip(graph.input_names, graph.inputs):
        iid = f"i{len(io)}"
        text = f"{_clip(name, 30)}: {type_text(v.type)}"
        sizes[iid] = (round(max(MIN_W, PAD * 2 + CHAR_W * len(text)), 1), IO_H)
        io.append({"id": iid, "kind": "input", "text": text})
        producer[v] = iid
    for n, b in zip(graph.nodes, boxes):
        for v in dict.fromkeys(n.inputs):
            src = producer.get(v)
            if src is not None:          # constants (weights) are not drawn
                edges.append({"from": src, "to": b["id"], "label": type_text(v.type)})
    for name, v in zip(graph.output_names, graph.outputs):
        oid = f"o{len(io)}"
        text = f"{_clip(name, 30)}: {type_text(v.type)}"
        sizes[oid] = (round(max(MIN_W, PAD * 2 + CHAR_W * len(text)), 1), IO_H)
        io.append({"id": oid, "kind": "output", "text": text})
        src = producer.get(v)
        if src is not None:
            edges.append({"from": src, "to": oid, "label": ""})
    lay = layered_layout(sizes, [(e["from"], e["to"]) for e in edges])
    for item in boxes + io:
        item["x"], item["y"] = lay.boxes[item["id"]]
        item["w"], item["h"] = sizes[item["id"]]
    for e, pts in zip(edges, lay.edges):
        e["pts"] = pts
    return {"boxes": boxes, "io": io, "edges": edges, "width": lay.width, "height": lay.height, "total_ms": total}


__all__ = ["duration_text", "graph_view", "node_ops", "type_text"]
