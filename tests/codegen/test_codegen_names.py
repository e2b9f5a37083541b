"""Readable C: names kept, sanitized and uniquified; parentheses by precedence (checked by running
random expressions); generation speed grows linearly with the program."""
import re
import sys

import numpy as np

from tessera.codegen import generate
from tessera.codegen.c_base import NameTable
from tessera.ir import (Buffer, BufferStore, Cast, For, IntImm, Let, LetStmt, Select, Var, const, max_expr,
                        min_expr, seq)
from tessera.ir.expr import Call, FloorDiv, FloorMod, Not, Or


def test_name_table_sanitizes_and_uniquifies():
    t = NameTable(reserved={"err"})
    assert t.fresh("i") == "i"
    assert t.fresh("i") == "i_1"
    assert t.fresh("int") == "int_"
    assert t.fresh("a.b-c") == "a_b_c"
    assert t.fresh("0x") == "v0x"
    assert t.fresh("") == "v"
    assert t.fresh("err") == "err_"
    assert t.fresh("float32x8") == "float32x8_"
    assert t.fresh("tsr_alloc") == "tsr_alloc_"
    assert t.fresh("expf") == "expf_"
    t.push()
    assert t.fresh("j") == "j"
    t.pop()
    assert t.fresh("j") == "j"  # released with its block


def test_program_names_in_the_kernel(build, lowered):
    A = Buffer((16,), "float32", "int")  # a keyword
    B = Buffer((16,), "float32", "B.grad")  # a dot
    i1, i2, i3 = Var("i"), Var("i"), Var("i")
    x = Var("exp", "float32")  # shadows nothing: exp is called as expf

    def body(a, b):
        first = For(i1, 0, 4, "serial", For(i2, 0, 4, "serial",
                                            LetStmt(x, a[i1 * 4 + i2], BufferStore(
                                                b, Call("float32", "exp", [x]) + x, [i1 * 4 + i2]))))
        second = For(i3, 0, 16, "serial", BufferStore(b, b[i3] * 2.0, [i3]))
        return seq(first, second)
    src = generate(lowered([A, B], body))
    kernel = src[src.index("static int32_t main_kernel"):src.index("/* main: the kernel")]
    assert "main_kernel(const float* restrict int_, float* restrict B_grad)" in kernel
    assert "for (int32_t i = 0; i < 4; ++i)" in kernel and "for (int32_t i_1 = 0; i_1 < 4; ++i_1)" in kernel
    assert "for (int32_t i = 0; i < 16; ++i)" in kernel  # a sibling loop reuses the name
    assert "const float exp_ = int_[i * 4 + i_1];" in kernel and "expf(exp_) + exp_" in kernel
    lib = build(src)
    a = np.random.rand(16).astype(np.float32)
    b = np.zeros(16, np.float32)
    lib.run(a, b)
    np.testing.assert_allclose(b, (np.exp(a) + a) * 2, rtol=1e-6)
    assert [p["name"] for p in lib.metadata["functions"][0]["params"]] == ["int", "B.grad"]


def test_minimal_but_safe_parentheses(lowered):
    A = Buffer((16,), "int32", "A")
    P = Buffer((16,), "bool", "P")
    i = Var("i")
    a = i    # (signed arithmetic on loaded data is printed through the unsigned type: it wraps)
    cases = [
        ((a + 1) * 2, "(i + 1) * 2"),
        (a - (a - 1), "i - (i - 1)"),
        (a - a * 2 + 3, "i - i * 2 + 3"),
        ((a << 2) + 1, "(i << 2) + 1"),
        ((a + 1) << 2, "((i + 1) << 2)"),
        (a * -3, "i * (-3)"),
        (0 - a, "-i"),
    ]
    for expr, text in cases:
        src = generate(lowered([A], lambda buf, e=expr: For(i, 0, 16, "serial", BufferStore(buf, e, [i]))))
        assert f"A[i] = {text};" in src, (text, src[src.index("main_kernel"):][:400])
    a, p = A[i], P[i]
    for expr, text in [(Or(p & (a > 0), p), "(P[i] && A[i] > 0) || P[i]"),
                       ((p | (a > 0)) & p, "(P[i] || A[i] > 0) && P[i]"),
                       (Not(a < 3), "!(A[i] < 3)"),
                       ((a & 3) == 1, "(A[i] & 3) == 1"),
                       ((a < 3) == p, "(A[i] < 3) == P[i]"),
                       (Select(p, a, i + 1) > 2, "(P[i] ? A[i] : i + 1) > 2")]:
        src = generate(lowered([A, P], lambda x, y, e=expr: For(i, 0, 16, "serial", BufferStore(y, e, [i]))))
        assert f"P[i] = {text};" in src, text


def _random_expr(rng, leaves, depth):
    if depth == 0 or rng.random() < 0.2:
        if rng.random() < 0.3:
            return const(int(rng.integers(-9, 10)), "int64")
        return leaves[int(rng.integers(len(leaves)))]
    a = _random_expr(rng, leaves, depth - 1)
    b = _random_expr(rng, leaves, depth - 1)
    k = int(rng.integers(13))
    if k == 0:
        return a + b
    if k == 1:
        return a - b
    if k == 2:
        return a * b
    if k == 3:
        return FloorDiv(a, const(int(rng.integers(1, 7)), "int64"))
    if k == 4:
        return FloorMod(a, const(int(rng.integers(1, 7)), "int64"))
    if k == 5:
        return min_expr(a, b)
    if k == 6:
        return max_expr(a, b)
    if k == 7:
        return a & b
    if k == 8:
        return a | b
    if k == 9:
        return a ^ b
    if k == 10:
        return (a & const(0xFF, "int64")) << const(int(rng.integers(0, 4)), "int64")
    if k == 11:
        return a >> const(int(rng.integers(0, 4)), "int64")
    return Select(Or(a < b, (a == b) & (b > const(0, "int64"))), a, b - a)


def _evaluate(e, env):
    """numpy's value of the expression (int64 arrays)."""
    from tessera.ir import expr as E

    t = type(e)
    if t is E.IntImm:
        return np.int64(e.value)
    if t is E.BufferLoad:
        return env[e.buffer.name]
    if t is E.Select:
        return np.where(_evaluate(e.condition, env), _evaluate(e.true_value, env), _evaluate(e.false_value, env))
    if t is E.Call:
        a, b = (_evaluate(x, env) for x in e.args)
        return {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
                "shift_left": np.left_shift, "shift_right": np.right_shift}[e.op](a, b)
    a, b = _evaluate(e.a, env), _evaluate(e.b, env)
    return {E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.FloorDiv: np.floor_divide,
            E.FloorMod: np.mod, E.Min: np.minimum, E.Max: np.maximum, E.LT: np.less, E.EQ: np.equal,
            E.GT: np.greater, E.And: np.logical_and, E.Or: np.logical_or}[t](a, b)


def test_random_expressions_compute_like_numpy(build, lowered):
    """Precedence and helper semantics hold for random nests of every integer operator."""
    rng = np.random.default_rng(7)
    X, Y = Buffer((32,), "int64", "X"), Buffer((32,), "int64", "Y")
    outs = [Buffer((32,), "int64", f"R{k}") for k in range(24)]
    i = Var("i")
    exprs = []

    def body(x, y, *rs):
        stores = []
        for r in rs:
            e = _random_expr(rng, [x[i], y[i]], 4)
            exprs.append(e)
            stores.append(BufferStore(r, e, [i]))
        return For(i, 0, 32, "serial", seq(*stores))
    lib = build(generate(lowered([X, Y, *outs], body)))
    x = rng.integers(-50, 50, 32).astype(np.int64)
    y = rng.integers(-50, 50, 32).astype(np.int64)
    results = [np.zeros(32, np.int64) for _ in outs]
    lib.run(x, y, *results)
    for e, got in zip(exprs, results):
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(got, np.broadcast_to(_evaluate(e, {"X": x, "Y": y}), (32,)))


def _big_kernel(lowered, statements):
    A = Buffer((statements, 16), "float32", "A")
    C = Buffer((statements, 16), "float32", "C")
    i = Var("i")

    def body(a, c):
        stores = []
        for s in range(statements):
            v = a[s * 16 + i]
            x = Var("x", "float32")
            stores.append(LetStmt(x, v * 2.0 + 1.0, BufferStore(
                c, Call("float32", "exp", [x]) + max_expr(x, const(0.0)) * Cast("float32", i), [s * 16 + i])))
        return For(i, 0, 16, "parallel", seq(*stores))
    return lowered([A, C], body)


def test_generation_is_fast_and_linear(lowered):
    small, large = _big_kernel(lowered, 250), _big_kernel(lowered, 1000)

    def calls(f):
        """The Python and C function calls generating f's C makes: a count, not a time, so a busy
        machine cannot fail the test."""
        n = [0]

        def count(frame, event, arg):
            n[0] += 1

        sys.setprofile(count)
        try:
            generate(f)
        finally:
            sys.setprofile(None)
        return n[0]
    n_small, n_large = calls(small), calls(large)
    # linear: 4x the statements costs about 4x the calls (quadratic would be 16x)
    assert n_large < 8 * n_small, (n_small, n_large)
    src = generate(large)
    # lets in one block get distinct names: x, x_1, ..., x_999
    assert len(re.findall(r"const float x(?:_\d+)? = ", src)) == 1000 and "const float x_999 = " in src
