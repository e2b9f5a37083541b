"""vectorize_loop: vector code for straight-line vectorized loops; other loops are kept."""
import numpy as np
import pytest

from tessera import ir
from tessera.errors import TesseraError
from tessera.ir import (Broadcast, Buffer, BufferLoad, BufferStore, Call, For, IfThenElse, LetStmt,
                        PrimFunc, Ramp, Var, seq)
from tessera.tir.transform import vectorize_loop
from tir_builders import assert_same, find


def vloop(var, extent, body, lo=0):
    return For(var, lo, extent, "vectorized", body)


def stores(func):
    return find(func.body, BufferStore)


def loops_of(func, kind=None):
    return [f for f in find(func.body, For) if kind is None or f.kind == kind]


def test_contiguous_loads_and_stores_become_ramps():
    A, B, C = (Buffer((32,), "float32", n) for n in "ABC")
    i, j = Var("i"), Var("j")
    idx = i * 8 + j
    f = PrimFunc([A, B, C], For(i, 0, 4, "serial", vloop(j, 8, BufferStore(C, A[idx] + B[j], [idx]))))
    g = vectorize_loop(f)
    assert not loops_of(g, "vectorized")
    (st,) = stores(g)
    assert isinstance(st.indices[0], Ramp) and st.indices[0].lanes == 8 and st.indices[0].stride.value == 1
    assert st.value.dtype == "float32x8"
    loads = find(g.body, BufferLoad)
    assert all(isinstance(ld.indices[0], Ramp) and ld.indices[0].stride.value == 1 for ld in loads)
    a, b, c = assert_same(f, g)
    np.testing.assert_allclose(c, a + np.tile(b[:8], 4))


def test_strided_and_gather_loads():
    A, B, C = Buffer((24,), "float32", "A"), Buffer((4,), "float32", "B"), Buffer((8,), "float32", "C")
    j = Var("j")
    f = PrimFunc([A, B, C], vloop(j, 8, BufferStore(C, A[j * 3] + B[j // 2], [j])))
    g = vectorize_loop(f)
    (st,) = stores(g)
    a_load, b_load = sorted(find(g.body, BufferLoad), key=lambda ld: ld.buffer.name)
    assert isinstance(a_load.indices[0], Ramp) and a_load.indices[0].stride.value == 3
    assert b_load.dtype == "float32x8" and not isinstance(b_load.indices[0], Ramp)  # a gather
    a, b, c = assert_same(f, g)
    np.testing.assert_allclose(c, a[::3] + np.repeat(b, 2))


def test_scalars_are_broadcast():
    A, C = Buffer((8,), "float32", "A"), Buffer((8,), "float32", "C")
    alpha, j = Var("alpha", "float32"), Var("j")
    f = PrimFunc([A, alpha, C], vloop(j, 8, BufferStore(C, A[j] * alpha + 1.0, [j])))
    g = vectorize_loop(f)
    assert find(g.body, Broadcast)
    a, _, c = assert_same(f, g, scalars={"alpha": np.float32(1.5)})
    np.testing.assert_allclose(c, a * 1.5 + 1, rtol=1e-6)


def test_store_of_invariant_value():
    C = Buffer((8,), "float32", "C")
    j = Var("j")
    f = PrimFunc([C], vloop(j, 8, BufferStore(C, ir.const(2.0), [j])))
    g = vectorize_loop(f)
    (st,) = stores(g)
    assert isinstance(st.value, Broadcast) and isinstance(st.indices[0], Ramp)
    (c,) = assert_same(f, g)
    assert (c == 2).all()


def test_long_loop_split_into_vectors_and_tail():
    A, C = Buffer((21,), "float32", "A"), Buffer((21,), "float32", "C")
    j = Var("j")
    f = PrimFunc([A, C], vloop(j, 20, BufferStore(C, A[j + 1] * 2.0, [j + 1]), lo=0))
    g = vectorize_loop(f)
    outer = loops_of(g)
    assert len(outer) == 1 and outer[0].kind == "serial" and outer[0].extent.value == 2
    lanes = sorted(st.indices[0].lanes if isinstance(st.indices[0], Ramp) else 1 for st in stores(g))
    assert lanes == [4, 8]  # 2 x 8 lanes in the loop, then a 4-lane remainder
    a, c = assert_same(f, g)
    np.testing.assert_allclose(c[1:], a[1:] * 2)


def test_nonzero_min_and_odd_remainder():
    A, C = Buffer((16,), "int32", "A"), Buffer((16,), "int32", "C")
    j = Var("j")
    f = PrimFunc([A, C], vloop(j, 7, BufferStore(C, A[j] + j, [j]), lo=3))
    g = vectorize_loop(f)
    assert not loops_of(g)
    lanes = sorted(st.indices[0].lanes if isinstance(st.indices[0], Ramp) else 1 for st in stores(g))
    assert lanes == [1, 2, 4]
    a, c = assert_same(f, g)
    np.testing.assert_array_equal(c[3:10], a[3:10] + np.arange(3, 10))


def test_default_lanes_follow_widest_dtype_and_hint():
    for dtype, lanes in (("float32", 8), ("float64", 4), ("int8", 32), ("float16", 16)):
        A = Buffer((64,), dtype, "A")
        j = Var("j")
        g = vectorize_loop(PrimFunc([A], vloop(j, 64, BufferStore(A, A[j] + ir.const(1, dtype), [j]))))
        assert stores(g)[0].indices[0].lanes == lanes, dtype
    A = Buffer((64,), "float32", "A")
    j = Var("j")
    f = PrimFunc([A], vloop(j, 64, BufferStore(A, A[j] * 2.0, [j])))
    assert stores(vectorize_loop(f, lanes_hint=4))[0].indices[0].lanes == 4
    assert stores(vectorize_loop(f, vector_bits=512))[0].indices[0].lanes == 16
    with pytest.raises(TesseraError, match="lanes_hint"):
        vectorize_loop(f, lanes_hint=0)


def test_let_invariant_if_and_math_call():
    A, C = Buffer((8,), "float32", "A"), Buffer((8,), "float32", "C")
    flag, j = Var("flag"), Var("j")
    t = Var("t", "float32")
    body = LetStmt(t, A[j] * 0.5, IfThenElse(flag > 0, BufferStore(C, ir.call_intrin("float32", "exp", t), [j]),
                                             BufferStore(C, t, [j])))
    f = PrimFunc([A, flag, C], vloop(j, 8, body))
    g = vectorize_loop(f)
    assert not loops_of(g, "vectorized")
    (let,) = find(g.body, LetStmt)
    assert let.var.dtype == "float32x8" and let.var is not t
    (call,) = find(g.body, Call)
    assert call.dtype == "float32x8"
    for flag_value in (0, 1):
        a, _, c = assert_same(f, g, scalars={"flag": flag_value})
        np.testing.assert_allclose(c, np.exp(a * 0.5) if flag_value else a * 0.5, rtol=1e-6)


def test_cast_compare_and_select():
    A, C = Buffer((8,), "int32", "A"), Buffer((8,), "float32", "C")
    j = Var("j")
    value = ir.Select(A[j] > j, A[j].astype("float32"), ir.const(-1.0))
    f = PrimFunc([A, C], vloop(j, 8, BufferStore(C, value, [j])))
    g = vectorize_loop(f)
    assert stores(g)[0].value.dtype == "float32x8"
    a, c = assert_same(f, g)
    np.testing.assert_allclose(c, np.where(a > np.arange(8), a, -1))


@pytest.mark.parametrize("case", ["reduction", "if_depends", "if_then_else", "inner_loop",
                                  "symbolic_reduction", "extern_call"])
def test_unvectorizable_loops_are_kept(case):
    A, S = Buffer((8,), "float32", "A"), Buffer((1,), "float32", "S")
    j, k, n = Var("j"), Var("k"), Var("n")
    extent = 8
    if case == "reduction":
        body = BufferStore(S, S[0] + A[j], [0])
    elif case == "if_depends":
        body = IfThenElse(j < 4, BufferStore(A, A[j] * 2.0, [j]))
    elif case == "if_then_else":
        body = BufferStore(A, ir.call_intrin("float32", "if_then_else", j < 4, A[j], ir.const(0.0)), [j])
    elif case == "inner_loop":
        body = For(k, 0, 2, "serial", BufferStore(A, A[j] + 1.0, [j]))
    elif case == "symbolic_reduction":  # a symbolic extent alone is vectorized (tests/ops/test_rows_symbolic.py)
        extent = n
        body = BufferStore(S, S[0] + A[j], [0])
    else:
        body = BufferStore(A, ir.call_intrin("float32", "my_extern", A[j]), [j])
    params = [A, S] + ([n] if case == "symbolic_reduction" else [])
    f = PrimFunc(params, vloop(j, extent, body))
    g = vectorize_loop(f)
    assert g.body.kind == "vectorized" and not find(g.body, Ramp)
    if case not in ("symbolic_reduction", "extern_call"):
        assert_same(f, g)


def test_inner_vectorized_loop_inside_kept_outer():
    # the inner loop is vectorized; the outer vectorized loop then holds vector code and is kept
    A1 = Buffer((32,), "float32", "A")
    i, j = Var("i"), Var("j")
    f = PrimFunc([A1], vloop(i, 4, vloop(j, 8, BufferStore(A1, A1[i * 8 + j] + 1.0, [i * 8 + j]))))
    g = vectorize_loop(f)
    assert g.body.kind == "vectorized" and isinstance(stores(g)[0].indices[0], Ramp)
    assert_same(f, g)


def test_no_vectorized_loops_returns_same_function():
    A = Buffer((8,), "float32", "A")
    j = Var("j")
    f = PrimFunc([A], For(j, 0, 8, "serial", BufferStore(A, A[j] + 1.0, [j])))
    assert vectorize_loop(f) is f


def test_sequence_of_stores():
    A, B = Buffer((8,), "float32", "A"), Buffer((8,), "float32", "B")
    j = Var("j")
    f = PrimFunc([A, B], vloop(j, 8, seq(BufferStore(A, A[j] + 1.0, [j]), BufferStore(B, A[j] * B[j], [j]))))
    g = vectorize_loop(f)
    assert len(stores(g)) == 2 and all(isinstance(s.indices[0], Ramp) for s in stores(g))
    assert_same(f, g)


def test_if_then_else_of_a_condition_every_lane_shares_is_vectorized():
    # the condition depends on the outer loop only: a vector if_then_else (C's ?: of two vectors, one branch
    # evaluated), where a condition of the lane's own keeps the loop (test_unvectorizable_loops_are_kept)
    A, B, C = (Buffer((32,), "float32", n) for n in "ABC")
    i, j = Var("i"), Var("j")
    idx = i * 8 + j
    value = ir.call_intrin("float32", "if_then_else", i < 2, A[idx] + 1.0, B[j] * 2.0)
    f = PrimFunc([A, B, C], For(i, 0, 4, "serial", vloop(j, 8, BufferStore(C, value, [idx]))))
    g = vectorize_loop(f)
    (s,) = stores(g)
    assert isinstance(s.indices[0], Ramp) and s.value.dtype.lanes == 8 and not loops_of(g, "vectorized")
    a, b, c = assert_same(f, g)
    np.testing.assert_allclose(c, np.concatenate([a[:16] + 1.0, np.tile(b[:8] * 2.0, 2)]), rtol=1e-6)
