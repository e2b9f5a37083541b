"""te.create_prim_func: turn a graph of tensor operations into a schedulable PrimFunc.

Every compute op reachable from the arguments becomes one block in its own perfect loop nest, in
topological order, under a root block that allocates the intermediate tensors (see
docs/internals.md, "The shape of a PrimFunc from te.create_prim_func").
"""
from __future__ import annotations

from ..errors import TesseraError
from ..ir.names import fresh_name
from ..ir import expr as E
from ..ir.buffer import Buffer, BufferRegion
from ..ir.function import PrimFunc
from ..ir.functor import Mutator, collect_vars, combine, post_order_visit
from ..ir.stmt import Block, BlockRealize, BufferStore, For, LetStmt, seq
from ..ir.structural import structural_equal
from .tensor import ComputeOp, PlaceholderOp, Tensor


class _Names:
    """Hands out unique names: the name itself if free, else name_1, name_2, ..."""

    __slots__ = ("used",)

    def __init__(self, taken=()):
        self.used = set(taken)

    def fresh(self, name: str) -> str:
        name = fresh_name(name, self.used)
        self.used.add(name)
        return name


def topo_ops(arg_tensors, in_args):
    """Compute ops reachable from the arguments, producers first (post-order DFS in args order)."""
    order, done, active = [], set(), set()
    for root in arg_tensors:
        if isinstance(root.op, PlaceholderOp) or id(root.op) in done:
            continue
        stack = [(root.op, iter(root.op.input_tensors))]
        active.add(id(root.op))
        while stack:
            op, it = stack[-1]
            for t in it:
                dep = t.op
                if isinstance(dep, PlaceholderOp):
                    if id(t) not in in_args:
                        raise TesseraError(f"placeholder {t.name!r} is read by compute {op.name!r} but is not "
                                           f"in the arguments of create_prim_func; add it to the list")
                    continue
                if not isinstance(dep, ComputeOp):
                    raise TesseraError(f"compute {op.name!r} reads {t.name!r}, made by unsupported {dep!r}")
                if id(dep) in done or id(dep) in active:
                    continue
                active.add(id(dep))
                stack.append((dep, iter(dep.input_tensors)))
                break
            else:
                stack.pop()
                active.discard(id(op))
                done.add(id(op))
                order.append(op)
    return order


class _Rewriter(Mutator):
    """Rewrites a TE expression into a block body: axis vars -> block iter vars, tensor buffers ->
    function buffers; records the regions read and refuses variables that are not bound."""

    def __init__(self, buf_of, allowed, reduce_owner, opname):
        super().__init__()
        self.buf_of, self.allowed, self.reduce_owner, self.opname = buf_of, allowed, reduce_owner, opname
        self.vmap = {}
        self.local = set()
        self.reads = []  # (buffer, indices), distinct, in order of first read

    def visit_Var(self, v):
        r = self.vmap.get(v)
        if r is not None:
            return r
        if v in self.allowed or v in self.local:
            return v
        owner = self.reduce_owner.get(v)
        if owner is not None:
            raise TesseraError(f"compute {self.opname!r} uses reduce axis {v.name!r} (of the reduction in "
                               f"compute {owner!r}) outside a reduction over it; a te.reduce_axis may only "
                               f"appear inside te.sum/te.max/te.min(..., axis={v.name})")
        raise TesseraError(f"compute {self.opname!r} uses variable {v.name!r}, which is not bound: a "
                           f"te.reduce_axis may only appear inside a reduction over it "
                           f"(te.sum(..., axis={v.name})); a te.var must be in the arguments of "
                           f"create_prim_func or in the shape of an argument tensor")

    def visit_Let(self, node):
        self.local.add(node.var)
        return self.generic_visit(node)

    def visit_Reduce(self, node):
        raise TesseraError(f"compute {self.opname!r}: te.{node.combiner.name} must be the outermost "
                           f"expression of the compute body; compute the reduction in its own te.compute")

    def visit_BufferLoad(self, node):
        indices = tuple(self.visit(i) for i in node.indices)
        buf = self.buf_of[node.buffer]
        self.record(buf, indices)
        if buf is node.buffer and all(a is b for a, b in zip(indices, node.indices)):
            return node
        return node.replace(buffer=buf, indices=indices)

    def record(self, buf, indices):
        for b, idx in self.reads:
            if b is buf and all(x is y or structural_equal(x, y) for x, y in zip(idx, indices)):
                return
        self.reads.append((buf, indices))


def _point_region(buf, indices) -> BufferRegion:
    return BufferRegion(buf, tuple(E.Range.from_min_extent(i, E.const(1, i.dtype)) for i in indices))


def _check_vars(exprs, allowed, what):
    for e in exprs:
        if isinstance(e, E.IntImm):
            continue
        for v in ([e] if isinstance(e, E.Var) else collect_vars(e)):
            if v not in allowed:
                raise TesseraError(f"{what} uses variable {v.name!r}, which is neither in the arguments of "
                                   f"create_prim_func nor in the shape of an argument tensor")


def _lower_op(op: ComputeOp, block_name, buf_of, allowed, reduce_owner):
    """One compute op -> its loop nest around one BlockRealize."""
    names, block_names = _Names(), _Names()
    loop_vars, iter_vars, spatial_map, reduce_map = [], [], {}, {}
    for axes, kind, vmap in ((op.axis, "data_par", spatial_map), (op.reduce_axis, "reduce", reduce_map)):
        for iv in axes:
            if kind == "reduce":
                _check_vars((iv.dom.min, iv.dom.extent), allowed, f"reduce axis {iv.var.name!r} of compute {op.name!r}")
            dt = iv.var.dtype
            lv = E.Var(names.fresh(iv.var.name), dt)
            bv = E.Var(block_names.fresh("v" + iv.var.name), dt)
            loop_vars.append((lv, iv.dom))
            iter_vars.append(E.IterVar(iv.dom, bv, kind))
            vmap[iv.var] = bv

    outs = [buf_of[t.buffer] for t in op.outputs]
    point = tuple(iv.var for iv in iter_vars[:len(op.axis)])
    rw = _Rewriter(buf_of, allowed, reduce_owner, op.name)
    init = None
    if not op.reduce_axis:
        rw.vmap = spatial_map
        body = seq(*[BufferStore(ob, rw.visit(b), point) for ob, b in zip(outs, op.body)])
    else:
        rw.vmap = {**spatial_map, **reduce_map}
        inits, updates, pending = [], [], []
        for group in op.reduce_groups:
            red = op.body[group[0]]
            gouts = [None] * len(group)
            for k in group:
                gouts[op.body[k].value_index] = outs[k]
            sources = tuple(rw.visit(s) for s in red.source)
            old = tuple(E.BufferLoad(ob, point) for ob in gouts)
            new = combine(red.combiner, old, sources)
            if not (isinstance(red.condition, E.IntImm) and red.condition.value):
                cond = rw.visit(red.condition)
                new = tuple(E.Select(cond, n, o) for n, o in zip(new, old))
            if len(gouts) == 1:
                updates.append(BufferStore(gouts[0], new[0], point))
            else:  # bind every combined value first: each output must see the old values
                lets = [E.Var(f"{ob.name}_new", ob.dtype) for ob in gouts]
                stmt = seq(*[BufferStore(ob, lv, point) for ob, lv in zip(gouts, lets)])
                for lv, value in zip(reversed(lets), reversed(new)):
                    stmt = LetStmt(lv, value, stmt)
                updates.append(stmt)
            pending.append((gouts, red))
        rw.vmap = spatial_map  # init values see only the spatial axes
        for gouts, red in pending:
            values = tuple(rw.visit(v) for v in red.init) if red.init else red.combiner.identity_element
            inits.extend(BufferStore(ob, v, point) for ob, v in zip(gouts, values))
        body, init = seq(*updates), seq(*inits)

    block = Block(iter_vars, tuple(_point_region(b, i) for b, i in rw.reads),
                  tuple(_point_region(ob, point) for ob in outs), block_name, body, init,
                  annotations=op.attrs or None)
    stmt = BlockRealize([lv for lv, _ in loop_vars], True, block)
    for lv, dom in reversed(loop_vars):
        stmt = For(lv, dom.min, dom.extent, "serial", stmt)
    return stmt


def create_prim_func(args, name: str = "main") -> PrimFunc:
    """A PrimFunc computing the given output tensors from the given inputs.

    args: the tensors (placeholders and computed outputs) and scalar te.vars that become the
    parameters, in order. Computes reachable from them that are not in args become intermediate
    buffers allocated by the root block.
    """
    if isinstance(args, (Tensor, E.Var)):
        args = [args]
    args = list(args)
    in_args = set()
    arg_tensors = []
    for a in args:
        if isinstance(a, Tensor):
            if id(a) in in_args:
                raise TesseraError(f"tensor {a.name!r} appears twice in the arguments of create_prim_func")
            in_args.add(id(a))
            arg_tensors.append(a)
        elif isinstance(a, E.Var):
            if id(a) in in_args:
                raise TesseraError(f"variable {a.name!r} appears twice in the arguments of create_prim_func")
            in_args.add(id(a))
        else:
            raise TesseraError(f"create_prim_func takes te tensors and scalar te.vars, got {a!r}")
    order = topo_ops(arg_tensors, in_args)

    names = _Names()
    buf_of: dict[Buffer, Buffer] = {}
    params = []
    allowed = set()
    for a in args:
        if isinstance(a, E.Var):
            params.append(a)
            allowed.add(a)
            continue
        buf = a.buffer
        fresh = names.fresh(buf.name)
        fbuf = buf if fresh == buf.name else buf.replace(name=fresh)
        buf_of[buf] = fbuf
        params.append(fbuf)
    for p in params:
        if isinstance(p, Buffer):
            for s in p.shape:
                if isinstance(s, E.Var):
                    allowed.add(s)
                elif not isinstance(s, E.IntImm):
                    allowed.update(collect_vars(s))
    allocs = []
    reduce_owner = {}
    for op in order:
        for t in op.outputs:
            if t.buffer not in buf_of:
                _check_vars(t.shape, allowed, f"intermediate tensor {t.name!r}")
                buf = t.buffer
                fresh = names.fresh(buf.name)
                fbuf = buf if fresh == buf.name else buf.replace(name=fresh)
                buf_of[buf] = fbuf
                allocs.append(fbuf)
        for iv in op.reduce_axis:
            reduce_owner.setdefault(iv.var, op.name)

    block_names = _Names(("root",))
    nests = [_lower_op(op, block_names.fresh(op.name), buf_of, allowed, reduce_owner) for op in order]
    root = Block((), (), (), "root", seq(*nests), None, allocs)
    return PrimFunc(params, BlockRealize((), True, root), name=name)


def block_name_of(func, out_tensor) -> str:
    """Name of the block of func (made by create_prim_func) that writes out_tensor."""
    found = []
    target_name = None
    for p in func.params:
        if getattr(p, "name", None) == out_tensor.name:
            target_name = p.name

    def visit(n):
        if isinstance(n, Block) and any(w.buffer.name == target_name for w in n.writes):
            found.append(n.name_hint)

    post_order_visit(func.body, visit)
    return found[-1] if found else out_tensor.op.name
