"""The layered drawing of a graph for the report: box and edge coordinates computed here, in Python,
by grandalf's Sugiyama layout (layers, crossing reduction, Brandes-Koepf-style placement, edges
routed through the long edges' dummy vertices), so the page only draws: a 600-box graph opens at
once instead of laying itself out in the browser.

    boxes = {"n0": (w, h), "n1": (w, h), ...}; edges = [("n0", "n1"), ...]
    lay = layered_layout(boxes, edges)
    lay.boxes["n1"] -> (x, y) of its centre; lay.edges[i] -> [(x, y), ...] from tail to head
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TesseraError

try:
    from grandalf.graphs import Edge, Vertex, graph_core
    from grandalf.layouts import SugiyamaLayout
    from grandalf.routing import route_with_lines
except ImportError:      # the report extra: pip install 'tessera[report]'
    SugiyamaLayout = None

GAP_X, GAP_Y = 28, 46          # between boxes side by side, between layers
COMPONENT_GAP = 60             # between the drawings of unconnected parts


@dataclass(frozen=True)
class Layout:
    """boxes: id -> (x, y) centre; edges: one polyline [(x, y), ...] per edge in the order given, tail
    to head (an edge between two ids of one component); width, height: the drawing's extent."""

    boxes: dict
    edges: list
    width: float
    height: float


class _View:
    __slots__ = ("w", "h", "xy")

    def __init__(self, w, h):
        self.w, self.h, self.xy = w, h, (0.0, 0.0)


class _EdgeView:
    __slots__ = ("pts", "head_angle")

    def __init__(self):
        self.pts, self.head_angle = None, 0.0

    def setpath(self, pts):
        self.pts = [(float(x), float(y)) for x, y in pts]


def layered_layout(boxes: dict, edges: list) -> Layout:
    """Lay out a directed acyclic graph top to bottom (see the module docstring). boxes: id -> (width,
    height); edges: (tail id, head id) pairs. Unconnected parts are laid out one beside the other."""
    if SugiyamaLayout is None:
        raise TesseraError("the report's graph layout needs grandalf (pip install 'tessera[report]')")
    verts = {b: Vertex(b) for b in boxes}
    for b, v in verts.items():
        v.view = _View(*boxes[b])
    es = []
    for a, b in edges:
        if a not in verts or b not in verts:
            raise TesseraError(f"report layout: edge {a!r} -> {b!r} names a box that is not in the graph")
        e = Edge(verts[a], verts[b])
        e.view = _EdgeView()
        es.append(e)
    out_boxes, x0, height = {}, 0.0, 0.0
    for comp in _components(verts, es):
        placed = _place(comp)
        left = min(x - w / 2 for (x, _), w in ((v.view.xy, v.view.w) for v in comp.sV))
        right = max(x + w / 2 for (x, _), w in ((v.view.xy, v.view.w) for v in comp.sV))
        top = min(y - v.view.h / 2 for v, (_, y) in ((v, v.view.xy) for v in comp.sV))
        dx, dy = x0 - left, -top
        for v in comp.sV:
            x, y = v.view.xy
            out_boxes[v.data] = (x + dx, y + dy)
            height = max(height, y + dy + v.view.h / 2)
        for e in comp.sE:
            e.view.pts = [(x + dx, y + dy) for x, y in (e.view.pts or [])]
        x0 += right - left + COMPONENT_GAP
        del placed
    paths = []
    for e in es:
        pts = e.view.pts
        if not pts:      # an edge the layout left unrouted (both ends in one layer): a straight line
            (ax, ay), (bx, by) = out_boxes[e.v[0].data], out_boxes[e.v[1].data]
            pts = [(ax, ay), (bx, by)]
        paths.append([(round(x, 1), round(y, 1)) for x, y in pts])
    width = max(x0 - COMPONENT_GAP, 0.0)
    return Layout({k: (round(x, 1), round(y, 1)) for k, (x, y) in out_boxes.items()}, paths, width, height)


def _components(verts: dict, edges: list) -> list:
    """grandalf's connected components (graph_core), found by union-find: grandalf's own Graph
    finds them in quadratic time (2 s for 600 boxes)."""
    parent = {v: v for v in verts.values()}

    def root(v):
        while parent[v] is not v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for e in edges:
        a, b = root(e.v[0]), root(e.v[1])
        if a is not b:
            parent[b] = a
    groups: dict = {}
    for v in verts.values():
        groups.setdefault(root(v), ([], []))[0].append(v)
    for e in edges:
        groups[root(e.v[0])][1].append(e)
    return [graph_core(vs, es) for vs, es in groups.values()]


def _place(comp):
    """grandalf's Sugiyama layout of one connected component (views' xy and edges' paths set)."""
    lay = SugiyamaLayout(comp)
    lay.xspace, lay.yspace = GAP_X, GAP_Y
    lay.route_edge = route_with_lines
    roots = [v for v in comp.sV if not v.e_in()]
    lay.init_all(roots=roots or None, optimize=True)
    lay.draw(2)
    return lay


__all__ = ["Layout", "layered_layout"]
