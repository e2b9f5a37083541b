"""The statement pass tir.transform.simplify: rules, and unchanged results on random programs.

A small interpreter runs the program before and after the pass on numpy buffers; the stores
must produce the same buffer contents.
"""
import random

import numpy as np
import pytest

from tessera import ir
from tessera.arith import Analyzer
from tessera.errors import TesseraError
from tessera.ir import (Allocate, AttrStmt, Block, BlockRealize, BufferRegion, BufferStore, Evaluate,
                        For, IfThenElse, IterVar, LetStmt, PrimFunc, Range, SeqStmt, SizeVar, Var,
                        structural_equal)
from tessera.tir.transform.simplify import simplify, simplify_stmt

from test_arith_random import ev as ev_int


# ---------------------------------------------------------------------------------------------
# a tiny interpreter
# ---------------------------------------------------------------------------------------------
def ev(e, env, mem):
    if isinstance(e, ir.BufferLoad):
        idx = tuple(ev(i, env, mem) for i in e.indices)
        return mem[e.buffer][idx].item()
    if isinstance(e, ir.FloatImm):
        return e.value
    # integer expressions: reuse the expression evaluator, with loads resolved first
    loads = {}

    def collect(n):
        if isinstance(n, ir.BufferLoad):
            loads[n] = None

    ir.post_order_visit(e, collect)
    if not loads:
        return ev_int(e, env)
    sub = {}
    for n in loads:
        v = Var("load", n.dtype)
        env = dict(env)
        env[v] = ev(n, env, mem)
        sub[n] = v

    class R(ir.Mutator):
        def visit_BufferLoad(self, n):
            return sub.get(n, n)

    return ev_int(R().visit(e), env)


def run(stmt, env, mem):
    t = type(stmt)
    if t is SeqStmt:
        for s in stmt.seq:
            run(s, env, mem)
    elif t is For:
        lo, ext = ev(stmt.min, env, mem), ev(stmt.extent, env, mem)
        for v in range(lo, lo + ext):
            run(stmt.body, {**env, stmt.loop_var: v}, mem)
    elif t is IfThenElse:
        if ev(stmt.condition, env, mem):
            run(stmt.then_case, env, mem)
        elif stmt.else_case is not None:
            run(stmt.else_case, env, mem)
    elif t is BufferStore:
        idx = tuple(ev(i, env, mem) for i in stmt.indices)
        mem[stmt.buffer][idx] = ev(stmt.value, env, mem)
    elif t is LetStmt:
        run(stmt.body, {**env, stmt.var: ev(stmt.value, env, mem)}, mem)
    elif t is Evaluate:
        pass
    elif t is AttrStmt or t is Allocate:
        run(stmt.body, env, mem)
    elif t is BlockRealize:
        if ev(stmt.predicate, env, mem):
            b = stmt.block
            benv = dict(env)
            for iv, val in zip(b.iter_vars, stmt.iter_values):
                benv[iv.var] = ev(val, env, mem)
            if b.init is not None and all(benv[iv.var] == ev(iv.dom.min, benv, mem)
                                          for iv in b.iter_vars if iv.iter_type == "reduce"):
                run(b.init, benv, mem)
            run(b.body, benv, mem)
    else:
        raise TypeError(f"interpreter has no rule for {t.__name__}")


def same_effect(before, after, buffers, env=None, seed=0):
    rng = np.random.default_rng(seed)
    m1 = {b: rng.integers(-50, 50, size=[s.value for s in b.shape]).astype(np.int64) for b in buffers}
    m2 = {b: a.copy() for b, a in m1.items()}
    run(before, dict(env or {}), m1)
    run(after, dict(env or {}), m2)
    for b in buffers:
        np.testing.assert_array_equal(m1[b], m2[b], err_msg=f"buffer {b.name} differs")


def loop(var, extent, body, kind="serial", **kw):
    return For(var, 0, extent, kind, body, **kw)


A = ir.Buffer((8, 8), "int32", "A")
F = ir.Buffer((64,), "int32", "F")
io, ii, i, j, k = (Var(n) for n in ["io", "ii", "i", "j", "k"])


# ---------------------------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------------------------
def test_split_indices_come_out_clean():
    f = io * 8 + ii
    body = loop(io, 8, loop(ii, 8, BufferStore(A, A[f // 8, f % 8] + 1, [f // 8, f % 8])))
    out = simplify_stmt(body)
    expected = loop(io, 8, loop(ii, 8, BufferStore(A, A[io, ii] + 1, [io, ii])))
    assert structural_equal(out, expected), out.script()
    same_effect(body, out, [A])


def test_provable_conditions_are_removed_and_others_kept():
    s = BufferStore(F, 1, [i])
    out = simplify_stmt(loop(i, 8, IfThenElse(i < 10, s)))
    assert structural_equal(out, loop(i, 8, s))
    out = simplify_stmt(loop(i, 8, IfThenElse(i >= 8, s, BufferStore(F, 2, [i]))))
    assert structural_equal(out, loop(i, 8, BufferStore(F, 2, [i])))
    out = simplify_stmt(loop(i, 8, IfThenElse(i >= 8, s)))
    assert structural_equal(out, ir.NOP)
    # a guard of a non-divisible split stays
    guarded = loop(io, 3, loop(ii, 4, IfThenElse(io * 4 + ii < 10, BufferStore(F, 1, [io * 4 + ii]))))
    out = simplify_stmt(guarded)
    assert structural_equal(out, guarded)
    same_effect(guarded, out, [F])


def test_conditions_known_inside_branches():
    s1, s2, s3 = (BufferStore(F, v, [i]) for v in (1, 2, 3))
    prog = loop(i, 64, IfThenElse(i < 10, IfThenElse(i < 10, s1, s2), IfThenElse(i < 10, s2, s3)))
    out = simplify_stmt(prog)
    assert structural_equal(out, loop(i, 64, IfThenElse(i < 10, s1, s3))), out.script()
    same_effect(prog, out, [F])
    prog = loop(i, 8, loop(j, 8, IfThenElse(i * 8 + j < 50, IfThenElse(j + i * 8 <= 49, s1))))
    out = simplify_stmt(prog)
    assert structural_equal(out, loop(i, 8, loop(j, 8, IfThenElse(i * 8 + j < 50, s1))))


def test_unit_loops():
    out = simplify_stmt(loop(i, 1, BufferStore(F, i * 2, [i + 3])))
    assert structural_equal(out, BufferStore(F, 0, [3]))
    out = simplify_stmt(For(i, 5, 1, "serial", BufferStore(F, i, [i])))
    assert structural_equal(out, BufferStore(F, 5, [5]))
    # thread-bound and annotated loops stay
    tb = For(i, 0, 1, "thread_binding", BufferStore(F, 1, [i]), thread_binding=IterVar(None, Var("tx"), "thread", "threadIdx.x"))
    assert type(simplify_stmt(tb)) is For
    ann = For(i, 0, 1, "serial", BufferStore(F, 1, [i]), annotations={"pragma_unroll": 1})
    assert type(simplify_stmt(ann)) is For


def test_empty_loops_disappear():
    assert structural_equal(simplify_stmt(loop(i, 0, BufferStore(F, 1, [i]))), ir.NOP)
    assert structural_equal(simplify_stmt(loop(i, -3, BufferStore(F, 1, [i]))), ir.NOP)
    assert structural_equal(simplify_stmt(loop(i, 8, Evaluate(0))), ir.NOP)


def test_sequences_keep_every_store_in_order():
    s1, s2 = BufferStore(F, 1, [0]), BufferStore(F, 2, [0])
    prog = SeqStmt([s1, Evaluate(0), s2, Evaluate(0), s1])
    out = simplify_stmt(prog)
    assert structural_equal(out, SeqStmt([s1, s2, s1]))
    out = simplify_stmt(SeqStmt([Evaluate(0), Evaluate(0)]))
    assert structural_equal(out, ir.NOP)
    # an extern call is not a no-op
    call = Evaluate(ir.call_intrin("int32", "printf", ir.StringImm("x")))
    assert structural_equal(simplify_stmt(SeqStmt([call, Evaluate(0)])), call)


def test_let_statements():
    t = Var("t")
    prog = LetStmt(t, 3, BufferStore(F, t * 2, [t]))
    assert structural_equal(simplify_stmt(prog), BufferStore(F, 6, [3]))
    # a non-constant value stays bound; its range is known in the body
    prog = loop(i, 64, LetStmt(t, i % 4, IfThenElse(t < 4, BufferStore(F, t, [i]))))
    out = simplify_stmt(prog)
    assert structural_equal(out, loop(i, 64, LetStmt(t, i % 4, BufferStore(F, t, [i]))))
    same_effect(prog, out, [F])


def test_symbolic_extents():
    n = SizeVar("n")
    B = ir.Buffer((n,), "int32", "B")
    prog = For(i, 0, n, "serial", IfThenElse(i < n, BufferStore(B, 1, [i])))
    func = PrimFunc([B], prog)
    out = simplify(func)
    assert structural_equal(out.body, For(i, 0, n, "serial", BufferStore(B, 1, [i])))
    # shape variables that are plain Vars are known to be >= 0
    m = Var("m")
    C = ir.Buffer((m,), "int32", "C")
    func = PrimFunc([C], IfThenElse(m >= 0, BufferStore(C, 1, [0])))
    assert structural_equal(simplify(func).body, BufferStore(C, 1, [0]))


def test_blocks_are_kept_with_bounds_of_their_iteration_variables():
    vi = IterVar(Range(0, 16), Var("vi"), "data_par")
    body = IfThenElse(vi.var < 16, BufferStore(F, F[vi.var * 4 // 4] + 1, [vi.var]))
    blk = Block([vi], [BufferRegion(F, [Range.from_min_extent(vi.var * 2 // 2, 1)])],
                [BufferRegion(F, [Range.from_min_extent(vi.var, 1)])], "blk", body)
    prog = loop(i, 10, BlockRealize([i + 0], i < 16, blk))
    out = simplify_stmt(prog)
    realize = out.body
    assert type(realize) is BlockRealize and realize.predicate.value == 1
    assert structural_equal(realize.iter_values[0], i)
    b = realize.block
    assert b.name_hint == "blk" and b.iter_vars[0].var is vi.var
    assert structural_equal(b.body, BufferStore(F, F[vi.var] + 1, [vi.var]))
    assert structural_equal(b.reads[0].region[0].min, vi.var)
    same_effect(prog, out, [F])


def test_block_iteration_variables_narrowed_by_their_bindings():
    vi = IterVar(Range(0, 64), Var("vi"), "data_par")
    blk = Block([vi], [], [], "b", IfThenElse(vi.var < 8, BufferStore(F, 1, [vi.var])))
    prog = loop(i, 8, BlockRealize([i], True, blk))
    out = simplify_stmt(prog)
    assert type(out.body.block.body) is BufferStore


def test_te_function_roundtrip():
    from tessera import te

    n = te.var("n")
    Ap = te.placeholder((n, 16), name="A", dtype="float32")
    Bp = te.placeholder((16, 8), name="B", dtype="float32")
    kk = te.reduce_axis((0, 16), name="k")
    C = te.compute((n, 8), lambda a, b: te.sum(Ap[a, kk] * Bp[kk, b], axis=kk), name="C")
    func = te.create_prim_func([Ap, Bp, C])
    assert simplify(func) is func  # nothing to simplify: the same object back
    from tessera.tir.transform import lower

    low = lower(func)
    assert simplify(low) is low  # lowering already ran simplify; a second run is a no-op


def test_pass_refuses_non_functions():
    with pytest.raises(TesseraError, match="PrimFunc"):
        simplify(BufferStore(F, 1, [0]))
    with pytest.raises(TesseraError, match="statement"):
        simplify_stmt(i + 1)


def test_simplify_stmt_with_a_given_analyzer():
    ana = Analyzer()
    ana.bind(k, Range(0, 4))
    out = simplify_stmt(IfThenElse(k < 4, BufferStore(F, 1, [k])), ana)
    assert type(out) is BufferStore


# ---------------------------------------------------------------------------------------------
# random programs
# ---------------------------------------------------------------------------------------------
class ProgGen:
    """Loop nests over F (64 elements) with split/fuse indices, guards, unit loops and lets."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def program(self):
        r = self.r
        stmts = [self.nest() for _ in range(r.randint(1, 3))]
        if r.random() < 0.3:
            stmts.insert(r.randint(0, len(stmts)), Evaluate(0))
        return SeqStmt(stmts) if len(stmts) > 1 else stmts[0]

    def nest(self):
        r = self.r
        shape = r.choice(["split", "fuse", "plain", "guard"])
        a, b = Var("a"), Var("b")
        if shape == "split":
            fa = r.choice([1, 2, 4, 8])
            outer = 64 // fa
            idx = a * fa + b
            idx = r.choice([idx, (idx // 8) * 8 + idx % 8, (idx // 4) * 4 + idx % 4])
            body = BufferStore(F, F[idx] + self.value(a, b), [idx])
            return loop(a, outer, loop(b, fa, self.wrap(body, a, b, idx)))
        if shape == "fuse":
            w = r.choice([2, 4, 8])
            h = 64 // w
            row, col = a // w, a % w
            idx = row * w + col
            body = BufferStore(F, F[idx] * 2 - self.value(row, col), [idx])
            return loop(a, h * w, self.wrap(body, row, col, idx))
        if shape == "guard":
            fa = r.choice([3, 5, 7])
            outer = (64 + fa - 1) // fa
            idx = a * fa + b
            body = IfThenElse(idx < 64, BufferStore(F, F[ir.min_expr(idx, 63)] + 1, [ir.min_expr(idx, 63)]))
            return loop(a, outer, loop(b, fa, body))
        ext = r.choice([0, 1, 1, 5])
        body = BufferStore(F, F[a + 3] + a, [a + 3])
        return loop(a, ext, self.wrap(body, a, a, a + 3))

    def value(self, p, q):
        r = self.r
        return r.choice([p, q, p * 3 - q, ir.Select(q < 2, p, q), ir.max_expr(p, q), p % 3, p // 2 + 1])

    def wrap(self, body, p, q, idx):
        r = self.r
        k = r.random()
        if k < 0.25:
            return IfThenElse(r.choice([idx < 64, idx >= 0, q < 3, idx < 0, p == q]), body,
                              r.choice([None, BufferStore(F, 7, [idx])]))
        if k < 0.4:
            t = Var("t")
            return LetStmt(t, r.choice([ir.const(2), q % 4]), SeqStmt([BufferStore(F, t, [idx]), body]))
        if k < 0.5:
            u = Var("u")
            return For(u, 0, 1, "serial", BufferStore(F, F[idx] + u, [idx + u]))
        return body


@pytest.mark.parametrize("seed", range(40))
def test_random_programs_compute_the_same(seed):
    prog = ProgGen(seed).program()
    out = simplify_stmt(prog)
    same_effect(prog, out, [F], seed=seed)
