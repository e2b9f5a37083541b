"""Matmuls with a symbolic row count (dynamic batch/sequence axes): rows padded to the micro-kernel's
tile, tensorized, parallel over the constant B panels, and exact against numpy at every M."""
import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.graph import Builder
from tessera.graph.ir import FUSED_OP
from tessera.ops.nn.dense import pack_panel, row_pad
from tessera.ops.registry import ScheduleContext, get_op
from tessera.target import Target

HOST = Target("c")
HAS_KERNELS = (HOST.has_feature("avx2") and HOST.has_feature("fma")) or HOST.has_feature("avx512f")
needs_kernels = pytest.mark.skipif(not HAS_KERNELS, reason="the host has no x86 GEMM micro-kernels")
rng = np.random.default_rng(15)


def ints(*shape):
    """Small integers as float32: every product and sum is exact, so results compare exactly."""
    return rng.integers(-4, 5, shape).astype("float32")


def build(op, a_shape, b_shape, target, attrs=None):
    o = get_op(op)
    A = te.placeholder(a_shape, name="A", dtype="float32")
    B = te.placeholder(b_shape, name="B", dtype="float32")
    at = o.normalize_attrs(attrs or {})
    t = Target(target)
    outs = o.compute_for([A, B], at, target=t)
    sch = tir.Schedule(te.create_prim_func([A, B, *outs]))
    o.schedule(sch, ScheduleContext(block=op.split(".")[-1], attrs=at, target=t))
    return tessera.build(sch.mod, target=target)


def packed(b, panel):
    """b (K, N) as nn.pack_matmul_weight lays it out: (ceil(N / panel), K, panel), zero past N."""
    K, N = b.shape
    out = np.zeros((-(-N // panel), K, panel), "float32")
    for p in range(out.shape[0]):
        w = b[:, p * panel:(p + 1) * panel]
        out[p, :, :w.shape[1]] = w
    return out


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_weight_matmul_with_symbolic_rows_is_tensorized_and_exact_at_every_row_count(threads):
    target = f"c -num-threads={threads}"
    K, N = 96, 200                       # N: the last panel is zero-padded
    panel = pack_panel(None, N, target)
    mr = row_pad(panel)
    n = te.var("n")
    lib = build("nn.matmul", (n, K), (-(-N // panel), K, panel), target, {"b_panel": panel, "b_cols": N})
    src = lib.get_source()
    assert "tintrin_" in src and "_gemm_" in src             # the micro-kernel runs the tiles
    assert ("omp parallel for" in src) == (threads > 1)    # over the B panels
    b = ints(K, N)
    bp = packed(b, panel)
    for m in (1, mr - 1, mr, mr + 1, 37, 384):
        a = ints(m, K)
        c = np.full((m, N), np.nan, "float32")
        lib(a, bp, c)
        np.testing.assert_array_equal(c, a @ b, err_msg=f"M={m}")


@needs_kernels
def test_symbolic_batch_and_rows_of_a_packed_weight_matmul():
    target = "c -num-threads=2"
    K, N = 64, 128
    panel = pack_panel(None, N, target)
    bt, n = te.var("bt"), te.var("n")
    lib = build("nn.matmul", (bt, n, K), (-(-N // panel), K, panel), target, {"b_panel": panel, "b_cols": N})
    b = ints(K, N)
    for batch, m in ((1, 5), (3, 16), (2, 37)):
        a = ints(batch, m, K)
        c = np.empty((batch, m, N), "float32")
        lib(a, packed(b, panel), c)
        np.testing.assert_array_equal(c, a @ b)


@needs_kernels
@pytest.mark.parametrize("case", ["scores", "context", "k_symbolic"])
def test_attention_matmuls_with_symbolic_extents_are_tensorized_and_exact(case):
    """Q @ K^T (M and N symbolic), scores @ V (M and K symbolic), and a 2-D product with K symbolic:
    A's rows and B's columns are padded to the tile inside the kernel."""
    target = "c -num-threads=2"
    bt, n = te.var("bt"), te.var("n")
    shapes = {"scores": (((bt, 3, n, 64), (bt, 3, 64, n)), lambda m, b: ((b, 3, m, 64), (b, 3, 64, m))),
              "context": (((bt, 3, n, n), (bt, 3, n, 64)), lambda m, b: ((b, 3, m, m), (b, 3, m, 64))),
              "k_symbolic": (((37, n), (n, 70)), lambda m, b: ((37, m), (m, 70)))}[case]
    (sa, sb), concrete = shapes
    lib = build("nn.matmul", sa, sb, target)
    assert "tintrin_" in lib.get_source()
    for m in (1, 3, 4, 5, 16, 37):
        for batch in (1, 2):
            ca, cb = concrete(m, batch)
            a, b = ints(*ca), ints(*cb)
            want = a @ b
            c = np.empty(want.shape, "float32")
            lib(a, b, c)
            np.testing.assert_array_equal(c, want, err_msg=f"{case} M={m} batch={batch}")


def test_row_pad_is_the_fewest_rows_of_the_panels_tiles():
    assert row_pad(64) == 4 and row_pad(24) == 4 and row_pad(16) == 4 and row_pad(8) == 8 and row_pad(32) == 8
    with pytest.raises(tessera.errors.TesseraError, match="12 columns wide"):
        row_pad(12)


@needs_kernels
def test_graph_with_symbolic_rows_packs_its_constant_weight_and_matches_numpy():
    """A graph whose activation has a symbolic row count: pack_matmul_weights packs the constant
    weight (it used to need a static M) and the one compile runs every row count."""
    w = ints(48, 80)
    bias = ints(80)
    gb = Builder("sym_mlp")
    x = gb.input("x", ("batch", "seq", 48))
    h = gb.op("add", gb.op("nn.matmul", x, gb.const(w, "w")), gb.const(bias, "bias"))
    gb.output(h)
    exe = tessera.compile(gb.finish(), target="c -num-threads=2")
    nodes = []
    for n in exe.graph.nodes:
        nodes.extend(n.attrs["function"].body.nodes if n.op == FUSED_OP else [n])
    assert any(n.op == "nn.matmul" and n.attrs.get("b_panel") for n in nodes)
    for batch, seq in ((1, 1), (1, 7), (2, 16), (4, 33)):
        xv = ints(batch, seq, 48)
        np.testing.assert_array_equal(np.asarray(exe(xv)), xv @ w + bias)


@needs_kernels
def test_row_padding_of_a_symbolic_row_count_copies_whole_rows_in_parallel():
    """A's padded copy (and C's copy-out with the epilogue) run in parallel over (batch, row), a
    row's vectors inside: one division by the symbolic row count a row, not one a vector."""
    target = "c -num-threads=2"
    K, N = 96, 128
    panel = pack_panel(None, N, target)
    op = get_op("nn.matmul")
    A = te.placeholder((te.var("bt"), te.var("n"), K), name="A", dtype="float32")
    B = te.placeholder((-(-N // panel), K, panel), name="B", dtype="float32")
    at = op.normalize_attrs({"b_panel": panel, "b_cols": N})
    outs = op.compute_for([A, B], at, target=Target(target))
    sch = tir.Schedule(te.create_prim_func([A, B, *outs]))
    op.schedule(sch, ScheduleContext(block="matmul", attrs=at, target=Target(target)))
    for name in ("a_pad", "matmul"):
        assert [sch.get(lp).kind for lp in sch.get_loops(sch.get_block(name))] == ["parallel", "vectorized"], name
