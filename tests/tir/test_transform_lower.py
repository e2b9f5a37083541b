"""lower: the whole pipeline keeps semantics and leaves only lowered IR."""
import numpy as np
import pytest

from interp_lowered import run
from tessera import ir
from tessera.errors import TesseraError
from tessera.target import Target
from tessera.ir import (Allocate, AssertStmt, AttrStmt, Block, BlockRealize, Buffer, BufferLoad,
                        BufferStore, Evaluate, For, IfThenElse, IRModule, LetStmt, PrimFunc, Ramp,
                        Reduce, SeqStmt, Var)
from tessera.tir import transform
from tessera.tir.transform import PIPELINE, lower
from tir_builders import assert_same, find, iv, loops, matmul, matmul_block, matmul_buffers, root

LOWERED_STMTS = (For, SeqStmt, IfThenElse, Allocate, LetStmt, BufferStore, Evaluate, AttrStmt, AssertStmt)


def assert_lowered(func):
    """Only lowered statements, 1-D accesses, no Reduce (the contract of docs/internals.md)."""
    def walk(s):
        assert isinstance(s, LOWERED_STMTS), type(s).__name__
        for f in s._fields:
            v = getattr(s, f)
            if isinstance(v, ir.Stmt):
                walk(v)
            elif isinstance(v, tuple):
                for x in v:
                    if isinstance(x, ir.Stmt):
                        walk(x)
    walk(func.body)
    assert not find(func.body, (Block, BlockRealize, Reduce))
    for acc in find(func.body, (BufferLoad, BufferStore)):
        assert acc.buffer.ndim == 1 and len(acc.indices) == 1


def test_matmul_with_vectorized_spatial_loop(isa_target):
    """j (extent 32) vectorized: float32 vectors as wide as the target's registers."""
    A, B, C = matmul_buffers(4, 32, 5)
    i, j, k = Var("i"), Var("j"), Var("k")
    nest = loops([(i, 4), (k, 5), (j, 32)], matmul_block(A, B, C, [i, j, k]), kinds={"j": "vectorized"})
    f = PrimFunc([A, B, C], root(nest))
    g = lower(f, target=isa_target)
    assert_lowered(g)
    assert not [x for x in find(g.body, For) if x.kind == "vectorized"]
    lanes = Target(isa_target).vector_bits // 32
    for st in find(g.body, BufferStore):
        assert isinstance(st.indices[0], Ramp) and st.indices[0].lanes == lanes
    a, b, c = assert_same(f, g)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


@pytest.mark.parametrize("order", ["ijk", "kij", "jki"])
def test_matmul_orders(order):
    f = matmul(5, 6, 7, order=order)
    g = lower(f)
    assert_lowered(g)
    a, b, c = assert_same(f, g)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    again = lower(g)  # lowering a lowered function keeps it valid
    assert_lowered(again)
    assert again.attrs["flat_params"] == g.attrs["flat_params"]
    assert_same(f, again)


def test_split_with_predicate_vectorized_and_unrolled():
    # i (extent 10) split by 4 with inner vectorized (predicate keeps it a simd loop); j unrolled
    n, m = 10, 3
    A, B = Buffer((n, m), "float32", "A"), Buffer((n, m), "float32", "B")
    vi, vj = iv("vi", n), iv("vj", m)
    block = Block([vi, vj], [], [], "B", BufferStore(B, A[vi.var, vj.var] + 1.0, [vi.var, vj.var]))
    io, ii, j = Var("io"), Var("ii"), Var("j")
    nest = loops([(io, 3), (j, m), (ii, 4)], BlockRealize([io * 4 + ii, j], io * 4 + ii < n, block),
                 kinds={"ii": "vectorized", "j": "unrolled"})
    f = PrimFunc([A, B], root(nest))
    g = lower(f)
    assert_lowered(g)
    assert [x.kind for x in find(g.body, For)] == ["serial"] + ["vectorized"] * 3
    a, b = assert_same(f, g)
    np.testing.assert_allclose(b, a + 1)


def test_intermediate_buffer_and_symbolic_shape():
    n = Var("n")
    A, B = Buffer((n, 8), "float32", "A"), Buffer((n, 8), "float32", "B")
    T = Buffer((n, 8), "float32", "T")
    i, j, i2, j2 = Var("i"), Var("j"), Var("i"), Var("j")
    v1 = [iv("vi", n), iv("vj", 8)]
    v2 = [iv("vi", n), iv("vj", 8)]
    b1 = Block(v1, [], [], "T", BufferStore(T, ir.call_intrin("float32", "exp", A[v1[0].var, v1[1].var]),
                                            [v1[0].var, v1[1].var]))
    b2 = Block(v2, [], [], "B", BufferStore(B, T[v2[0].var, v2[1].var] * 2.0, [v2[0].var, v2[1].var]))
    f = PrimFunc([A, B], root(loops([(i, n), (j, 8)], BlockRealize([i, j], True, b1), kinds={"j": "vectorized"}),
                              loops([(i2, n), (j2, 8)], BlockRealize([i2, j2], True, b2)), alloc=[T]))
    g = lower(f)
    assert_lowered(g)
    (alloc,) = find(g.body, Allocate)
    assert alloc.buffer.ndim == 1
    a = np.random.default_rng(0).standard_normal((3, 8)).astype("float32")
    b = np.zeros((3, 8), "float32")
    run(g, [a, b])
    np.testing.assert_allclose(b, np.exp(a) * 2, rtol=1e-6)


def test_dump_sees_every_pass_in_order():
    seen = []
    lower(matmul(), dump=lambda name, func: seen.append((name, isinstance(func, PrimFunc))))
    assert seen == [(name, True) for name, _ in PIPELINE]
    assert [name for name, _ in PIPELINE] == ["lower_vthread", "plan_buffer_allocation", "lower_blocks",
                                             "compact_buffer_allocation", "flatten_buffer", "simplify",
                                             "lower_checks", "vectorize_loop", "unroll_loop", "simplify",
                                             "fuse_intrin_epilogue"]


def test_module_lowers_every_function():
    mod = IRModule({"main": matmul(2, 3, 4), "other": matmul(3, 2, 2, order="kij")})
    out = lower(mod, target="c")
    assert isinstance(out, IRModule) and sorted(name for name, _ in out) == ["main", "other"]
    for _, func in out:
        assert_lowered(func)
    assert_same(mod["other"], out["other"])


def test_lower_refuses_other_inputs_and_exports_passes():
    with pytest.raises(TesseraError, match="PrimFunc"):
        lower("not a function")
    for name in ("lower_blocks", "flatten_buffer", "simplify", "vectorize_loop", "unroll_loop", "lower"):
        assert callable(getattr(transform, name))


# ---------------------------------------------------------------------------------------------
# property: random split / reorder / fuse / loop kinds of a matmul lower to the same results
# ---------------------------------------------------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def scheduled_matmuls(draw):
    ext = {ax: draw(st.integers(1, 5)) for ax in "ijk"}
    nest, binding, pred = [], {}, []
    for ax in "ijk":
        factor = draw(st.sampled_from([None, 1, 2, 3, 4]))
        if factor is None:
            v = Var(ax)
            nest.append((v, ext[ax]))
            binding[ax] = v
        else:
            outer, inner = Var(ax + "o"), Var(ax + "i")
            n_outer = -(-ext[ax] // factor)
            nest += [(outer, n_outer), (inner, factor)]
            binding[ax] = outer * factor + inner
            if n_outer * factor != ext[ax]:
                pred.append(binding[ax] < ext[ax])
    nest = [nest[p] for p in draw(st.permutations(range(len(nest))))]
    if len(nest) >= 2 and draw(st.booleans()):
        p = draw(st.integers(0, len(nest) - 2))
        (v1, e1), (v2, e2) = nest[p], nest[p + 1]
        fused = Var("fused")
        nest[p:p + 2] = [(fused, e1 * e2)]
        sub = {v1: fused // e2, v2: fused % e2}
        binding = {ax: ir.substitute(b, sub) for ax, b in binding.items()}
        pred = [ir.substitute(c, sub) for c in pred]
    kinds = {}
    for v, _ in nest:
        kinds[v.name] = draw(st.sampled_from(["serial", "serial", "unrolled", "vectorized"]))
    A, B, C = matmul_buffers(ext["i"], ext["j"], ext["k"])
    block = matmul_block(A, B, C, [binding["i"], binding["j"], binding["k"]],
                         predicate=ir.all_of(*pred) if pred else True)
    return PrimFunc([A, B, C], root(loops(nest, block, kinds)))


@settings(max_examples=60, deadline=None)
@given(scheduled_matmuls())
def test_random_schedules_lower_correctly(f):
    g = lower(f)
    assert_lowered(g)
    a, b, c = assert_same(f, g)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
