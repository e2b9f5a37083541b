"""structural_equal / structural_hash: alpha-equivalence, free variables, sensitivity to every field."""
import pytest

from tessera.ir import (Allocate, Block, BlockRealize, Buffer, BufferRegion, BufferStore, CommReducer,
                        Evaluate, For, IRModule, IterVar, Let, LetStmt, PrimFunc, Range, Reduce, SizeVar,
                        Var, const, seq, structural_equal, structural_hash)


def _loop(kind="serial", extent=16, scale=2.0, dtype="float32", name="i", annotations=None):
    A = Buffer((16,), dtype, "A")
    i = Var(name)
    return A, For(i, 0, extent, kind, BufferStore(A, A[i] * const(scale, dtype), [i]),
                  annotations=annotations)


def _func(n_name="n", loop_name="i"):
    n = Var(n_name)
    A = Buffer((n,), "float32", "A")
    B = Buffer((n,), "float32", "B")
    i = Var(loop_name)
    return PrimFunc([A, B], For(i, 0, n, "serial", BufferStore(B, A[i] + 1.0, [i])))


def _matmul_block(tag):
    A = Buffer((8, 8), "float32", "A" + tag)
    C = Buffer((8,), "float32", "C" + tag)
    vi, vk = Var("vi" + tag), Var("vk" + tag)
    i, k = Var("i" + tag), Var("k" + tag)
    blk = Block([IterVar(Range(0, 8), vi), IterVar(Range(0, 8), vk, "reduce")],
                [BufferRegion(A, [vi, vk])], [BufferRegion(C, [vi])], "C",
                BufferStore(C, C[vi] + A[vi, vk], [vi]), init=BufferStore(C, const(0.0), [vi]),
                alloc_buffers=[Buffer((4,), "float32", "tmp" + tag)])
    body = For(i, 0, 8, "serial", For(k, 0, 8, "serial", BlockRealize([i, k], True, blk)))
    return PrimFunc([A, C], BlockRealize([], True, Block([], [], [], "root", body)))


def test_alpha_equivalent_loops_are_equal_and_hash_equal():
    A = Buffer((16,), "float32", "A")
    i, j = Var("i"), Var("j")
    f1 = For(i, 0, 16, "serial", BufferStore(A, A[i] * 2.0, [i]))
    f2 = For(j, 0, 16, "serial", BufferStore(A, A[j] * 2.0, [j]))
    assert structural_equal(f1, f2)
    assert structural_hash(f1) == structural_hash(f2)


def test_functions_built_twice_are_equal():
    f, g = _func(), _func("m", "k")  # names are ignored; shape variables are defined by the params
    assert structural_equal(f, g) and structural_hash(f) == structural_hash(g)
    assert structural_equal(_matmul_block("1"), _matmul_block("2"))
    assert structural_hash(_matmul_block("1")) == structural_hash(_matmul_block("2"))
    assert structural_equal(IRModule(_func()), IRModule(_func()))


def test_same_shape_variable_must_map_consistently():
    n, m = Var("n"), Var("m")
    A1, B1 = Buffer((n,), "float32", "A"), Buffer((n,), "float32", "B")
    A2, B2 = Buffer((n,), "float32", "A"), Buffer((m,), "float32", "B")
    body = lambda A, B: Evaluate(0)  # noqa: E731
    f = PrimFunc([A1, B1], body(A1, B1))
    g = PrimFunc([A2, B2], body(A2, B2))
    assert not structural_equal(f, g)  # (n, n) is not (n, m)
    assert structural_hash(f) != structural_hash(g)


@pytest.mark.parametrize("other", [
    dict(extent=8), dict(scale=3.0), dict(dtype="float64"), dict(kind="parallel"),
    dict(kind="vectorized"), dict(annotations={"pragma_unroll": 4}),
])
def test_differences_are_seen(other):
    _, base = _loop()
    _, changed = _loop(**other)
    assert not structural_equal(base, changed)
    assert structural_hash(base) != structural_hash(changed)


def test_constant_dtype_and_value_differences():
    assert not structural_equal(const(1), const(1, "int64"))
    assert not structural_equal(const(1), const(2))
    assert not structural_equal(const(1.0), const(1))
    assert structural_equal(const(0.5), const(0.5))
    assert structural_hash(const(1)) != structural_hash(const(1, "int64"))
    # NaN equals NaN structurally; 0.0 and -0.0 are different constants; hashes agree with that
    nan1, nan2 = const(float("nan")), const(-float("nan"))
    assert structural_equal(nan1, nan2) and structural_hash(nan1) == structural_hash(nan2)
    assert not structural_equal(const(0.0), const(-0.0))


def test_node_types_differ():
    i = Var("i")
    assert not structural_equal(i + 1, i - 1)
    assert not structural_equal(i + 1, i * 1)
    assert not structural_equal(Var("s"), SizeVar("s"), map_free_vars=True)
    assert not structural_equal(Var("a", "int32"), Var("a", "int64"), map_free_vars=True)


def test_free_variables_need_map_free_vars():
    i, j = Var("i"), Var("j")
    assert structural_equal(i + 1, i + 1)
    assert not structural_equal(i + 1, j + 1)
    assert structural_equal(i + 1, j + 1, map_free_vars=True)
    assert structural_hash(i + 1) == structural_hash(j + 1)
    # the mapping is a bijection
    assert not structural_equal(i + i, i + j, map_free_vars=True)
    assert not structural_equal(i + j, i + i, map_free_vars=True)
    assert structural_equal(i + j, j + i, map_free_vars=True)
    assert not structural_equal(i + j, i + i)
    assert structural_hash(i + i) != structural_hash(i + j)


def test_free_buffers_compare_by_identity_unless_mapped():
    A, B = Buffer((4,), "float32", "A"), Buffer((4,), "float32", "A")
    i = Var("i")
    assert not structural_equal(A[i], B[i])
    assert structural_equal(A[i], B[i], map_free_vars=True)
    C = Buffer((5,), "float32", "A")
    assert not structural_equal(A[i], C[i], map_free_vars=True)  # a mapped buffer's shape must agree


def test_definitions_in_let_allocate_block_and_reducer():
    def let_stmt():
        x = Var("x", "float32")
        A = Buffer((4,), "float32", "A")
        return A, LetStmt(x, const(1.0), BufferStore(A, x * x, [0]))

    A1, s1 = let_stmt()
    A2, s2 = let_stmt()
    assert not structural_equal(s1, s2)  # A is free and differs
    assert structural_equal(s1, s2.replace(body=BufferStore(A1, s2.body.value, [0])))

    def alloc():
        T = Buffer((8,), "float32", "T", scope="local")
        return Allocate(T, BufferStore(T, const(0.0), [3]))

    assert structural_equal(alloc(), alloc())
    local = alloc()
    shared = Allocate(Buffer((8,), "float32", "T", scope="shared"), local.body)
    assert not structural_equal(local, shared)

    x = Var("x")
    assert structural_equal(Let(x, const(1), x + 1), Let(Var("y"), const(1), Var("y") + 1)) is False
    y = Var("y")
    assert structural_equal(Let(x, const(1), x + 1), Let(y, const(1), y + 1))

    def reducer():
        a, b = Var("a", "float32"), Var("b", "float32")
        return CommReducer([a], [b], [a + b], [const(0.0)], "sum")

    assert structural_equal(reducer(), reducer())
    assert structural_hash(reducer()) == structural_hash(reducer())
    k1, k2 = IterVar(Range(0, 8), "k", "reduce"), IterVar(Range(0, 8), "k", "reduce")
    B = Buffer((8,), "float32", "B")
    r1 = Reduce(reducer(), [B[k1.var]], [k1])
    r2 = Reduce(reducer(), [B[k2.var]], [k2])
    assert structural_equal(r1, r2, map_free_vars=True)


def test_block_iter_kinds_and_names():
    f1, f2 = _matmul_block("x"), _matmul_block("y")
    blk_realize = f2.body.block.body.body.body
    blk = blk_realize.block
    iv = blk.iter_vars[1]
    spatial = blk.replace(iter_vars=(blk.iter_vars[0], iv.replace(iter_type="data_par")))
    f3 = f2.replace(body=f2.body.replace(block=f2.body.block.replace(
        body=f2.body.block.body.replace(body=f2.body.block.body.body.replace(
            body=blk_realize.replace(block=spatial))))))
    assert not structural_equal(f1, f3)
    renamed = f2.replace(name="other")
    assert structural_equal(f1, renamed)  # function names are ignored, as all names


def test_sequences_and_tuple_lengths():
    i = Var("i")
    assert not structural_equal(seq(Evaluate(i), Evaluate(i + 1)), seq(Evaluate(i)))
    assert structural_equal(seq(Evaluate(i), Evaluate(i + 1)), seq(Evaluate(i), Evaluate(i + 1)))
