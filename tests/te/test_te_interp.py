"""The reference interpreter (tests/te/interp.py) on hand-written PrimFuncs: its semantics must be
right for it to be an oracle."""
import numpy as np
import pytest
from te_interp import InterpError, run

from tessera import ir
from tessera.errors import ShapeError


def loop(var, extent, body, kind="serial", start=0):
    return ir.For(var, start, extent, kind, body)


def test_lowered_style_program_with_allocate_let_if():
    A = ir.Buffer((6,), "int32", "A")
    B = ir.Buffer((6,), "int32", "B")
    T = ir.Buffer((6,), "int32", "T")
    i, t = ir.Var("i"), ir.Var("t")
    body = ir.Allocate(T, ir.seq(
        loop(i, 6, ir.BufferStore(T, A[i] * 2, [i])),
        loop(i, 6, ir.LetStmt(t, T[i] - 5, ir.IfThenElse(
            t > 0, ir.BufferStore(B, ir.truncdiv(t, 2), [i]), ir.BufferStore(B, ir.truncmod(t, 3), [i]))))))
    func = ir.PrimFunc([A, B], body)
    a = np.arange(6, dtype="int32")
    b = np.zeros(6, "int32")
    run(func, a, b)
    tt = a * 2 - 5
    want = np.where(tt > 0, np.trunc(tt / 2), np.fmod(tt, 3)).astype("int32")
    np.testing.assert_array_equal(b, want)


def test_int32_wraps_and_division_semantics():
    A = ir.Buffer((4,), "int32", "A")
    i = ir.Var("i")
    x = A[i]
    outs = [ir.Buffer((4,), "int32", n) for n in ("w", "fd", "fm", "td", "tm")]
    vals = [x * 65536 * 65536 + x, x // -3, x % -3, ir.Div(x, -3), ir.Mod(x, -3)]
    body = loop(i, 4, ir.seq(*[ir.BufferStore(o, v, [i]) for o, v in zip(outs, vals)]))
    func = ir.PrimFunc([A] + outs, body)
    a = np.array([-7, -1, 2, 8], "int32")
    res = [np.zeros(4, "int32") for _ in outs]
    run(func, a, *res)
    np.testing.assert_array_equal(res[0], a)  # x * 2**32 wraps to 0
    np.testing.assert_array_equal(res[1], a // -3)
    np.testing.assert_array_equal(res[2], a % -3)
    np.testing.assert_array_equal(res[3], np.trunc(a / -3).astype("int32"))
    np.testing.assert_array_equal(res[4], np.fmod(a, -3))


def test_vector_ramp_broadcast_and_flat_params():
    A = ir.Buffer((2, 4), "float32", "A")
    B = ir.Buffer((2, 4), "float32", "B")
    Af = ir.Buffer((8,), "float32", "A")
    Bf = ir.Buffer((8,), "float32", "B")
    i = ir.Var("i")
    idx = ir.Ramp(i * 4, 1, 4)
    body = loop(i, 2, ir.BufferStore(Bf, Af[idx] * ir.Broadcast(ir.const(2.0), 4) + Af[idx], [idx]))
    func = ir.PrimFunc([A, B], body).with_attr("flat_params", (Af, Bf))
    a = np.arange(8, dtype="float32").reshape(2, 4)
    b = np.zeros((2, 4), "float32")
    run(func, a, b)
    np.testing.assert_array_equal(b, a * 3)


def test_if_then_else_is_lazy_select_is_not():
    A = ir.Buffer((3,), "float32", "A")
    B = ir.Buffer((4,), "float32", "B")
    i = ir.Var("i")
    guarded = ir.Call("float32", "if_then_else", [i < 3, A[ir.min_expr(i, 3)], ir.const(0.0)])
    run(ir.PrimFunc([A, B], loop(i, 4, ir.BufferStore(B, guarded, [i]))),
        np.ones(3, "float32"), b := np.full(4, 9.0, "float32"))
    np.testing.assert_array_equal(b, [1, 1, 1, 0])
    eager = ir.Select(i < 3, A[i], ir.const(0.0))
    with pytest.raises(InterpError, match="'A'.*out of bounds"):
        run(ir.PrimFunc([A, B], loop(i, 4, ir.BufferStore(B, eager, [i]))),
            np.ones(3, "float32"), np.zeros(4, "float32"))


def test_block_init_runs_at_reduce_min_and_predicate():
    A = ir.Buffer((4, 6), "float32", "A")
    S = ir.Buffer((4,), "float32", "S")
    i, k = ir.Var("i"), ir.Var("k")
    vi, vk = ir.Var("vi"), ir.Var("vk")
    block = ir.Block([ir.IterVar(ir.Range(0, 4), vi, "data_par"), ir.IterVar(ir.Range(1, 6), vk, "reduce")],
                     [], [], "S", ir.BufferStore(S, S[vi] + A[vi, vk], [vi]),
                     init=ir.BufferStore(S, ir.const(100.0), [vi]))
    realize = ir.BlockRealize([i, k + 1], k + 1 < 5, block)
    func = ir.PrimFunc([A, S], loop(i, 4, loop(k, 5, realize)))
    a = np.arange(24, dtype="float32").reshape(4, 6)
    s = np.zeros(4, "float32")
    run(func, a, s)
    np.testing.assert_array_equal(s, 100 + a[:, 1:5].sum(1))


def test_errors_are_clear():
    A = ir.Buffer((3,), "float32", "A")
    i = ir.Var("i")
    oob = ir.PrimFunc([A], loop(i, 4, ir.BufferStore(A, ir.const(1.0), [i])))
    with pytest.raises(InterpError, match="'A'.*out of bounds"):
        run(oob, np.zeros(3, "float32"))
    unknown = ir.PrimFunc([A], loop(i, 3, ir.BufferStore(A, ir.Call("float32", "my_extern", [A[i]]), [i])))
    with pytest.raises(InterpError, match="my_extern"):
        run(unknown, np.zeros(3, "float32"))
    I = ir.Buffer((3,), "int32", "I")
    div0 = ir.PrimFunc([I], loop(i, 3, ir.BufferStore(I, I[i] // I[i], [i])))
    with pytest.raises(InterpError, match="division by zero"):
        run(div0, np.zeros(3, "int32"))
    free = ir.Var("free")
    unbound = ir.PrimFunc([A], loop(i, 3, ir.BufferStore(A, A[i], [free])))
    with pytest.raises(InterpError, match="'free'"):
        run(unbound, np.zeros(3, "float32"))
    with pytest.raises(InterpError, match="float64"):
        run(oob, np.zeros(3, "float64"))
    n = ir.Var("n")
    N = ir.Buffer((n, n), "float32", "N")
    with pytest.raises(ShapeError, match="'N'"):
        run(ir.PrimFunc([N], ir.Evaluate(0)), np.zeros((2, 3), "float32"))


def test_expression_nodes():
    X = ir.Buffer((5,), "float32", "X")
    outs = {n: ir.Buffer((5,), dt, n) for n, dt in
            [("cast", "int32"), ("tobool", "bool"), ("let", "float32"), ("logic", "bool"),
             ("mn", "float32"), ("mx", "float32"), ("fmod", "float32"), ("i8", "int8")]}
    i, t = ir.Var("i"), ir.Var("t", "float32")
    x = X[i]
    vals = {"cast": x.astype("int32"), "tobool": x.astype("bool"),
            "let": ir.Let(t, x * 2.0, t + t), "logic": ir.Or(ir.Not(x > 0.0), ir.And(x > 1.0, x < 2.0)),
            "mn": ir.min_expr(x, 0.5), "mx": ir.max_expr(x, 0.5), "fmod": ir.Mod(x, ir.const(0.75)),
            "i8": (x.astype("int32") * 100).astype("int8")}
    func = ir.PrimFunc([X] + list(outs.values()),
                       loop(i, 5, ir.seq(*[ir.BufferStore(outs[n], vals[n], [i]) for n in outs])))
    xs = np.array([-1.5, 0.0, 0.25, 1.5, 2.5], "float32")
    res = {n: np.zeros(5, b.dtype.numpy()) for n, b in outs.items()}
    run(func, xs, *res.values())
    np.testing.assert_array_equal(res["cast"], np.trunc(xs).astype("int32"))
    np.testing.assert_array_equal(res["tobool"], xs != 0)
    np.testing.assert_array_equal(res["let"], xs * 4)
    np.testing.assert_array_equal(res["logic"], ~(xs > 0) | ((xs > 1) & (xs < 2)))
    np.testing.assert_array_equal(res["mn"], np.minimum(xs, 0.5))
    np.testing.assert_array_equal(res["mx"], np.maximum(xs, 0.5))
    np.testing.assert_array_equal(res["fmod"], np.fmod(xs, np.float32(0.75)))
    np.testing.assert_array_equal(res["i8"], (np.trunc(xs).astype("int32") * 100).astype("int8"))
