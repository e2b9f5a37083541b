"""te.create_prim_func: the structure of the PrimFunc it builds, and its results under the reference
interpreter compared with numpy."""
import numpy as np
import pytest
from te_interp import run

from tessera import ir, te
from tessera.errors import TesseraError

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def root_block(func):
    realize = func.body
    assert isinstance(realize, ir.BlockRealize) and realize.iter_values == ()
    assert realize.block.name_hint == "root" and realize.block.iter_vars == ()
    return realize.block


def nests(func):
    body = root_block(func).body
    return list(body.seq) if isinstance(body, ir.SeqStmt) else [body]


def unwrap(nest):
    """The loops of a nest and the BlockRealize inside them."""
    loops = []
    while isinstance(nest, ir.For):
        loops.append(nest)
        nest = nest.body
    assert isinstance(nest, ir.BlockRealize)
    return loops, nest


def blocks(func):
    return [unwrap(n)[1].block for n in nests(func)]


def test_matmul_structure():
    n = te.var("n")
    A = te.placeholder((n, 64), name="A")
    B = te.placeholder((64, 32), name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((n, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    assert isinstance(func, ir.PrimFunc)
    assert [p.name for p in func.params] == ["A", "B", "C"]
    assert func.params[0].shape[0] is n and func.params[2].shape[0] is n
    assert root_block(func).alloc_buffers == ()
    loops, realize = unwrap(nests(func)[0])
    assert [l.loop_var.name for l in loops] == ["i", "j", "k"]
    assert all(l.kind == "serial" for l in loops)
    assert loops[0].extent is n and [l.extent.value for l in loops[1:]] == [32, 64]
    assert [l.min.value for l in loops] == [0, 0, 0]
    block = realize.block
    assert block.name_hint == "C"
    assert [iv.var.name for iv in block.iter_vars] == ["vi", "vj", "vk"]
    assert [iv.iter_type for iv in block.iter_vars] == ["data_par", "data_par", "reduce"]
    assert block.iter_vars[0].dom.extent is n and block.iter_vars[2].dom.extent.value == 64
    assert all(v is l.loop_var for v, l in zip(realize.iter_values, loops))
    assert realize.predicate.value == 1
    vi, vj, vk = (iv.var for iv in block.iter_vars)
    # reads: what the te expression reads, as point regions in block iter vars
    assert [r.buffer.name for r in block.reads] == ["A", "B"]
    assert block.reads[0].region[0].min is vi and block.reads[0].region[1].min is vk
    assert all(rg.extent.value == 1 for r in block.reads for rg in r.region)
    assert len(block.writes) == 1 and block.writes[0].buffer is func.params[2]
    assert [rg.min for rg in block.writes[0].region] == [vi, vj]
    # init and update
    init = block.init
    assert isinstance(init, ir.BufferStore) and init.buffer is func.params[2] and init.value.value == 0.0
    assert list(init.indices) == [vi, vj]
    upd = block.body
    assert isinstance(upd, ir.BufferStore) and isinstance(upd.value, ir.Add)
    assert isinstance(upd.value.a, ir.BufferLoad) and upd.value.a.buffer is func.params[2]
    prod = upd.value.b
    assert isinstance(prod, ir.Mul) and prod.a.buffer is func.params[0] and prod.b.buffer is func.params[1]
    assert list(prod.a.indices) == [vi, vk] and list(prod.b.indices) == [vk, vj]

    a, b = rand(5, 64), rand(64, 32)
    c = np.zeros((5, 32), "float32")
    run(func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_structurally_equal_when_built_twice():
    def build():
        A = te.placeholder((8, 8), name="A")
        k = te.reduce_axis((0, 8), name="k")
        C = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="C")
        return te.create_prim_func([A, C])

    f1, f2 = build(), build()
    assert ir.structural_equal(f1, f2) and ir.structural_hash(f1) == ir.structural_hash(f2)


def test_elementwise_and_broadcast():
    A = te.placeholder((4, 5), name="A")
    b = te.placeholder((5,), name="b")
    C = te.compute((4, 5), lambda i, j: te.exp(A[i, j]) + b[j] * 2.0, name="C")
    func = te.create_prim_func([A, b, C])
    (block,) = blocks(func)
    assert block.init is None and all(iv.iter_type == "data_par" for iv in block.iter_vars)
    assert [r.buffer.name for r in block.reads] == ["A", "b"]
    a, bb = rand(4, 5), rand(5)
    c = np.zeros((4, 5), "float32")
    run(func, a, bb, c)
    np.testing.assert_allclose(c, np.exp(a) + bb * 2, rtol=1e-6)


def test_duplicate_reads_are_merged():
    A = te.placeholder((6,), name="A")
    C = te.compute((6,), lambda i: A[i] * A[i] + A[(i + 1) % 6], name="C")
    (block,) = blocks(te.create_prim_func([A, C]))
    assert len(block.reads) == 2
    assert isinstance(block.reads[1].region[0].min, ir.FloorMod)


@pytest.mark.parametrize("reducer,npfn", [(te.sum, np.sum), (te.max, np.max), (te.min, np.min)])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reductions_over_each_axis(reducer, npfn, axis):
    shape = (3, 4, 5)
    A = te.placeholder(shape, name="A")
    k = te.reduce_axis((0, shape[axis]), name="k")
    out_shape = tuple(s for d, s in enumerate(shape) if d != axis)

    def body(i, j):
        idx = [i, j]
        idx.insert(axis, k)
        return reducer(A[tuple(idx)], axis=k)

    R = te.compute(out_shape, body, name="R")
    func = te.create_prim_func([A, R])
    (block,) = blocks(func)
    assert block.init is not None and [iv.iter_type for iv in block.iter_vars].count("reduce") == 1
    a = rand(*shape)
    r = np.zeros(out_shape, "float32")
    run(func, a, r)
    np.testing.assert_allclose(r, npfn(a, axis=axis), rtol=1e-5, atol=1e-5)


def test_max_identity_is_the_lowest_finite_value():
    A = te.placeholder((2, 3), name="A")
    k = te.reduce_axis((0, 3), name="k")
    M = te.compute((2,), lambda i: te.max(A[i, k], axis=k), name="M")
    (block,) = blocks(te.create_prim_func([A, M]))
    assert block.init.value.value == float(np.finfo(np.float32).min)


def test_full_reduction_to_scalar_and_two_reduce_axes():
    A = te.placeholder((3, 4), name="A", dtype="int32")
    r0, r1 = te.reduce_axis((0, 3), name="r0"), te.reduce_axis((0, 4), name="r1")
    S = te.compute((), lambda: te.sum(A[r0, r1], axis=[r0, r1]), name="S")
    func = te.create_prim_func([A, S])
    loops, realize = unwrap(nests(func)[0])
    assert [l.loop_var.name for l in loops] == ["r0", "r1"]
    assert [iv.iter_type for iv in realize.block.iter_vars] == ["reduce", "reduce"]
    a = RNG.integers(-50, 50, (3, 4)).astype("int32")
    s = np.zeros((), "int32")
    run(func, a, s)
    assert s == a.sum()


def test_reduce_axis_not_starting_at_zero_and_where():
    A = te.placeholder((4, 10), name="A")
    k = te.reduce_axis((2, 8), name="k")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k, where=k % 2 == 0), name="S")
    func = te.create_prim_func([A, S])
    loops, realize = unwrap(nests(func)[0])
    assert loops[1].min.value == 2 and loops[1].extent.value == 6
    dom = realize.block.iter_vars[1].dom
    assert dom.min.value == 2 and dom.extent.value == 6
    assert isinstance(realize.block.body.value, ir.Select)
    a = rand(4, 10)
    s = np.zeros(4, "float32")
    run(func, a, s)
    np.testing.assert_allclose(s, a[:, 2:8:2].sum(axis=1), rtol=1e-5)


def test_reduction_with_init_value():
    A = te.placeholder((3, 4), name="A")
    B = te.placeholder((3,), name="B")
    k = te.reduce_axis((0, 4), name="k")
    S = te.compute((3,), lambda i: te.sum(A[i, k], axis=k, init=B[i]), name="S")
    func = te.create_prim_func([A, B, S])
    (block,) = blocks(func)
    assert isinstance(block.init.value, ir.BufferLoad) and block.init.value.buffer.name == "B"
    assert [r.buffer.name for r in block.reads] == ["A", "B"]
    a, b = rand(3, 4), rand(3)
    s = np.zeros(3, "float32")
    run(func, a, b, s)
    np.testing.assert_allclose(s, a.sum(1) + b, rtol=1e-5)


def _argmax():
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return ir.Select(keep, x[0], y[0]), ir.Select(keep, x[1], y[1])

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value(t1)

    return te.comm_reducer(fcombine, fidentity, name="argmax")


def test_argmax_multi_output():
    argmax = _argmax()
    m, n = te.var("m"), te.var("n")
    idx = te.placeholder((m, n), name="idx", dtype="int32")
    val = te.placeholder((m, n), name="val", dtype="float32")
    k = te.reduce_axis((0, n), name="k")
    T0, T1 = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    func = te.create_prim_func([idx, val, T0, T1])
    assert [p.name for p in func.params] == ["idx", "val", "T_v0", "T_v1"]
    (block,) = blocks(func)
    assert block.name_hint == "T" and [w.buffer.name for w in block.writes] == ["T_v0", "T_v1"]
    assert isinstance(block.init, ir.SeqStmt) and len(block.init.seq) == 2
    assert block.init.seq[0].value.value == -1
    # combined values are bound first, then stored
    let0 = block.body
    assert isinstance(let0, ir.LetStmt) and isinstance(let0.body, ir.LetStmt)
    stores = let0.body.body.seq
    assert stores[0].value is let0.var and stores[1].value is let0.body.var
    iv = np.tile(np.arange(7, dtype="int32"), (4, 1))
    v = rand(4, 7)
    t0, t1 = np.zeros(4, "int32"), np.zeros(4, "float32")
    run(func, iv, v, t0, t1)
    np.testing.assert_array_equal(t0, v.argmax(axis=1))
    np.testing.assert_array_equal(t1, v.max(axis=1))


def test_argmax_output_subset_becomes_intermediate():
    argmax = _argmax()
    val = te.placeholder((3, 6), name="val")
    k = te.reduce_axis((0, 6), name="k")
    T0, T1 = te.compute((3,), lambda i: argmax((k.var, val[i, k]), axis=k), name="T")
    func = te.create_prim_func([val, T0])
    assert [p.name for p in func.params] == ["val", "T_v0"]
    assert [b.name for b in root_block(func).alloc_buffers] == ["T_v1"]
    v = rand(3, 6)
    t0 = np.zeros(3, "int32")
    run(func, v, t0)
    np.testing.assert_array_equal(t0, v.argmax(axis=1))


def test_two_reductions_in_one_compute():
    A = te.placeholder((3, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    S, M = te.compute((3,), lambda i: (te.sum(A[i, k], axis=k), te.max(A[i, k], axis=k)), name="SM")
    func = te.create_prim_func([A, S, M])
    (block,) = blocks(func)
    assert isinstance(block.body, ir.SeqStmt) and len(block.body.seq) == 2
    assert len(block.reads) == 1
    a = rand(3, 5)
    s, mx = np.zeros(3, "float32"), np.zeros(3, "float32")
    run(func, a, s, mx)
    np.testing.assert_allclose(s, a.sum(1), rtol=1e-5)
    np.testing.assert_array_equal(mx, a.max(1))


def test_multi_output_elementwise():
    A = te.placeholder((4,), name="A")
    X, Y = te.compute((4,), lambda i: (A[i] + 1.0, A[i] * A[i]), name="XY")
    func = te.create_prim_func([A, X, Y])
    (block,) = blocks(func)
    assert isinstance(block.body, ir.SeqStmt) and block.init is None
    a = rand(4)
    x, y = np.zeros(4, "float32"), np.zeros(4, "float32")
    run(func, a, x, y)
    np.testing.assert_allclose(x, a + 1)
    np.testing.assert_allclose(y, a * a)


def test_if_then_else_padding():
    n = 5
    A = te.placeholder((n, n), name="A")
    P = te.compute((n + 2, n + 2), lambda i, j: te.if_then_else(
        te.all(i >= 1, i <= n, j >= 1, j <= n), A[i - 1, j - 1], 0.0), name="P")
    func = te.create_prim_func([A, P])
    a = rand(n, n)
    p = np.full((n + 2, n + 2), -7.0, "float32")
    run(func, a, p)
    np.testing.assert_array_equal(p, np.pad(a, 1))


def test_symbolic_shapes():
    n, m = te.var("n"), te.size_var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 3.0, name="B")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n,), lambda i: te.sum(B[i, k], axis=k), name="C")
    func = te.create_prim_func([A, C])
    assert [s for s in root_block(func).alloc_buffers[0].shape] == [n, m]
    loops, _ = unwrap(nests(func)[1])
    assert loops[0].extent is n and loops[1].extent is m
    for shape in [(2, 3), (5, 1), (4, 7)]:
        a = rand(*shape)
        c = np.zeros(shape[0], "float32")
        run(func, a, c)
        np.testing.assert_allclose(c, (a * 3).sum(1), rtol=1e-5)


def test_scalar_var_param():
    alpha = te.var("alpha", "float32")
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * alpha, name="B")
    func = te.create_prim_func([A, alpha, B])
    assert func.params[1] is alpha
    a = rand(4)
    b = np.zeros(4, "float32")
    run(func, a, 2.5, b)
    np.testing.assert_allclose(b, a * np.float32(2.5))


def test_multi_stage_intermediate_in_alloc_buffers():
    A = te.placeholder((6, 4), name="A")
    B = te.compute((6, 4), lambda i, j: A[i, j] + 1.0, name="B")
    k = te.reduce_axis((0, 4), name="k")
    C = te.compute((6,), lambda i: te.sum(B[i, k] * B[i, k], axis=k), name="C")
    D = te.compute((6,), lambda i: te.sqrt(C[i]), name="D")
    func = te.create_prim_func([A, D])
    assert [p.name for p in func.params] == ["A", "D"]
    assert [b.name for b in root_block(func).alloc_buffers] == ["B", "C"]
    assert [b.name_hint for b in blocks(func)] == ["B", "C", "D"]
    a = rand(6, 4)
    d = np.zeros(6, "float32")
    run(func, a, d)
    np.testing.assert_allclose(d, np.sqrt(((a + 1) ** 2).sum(1)), rtol=1e-5)


def test_diamond_graph_topological_order_and_output_in_the_middle():
    A = te.placeholder((5,), name="A")
    B = te.compute((5,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((5,), lambda i: B[i] + 1.0, name="C")
    D = te.compute((5,), lambda i: B[i] - 1.0, name="D")
    E = te.compute((5,), lambda i: C[i] * D[i], name="E")
    func = te.create_prim_func([A, B, E])
    names = [b.name_hint for b in blocks(func)]
    assert names[0] == "B" and names[-1] == "E" and sorted(names[1:3]) == ["C", "D"]
    assert [b.name for b in root_block(func).alloc_buffers] == ["C", "D"]
    a = rand(5)
    b, e = np.zeros(5, "float32"), np.zeros(5, "float32")
    run(func, a, b, e)
    np.testing.assert_allclose(b, a * 2)
    np.testing.assert_allclose(e, (a * 2 + 1) * (a * 2 - 1), rtol=1e-6)


def test_duplicate_names_are_uniquified():
    A1 = te.placeholder((3,), name="A")
    A2 = te.placeholder((3,), name="A")
    X = te.compute((3,), lambda i: A1[i] + A2[i], name="root")
    Y = te.compute((3,), lambda i: X[i] * 2.0, name="root")
    func = te.create_prim_func([A1, A2, Y])
    names = [p.name for p in func.params]
    assert names[:2] == ["A", "A_1"] and len(set(names)) == 3
    assert root_block(func).alloc_buffers[0].name not in names
    assert [b.name_hint for b in blocks(func)] == ["root_1", "root_2"]
    a1, a2 = rand(3), rand(3)
    y = np.zeros(3, "float32")
    run(func, a1, a2, y)
    np.testing.assert_allclose(y, (a1 + a2) * 2, rtol=1e-6)


def test_loop_names_unique_within_a_nest():
    A = te.placeholder((3, 4), name="A")
    k = te.reduce_axis((0, 4), name="i")
    S = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="S")
    func = te.create_prim_func([A, S])
    loops, realize = unwrap(nests(func)[0])
    assert [l.loop_var.name for l in loops] == ["i", "i_1"]
    assert [iv.var.name for iv in realize.block.iter_vars] == ["vi", "vi_1"]
    a = rand(3, 4)
    s = np.zeros(3, "float32")
    run(func, a, s)
    np.testing.assert_allclose(s, a.sum(1), rtol=1e-5)


def test_compute_attrs_become_block_annotations():
    A = te.placeholder((3,), name="A")
    B = te.compute((3,), lambda i: A[i], name="B", attrs={"schedule_rule": "ewise"})
    (block,) = blocks(te.create_prim_func([A, B]))
    assert dict(block.annotations) == {"schedule_rule": "ewise"}


def test_int_semantics_under_the_interpreter():
    A = te.placeholder((8,), name="A", dtype="int32")
    Q = te.compute((8,), lambda i: (A[i] // 3) * 100 + A[i] % 3 + te.truncdiv(A[i], 3) * 10000, name="Q")
    func = te.create_prim_func([A, Q])
    a = np.array([-7, -6, -1, 0, 1, 5, 6, 7], "int32")
    q = np.zeros(8, "int32")
    run(func, a, q)
    np.testing.assert_array_equal(q, (a // 3) * 100 + a % 3 + np.trunc(a / 3).astype("int32") * 10000)


def test_math_intrinsics_under_the_interpreter():
    A = te.placeholder((6,), name="A")
    F = te.compute((6,), lambda i: te.sigmoid(A[i]) + te.erf(A[i]) + te.round(A[i] * 2.0)
                   + te.abs(A[i]) + te.power(te.abs(A[i]), 1.5) + te.fma(A[i], A[i], 1.0), name="F")
    func = te.create_prim_func([A, F])
    a = np.array([-2.5, -0.75, -0.25, 0.25, 1.25, 3.0], "float32")
    f = np.zeros(6, "float32")
    run(func, a, f)
    from math import erf

    want = (1 / (1 + np.exp(-a)) + np.array([erf(x) for x in a], "float32") + np.round(a * 2)
            + np.abs(a) + np.abs(a) ** 1.5 + (a * a + 1))
    np.testing.assert_allclose(f, want, rtol=1e-5)


def test_errors_missing_placeholder():
    A = te.placeholder((3,), name="Ain")
    B = te.compute((3,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(TesseraError, match="placeholder 'Ain'.*compute 'B'"):
        te.create_prim_func([B])


def test_errors_reduce_axis_outside_reduction():
    A = te.placeholder((3, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    B = te.compute((3,), lambda i: A[i, k], name="B")
    with pytest.raises(TesseraError, match="compute 'B'.*'k'.*reduction"):
        te.create_prim_func([A, B])
    S = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="S")
    T = te.compute((3,), lambda i: S[i] + A[i, k], name="T")
    with pytest.raises(TesseraError, match="reduce axis 'k' \\(of the reduction in compute 'S'\\)"):
        te.create_prim_func([A, T])
    r = te.reduce_axis((0, 3), name="r")
    U = te.compute((3,), lambda i: te.sum(A[i, k], axis=k, init=A[i, r]), name="U")
    with pytest.raises(TesseraError, match="'r'"):
        te.create_prim_func([A, U])


def test_errors_unbound_vars_and_bad_args():
    alpha = te.var("alpha", "float32")
    A = te.placeholder((3,), name="A")
    B = te.compute((3,), lambda i: A[i] * alpha, name="B")
    with pytest.raises(TesseraError, match="'alpha'"):
        te.create_prim_func([A, B])
    n = te.var("n")
    C = te.compute((n,), lambda i: A[0], name="C")
    D = te.compute((3,), lambda i: C[i], name="D")
    with pytest.raises(TesseraError, match="intermediate tensor 'C'.*'n'"):
        te.create_prim_func([A, D])
    with pytest.raises(TesseraError, match="twice"):
        te.create_prim_func([A, A, B])
    with pytest.raises(TesseraError, match="tensors and scalar"):
        te.create_prim_func([A, "B"])
