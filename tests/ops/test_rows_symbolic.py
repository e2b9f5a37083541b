"""Row ops along a symbolic axis (dynamic sequence lengths): softmax / log_softmax reduce whole vectors
of partial results plus a scalar tail, their rows vectorize at any length (the vectorize pass lowers a
symbolic-extent loop to whole vectors and a scalar rest), and results match numpy at every length."""
import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.ops.registry import ScheduleContext, get_op
from tessera.target import Target

RNG = np.random.default_rng(15)


class _Type:
    def __init__(self, shape):
        self.shape = shape


def _build(op_name, shape, target):
    op = get_op(op_name)
    attrs = op.normalize_attrs({"axis": -1})
    x = te.placeholder(shape, "float32", "x")
    outs = op.compute_for([x], attrs, target=Target(target))
    sch = tir.Schedule(te.create_prim_func([x, *outs]))
    op.schedule(sch, ScheduleContext(block=outs[0].name, attrs=attrs, target=Target(target),
                                     output_types=(_Type(shape),)))
    return sch, tessera.build(sch, target=target)


def _softmax(x, log):
    x64 = x.astype(np.float64)
    z = x64 - x64.max(axis=-1, keepdims=True)
    if log:
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("op_name", ["nn.softmax", "nn.log_softmax"])
def test_softmax_along_a_symbolic_row_matches_numpy_at_every_length(op_name, threads, isa_target):
    target = f"{isa_target} -num-threads={threads}"
    lanes = Target(target).vector_bits // 32
    b, n = te.var("b"), te.var("n")
    sch, lib = _build(op_name, (b, 3, n, n), target)
    script = sch.mod.script()
    assert "_maxelem_rf" in script and "T.vectorized" in script       # the lane form, vectorized
    for batch, m in ((1, 1), (2, lanes - 1), (1, lanes), (1, lanes + 1), (2, 37), (1, 384)):
        x = RNG.standard_normal((batch, 3, m, m)).astype("float32") * 4
        y = np.full_like(x, np.nan)
        lib(x, y)
        np.testing.assert_allclose(y, _softmax(x, op_name == "nn.log_softmax"), rtol=2e-5, atol=2e-6,
                                   err_msg=f"{op_name} batch {batch} length {m}")


def test_symbolic_softmax_propagates_nan_and_stays_finite_for_large_inputs():
    n = te.var("n")
    _, lib = _build("nn.softmax", (4, n), "c")
    x = RNG.standard_normal((4, 37)).astype("float32") * 50 + 1000
    x[1, 35] = np.nan          # in the tail of a row
    x[2, 3] = np.nan           # in the whole vectors of a row
    y = np.empty_like(x)
    lib(x, y)
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all()
    np.testing.assert_allclose(y[[0, 3]], _softmax(x[[0, 3]], False), rtol=2e-5, atol=2e-6)


def test_a_static_row_keeps_the_rfactor_schedule():
    sch, _ = _build("nn.softmax", (2, 64), "c")
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_block("root"))}
    assert "softmax_expsum_rf_update" in names    # made by rfactor_lanes, not by the compute
    assert not any(sch.get(sch.get_block(nm)).annotations for nm in names)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_vectorized_loop_of_symbolic_extent_is_exact_at_every_extent(dtype):
    n = te.var("n")
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: A[i] * 3 + A[i], name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    sch.vectorize(sch.get_loops(sch.get_block("B"))[0])
    lib = tessera.build(sch.mod, target="c")
    src = lib.get_source()
    assert "omp simd" not in src and "B[i] = " in src        # whole vectors, then the scalar rest
    lanes = Target("c").vector_bits // np.dtype(dtype).itemsize // 8
    for m in (0, 1, lanes - 1, lanes, lanes + 1, 37, 384):
        a = (RNG.integers(-100, 100, m)).astype(dtype)
        b = np.zeros(m, dtype)
        lib(a, b)
        np.testing.assert_array_equal(b, a * 4, err_msg=f"n = {m}")


@pytest.mark.parametrize("threads", [1, 2])
def test_symbolic_elementwise_block_runs_rows_in_parallel_and_their_vectors_inside(threads, isa_target):
    """A transpose over symbolic (batch, seq): the parallel loop runs over (batch, head), a head's
    rows and their vectors serial loops inside it (fused into the parallel loop, the index would
    divide by `seq` at every vector); exact at every length."""
    from tessera.ops._schedule import schedule_spatial_block
    target = f"{isa_target} -num-threads={threads}"
    lanes = Target(target).vector_bits // 32
    b, n = te.var("b"), te.var("n")
    X = te.placeholder((b, n, 12, 64), name="X", dtype="float32")
    Y = te.compute((b, 12, n, 64), lambda i, h, s, d: X[i, s, h, d] + 1.0, name="Y")
    sch = tir.Schedule(te.create_prim_func([X, Y]))
    schedule_spatial_block(sch, sch.get_block("Y"), Target(target))
    kinds = [sch.get(lp).kind for lp in sch.get_loops(sch.get_block("Y"))]
    rows = ["parallel", "serial"] if threads > 1 else ["serial"] * 3
    assert kinds == rows + ["serial", "vectorized"]
    assert sch.get(sch.get_loops(sch.get_block("Y"))[-1]).extent.value == lanes
    lib = tessera.build(sch.mod, target=target)
    for batch, m in ((1, 1), (2, 5), (1, 64), (3, 37)):
        x = RNG.standard_normal((batch, m, 12, 64)).astype("float32")
        y = np.full((batch, 12, m, 64), np.nan, "float32")
        lib(x, y)
        np.testing.assert_array_equal(y, x.transpose(0, 2, 1, 3) + 1.0, err_msg=f"batch {batch} length {m}")


def test_static_elementwise_block_still_fuses_its_vectors_into_the_parallel_loop():
    from tessera.ops._schedule import schedule_spatial_block
    X = te.placeholder((4, 64, 12, 64), name="X", dtype="float32")
    Y = te.compute((4, 12, 64, 64), lambda i, h, s, d: X[i, s, h, d] + 1.0, name="Y")
    sch = tir.Schedule(te.create_prim_func([X, Y]))
    schedule_spatial_block(sch, sch.get_block("Y"), Target("c -num-threads=2"))
    assert [sch.get(lp).kind for lp in sch.get_loops(sch.get_block("Y"))] == ["parallel", "vectorized"]


@pytest.mark.parametrize("shape, threads, fused", [
    ((4, 12, 64), 2, 3),              # static extents: every row loop
    (("b", 12, "n"), 2, 2),           # (batch, heads): divisions by 12 only
    (("b", 12, "n"), 8, 3),           # 12 heads on 8 threads would idle a third of a round
    (("b", "n"), 2, 2),               # no static loop to feed the threads: every row loop
    (("n", 4, 6), 2, 3),              # the first loop's divisor-free, the rest static
])
def test_parallel_prefix_fuses_the_loops_whose_index_divides_by_constants(shape, threads, fused):
    from tessera.ops._schedule import parallel_prefix
    dims = [te.var(d) if isinstance(d, str) else d for d in shape]
    X = te.placeholder(dims + [8], name="X", dtype="float32")
    Y = te.compute(dims + [8], lambda *i: X[i] * 2.0, name="Y")
    sch = tir.Schedule(te.create_prim_func([X, Y]))
    loops = sch.get_loops(sch.get_block("Y"))[:-1]
    got = parallel_prefix(sch, loops, Target(f"c -num-threads={threads}"))
    assert [sch.get(lp) for lp in got] == [sch.get(lp) for lp in loops[:fused]]
