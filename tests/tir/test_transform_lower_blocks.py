"""lower_blocks: blocks disappear, init is hoisted or guarded, semantics are kept (TVM's)."""
import numpy as np
import pytest

from tessera import ir
from tessera.errors import TesseraError
from tessera.ir import (Allocate, Block, BlockRealize, Buffer, BufferStore, For, IfThenElse, PrimFunc,
                        Var, seq)
from tessera.tir.transform import lower_blocks
from interp_lowered import run
from tir_builders import assert_same, find, iv, loops, matmul, matmul_block, matmul_buffers, root


def no_blocks(func):
    assert not find(func.body, (Block, BlockRealize))


def check_matmul(f):
    g = lower_blocks(f)
    no_blocks(g)
    A, B, C = assert_same(f, g)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    return g


def test_matmul_init_hoisted_before_reduce_loop():
    g = check_matmul(matmul(order="ijk"))
    i_loop = g.body
    j_loop = i_loop.body
    assert isinstance(i_loop, For) and isinstance(j_loop, For)
    init, k_loop = j_loop.body.seq
    assert isinstance(init, BufferStore) and isinstance(init.value, ir.FloatImm)
    assert [x.name for x in init.indices] == ["i", "j"]
    assert isinstance(k_loop, For) and isinstance(k_loop.body, BufferStore)  # no guard left


@pytest.mark.parametrize("order", ["kij", "ikj", "kji", "jki"])
def test_reordered_reduction_gets_guarded_init(order):
    g = check_matmul(matmul(order=order))
    guards = find(g.body, IfThenElse)
    assert len(guards) == 1
    assert guards[0].condition.script().replace(" ", "") in ("k==0",)


def test_split_reduce_loops_hoist_with_predicate():
    # k (extent 7) split by 4: ko in [0, 2), ki in [0, 4); vk = ko*4 + ki, predicate vk < 7
    A, B, C = matmul_buffers(4, 3, 7)
    i, j, ko, ki = Var("i"), Var("j"), Var("ko"), Var("ki")
    vk = ko * 4 + ki
    nest = loops([(i, 4), (j, 3), (ko, 2), (ki, 4)], matmul_block(A, B, C, [i, j, vk], predicate=vk < 7))
    f = PrimFunc([A, B, C], root(nest))
    g = check_matmul(f)
    j_loop = g.body.body
    init, ko_loop = j_loop.body.seq
    assert isinstance(ko_loop, For) and ko_loop.loop_var is ko
    # the init keeps the predicate at the first reduce iteration (0*4 + 0 < 7), the body the full one
    assert isinstance(ko_loop.body.body, IfThenElse)


def test_fused_reduce_loops_hoist():
    # two reduce axes fused into one loop: vk1 = f // 3, vk2 = f % 3
    n, K1, K2 = 4, 2, 3
    A, C = Buffer((n, K1, K2), "float32", "A"), Buffer((n,), "float32", "C")
    vi, vk1, vk2 = iv("vi", n), iv("vk1", K1, "reduce"), iv("vk2", K2, "reduce")
    body = BufferStore(C, C[vi.var] + A[vi.var, vk1.var, vk2.var], [vi.var])
    block = Block([vi, vk1, vk2], [], [], "C", body, init=BufferStore(C, 0.0, [vi.var]))
    i, fk = Var("i"), Var("fk")
    f = PrimFunc([A, C], root(loops([(i, n), (fk, K1 * K2)],
                                    BlockRealize([i, fk // K2, fk % K2], True, block))))
    g = lower_blocks(f)
    no_blocks(g)
    init, fk_loop = g.body.body.seq
    assert isinstance(init, BufferStore) and fk_loop.loop_var is fk
    a, c = assert_same(f, g)
    np.testing.assert_allclose(c, a.sum(axis=(1, 2)), rtol=1e-5)


def test_fused_spatial_and_reduce_loop_is_guarded():
    # i and k fused: the reduce binding depends on a loop that is also spatial
    n, m, K = 3, 4, 5
    A, B, C = matmul_buffers(n, m, K)
    f_, j = Var("f"), Var("j")
    f = PrimFunc([A, B, C], root(loops([(f_, n * K), (j, m)],
                                       matmul_block(A, B, C, [f_ // K, j, f_ % K]))))
    g = check_matmul(f)
    assert len(find(g.body, IfThenElse)) == 1


def test_split_spatial_reduce_interleaved():
    # k split, and the spatial j loop sits between ko and ki: not a perfect reduce nest -> guard
    n, m, K = 3, 4, 8
    A, B, C = matmul_buffers(n, m, K)
    i, j, ko, ki = Var("i"), Var("j"), Var("ko"), Var("ki")
    f = PrimFunc([A, B, C], root(loops([(i, n), (ko, 2), (j, m), (ki, 4)],
                                       matmul_block(A, B, C, [i, j, ko * 4 + ki]))))
    g = check_matmul(f)
    assert len(find(g.body, IfThenElse)) == 1


def test_loop_not_in_any_binding_keeps_tvm_semantics():
    # a loop whose var binds nothing, inside the reduce loop: the init runs on each of its
    # iterations (TVM semantics); hoisting would change the result, so the init must be guarded
    n, m, K = 2, 3, 4
    A, B, C = matmul_buffers(n, m, K)
    i, j, k, t = Var("i"), Var("j"), Var("k"), Var("t")
    f = PrimFunc([A, B, C], root(loops([(i, n), (j, m), (k, K), (t, 2)],
                                       matmul_block(A, B, C, [i, j, k]))))
    g = lower_blocks(f)
    assert len(find(g.body, IfThenElse)) == 1
    assert_same(f, g)


def test_non_injective_reduce_binding_is_guarded():
    # vk = ki % 2 over ki in [0, 4): at min twice, so the init cannot be hoisted
    n, m = 2, 3
    A, B, C = matmul_buffers(n, m, 2)
    i, j, ki = Var("i"), Var("j"), Var("ki")
    f = PrimFunc([A, B, C], root(loops([(i, n), (j, m), (ki, 4)],
                                       matmul_block(A, B, C, [i, j, ki % 2]))))
    g = lower_blocks(f)
    assert len(find(g.body, IfThenElse)) == 1
    assert_same(f, g)


def test_reduce_bound_to_constant_runs_init_in_place():
    n, m = 3, 2
    A, B, C = matmul_buffers(n, m, 1)
    i, j = Var("i"), Var("j")
    f = PrimFunc([A, B, C], root(loops([(i, n), (j, m)], matmul_block(A, B, C, [i, j, 0]))))
    g = check_matmul(f)
    assert not find(g.body, IfThenElse)


def test_symbolic_extent_reduction_hoists():
    n = Var("n")
    A, B, C = Buffer((4, n), "float32", "A"), Buffer((n, 3), "float32", "B"), Buffer((4, 3), "float32", "C")
    i, j, k = Var("i"), Var("j"), Var("k")
    vi, vj, vk = iv("vi", 4), iv("vj", 3), iv("vk", n, "reduce")
    block = Block([vi, vj, vk], [], [], "C",
                  BufferStore(C, C[vi.var, vj.var] + A[vi.var, vk.var] * B[vk.var, vj.var], [vi.var, vj.var]),
                  init=BufferStore(C, 0.0, [vi.var, vj.var]))
    f = PrimFunc([A, B, C], root(loops([(i, 4), (j, 3), (k, n)], BlockRealize([i, j, k], True, block))))
    g = lower_blocks(f)
    assert not find(g.body, IfThenElse)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 5)).astype("float32"), rng.standard_normal((5, 3)).astype("float32")
    c = np.full((4, 3), np.nan, "float32")
    run(g, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_predicate_becomes_if():
    # i split by 4 over extent 6: io in [0, 2), ii in [0, 4), predicate io*4 + ii < 6
    A, B = Buffer((6,), "float32", "A"), Buffer((6,), "float32", "B")
    vi = iv("vi", 6)
    block = Block([vi], [], [], "B", BufferStore(B, A[vi.var] * 2.0, [vi.var]))
    io, ii = Var("io"), Var("ii")
    f = PrimFunc([A, B], root(loops([(io, 2), (ii, 4)],
                                    BlockRealize([io * 4 + ii], io * 4 + ii < 6, block))))
    g = lower_blocks(f)
    no_blocks(g)
    ifs = find(g.body, IfThenElse)
    assert len(ifs) == 1
    a, b = assert_same(f, g)
    np.testing.assert_allclose(b, a * 2)


def test_alloc_buffers_become_allocate():
    n = 8
    A, B = Buffer((n,), "float32", "A"), Buffer((n,), "float32", "B")
    T = Buffer((n,), "float32", "T")
    v1, v2 = iv("vi", n), iv("vi", n)
    b1 = Block([v1], [], [], "T", BufferStore(T, A[v1.var] * 2.0, [v1.var]))
    b2 = Block([v2], [], [], "B", BufferStore(B, T[v2.var] + 1.0, [v2.var]))
    i1, i2 = Var("i"), Var("i")
    f = PrimFunc([A, B], root(For(i1, 0, n, "serial", BlockRealize([i1], True, b1)),
                              For(i2, 0, n, "serial", BlockRealize([i2], True, b2)), alloc=[T]))
    g = lower_blocks(f)
    no_blocks(g)
    assert isinstance(g.body, Allocate) and g.body.buffer is T
    a, b = assert_same(f, g)
    np.testing.assert_allclose(b, a * 2 + 1)


def test_nested_blocks_after_blockize():
    # an outer block over io (4 rows each) containing the matmul block bound through vio
    n, m, K = 8, 3, 5
    A, B, C = matmul_buffers(n, m, K)
    io, ii, j, k = Var("io"), Var("ii"), Var("j"), Var("k")
    vio = iv("vio", n // 4)
    inner = loops([(ii, 4), (j, m), (k, K)], matmul_block(A, B, C, [vio.var * 4 + ii, j, k]))
    outer = Block([vio], [], [], "C_o", inner)
    f = PrimFunc([A, B, C], root(For(io, 0, n // 4, "serial", BlockRealize([io], True, outer))))
    g = check_matmul(f)
    assert not find(g.body, IfThenElse)  # hoisted inside the outer block
    stores = find(g.body, BufferStore)
    assert stores[0].indices[0].script().replace(" ", "") == "io*4+ii"


def test_block_alloc_used_by_init_is_guarded_and_correct():
    # a reduction whose init and body use the block's own scratch buffer
    n, K = 3, 4
    A, C = Buffer((n, K), "float32", "A"), Buffer((n,), "float32", "C")
    S = Buffer((1,), "float32", "S", scope="local")
    vi, vk = iv("vi", n), iv("vk", K, "reduce")
    init = seq(BufferStore(S, 0.0, [0]), BufferStore(C, S[0], [vi.var]))
    body = seq(BufferStore(S, A[vi.var, vk.var], [0]), BufferStore(C, C[vi.var] + S[0], [vi.var]))
    block = Block([vi, vk], [], [], "C", body, init=init, alloc_buffers=[S])
    i, k = Var("i"), Var("k")
    f = PrimFunc([A, C], root(loops([(i, n), (k, K)], BlockRealize([i, k], True, block))))
    g = lower_blocks(f)
    no_blocks(g)
    a, c = assert_same(f, g)
    np.testing.assert_allclose(c, a.sum(axis=1), rtol=1e-5)


def test_lower_blocks_refuses_match_buffers_and_bare_blocks():
    A = Buffer((4,), "float32", "A")
    blk = Block([], [], [], "b", BufferStore(A, 1.0, [0]), match_buffers=[A])
    with pytest.raises(TesseraError, match="match_buffers"):
        lower_blocks(PrimFunc([A], BlockRealize([], True, blk)))
    with pytest.raises(TesseraError, match="BlockRealize"):
        lower_blocks(PrimFunc([A], Block([], [], [], "b", BufferStore(A, 1.0, [0]))))


def test_lowered_function_is_unchanged():
    g = lower_blocks(matmul())
    assert lower_blocks(g) is g


def test_blockized_reduction_keeps_guarded_inner_init():
    # blockize over ki: the outer block binds the reduce ko, the inner block vk = vko * 4 + ki
    n, m, K = 2, 3, 8
    A, B, C = matmul_buffers(n, m, K)
    i, j, ko, ki = Var("i"), Var("j"), Var("ko"), Var("ki")
    vi, vj, vko = iv("vi", n), iv("vj", m), iv("vko", K // 4, "reduce")
    inner = For(ki, 0, 4, "serial", matmul_block(A, B, C, [vi.var, vj.var, vko.var * 4 + ki]))
    outer = Block([vi, vj, vko], [], [], "C_o", inner)
    f = PrimFunc([A, B, C], root(loops([(i, n), (j, m), (ko, K // 4)], BlockRealize([i, j, ko], True, outer))))
    g = check_matmul(f)
    (guard,) = find(g.body, IfThenElse)
    assert "ko" in guard.condition.script() and "ki" in guard.condition.script()
