"""Visitor, Mutator, substitute, post_order_visit, collect_vars, uses_var."""
from tessera.ir import (Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Cast,
                        CommReducer, Evaluate, For, IfThenElse, IntImm, IterVar, Let, Mutator, Node,
                        Range, Ramp, Select, Var, Visitor, collect_vars, const, post_order_visit, seq,
                        structural_equal, substitute, uses_var)


def _program():
    A = Buffer((16, 16), "float32", "A")
    B = Buffer((16, 16), "float32", "B")
    i, j = Var("i"), Var("j")
    store = BufferStore(B, A[i, j] * 2.0, [i, j])
    other = BufferStore(B, A[j, i] + 1.0, [j, i])
    body = For(i, 0, 16, "serial", For(j, 0, 16, "serial", seq(store, other)))
    return A, B, i, j, body


def test_substitute_replaces_vars_everywhere():
    A, B, i, j, body = _program()
    k = Var("k")
    out = substitute(body, {j: k * 2})
    inner = out.body
    assert inner.loop_var is j  # a definition is never replaced by an expression
    store, other = inner.body.seq
    assert store.indices[1].script() == "k * 2"
    assert store.value.a.indices[1].script() == "k * 2"
    assert other.indices[0].script() == "k * 2"
    assert not uses_var(out.body.body, j)
    assert uses_var(out, k)
    # the original is untouched (immutable IR)
    assert body.body.body.seq[0].indices[1] is j


def test_substitute_renames_definitions_with_vars_only():
    A, B, i, j, body = _program()
    fresh = Var("i2")
    renamed = substitute(body, {i: fresh})
    assert renamed.loop_var is fresh and not uses_var(renamed, i)
    assert structural_equal(renamed, body)  # a consistent renaming is alpha-equivalent
    x = Var("x")
    let = substitute(Let(x, const(2), x * 3), {x: const(5)})
    assert let.var is x and let.body.script() == "5 * 3"
    iv = IterVar(Range(0, 4), "vi")
    blk = Block([iv], [], [], "b", Evaluate(iv.var))
    out = substitute(blk, {iv.var: const(0)})
    assert out.iter_vars[0] is iv and out.body.value.value == 0
    a, b = Var("a", "float32"), Var("b", "float32")
    red = CommReducer([a], [b], [a + b], [const(0.0)])
    out = substitute(red, {a: const(1.0)})
    assert out.lhs[0] is a and out.rhs[0] is b and out.result[0].script() == "T.float32(1.0) + b"


def test_substitute_empty_map_and_untouched_subtrees_are_identical():
    A, B, i, j, body = _program()
    assert substitute(body, {}) is body
    unrelated = Var("u")
    assert substitute(body, {unrelated: const(3)}) is body
    e = i * 4 + j
    out = substitute(e, {j: const(1)})
    assert out.a is e.a  # the unchanged operand is shared, not copied
    assert out.b.value == 1


def test_substitute_rederives_dtypes():
    i = Var("i")
    e = i * 4 + 1
    vec = substitute(e, {i: Ramp(0, 1, 8)})
    assert vec.dtype == "int32x8" and vec.a.dtype == "int32x8"
    A = Buffer((64,), "float32", "A")
    load = substitute(A[i], {i: Ramp(0, 1, 4)})
    assert type(load) is BufferLoad and load.dtype == "float32x4"
    cmp = substitute(i < 3, {i: Ramp(0, 1, 4)})
    assert cmp.dtype == "boolx4"
    wide = substitute(i + 1, {i: Var("l", "int64")})
    assert wide.dtype == "int64" and type(wide.b) in (IntImm, Cast)
    f = Var("f", "float32")
    sel = substitute(Select(i < 2, f, f), {f: Var("d", "float64")})
    assert sel.dtype == "float64"


class _DoubleConsts(Mutator):
    def visit_IntImm(self, node):
        return const(node.value * 2, node.dtype) if node.dtype == "int32" and node.value == 3 else node


def test_mutator_rebuilds_only_changed_paths():
    A = Buffer((8,), "int32", "A")
    i, j = Var("i"), Var("j")
    keep = BufferStore(A, A[i] + 1, [i])
    change = BufferStore(A, A[j] * 3, [j])
    loop_keep = For(i, 0, 8, "serial", keep)
    loop_change = For(j, 0, 8, "parallel", change)
    prog = seq(loop_keep, loop_change)
    out = _DoubleConsts().visit(prog)
    assert out is not prog
    assert out.seq[0] is loop_keep  # no change below: the very same object
    new_loop = out.seq[1]
    assert new_loop is not loop_change and new_loop.kind == "parallel" and new_loop.loop_var is j
    assert new_loop.body.value.b.value == 6 and new_loop.body.value.a is change.value.a
    assert new_loop.body.buffer is A
    assert _DoubleConsts().visit(keep) is keep


def test_mutator_leaves_buffers_unless_asked():
    n = Var("n")
    A = Buffer((n,), "float32", "A")
    i = Var("i")
    store = BufferStore(A, A[i], [i])

    class Sub(Mutator):
        def visit_Var(self, v):
            return const(4) if v is n else v

    out = Sub().visit(store)
    assert out is store and out.buffer.shape[0] is n

    class SubBuf(Sub):
        mutate_buffers = True

    out = SubBuf().visit(store)
    assert out.buffer is not A and out.buffer.shape[0].value == 4
    assert out.value.buffer is not A and out.value.buffer.shape[0].value == 4


def test_mutator_dispatch_uses_class_hierarchy():
    seen = []

    class V(Visitor):
        def visit_BinaryOp(self, node):  # Add/Mul/... all land here
            seen.append(type(node).__name__)
            self.generic_visit(node)

    i = Var("i")
    V().visit((i + 1) * (i - 2))
    assert seen == ["Mul", "Add", "Sub"]


def test_post_order_visit_children_before_parents():
    i = Var("i")
    A = Buffer((8,), "float32", "A")
    e = A[i] * 2.0 + 1.0
    order = []
    post_order_visit(e, lambda n: order.append(n))
    assert order[-1] is e
    assert [type(n).__name__ for n in order] == [
        "Buffer", "Var", "BufferLoad", "FloatImm", "Mul", "FloatImm", "Add"]
    # each node comes after all of its children
    position = {id(n): k for k, n in enumerate(order)}
    for n in order:
        for f in n._fields:
            v = getattr(n, f)
            kids = v if isinstance(v, tuple) else (v,)
            for kid in kids:
                if isinstance(kid, Node) and id(kid) in position:
                    assert position[id(kid)] < position[id(n)]


def test_post_order_visit_statements():
    A, B, i, j, body = _program()
    kinds = []
    post_order_visit(body, lambda n: kinds.append(type(n).__name__))
    assert kinds[-1] == "For" and kinds[-2] == "For" and kinds[-3] == "SeqStmt"
    assert kinds.index("BufferStore") < kinds.index("SeqStmt")
    assert kinds.count("BufferStore") == 2 and kinds.count("BufferLoad") == 2


def test_collect_vars_and_uses_var():
    A, B, i, j, body = _program()
    got = collect_vars(body)
    assert len(got) == 2 and got[0] is i and got[1] is j
    k = Var("k")
    assert uses_var(body, j) and not uses_var(body, k)
    e = k * 3 + i
    assert [v.name for v in collect_vars(e)] == ["k", "i"]


def test_mutator_through_blocks_keeps_structure():
    A = Buffer((8,), "float32", "A")
    vi, i = Var("vi"), Var("i")
    blk = Block([IterVar(Range(0, 8), vi)], [BufferRegion(A, [vi])], [BufferRegion(A, [vi])], "B",
                BufferStore(A, A[vi] + 1.0, [vi]))
    prog = For(i, 0, 8, "serial", BlockRealize([i], i < 3, blk))
    out = substitute(prog, {i: Var("t") * 1})
    realize = out.body
    assert realize.block is blk  # nothing inside the block used i
    assert realize.iter_values[0].script() == "t * 1" and realize.predicate.script() == "t * 1 < 3"
    assert structural_equal(substitute(prog, {}), prog)


def test_visitor_counts_every_occurrence():
    i = Var("i")
    count = 0

    class C(Visitor):
        def visit_Var(self, v):
            nonlocal count
            count += 1

    C().visit(IfThenElse(i < 2, Evaluate(i + i), Evaluate(i)))
    assert count == 4


def test_depth_measures_a_tree_deeper_than_the_recursion_limit():
    """functor.depth walks without recursing (error messages use it on programs too deep for the
    recursive passes)."""
    from tessera.ir import expr as E
    from tessera.ir.functor import depth

    x = E.Var("x", "float32")
    assert depth(x) == 1
    assert depth(x * x + x) == 3
    e = x
    for _ in range(20_000):
        e = e + x
    assert depth(e) == 20_001
    shared = x * x
    assert depth(E.Select(x > shared, shared, x)) == 4        # Select > GT > Mul > x
