"""transform_layout and IndexMap: change a buffer's shape and rewrite every access to it.

    sch.transform_layout(block, ("read", 1), lambda k, j: (j // 16, k, j % 16))

packs a (K, N) buffer into (N/16, K, 16) tiles: every load and store `B[k, j]` in the function
becomes `B[j // 16, k, j % 16]`, block regions follow, and the buffer (an allocation or, as in TVM,
a function parameter, whose layout the caller then provides) gets the new shape. The usual way to
pack an input is to transform a cache of it: `cache_read(block, i, "global")` then
`transform_layout` of the cache, so the copy block does the packing.

An IndexMap (TVM's tir.IndexMap) is a lambda over the buffer's indices; in traces it is recorded as
its text (`"lambda k, j: (j // 16, k, j % 16)"`), which `IndexMap.parse` reads back with a small
parser of index arithmetic (names, ints, + - * // %, min/max), never `eval`. The map must be
injective on the buffer's shape: maps made of whole indices and (i // c, i % c) pairs are by
construction, others are checked by enumeration on constant shapes (and refused on symbolic ones); a map whose image does not fill the new shape pads the buffer, which is
allowed for allocated buffers: with pad_value=None the padding is left unwritten (nothing reads
it); with a pad_value the buffer's writer is rebuilt to iterate over the padded layout and store
pad_value where the map's inverse leaves the old shape (as TVM does), so whole padded tiles can be
read, e.g. by a micro-kernel.
"""
from __future__ import annotations

import ast
import inspect

import numpy as np

from ...arith import Analyzer
from ...errors import ScheduleError
from ...ir import (
    Add,
    BlockRealize,
    Buffer,
    BufferRegion,
    BufferStore,
    Call,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IntImm,
    IterVar,
    Max,
    Min,
    Mul,
    PrimExpr,
    Range,
    Sub,
    Var,
    all_of,
    collect_vars,
    const,
    max_expr,
    min_expr,
    substitute,
)
from ...ir.functor import substitute as subst
from ..analysis import edit, relax_range, shape_var_analyzer
from .instruction import instruction_kind
from .region import (
    BufferReplacer,
    dedup_regions,
    loops_in,
    point_region,
    removal_root,
)
from .state import FuncIndex

_PARSED: dict = {}  # (text, index dtype) -> IndexMap: traces replay the same maps many times
_CHECK_LIMIT = 1 << 26  # elements: above this, injectivity is not checked by enumeration


class IndexMap:
    """A map from buffer indices (initial_indices, Vars) to new indices (final_indices)."""

    __slots__ = ("initial_indices", "final_indices")

    def __init__(self, initial_indices, final_indices):
        self.initial_indices = tuple(initial_indices)
        self.final_indices = tuple(final_indices)

    @staticmethod
    def from_func(func, ndim=None, index_dtype="int32") -> "IndexMap":
        """The IndexMap of a Python function of the indices (`lambda i, j: (j, i)`); ndim is needed
        for a function taking *indices."""
        try:
            sig = inspect.signature(func)
        except (TypeError, ValueError):
            raise ScheduleError(f"an index map must be a Python function of the indices, got {func!r}") from None
        names, varargs = [], False
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                names.append(p.name)
            elif p.kind is p.VAR_POSITIONAL:
                varargs = True
            elif p.default is p.empty:
                raise ScheduleError(f"index map {func!r}: parameter {p.name!r} must be positional")
        if varargs:
            if ndim is None:
                raise ScheduleError("an index map taking *indices needs ndim")
            names += [f"i{k}" for k in range(len(names), ndim)]
        if ndim is not None and len(names) != ndim:
            raise ScheduleError(f"index map {_func_text(func)} takes {len(names)} indices, the buffer has {ndim} "
                                f"dimensions")
        ivars = [Var(n, index_dtype) for n in names]
        out = func(*ivars)
        if not isinstance(out, (tuple, list)):
            out = (out,)
        final = []
        for k, e in enumerate(out):
            if isinstance(e, (int, np.integer)) and not isinstance(e, bool):
                e = const(int(e), index_dtype)
            if not isinstance(e, PrimExpr) or not e.dtype.is_integer() or e.dtype.lanes != 1:
                raise ScheduleError(f"index map {_func_text(func)}: result {k} is {e!r}, not an integer index "
                                    f"expression")
            final.append(e)
        return IndexMap(ivars, final)

    @staticmethod
    def parse(text: str, index_dtype="int32") -> "IndexMap":
        """The IndexMap of its text form `lambda a, b: (expr, ...)` (see the module docstring)."""
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as e:
            raise ScheduleError(f"index map {text!r} is not a Python lambda: {e.msg}") from None
        lam = tree.body
        if not isinstance(lam, ast.Lambda):
            raise ScheduleError(f"index map {text!r} must be a lambda of the indices")
        a = lam.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or getattr(a, "posonlyargs", []):
            raise ScheduleError(f"index map {text!r}: only plain positional index names are allowed")
        ivars = {x.arg: Var(x.arg, index_dtype) for x in a.args}
        if len(ivars) != len(a.args):
            raise ScheduleError(f"index map {text!r} names an index twice")
        body = lam.body.elts if isinstance(lam.body, (ast.Tuple, ast.List)) else [lam.body]
        final = [_from_ast(e, ivars, text, index_dtype) for e in body]
        return IndexMap(list(ivars.values()), final)

    def map_indices(self, indices) -> list:
        vmap = dict(zip(self.initial_indices, indices))
        return [substitute(e, vmap) for e in self.final_indices]

    def text(self) -> str:
        names = ", ".join(v.name for v in self.initial_indices)
        outs = ", ".join(_py(e) for e in self.final_indices)
        if len(self.final_indices) == 1:
            outs += ","
        return f"lambda {names}: ({outs})"

    def __str__(self):
        return self.text()

    def __repr__(self):
        return f"IndexMap({self.text()})"


def _func_text(func) -> str:
    return getattr(func, "__name__", repr(func))


_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


def _from_ast(node, ivars, text, dtype):
    if isinstance(node, ast.Name):
        v = ivars.get(node.id)
        if v is None:
            raise ScheduleError(f"index map {text!r} uses {node.id!r}, which is not one of its indices")
        return v
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return const(node.value, dtype)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_from_ast(node.left, ivars, text, dtype),
                                       _from_ast(node.right, ivars, text, dtype))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        x = _from_ast(node.operand, ivars, text, dtype)
        return -x if isinstance(node.op, ast.USub) else x
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max") \
            and len(node.args) == 2 and not node.keywords:
        a, b = (_from_ast(x, ivars, text, dtype) for x in node.args)
        return min_expr(a, b) if node.func.id == "min" else max_expr(a, b)
    raise ScheduleError(f"index map {text!r}: {ast.dump(node)[:60]} is not index arithmetic (names, ints, "
                        f"+ - * // %, min, max)")


_PREC = {Add: 1, Sub: 1, Mul: 2, FloorDiv: 2, FloorMod: 2}
_SYM = {Add: "+", Sub: "-", Mul: "*", FloorDiv: "//", FloorMod: "%"}


def _py(e, prec=0) -> str:
    """Python text of an index expression (what IndexMap.parse reads)."""
    t = type(e)
    if isinstance(e, Var):
        return e.name
    if t is IntImm:
        s = str(e.value)
        return f"({s})" if e.value < 0 and prec > 0 else s
    if t in _PREC:
        p = _PREC[t]
        # left-associative: the right operand needs parentheses at equal precedence
        s = f"{_py(e.a, p)} {_SYM[t]} {_py(e.b, p + 1)}"
        return f"({s})" if p < prec else s
    if t is Min or t is Max:
        return f"{'min' if t is Min else 'max'}({_py(e.a)}, {_py(e.b)})"
    raise ScheduleError(f"index map: {e.script()} is not index arithmetic (names, ints, + - * // %, min, max)")


def _as_index_map(index_map, ndim, dtype) -> IndexMap:
    if isinstance(index_map, IndexMap):
        m = index_map
    elif isinstance(index_map, str):
        key = (index_map, dtype)
        m = _PARSED.get(key)
        if m is None:
            m = IndexMap.parse(index_map, dtype)
            if len(_PARSED) > 256:
                _PARSED.clear()
            _PARSED[key] = m
    elif callable(index_map):
        m = IndexMap.from_func(index_map, ndim, dtype)
    else:
        raise ScheduleError(f"transform_layout: index_map must be a function of the indices, an IndexMap or "
                            f"its text, got {type(index_map).__name__}")
    if len(m.initial_indices) != ndim:
        raise ScheduleError(f"transform_layout: index map {m.text()} takes {len(m.initial_indices)} indices, "
                            f"the buffer has {ndim} dimensions")
    for e in m.final_indices:
        extra = [v.name for v in collect_vars(e) if v not in m.initial_indices]
        if extra:
            raise ScheduleError(f"transform_layout: index map {m.text()} uses {extra[0]!r}, not one of its indices")
    return m


def _resolve_buffer(block, buffer, prim):
    """The Buffer a transform_layout `buffer` argument names: ("read"|"write", index), a name, or a Buffer."""
    name = block.name_hint
    if isinstance(buffer, Buffer):
        for r in block.reads + block.writes:
            if r.buffer is buffer:
                return buffer
        raise ScheduleError(f"{prim}: block {name!r} does not access buffer {buffer.name!r}")
    if isinstance(buffer, str):
        found = [r.buffer for r in block.reads + block.writes if r.buffer.name == buffer]
        if not found:
            names = sorted({r.buffer.name for r in block.reads + block.writes})
            raise ScheduleError(f"{prim}: block {name!r} accesses no buffer named {buffer!r} (it accesses "
                                f"{', '.join(names)})")
        return found[0]
    if isinstance(buffer, (tuple, list)) and len(buffer) == 2 and buffer[0] in ("read", "write") \
            and isinstance(buffer[1], int) and not isinstance(buffer[1], bool):
        regions = block.reads if buffer[0] == "read" else block.writes
        if not -len(regions) <= buffer[1] < len(regions):
            raise ScheduleError(f"{prim}: block {name!r} has {len(regions)} {buffer[0]} regions; index "
                                f"{buffer[1]} is out of range")
        return regions[buffer[1]].buffer
    raise ScheduleError(f"{prim}: buffer must be ('read', i), ('write', i), a buffer name or a Buffer, "
                        f"got {buffer!r}")


def _new_shape(m: IndexMap, buf, prim):
    """The shape of the transformed buffer and whether the map leaves padding, checking that it
    is injective on the buffer's shape."""
    ana = shape_var_analyzer_for_shape(buf)
    fast = _split_shape(m, buf)
    if fast is not None:
        split = _split_form(m, buf, ana)
        if split is not None:
            return fast, split
    loops = [(v, const(0, v.dtype), s if s.dtype == v.dtype else s.astype(v.dtype))
             for v, s in zip(m.initial_indices, buf.shape)]
    shape = []
    for k, e in enumerate(m.final_indices):
        lo, hi = relax_range(e, e, loops, ana)
        if lo is None or hi is None or not ana.can_prove(lo >= 0):
            raise ScheduleError(f"{prim}: index {k} of {m.text()} ({_py(e)}) is not provably >= 0 and bounded on "
                                f"the shape {_shape_text(buf)} of {buf.name!r}")
        shape.append(ana.simplify(hi + 1))
    split = _split_form(m, buf, ana)
    if split is not None:
        return shape, split
    constant = all(type(s) is IntImm for s in buf.shape) and all(type(s) is IntImm for s in shape)
    if not constant:
        # symbolic: only permutations of the indices are accepted
        if sorted(id(e) for e in m.final_indices) != sorted(id(v) for v in m.initial_indices):
            raise ScheduleError(f"{prim}: {buf.name!r} has the symbolic shape {_shape_text(buf)}; only maps made "
                                f"of whole indices and (i // c, i % c) pairs can be checked for it, not "
                                f"{m.text()}")
        return [buf.shape[m.initial_indices.index(e)] for e in m.final_indices], False
    old = [s.value for s in buf.shape]
    new = [s.value for s in shape]
    n_old, n_new = int(np.prod(old, dtype=np.int64)), int(np.prod(new, dtype=np.int64))
    if n_old == 0:
        return shape, n_new > 0
    if n_new > _CHECK_LIMIT:
        raise ScheduleError(f"{prim}: the transformed {buf.name!r} would have {n_new} elements; tessera checks "
                            f"layouts by enumeration up to {_CHECK_LIMIT}")
    grid = np.indices(old, dtype=np.int64).reshape(len(old), -1)
    values = [_eval(e, dict(zip(m.initial_indices, grid)), n_old) for e in m.final_indices]
    flat = np.zeros(n_old, np.int64)
    for v, s in zip(values, new):
        flat = flat * s + v
    if np.bincount(flat, minlength=n_new).max() > 1:
        raise ScheduleError(f"{prim}: {m.text()} maps two elements of {buf.name!r} (shape {old}) to the same "
                            f"place; a layout transformation must be injective")
    return shape, n_new != n_old


def _split_shape(m: IndexMap, buf):
    """The new shape of a map of whole indices and (i // c, i % c) pairs over a constant shape
    (None for anything else)."""
    ext = {v: s for v, s in zip(m.initial_indices, buf.shape)}
    out = []
    for e in m.final_indices:
        t = type(e)
        if isinstance(e, Var) and e in ext and type(ext[e]) is IntImm:
            out.append(ext[e])
        elif (t is FloorDiv or t is FloorMod) and isinstance(e.a, Var) and e.a in ext and type(e.b) is IntImm \
                and e.b.value > 0 and type(ext[e.a]) is IntImm:
            n, c = ext[e.a].value, e.b.value
            out.append(const(-(-n // c) if t is FloorDiv else min(c, n), ext[e.a].dtype))
        else:
            return None
    return out


def _split_form(m: IndexMap, buf, ana):
    """For maps made of whole indices and (v // c, v % c) pairs (each index used once, or once as
    a pair): whether the result pads the buffer; None for other maps."""
    uses = {v: [] for v in m.initial_indices}
    for e in m.final_indices:
        t = type(e)
        if isinstance(e, Var) and e in uses:
            uses[e].append(("whole", None))
        elif (t is FloorDiv or t is FloorMod) and isinstance(e.a, Var) and e.a in uses and \
                type(e.b) is IntImm and e.b.value > 0:
            uses[e.a].append(("div" if t is FloorDiv else "mod", e.b.value))
        else:
            return None
    padded = False
    for v, extent in zip(m.initial_indices, buf.shape):
        u = sorted(uses[v], key=lambda x: x[0])
        if u == [("whole", None)]:
            continue
        if len(u) == 2 and u[0][0] == "div" and u[1][0] == "mod" and u[0][1] == u[1][1]:
            c = u[0][1]
            if not ana.can_prove_equal(extent % c, 0):
                padded = True
            continue
        return None
    return padded


def shape_var_analyzer_for_shape(buf):
    ana = Analyzer()
    for s in buf.shape:
        if isinstance(s, Var):
            ana.tighten(s, (0, float("inf")))
    return ana


def _shape_text(buf) -> str:
    return "(" + ", ".join(s.script() for s in buf.shape) + ")"


def _eval(e, env, n):
    """e evaluated on numpy int64 arrays (floor division and modulo, as the IR defines them)."""
    t = type(e)
    if isinstance(e, Var):
        return env[e]
    if t is IntImm:
        return np.full(n, e.value, np.int64)
    if t is Add:
        return _eval(e.a, env, n) + _eval(e.b, env, n)
    if t is Sub:
        return _eval(e.a, env, n) - _eval(e.b, env, n)
    if t is Mul:
        return _eval(e.a, env, n) * _eval(e.b, env, n)
    if t is FloorDiv or t is FloorMod:
        a, b = _eval(e.a, env, n), _eval(e.b, env, n)
        if np.any(b == 0):
            raise ScheduleError(f"index map divides by zero in {e.script()}")
        return a // b if t is FloorDiv else a % b
    if t is Min:
        return np.minimum(_eval(e.a, env, n), _eval(e.b, env, n))
    if t is Max:
        return np.maximum(_eval(e.a, env, n), _eval(e.b, env, n))
    raise ScheduleError(f"index map: {e.script()} is not index arithmetic")


@instruction_kind("TransformLayout", inputs=("block",))
def transform_layout(self, block, buffer, index_map, pad_value=None, assume_injective_transform=False):
    """Give a buffer the layout index_map(*indices) and rewrite every access to it (see the module
    docstring). buffer: ("read", i) / ("write", i) of the block, or the buffer's name."""
    prim = "transform_layout"
    fname, idx, realize = self._block(block, prim)
    buf = _resolve_buffer(realize.block, buffer, prim)
    dtype = buf.shape[0].dtype if buf.shape else "int32"
    m = _as_index_map(index_map, buf.ndim, str(dtype))
    if pad_value is not None and not isinstance(pad_value, (int, float)) or isinstance(pad_value, bool):
        raise ScheduleError(f"{prim}: pad_value must be None, an int or a float, got {pad_value!r}")
    if assume_injective_transform:
        ana = shape_var_analyzer_for_shape(buf)
        loops = [(v, const(0, v.dtype), s) for v, s in zip(m.initial_indices, buf.shape)]
        shape = []
        for k, e in enumerate(m.final_indices):
            lo, hi = relax_range(e, e, loops, ana)
            if hi is None:
                raise ScheduleError(f"{prim}: index {k} of {m.text()} is not bounded on {_shape_text(buf)}")
            shape.append(ana.simplify(hi + 1))
        padded = False
    else:
        shape, padded = _new_shape(m, buf, prim)
    is_param = any(p is buf for p in idx.func.params)
    new_buf = buf.replace(shape=tuple(shape), strides=())
    pad_plan = None
    if padded and pad_value is not None:
        pad_plan = _plan_padding(self, fname, idx, buf, new_buf, m, pad_value, prim)
    ana = shape_var_analyzer(idx.func)

    def index_fn(old, indices):
        return tuple(ana.simplify(x) for x in m.map_indices(indices))

    def region_fn(r: BufferRegion, new):
        if all(type(x.extent) is IntImm and x.extent.value == 1 for x in r.region):
            mins = index_fn(r.buffer, [x.min for x in r.region])
            return BufferRegion(new, tuple(Range.from_min_extent(x, const(1, x.dtype)) for x in mins))
        loops = [(v, x.min, x.extent) for v, x in zip(m.initial_indices, r.region)]
        out = []
        for d, e in enumerate(m.final_indices):
            lo, hi = relax_range(e, e, loops, ana)
            if lo is None or hi is None:
                lo, hi = const(0, shape[d].dtype), ana.simplify(shape[d] - 1)
            out.append(Range.from_min_extent(ana.simplify(lo), ana.simplify(hi - lo + 1)))
        return BufferRegion(new, tuple(out))

    rep = BufferReplacer({buf: new_buf}, index_fn, region_fn)
    func = idx.func
    body = rep.visit(func.body)
    params = tuple(new_buf if p is buf else p for p in func.params)
    new_func = func.replace(params=params, body=body)
    if not is_param and body is func.body:
        raise ScheduleError(f"{prim}: {buf.name!r} is not used in the function")
    if pad_plan is not None:
        wname, nest, old_loops = pad_plan
        fidx = FuncIndex(new_func)
        root = removal_root(fidx, fidx.blocks[wname])
        new_func = new_func.with_body(edit(new_func.body, {id(root): lambda _: nest}))
        for v in old_loops:
            self._retire_loop(fname, v, f"transform_layout regenerated the loops of block {wname!r} over the "
                                        f"padded layout of {buf.name!r}")
    self._state.set_func(fname, new_func)
    return None


def _plan_padding(self, fname, idx, buf, new_buf, m, pad_value, prim):
    """The writer of buf rebuilt to iterate over the padded layout, writing pad_value where the
    inverse of the map leaves the old shape: (block name, new loop nest, retired loop vars)."""
    if _split_form(m, buf, shape_var_analyzer(idx.func)) is None:
        raise ScheduleError(f"{prim}: pad_value needs a map of whole indices and (i // c, i % c) pairs (whose "
                            f"inverse is known), not {m.text()}")
    if any(p is buf for p in idx.func.params):
        raise ScheduleError(f"{prim}: {m.text()} pads {buf.name!r}, a parameter of the function; its padding is "
                            f"the caller's, so pad_value applies to allocated buffers only")
    writers = [r for r in idx.realizes if any(w.buffer is buf for w in r.block.writes)]
    if len(writers) != 1:
        raise ScheduleError(f"{prim}: pad_value needs one block writing {buf.name!r}, found {len(writers)}")
    w = writers[0]
    blk = w.block
    wname = blk.name_hint
    store = blk.body
    ivars = [iv.var for iv in blk.iter_vars]
    if blk.init is not None or any(iv.iter_type != "data_par" for iv in blk.iter_vars) or \
            type(store) is not BufferStore or store.buffer is not buf or len(blk.writes) != 1 or \
            sorted(id(x) for x in store.indices) != sorted(id(v) for v in ivars):
        raise ScheduleError(f"{prim}: to write pad_value, block {wname!r} must be a spatial block storing "
                            f"{buf.name!r} at its iteration variables (one store)")
    root = removal_root(idx, w)
    if root is w and idx.loops_above(w):
        raise ScheduleError(f"{prim}: block {wname!r} shares its loops with other blocks; pad it before moving "
                            f"blocks into its loops")
    # buffer dimension d is indexed by the writer's iterator store.indices[d]; new dimension e is
    # x (a whole index), x // c or x % c: invert to get every old index from the new ones
    by_dim = {x: d for d, x in enumerate(m.initial_indices)}
    parts = {}
    names = []
    for e in m.final_indices:
        x = e if isinstance(e, Var) else e.a
        base = store.indices[by_dim[x]].name
        names.append(base if isinstance(e, Var) else f"{base}_{'o' if type(e) is FloorDiv else 'i'}")
    uvars = [Var(n, s.dtype) for n, s in zip(names, new_buf.shape)]
    for u, e in zip(uvars, m.final_indices):
        if isinstance(e, Var):
            parts.setdefault(e, {})["whole"] = u
        else:
            parts.setdefault(e.a, {})["div" if type(e) is FloorDiv else "mod"] = (u, e.b)
    ana = shape_var_analyzer(idx.func)
    vmap, valid = {}, []
    for x, d in by_dim.items():
        p = parts[x]
        if "whole" in p:
            old = p["whole"]
        else:
            (uo, c), (ui, _) = p["div"], p["mod"]
            old = uo * c + ui
            if not ana.can_prove_equal(buf.shape[d] % c, 0):
                valid.append(old < buf.shape[d])
        vmap[store.indices[d]] = old
    value = subst(store.value, vmap)
    pad = const(pad_value, buf.dtype)
    if valid:
        value = Call(buf.dtype, "if_then_else", (all_of(*valid), value, pad))
    ivs = [IterVar(Range.from_min_extent(const(0, s.dtype), s), u, "data_par") for u, s in zip(uvars, new_buf.shape)]
    reads = tuple(r.replace(region=tuple(Range.from_min_extent(ana.simplify(subst(x.min, vmap)),
                                                               subst(x.extent, vmap)) for x in r.region))
                  for r in blk.reads)
    new_block = blk.replace(iter_vars=tuple(ivs), body=BufferStore(new_buf, value, uvars),
                            reads=dedup_regions(reads), writes=(point_region(new_buf, uvars),))
    lvars = [Var(n[1:] if n.startswith("v") and len(n) > 1 else n, u.dtype) for n, u in zip(names, uvars)]
    stmt = BlockRealize(lvars, True, new_block)
    for lv, s in reversed(list(zip(lvars, new_buf.shape))):
        stmt = For(lv, const(0, lv.dtype), s, ForKind.SERIAL, stmt)
    old_loops = [lp.loop_var for lp in loops_in(root)] if root is not w else []
    return wname, stmt, old_loops


def recorded_arguments(self, block, buffer, index_map, pad_value=None, assume_injective_transform=False):
    """The arguments of sch.transform_layout as its trace records them (Schedule.transform_layout's
    `prepare`): a callable or IndexMap index_map as its text, a Buffer as its name.

    block: a block that accesses the buffer; buffer: ("read", i) / ("write", i) of that block, the
    buffer's name, or the Buffer; index_map: a function of the indices, an IndexMap or its text.
    """
    if not isinstance(index_map, str):
        _, _, realize = self._block(block, "transform_layout")
        buf = _resolve_buffer(realize.block, buffer, "transform_layout")
        dtype = str(buf.shape[0].dtype) if buf.shape else "int32"
        index_map = _as_index_map(index_map, buf.ndim, dtype).text()
        if isinstance(buffer, Buffer):
            buffer = buf.name
    elif not isinstance(buffer, (str, tuple, list)):
        _, _, realize = self._block(block, "transform_layout")
        buffer = _resolve_buffer(realize.block, buffer, "transform_layout").name
    return block, buffer, index_map, pad_value, assume_injective_transform


__all__ = ["IndexMap", "transform_layout", "recorded_arguments"]
