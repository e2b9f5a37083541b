"""Helpers of the report tests: the small models' sizes, a synthetic graph of any size (a chain of
elementwise ops with a residual add every 8 nodes), and readers of the page's JSON elements."""
import json
import re

from tessera import graph

TARGET = "c -num-threads=2"
SMALL_BERT = dict(n_layers=1, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64)


def synthetic_graph(n: int, name: str = "synthetic", batch=1):
    """n nodes: relu, tanh, sigmoid, negative in turn, every 8th an add of the last residual; the
    input is [batch, 64] (batch a name: symbolic)."""
    gb = graph.Builder(name)
    x = gb.input("x", (batch, 64))
    h, skip = x, x
    ops = ("nn.relu", "tanh", "sigmoid", "negative")
    for i in range(n):
        if i % 8 == 7:
            h = skip = gb.op("add", h, skip)
        else:
            h = gb.op(ops[i % 4], h)
    gb.output(h)
    return gb.finish()


def page_data(text: str) -> dict:
    """The page's drawing data (the report-data script element)."""
    m = re.search(r"<script type=\"application/json\" id=\"report-data\">(.*?)</script>", text, re.S)
    assert m, "no report-data element"
    return json.loads(m.group(1))


def kernel_blobs(text: str) -> dict:
    """kernel id -> its panel (the kernel-kN script elements)."""
    return {m.group(1): json.loads(m.group(2)) for m in
            re.finditer(r"<script type='application/json' id='kernel-(k\d+)'>(.*?)</script>", text, re.S)}


def head_blobs(text: str) -> dict:
    """head id -> {html, lines}: the C preceding kernels, each held once (the head-hN elements)."""
    return {m.group(1): json.loads(m.group(2)) for m in
            re.finditer(r"<script type='application/json' id='head-(h\d+)'>(.*?)</script>", text, re.S)}

