"""The report's layered layout (grandalf): every box placed, edges point down from tail to head,
boxes of one layer do not overlap, unconnected parts sit side by side."""
import pytest

pytest.importorskip("grandalf", reason="the report extra: pip install 'tessera[report]'")

from tessera.errors import TesseraError  # noqa: E402
from tessera.report.layout import layered_layout  # noqa: E402


def _overlap(a, b):
    (ax, ay, aw, ah), (bx, by, bw, bh) = a, b
    return abs(ax - bx) * 2 < aw + bw and abs(ay - by) * 2 < ah + bh


def test_a_diamond_with_a_long_edge_is_layered_top_down():
    sizes = {"a": (100, 30), "b": (120, 40), "c": (80, 30), "d": (100, 30), "e": (60, 20)}
    edges = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("a", "d"), ("d", "e")]
    lay = layered_layout(sizes, edges)
    assert set(lay.boxes) == set(sizes)
    y = {k: lay.boxes[k][1] for k in sizes}
    assert y["a"] < y["b"] < y["d"] < y["e"] and y["a"] < y["c"] < y["d"]
    for (t, h), pts in zip(edges, lay.edges):
        assert len(pts) >= 2 and pts[0][1] < pts[-1][1], (t, h, pts)      # drawn tail (top) to head
    rects = {k: (*lay.boxes[k], *sizes[k]) for k in sizes}
    for i, a in enumerate(sizes):
        for b in list(sizes)[i + 1:]:
            assert not _overlap(rects[a], rects[b]), (a, b)
    assert len(lay.edges[4]) > 2        # a -> d spans two layers: routed through a dummy vertex


def test_unconnected_parts_sit_side_by_side():
    sizes = {"a": (100, 30), "b": (100, 30), "lone": (80, 20)}
    lay = layered_layout(sizes, [("a", "b")])
    assert lay.boxes["lone"][0] - 40 > lay.boxes["a"][0] + 50
    assert lay.width > 180


def test_an_edge_to_an_unknown_box_is_refused():
    with pytest.raises(TesseraError, match="names a box that is not in the graph"):
        layered_layout({"a": (10, 10)}, [("a", "zz")])
