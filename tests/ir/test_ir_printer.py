"""The text printer: every node kind is visible, precedence is minimal, names never collide."""
import sys

import pytest

from tessera.ir import (Allocate, AssertStmt, AttrStmt, Block, BlockRealize, Broadcast, Buffer,
                        BufferRegion, BufferStore, Call, CommReducer, Div, Evaluate, For,
                        IfThenElse, IRModule, IterVar, Let, LetStmt, Mod, Not, PrimFunc,
                        Ramp, Range, Reduce, Select, SizeVar, StringImm, Var, all_of, any_of,
                        call_intrin, cast, const, max_expr, min_expr, seq, truncdiv, truncmod)


def _matmul():
    n = SizeVar("n")
    A = Buffer((n, 64), "float32", "A")
    B = Buffer((64, 32), "float32", "B")
    C = Buffer((n, 32), "float32", "C")
    i, j, k = Var("i"), Var("j"), Var("k")
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    block = Block([IterVar(Range(0, n), vi), IterVar(Range(0, 32), vj),
                   IterVar(Range(0, 64), vk, "reduce")],
                  [BufferRegion(A, [vi, vk]), BufferRegion(B, [vk, vj])], [BufferRegion(C, [vi, vj])],
                  "C", BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], [vi, vj]),
                  init=BufferStore(C, const(0.0), [vi, vj]))
    nest = For(i, 0, n, "serial", For(j, 0, 32, "serial",
                                      For(k, 0, 64, "serial", BlockRealize([i, j, k], True, block))))
    root = BlockRealize([], True, Block([], [], [], "root", nest))
    return PrimFunc([A, B, C], root)


MATMUL_TEXT = '''\
@T.prim_func
def main(A: T.Buffer((n, 64), "float32"), B: T.Buffer((64, 32), "float32"), C: T.Buffer((n, 32), "float32")):
    n = T.int32(is_size_var=True)
    with T.block("root"):
        for i, j, k in T.grid(n, 32, 64):
            with T.block("C"):
                vi = T.axis.spatial(n, i)
                vj = T.axis.spatial(32, j)
                vk = T.axis.reduce(64, k)
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = T.float32(0.0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]'''


def test_matmul_exact_text():
    f = _matmul()
    assert f.script() == MATMUL_TEXT
    assert str(f) == MATMUL_TEXT


def test_module_indents_functions():
    f = _matmul()
    text = IRModule({"mm": f}).script()
    lines = text.splitlines()
    assert lines[:4] == ["@I.ir_module", "class Module:", "    @T.prim_func",
                         '    def mm(A: T.Buffer((n, 64), "float32"), B: T.Buffer((64, 32), "float32"), '
                         'C: T.Buffer((n, 32), "float32")):']
    assert "\n".join(line[4:] for line in lines[3:]) == MATMUL_TEXT.split("\n", 1)[1].replace("main", "mm")


# expressions ----------------------------------------------------------------------------------
i, j, k = Var("i"), Var("j"), Var("k")
x, y = Var("x", "float32"), Var("y", "float32")
b = Var("b", "bool")


@pytest.mark.parametrize("e, text", [
    (i * 8 + j, "i * 8 + j"),
    (i + j * k, "i + j * k"),
    ((i + j) * k, "(i + j) * k"),
    (i - (j - k), "i - (j - k)"),
    ((i - j) - k, "i - j - k"),
    (i - (j + k), "i - (j + k)"),
    (i * (j * k), "i * (j * k)"),
    (i // 4 % 3, "i // 4 % 3"),
    (i // (4 * j), "i // (4 * j)"),
    (i % (j // 2), "i % (j // 2)"),
    (truncdiv(i, j), "T.truncdiv(i, j)"),
    (truncmod(i, j + 1), "T.truncmod(i, j + 1)"),
    (x / (x * y), "x / (x * y)"),
    (x / y * x, "x / y * x"),
    (min_expr(i, j) + max_expr(i, 3), "T.min(i, j) + T.max(i, 3)"),
    (i * -3, "i * -3"),
    ((i < j) == (j < k), "(i < j) == (j < k)"),
    (all_of(i < 3, j > 2, any_of(k == 1, Not(i == j))), "i < 3 and j > 2 and (k == 1 or not i == j)"),
    (any_of(all_of(b, b), b), "b and b or b"),
    (all_of(b, any_of(b, b)), "b and (b or b)"),
    (Not(all_of(b, b)), "not (b and b)"),
    (Select(i < j, x, y), "T.Select(i < j, x, y)"),
    (cast(x, "float16"), 'T.Cast("float16", x)'),
    (call_intrin("float32", "exp", x + y), "T.exp(x + y)"),
    (call_intrin("bool", "isnan", x), 'T.isnan(x, dtype="bool")'),
    (Call("float32", "my.kernel", [x]), 'T.call_extern("my.kernel", x)'),
    (Call("float32", "my.kernel", []), 'T.call_extern("my.kernel", dtype="float32")'),
    (Call("int32", "nargs", []), 'T.nargs(dtype="int32")'),
    (Ramp(i * 8, 1, 8), "T.Ramp(i * 8, 1, 8)"),
    (Broadcast(x, 4) * Broadcast(y, 4), "T.Broadcast(x, 4) * T.Broadcast(y, 4)"),
    (const(3), "3"),
    (const(-3), "-3"),
    (const(3, "int64"), "T.int64(3)"),
    (const(200, "uint8"), "T.uint8(200)"),
    (const(0.5), "T.float32(0.5)"),
    (const(0.1, "float64"), "T.float64(0.1)"),
    (const(1e-05, "float16"), "T.float16(1e-05)"),
    (const(float("inf")), 'T.float32("inf")'),
    (const(float("-inf")), 'T.float32("-inf")'),
    (const(float("nan"), "float64"), 'T.float64("nan")'),
    (const(True), "True"),
    (const(False), "False"),
    (StringImm('say "hi"'), '"say \\"hi\\""'),
    (Let(x, const(1.0), x * x), "T.Let(x, T.float32(1.0), x * x)"),
])
def test_expression_text(e, text):
    assert e.script() == text
    assert str(e) == text


def test_int_div_and_mod_nodes_print_as_trunc_calls():
    assert Div(i, j).script() == "T.truncdiv(i, j)"
    assert Mod(i, j).script() == "T.truncmod(i, j)"
    assert Div(x, y).script() == "x / y"


def test_float_constants_round_trip_through_repr():
    for v in (0.1, 1 / 3, 1e300, -2.5e-8, 123456789.125):
        text = const(v, "float64").script()
        assert float(text[len("T.float64("):-1]) == v


def test_negative_constant_operands_keep_meaning():
    # Python parses `-1 // 2` as `(-1) // 2`: the printed text must still mean Sub(0, i) * 3
    neg = (0 - i) * 3
    assert neg.script() == "(0 - i) * 3"
    assert (i - const(-3)).script() == "i - -3"


def test_deep_expression_prints_without_recursion():
    e = i
    for t in range(5000):
        e = e + j * t
    text = e.script()
    assert text.startswith("i + j * 0 + j * 1 + ") and text.endswith(" + j * 4999")


def test_reduce_comm_reducer_itervar_range_region():
    lhs, rhs = Var("x", "float32"), Var("y", "float32")
    red = CommReducer([lhs], [rhs], [lhs + rhs], [const(0.0)], "sum")
    B = Buffer((64,), "float32", "B")
    kv = IterVar(Range(0, 64), "k", "reduce")
    r = Reduce(red, [B[kv.var] * 2.0], [kv], condition=kv.var < 10)
    assert r.script() == 'T.reduce("sum", B[k] * T.float32(2.0), axis={k: T.Range(0, 64)}, where=k < 10)'
    assert red.script() == 'T.comm_reducer(lambda x, y: x + y, [T.float32(0.0)], name="sum")'
    assert kv.script() == 'T.iter_var(k, T.Range(0, 64), "reduce")'
    assert IterVar(Range(0, 32), "tx", "thread", "threadIdx.x").script() == \
        'T.iter_var(tx, T.Range(0, 32), "thread", "threadIdx.x")'
    assert Range(2, 10).script() == "T.Range(2, 10)"
    assert Range.from_min_extent(i, 4).script() == "T.Range(i, i + 4)"
    assert BufferRegion(B, [Range.from_min_extent(i * 4, 4)]).script() == "B[i * 4:i * 4 + 4]"
    C = Buffer((8, 8), "float32", "C")
    assert BufferRegion(C, [i, Range(0, 8)]).script() == "C[i, 0:8]"


def test_multi_source_reduce_shows_value_index():
    a0, a1, b0, b1 = Var("a0"), Var("a1", "float32"), Var("b0"), Var("b1", "float32")
    arg = CommReducer([a0, a1], [b0, b1], [Select(a1 >= b1, a0, b0), max_expr(a1, b1)],
                      [const(-1), const(float("-inf"))], "argmax")
    B = Buffer((64,), "float32", "B")
    kv = IterVar(Range(0, 64), "k", "reduce")
    r = Reduce(arg, [kv.var, B[kv.var]], [kv], value_index=1)
    assert r.script() == 'T.reduce("argmax", (k, B[k]), axis={k: T.Range(0, 64)}, value_index=1)'
    assert arg.script().startswith("T.comm_reducer(lambda a0, a1, b0, b1: (T.Select(a1 >= b1, a0, b0), ")


def test_buffer_declaration_shows_non_defaults():
    n = Var("n")
    assert Buffer((n, 4), "float16", "A").script() == 'A = T.Buffer((n, 4), "float16")'
    s = Buffer((16,), "int8", "S", strides=(2,), elem_offset=4, scope="shared", data_alignment=16)
    assert s.script() == 'S = T.Buffer((16,), "int8", strides=(2,), elem_offset=4, scope="shared", align=16)'


# statements -----------------------------------------------------------------------------------
def test_loop_kinds_and_annotations():
    A = Buffer((64,), "float32", "A")
    lv = [Var(name) for name in "abcdefg"]
    body = seq(
        For(lv[0], 0, 64, "parallel", BufferStore(A, A[lv[0]] + 1.0, [lv[0]])),
        For(lv[1], 0, 8, "vectorized", BufferStore(A, A[lv[1]], [lv[1]])),
        For(lv[2], 0, 4, "unrolled", Evaluate(0)),
        For(lv[3], 0, 32, "thread_binding", Evaluate(0), thread_binding="threadIdx.x"),
        For(lv[4], 0, 16, "serial", Evaluate(0), annotations={"pragma_unroll": 4, "tag": "x"}),
        For(lv[5], 2, 8, "serial", Evaluate(0)),
        For(lv[6], i, 5, "parallel", Evaluate(0)),
    )
    text = body.script()
    assert "for a in T.parallel(0, 64):\n    A[a] = A[a] + T.float32(1.0)" in text
    assert "for b in T.vectorized(0, 8):" in text
    assert "for c in T.unroll(0, 4):" in text
    assert 'for d in T.thread_binding(0, 32, thread="threadIdx.x"):' in text
    assert 'for e in T.serial(0, 16, annotations={"pragma_unroll": 4, "tag": "x"}):' in text
    assert "for f in range(2, 10):" in text
    assert "for g in T.parallel(i, i + 5):" in text
    # free variables and buffers are declared at the top
    assert text.startswith('i = T.int32()\nA = T.Buffer((64,), "float32")\n')


def test_grid_folds_only_independent_perfect_serial_nests():
    n = Var("n")
    jj = Var("j")
    tri = For(i, 0, n, "serial", For(jj, 0, i, "serial", Evaluate(0)))
    assert tri.script() == "n = T.int32()\nfor i in range(n):\n    for j in range(i):\n        T.evaluate(0)"
    mixed = For(i, 0, 4, "serial", For(jj, 0, 4, "parallel", Evaluate(0)))
    assert "for i in range(4):\n    for j in T.parallel(0, 4):" in mixed.script()
    grid = For(i, 0, 4, "serial", For(jj, 0, n, "serial", Evaluate(0)))
    assert "for i, j in T.grid(4, n):" in grid.script()


def test_control_flow_let_assert_allocate_attr():
    n = Var("n")
    A = Buffer((n,), "float32", "A")
    X = Buffer((1024,), "float32", "X", scope="local")
    t = Var("t", "float32")
    tx = IterVar(Range(0, 32), "tx", "thread", "threadIdx.x")
    body = Allocate(X, LetStmt(t, A[0], AssertStmt(n > 0, 'n must be "positive"', seq(
        IfThenElse(t > 0.0, BufferStore(X, t, [0]),
                   IfThenElse(t < 0.0, BufferStore(X, -t, [1]), BufferStore(X, t * 2.0, [2]))),
        IfThenElse(b, Evaluate(call_intrin("int32", "tick"))),
        AttrStmt(tx, "thread_extent", 32, Evaluate(tx.var)),
        AttrStmt(StringImm("ctx"), "pragma_x", 1, Evaluate(0))))))
    f = PrimFunc([A, n], body)
    text = f.script()
    expected_tail = '''\
    X = T.allocate([1024], "float32", "local")
    t: T.float32 = A[0]
    assert n > 0, "n must be \\"positive\\""
    if t > T.float32(0.0):
        X[0] = t
    elif t < T.float32(0.0):
        X[1] = T.float32(0.0) - t
    else:
        X[2] = t * T.float32(2.0)
    if b:
        T.evaluate(T.tick(dtype="int32"))
    with T.attr(T.iter_var(tx, T.Range(0, 32), "thread", "threadIdx.x"), "thread_extent", 32):
        T.evaluate(tx)
    with T.attr("ctx", "pragma_x", 1):
        T.evaluate(0)'''
    assert text.endswith(expected_tail)
    # n is a parameter, b is free: only b is declared
    assert text.splitlines()[:3] == ['@T.prim_func', 'def main(A: T.Buffer((n,), "float32"), n: T.int32):',
                                     "    b = T.bool()"]


def test_block_predicate_annotations_alloc_and_lone_block():
    A = Buffer((10,), "float32", "A")
    L = Buffer((4,), "float32", "L", scope="local")
    vi = Var("vi")
    blk = Block([IterVar(Range(2, 12), vi)], [BufferRegion(A, [vi - 2])], [BufferRegion(A, [vi - 2])],
                "B", BufferStore(A, A[vi - 2] * 2.0, [vi - 2]), alloc_buffers=[L],
                annotations={"meta_schedule.tiling": "SSR", "unroll": [1, 2]})
    realize = BlockRealize([i + 2], i < 8, blk)
    text = For(i, 0, 10, "serial", realize).script()
    assert text.splitlines() == [
        'A = T.Buffer((10,), "float32")',
        "for i in range(10):",
        '    with T.block("B"):',
        "        vi = T.axis.spatial((2, 12), i + 2)",
        "        T.where(i < 8)",
        "        T.reads(A[vi - 2])",
        "        T.writes(A[vi - 2])",
        '        T.block_attr({"meta_schedule.tiling": "SSR", "unroll": [1, 2]})',
        '        L = T.alloc_buffer((4,), "float32", scope="local")',
        "        A[vi - 2] = A[vi - 2] * T.float32(2.0)",
    ]
    # a Block without its realize shows domains without bindings
    assert "vi = T.axis.spatial((2, 12))\n" in blk.script()


def test_match_buffers_and_annotation_values():
    import numpy as np

    A = Buffer((8, 8), "float32", "A")
    sub = Buffer((4, 4), "float32", "A_sub", strides=(8, 1))
    region = BufferRegion(A, [Range(0, 4), Range(4, 8)])
    blk = Block([], [region], [], "m", Evaluate(0), match_buffers=[(sub, region)],
                annotations={"n": np.int64(3), "f": np.float32(0.5), "ok": np.bool_(True),
                             "inf": float("inf"), "none": None, "t": (1,)})
    text = blk.script()
    assert 'A_sub = T.match_buffer((4, 4), "float32", strides=(8, 1), source=A[0:4, 4:8])' in text
    assert 'T.block_attr({"n": 3, "f": 0.5, "ok": True, "inf": float("inf"), "none": None, "t": (1,)})' in text


def test_opaque_block_with_empty_sets_still_shows_them():
    blk = BlockRealize([], True, Block([], [], [], "root", Evaluate(0)))
    assert blk.script() == 'with T.block("root"):\n    T.evaluate(0)'
    v = Var("v")
    one = BlockRealize([i], True, Block([IterVar(Range(0, 4), v, "opaque")], [], [], "o", Evaluate(0)))
    assert "v = T.axis.opaque(4, i)\n    T.reads()\n    T.writes()" in one.script()


def test_func_attrs_and_flat_param_aliases():
    n = Var("n")
    A = Buffer((n, 4), "float32", "A")
    Af = Buffer((n * 4,), "float32", "A")
    alpha = Var("alpha", "float32")
    body = For(i, 0, n * 4, "serial", BufferStore(Af, Af[i] * alpha, [i]))
    f = PrimFunc([A, alpha], body, attrs={"flat_params": (Af, None), "global_symbol": "scale",
                                          "tiles": (4, 8)}, name="scale")
    assert f.script() == '''\
@T.prim_func
def scale(A: T.Buffer((n, 4), "float32"), alpha: T.float32):
    T.func_attr({"global_symbol": "scale", "tiles": (4, 8)})
    n = T.int32()
    A_1 = T.Buffer((n * 4,), "float32", data=A.data)
    for i in range(n * 4):
        A_1[i] = A_1[i] * alpha'''


# names ----------------------------------------------------------------------------------------
def test_same_name_different_vars_are_disambiguated_in_order():
    A = Buffer((4, 4), "float32", "A")
    i1, i2, j1 = Var("i"), Var("i"), Var("j")
    prog = seq(For(i1, 0, 4, "serial", For(j1, 0, 4, "serial", BufferStore(A, const(1.0), [i1, j1]))),
               For(i2, 0, 4, "serial", BufferStore(A, A[i2, 0], [i2, 0])),
               For(i1, 0, 4, "serial", BufferStore(A, const(0.0), [i1, 0])))
    text = prog.script()
    assert "for i, j in T.grid(4, 4):\n    A[i, j] = T.float32(1.0)" in text
    assert "for i_1 in range(4):\n    A[i_1, 0] = A[i_1, 0]" in text
    # the same Var object keeps its one name everywhere
    assert text.endswith("for i in range(4):\n    A[i, 0] = T.float32(0.0)")
    assert (i1 + i2).script() == "i + i_1"
    assert (i2 + i1).script() == "i + i_1"  # first appearance decides
    assert (i1 + i1).script() == "i + i"


def test_buffers_share_the_namespace_and_suffixes_skip_taken_names():
    A1, A2 = Buffer((4,), "float32", "A"), Buffer((4,), "float32", "A")
    a_var, a1_var = Var("A"), Var("A_1")
    text = seq(BufferStore(A1, A2[a_var], [a1_var])).script()
    # printed in order: store target A, index A_1, loaded buffer (2nd "A"), its index (3rd "A")
    assert text.splitlines()[-1] == "A[A_1] = A_2[A_3]"
    assert 'A = T.Buffer((4,), "float32")' in text and 'A_2 = T.Buffer((4,), "float32")' in text
    assert "A_1 = T.int32()" in text and "A_3 = T.int32()" in text
    assert (Var("x_1") + Var("x") + Var("x")).script() == "x_1 + x + x_2"


def test_odd_names_are_made_identifiers():
    v = Var("i.outer")
    w = Var("for")
    t = Var("T")
    e = Var("")
    assert (v + w + t + e).script() == "i_outer + for_ + T_ + v"
    assert Var("0x").script() == "v0x"


def test_printing_big_programs_is_linear():
    A = Buffer((16, 64), "float32", "A")

    def program(count):
        stmts = []
        for _ in range(count):
            ii, jj = Var("i"), Var("j")
            stmts.append(For(ii, 0, 16, "serial", For(jj, 0, 64, "vectorized",
                                                      BufferStore(A, A[ii, jj] * 2.0, [ii, jj]))))
        return PrimFunc([A], seq(*stmts))

    def calls(func):
        """(the script, the Python and C function calls printing it made): a count, not a time, so a
        busy machine cannot fail the test."""
        n = [0]

        def count(frame, event, arg):
            n[0] += 1

        sys.setprofile(count)
        try:
            text = func.script()
        finally:
            sys.setprofile(None)
        return text, n[0]

    _, n_small = calls(program(200))
    text, n_big = calls(program(4000))
    assert "for i_3999 in range(16):" in text and text.count("\n") == 1 + 3 * 4000
    assert n_big < 40 * n_small, (n_small, n_big)   # 20x the work; quadratic printing would be ~400x
