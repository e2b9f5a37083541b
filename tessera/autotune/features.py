"""Program features for the learned cost model: one fixed-width row per buffer store of a candidate's
loop program (the TVM paper's and Ansor's per-store features; docs/autotune_features.md lists every
column).

    rows = extract_features(sch, "c -num-threads=2")        # np.float32, (n_stores, NUM_FEATURES)
    names = feature_names()                                   # what each column is

Where the features come from: the candidate is lowered through the prefix of its target's pipeline
(`tessera.backend.get_backend(target).passes(target)`) that ends with `lower_blocks`. There the
blocks are gone (bindings substituted, inits placed, predicates are `if`s, allocations placed at
their loop) but the loops still carry their kinds (a vectorized loop is still a loop, not Ramps; an
unrolled loop is not copied out yet), indices are still multi-dimensional, and a tensorized block
still names its intrinsic and the exact regions it touches (`tsr.access_region`, which the next pass
removes) -- and it is the cheap part of the pipeline. Everything after is one linear walk: each
index becomes an affine form in the loop variables (byte strides), and footprints, cache lines,
reuse and intensity are computed from those forms and the loop extents, never by simplifying IR.
A tensor-intrinsic call is one row: it writes its output region, and its work is its description's
loop nest times the operations of its body (a 6x16xK GEMM tile is 96 * K FMAs).

Counts and sizes are stored as log2(1 + x) (Ansor's choice: tree splits then see magnitudes);
one-hot columns are 0/1. Symbolic extents are refused (features need static shapes).
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from ..backend import functions_of, get_backend
from ..errors import TesseraError
from ..ir import (EQ, GE, GT, LE, LT, NE, Add, Allocate, And, AssertStmt, AttrStmt, Block, BlockRealize,
                  Broadcast, BufferLoad, BufferStore, Call, Cast, Div, Evaluate, FloatImm, FloorDiv, FloorMod,
                  For, IfThenElse, IntImm, Let, LetStmt, Max, Min, Mod, Mul, Not, Or, Ramp, Select, SeqStmt,
                  StringImm, Sub, Var)
from ..target import Target
from ..tir.tensor_intrin import TensorIntrin
from ..tir.tensor_intrin.intrin import pattern_of

LEVELS = 8          # loop levels described one by one, innermost first
BUFFER_SLOTS = 5    # buffers described per store, the most bytes first
CACHE_LINE = 64     # bytes
KINDS = ("serial", "parallel", "vectorized", "unrolled")
GPU_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")
ACCESS_REGION = "tsr.access_region"
FEATURE_VERSION = 1

# ---------------------------------------------------------------------------------------------
# the columns
# ---------------------------------------------------------------------------------------------
COMPUTE = ("float.add", "float.mul", "float.fma", "float.div", "float.cmp", "float.math",
           "int.add", "int.mul", "int.fma", "int.div", "int.cmp", "int.other",
           "bool.op", "select", "cast", "flops", "intrin.calls", "intrin.flops")
_BUF = (["access.read", "access.write", "access.readwrite", "bytes", "unique_bytes", "unique_lines"]
        + [f"footprint_bytes.L{k}" for k in range(LEVELS)] + [f"footprint_lines.L{k}" for k in range(LEVELS)]
        + ["reuse.loop", "reuse.dis_iter", "reuse.dis_bytes", "reuse.ct", "reuse.ratio",
           "stride.innermost", "stride.varying"])
_BUF_LOG = {"bytes", "unique_bytes", "unique_lines", "reuse.dis_iter", "reuse.dis_bytes", "reuse.ct",
            "reuse.ratio", "stride.innermost", "stride.varying"} | {n for n in _BUF if n.startswith("footprint")}


def _columns():
    cols = []  # (name, log-transformed)
    for k in range(LEVELS):
        cols.append((f"loop.L{k}.extent", True))
        cols += [(f"loop.L{k}.{kind}", False) for kind in KINDS]
    cols += [("loops.num", True), ("loops.outer_prod", True), ("loops.rest_prod", True)]
    cols += [("vec.lanes", True), ("vec.num", True), ("vec.innermost", False), ("vec.width_ratio", False),
             ("unroll.num", True), ("unroll.prod", True), ("unroll.max_step", True),
             ("parallel.num", True), ("parallel.extent", True), ("parallel.balance", False),
             ("parallel.outermost", False)]
    cols += [(f"gpu.{t}", True) for t in GPU_TAGS]
    cols += [(f"compute.{c}", True) for c in COMPUTE]
    cols += [("store.dtype_bytes", True), ("store.readwrite", False), ("store.constant", False),
             ("store.guards", True), ("store.tensorized", False), ("store.buffers", True),
             ("row.bytes", True), ("row.unique_bytes", True), ("row.unique_lines", True)]
    cols += [(f"intensity.L{k}", True) for k in range(LEVELS)] + [("intensity.total", True)]
    cols += [("alloc.allocated", False), ("alloc.bytes", True), ("alloc.outer_prod", True),
             ("alloc.local", False), ("alloc.shared", False)]
    for s in range(BUFFER_SLOTS):
        cols += [(f"buf{s}.{n}", n in _BUF_LOG) for n in _BUF]
    return cols


_COLS = _columns()
_NAMES = [n for n, _ in _COLS]
NUM_FEATURES = len(_COLS)
_INDEX = {n: i for i, n in enumerate(_NAMES)}
_LOG_MASK = np.array([lg for _, lg in _COLS], dtype=bool)
# columns that add up over the stores of a candidate (the cost model pools them as sums)
ADDITIVE = tuple(_INDEX[n] for n in [f"compute.{c}" for c in COMPUTE]
                 + ["loops.outer_prod", "row.bytes", "row.unique_bytes", "row.unique_lines"])

_I_LOOP = _INDEX["loop.L0.extent"]
_I_LOOPS = _INDEX["loops.num"]
_I_ANN = _INDEX["vec.lanes"]
_I_COMP = _INDEX["compute.float.add"]
_I_STORE = _INDEX["store.dtype_bytes"]
_I_AI = _INDEX["intensity.L0"]
_I_ALLOC = _INDEX["alloc.allocated"]
_I_BUF = _INDEX["buf0.access.read"]
_NB = len(_BUF)
_GPU = {t: _INDEX[f"gpu.{t}"] for t in GPU_TAGS}


def feature_names() -> list:
    """The name of every column of extract_features' rows, in order (docs/autotune_features.md)."""
    return list(_NAMES)


def log_columns() -> np.ndarray:
    """A boolean mask of the columns stored as log2(1 + x)."""
    return _LOG_MASK.copy()


# ---------------------------------------------------------------------------------------------
# what does not change between candidates: pipeline prefixes per target, buffer layouts, intrinsics
# ---------------------------------------------------------------------------------------------
_PREFIX: dict = {}
_BUFFERS: "OrderedDict" = OrderedDict()   # id(buffer) -> (buffer, element bytes, strides, bytes)
_BUFFER_CACHE_SIZE = 4096
_INTRINS: dict = {}                       # intrinsic name -> (TensorIntrin, info)


def _prefix(target: Target) -> list:
    passes = _PREFIX.get(target)
    if passes is None:
        full = get_backend(target).passes(target)
        names = [n for n, _ in full]
        if "lower_blocks" not in names:
            raise TesseraError(f"extract_features: target {str(target)!r}'s pipeline has no lower_blocks pass "
                               f"(passes: {', '.join(names)}); features are taken right after it")
        passes = _PREFIX[target] = [fn for _, fn in full[:names.index("lower_blocks") + 1]]
    return passes


def _static(buf, values, what: str, need: str) -> list:
    """The ints of buf's shape or strides (`values`); a symbolic one is an error."""
    out = []
    for v in values:
        if type(v) is not IntImm:
            raise TesseraError(f"extract_features: buffer {buf.name!r} has the symbolic {what} {v.script()}; "
                               f"features need static {need}")
        out.append(v.value)
    return out


def _buffer_info(buf):
    """(element bytes, strides in elements, total bytes) of a buffer, cached per buffer."""
    hit = _BUFFERS.get(id(buf))
    if hit is not None and hit[0] is buf:
        return hit[1]
    eb = buf.dtype.bytes
    shape = _static(buf, buf.shape, "extent", "shapes (bind the shape variables first)")
    if buf.strides:
        strides = _static(buf, buf.strides, "stride", "strides")
        size = max(1, 1 + sum((n - 1) * s for n, s in zip(shape, strides)))
    else:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        strides.reverse()
        size = acc
    info = (eb, tuple(strides), size * eb)
    _BUFFERS[id(buf)] = (buf, info)
    if len(_BUFFERS) > _BUFFER_CACHE_SIZE:
        _BUFFERS.popitem(last=False)
    return info


def _intrin_info(name: str):
    """What one call of a tensor intrinsic does: its description's loop extents (ints or the Vars
    of its parameters' shapes), operation counts per iteration, parameters, written buffer count,
    and whether its output is read too."""
    intrin = TensorIntrin.get(name, allow_missing=True)
    if intrin is None:
        raise TesseraError(f"extract_features: the program calls tensor intrinsic {name!r}, which is not "
                           f"registered")
    hit = _INTRINS.get(name)
    if hit is not None and hit[0] is intrin:
        return hit[1]
    s = pattern_of(intrin.desc, "desc", name)
    extents = []
    while type(s) is not BlockRealize:
        if type(s) is For:
            extents.append(s.extent.value if type(s.extent) is IntImm else s.extent)
        s = s.body
    block = s.block
    counts = [0.0] * len(COMPUTE)
    store = block.body
    while type(store) is not BufferStore:
        store = store.body
    loads = []
    _count_ops(store.value, counts, loads, {})
    written = [w.buffer for w in block.writes]
    reads_output = any(ld.buffer in written for ld in loads)
    params = [p for p in intrin.desc.params]
    order = [r.buffer for r in list(block.reads) + list(block.writes)]
    pos = [params.index(b) for b in order if b in params]
    info = (tuple(extents), tuple(counts), tuple(params[i] for i in pos), len(block.writes), reads_output)
    _INTRINS[name] = (intrin, info)
    return info


# ---------------------------------------------------------------------------------------------
# operation counts of an expression (per execution)
# ---------------------------------------------------------------------------------------------
_C = {n: i for i, n in enumerate(COMPUTE)}
_FADD, _FMUL, _FFMA, _FDIV, _FCMP, _FMATH = (_C[n] for n in ("float.add", "float.mul", "float.fma", "float.div",
                                                             "float.cmp", "float.math"))
_IADD, _IMUL, _IFMA, _IDIV, _ICMP, _IOTHER = (_C[n] for n in ("int.add", "int.mul", "int.fma", "int.div",
                                                              "int.cmp", "int.other"))
_BOOL, _SELECT, _CAST = _C["bool.op"], _C["select"], _C["cast"]
_CMP_TYPES = (EQ, NE, LT, LE, GT, GE, Min, Max)
_DIV_TYPES = (Div, Mod, FloorDiv, FloorMod)


def _is_float(dtype) -> bool:
    return dtype.code in ("float", "bfloat")


def _count_ops(e, counts, loads, lets):
    """Add e's operations to counts (an Add of a Mul counts as one FMA) and its loads to loads."""
    t = type(e)
    if t is BufferLoad:
        loads.append(e)
        return
    if t is IntImm or t is FloatImm or t is StringImm:
        return
    if t is Var:
        let = lets.get(e)
        if let is not None:
            for i, c in enumerate(let[0]):
                counts[i] += c
            loads.extend(let[1])
        return
    fl = _is_float(e.dtype) if hasattr(e, "dtype") else False
    if t is Add or t is Sub:
        a, b = e.a, e.b
        if type(b) is Mul or (t is Add and type(a) is Mul):
            m, other = (b, a) if type(b) is Mul else (a, b)
            counts[_FFMA if fl else _IFMA] += 1
            _count_ops(m.a, counts, loads, lets)
            _count_ops(m.b, counts, loads, lets)
            _count_ops(other, counts, loads, lets)
            return
        counts[_FADD if fl else _IADD] += 1
    elif t is Mul:
        counts[_FMUL if fl else _IMUL] += 1
    elif t in _DIV_TYPES:
        counts[_FDIV if fl else _IDIV] += 1
    elif t in _CMP_TYPES:
        counts[_FCMP if _is_float(e.a.dtype) else _ICMP] += 1
    elif t is And or t is Or or t is Not:
        counts[_BOOL] += 1
    elif t is Select:
        counts[_SELECT] += 1
        _count_ops(e.condition, counts, loads, lets)
        _count_ops(e.true_value, counts, loads, lets)
        _count_ops(e.false_value, counts, loads, lets)
        return
    elif t is Cast:
        counts[_CAST] += 1
        _count_ops(e.value, counts, loads, lets)
        return
    elif t is Call:
        op = e.op
        if op == "fma":
            counts[_FFMA if fl else _IFMA] += 1
        elif op == "if_then_else":
            counts[_SELECT] += 1
        elif fl:
            counts[_FMATH] += 1
        elif op != "address_of":
            counts[_IOTHER] += 1
        for a in e.args:
            _count_ops(a, counts, loads, lets)
        return
    elif t is Let:
        inner = [0.0] * len(COMPUTE)
        inner_loads = []
        _count_ops(e.value, inner, inner_loads, lets)
        lets = dict(lets)
        lets[e.var] = (inner, inner_loads)
        _count_ops(e.body, counts, loads, lets)
        return
    elif t is Broadcast:
        _count_ops(e.value, counts, loads, lets)
        return
    elif t is Ramp:
        return
    a = getattr(e, "a", None)
    if a is not None:
        _count_ops(a, counts, loads, lets)
        b = getattr(e, "b", None)
        if b is not None:
            _count_ops(b, counts, loads, lets)


def _flops(counts) -> float:
    return (counts[_FADD] + counts[_FMUL] + 2 * counts[_FFMA] + counts[_FDIV] + counts[_FCMP]
            + counts[_FMATH])


# ---------------------------------------------------------------------------------------------
# affine index forms: (constant, {loop var: coefficient}) -- inexact parts are approximated
# ---------------------------------------------------------------------------------------------
def _affine(e, lets, ranges):
    t = type(e)
    if t is IntImm:
        return float(e.value), {}
    if t is Var:
        let = lets.get(e)
        if let is not None:
            return let
        return 0.0, {e: 1.0}
    if t is Add or t is Sub:
        c1, d1 = _affine(e.a, lets, ranges)
        c2, d2 = _affine(e.b, lets, ranges)
        sign = 1.0 if t is Add else -1.0
        out = dict(d1)
        for v, c in d2.items():
            out[v] = out.get(v, 0.0) + sign * c
        return c1 + sign * c2, out
    if t is Mul:
        c1, d1 = _affine(e.a, lets, ranges)
        c2, d2 = _affine(e.b, lets, ranges)
        if not d2:
            return c1 * c2, {v: c * c2 for v, c in d1.items()}
        if not d1:
            return c1 * c2, {v: c * c1 for v, c in d2.items()}
        out = dict(d1)  # a product of two varying terms: keep both dependences (approximate)
        for v, c in d2.items():
            out[v] = out.get(v, 0.0) + c
        return c1 * c2, out
    if t in _DIV_TYPES and type(e.b) is IntImm and e.b.value > 0:
        return _divmod(e, lets, ranges)
    if t is Cast:
        return _affine(e.value, lets, ranges)
    if t is Ramp:
        return _affine(e.base, lets, ranges)
    if t is Broadcast:
        return _affine(e.value, lets, ranges)
    # min/max/select/calls/loads: depends on every loop variable inside, with unit coefficients
    out = {}
    for v in _loop_vars_in(e, ranges):
        out[v] = 1.0
    return 0.0, out


def _divmod(e, lets, ranges):
    """floordiv/floormod (and C div/mod, indices being non-negative) by a constant c: exact when the
    terms with coefficients not divisible by c stay within [0, c) over the loops (a split's
    `(i_0 * 8 + i_1) // 8`), otherwise coefficients divided by c (div) or kept (mod), approximately."""
    c = float(e.b.value)
    k, d = _affine(e.a, lets, ranges)
    q0, r0 = divmod(k, c)
    q, r = {}, {}
    lo = hi = r0
    for v, a in d.items():
        if a % c == 0:
            q[v] = a / c
        else:
            r[v] = a
            m, n = ranges.get(v, (0, 1))
            x, y = a * m, a * (m + n - 1)
            lo += min(x, y)
            hi += max(x, y)
    div = type(e) is FloorDiv or type(e) is Div
    if lo >= 0 and hi < c:   # exact
        return (q0, q) if div else (r0, r)
    if div:
        out = dict(q)
        for v, a in r.items():
            out[v] = a / c
        return q0, out
    return r0, r


def _loop_vars_in(e, ranges) -> list:
    out = []
    stack = [e]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is Var:
            if x in ranges and x not in out:
                out.append(x)
            continue
        if t is IntImm or t is FloatImm or t is StringImm:
            continue
        if t is BufferLoad:
            stack.extend(x.indices)
        elif t is Call:
            stack.extend(x.args)
        elif t is Select:
            stack += [x.condition, x.true_value, x.false_value]
        elif t is Cast or t is Broadcast:
            stack.append(x.value)
        elif t is Ramp:
            stack.append(x.base)
        elif t is Let:
            stack += [x.value, x.body]
        else:
            a = getattr(x, "a", None)
            if a is not None:
                stack.append(a)
                b = getattr(x, "b", None)
                if b is not None:
                    stack.append(b)
    return out


def _bound(e, what, ranges):
    """An upper bound of an integer expression over the enclosing loops (symbolic: refused)."""
    t = type(e)
    if t is IntImm:
        return e.value, e.value
    if t is Var:
        r = ranges.get(e)
        if r is None:
            raise TesseraError(f"extract_features: {what} depends on {e.name}, which is not a loop variable; "
                               f"features need static extents (bind the shape variables first)")
        return r[0], r[0] + r[1] - 1
    if t is Cast:
        return _bound(e.value, what, ranges)
    if t in (Add, Sub, Mul, Min, Max, FloorDiv, FloorMod, Div, Mod):
        a0, a1 = _bound(e.a, what, ranges)
        b0, b1 = _bound(e.b, what, ranges)
        if t is Add:
            return a0 + b0, a1 + b1
        if t is Sub:
            return a0 - b1, a1 - b0
        if t is Mul:
            p = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
            return min(p), max(p)
        if t is Min:
            return min(a0, b0), min(a1, b1)
        if t is Max:
            return max(a0, b0), max(a1, b1)
        if b0 > 0:
            if t is FloorDiv or t is Div:
                return a0 // b1, a1 // b0
            return 0, b1 - 1
    raise TesseraError(f"extract_features: cannot bound {what} ({e.script()}); features need static extents")


# ---------------------------------------------------------------------------------------------
# the walk
# ---------------------------------------------------------------------------------------------
class _Access:
    """One buffer reached by a store row: byte coefficients per loop var, the region a single
    execution touches (as (byte stride, extent) terms), and how many accesses one execution makes."""

    __slots__ = ("buffer", "coef", "region", "reads", "writes")

    def __init__(self, buffer, coef, region, reads, writes):
        self.buffer, self.coef, self.region, self.reads, self.writes = buffer, coef, region, reads, writes


def _byte_coef(buf, indices, lets, ranges):
    eb, strides, _ = _buffer_info(buf)
    coef = {}
    for idx, st in zip(indices, strides):
        _, d = _affine(idx, lets, ranges)
        sb = st * eb
        for v, c in d.items():
            coef[v] = coef.get(v, 0.0) + c * sb
    return coef


class _Walker:
    def __init__(self, target: Target):
        self.target = target
        self.vector_bits = target.vector_bits
        self.threads = max(1, target.num_threads)
        self.loops = []      # (var, extent, kind, auto_unroll_max_step)
        self.tags = []       # the thread tag of each loop in self.loops (None: not thread-bound)
        self.allocs = {}     # buffer -> loop depth of its Allocate
        self.lets = {}       # let var -> affine form
        self.ranges = {}     # loop var -> (min, extent)
        self.let_ops = {}    # let var -> (counts, loads)
        self.guards = 0
        self.fixed = {}      # loop var -> how many enclosing `if`s pin it to one value
        self.regions = []    # pending (buffer, call args) of a tensorized block
        self.intrin = None
        self.rows = []

    # statements ---------------------------------------------------------------------------------
    def stmt(self, s):
        t = type(s)
        if t is SeqStmt:
            for x in s.seq:
                self.stmt(x)
        elif t is For:
            if type(s.extent) is IntImm:
                ext = s.extent.value
            else:
                ext = _bound(s.extent, f"the extent of loop {s.loop_var.name}", self.ranges)[1]
            mn = s.min.value if type(s.min) is IntImm else _bound(s.min, f"the start of loop {s.loop_var.name}", self.ranges)[0]
            kind = s.kind if s.kind != "thread_binding" else "parallel"
            step = 0
            if s.annotations:
                v = getattr(s.annotations.get("pragma_auto_unroll_max_step"), "value",
                            s.annotations.get("pragma_auto_unroll_max_step"))
                step = int(v) if isinstance(v, (int, float)) else 0
            self.ranges[s.loop_var] = (mn, max(ext, 0))
            self.loops.append((s.loop_var, max(ext, 0), kind, step))
            self.tags.append(getattr(s.thread_binding, "thread_tag", None) if s.kind == "thread_binding" else None)
            self.stmt(s.body)
            self.loops.pop()
            self.tags.pop()
        elif t is BufferStore:
            self.store(s)
        elif t is IfThenElse:
            self.guards += 1
            pinned = self.pinned(s.condition)
            for v in pinned:
                self.fixed[v] = self.fixed.get(v, 0) + 1
            self.stmt(s.then_case)
            for v in pinned:
                self.fixed[v] -= 1
                if not self.fixed[v]:
                    del self.fixed[v]
            if s.else_case is not None:
                self.stmt(s.else_case)
            self.guards -= 1
        elif t is Allocate:
            self.allocs[s.buffer] = len(self.loops)
            self.stmt(s.body)
        elif t is LetStmt:
            self.lets[s.var] = _affine(s.value, self.lets, self.ranges)
            counts, loads = [0.0] * len(COMPUTE), []
            _count_ops(s.value, counts, loads, self.let_ops)
            self.let_ops[s.var] = (counts, loads)
            self.stmt(s.body)
        elif t is AttrStmt:
            key = s.attr_key
            if key == ACCESS_REGION:
                self.regions.append((s.node, s.value.args))
                self.stmt(s.body)
                self.regions.pop()
            elif key == "tensor_intrin":
                prev, self.intrin = self.intrin, s.node.value
                self.stmt(s.body)
                self.intrin = prev
            else:
                self.stmt(s.body)
        elif t is AssertStmt:
            self.stmt(s.body)
        elif t is Evaluate:
            if self.intrin is not None and type(s.value) is Call:
                self.call(s.value)
        elif t is Block or t is BlockRealize:
            raise TesseraError("extract_features: the program still has blocks after lower_blocks")

    def pinned(self, cond) -> list:
        """Loop vars an `if` condition pins to one value: the conjuncts `affine == constant` (a
        guarded reduction init runs once per reduction, `if k_0 == 0`, not once per iteration of k_0)."""
        out, stack = [], [cond]
        while stack:
            c = stack.pop()
            if type(c) is And:
                stack += [c.a, c.b]
            elif type(c) is EQ:
                x, y = (c.a, c.b) if type(c.b) is IntImm else (c.b, c.a)
                if type(y) is IntImm:
                    _, d = _affine(x, self.lets, self.ranges)
                    out += [v for v, a in d.items() if a and v in self.ranges and v not in out]
        return out

    # rows ----------------------------------------------------------------------------------------
    def store(self, s):
        counts = [0.0] * len(COMPUTE)
        loads = []
        _count_ops(s.value, counts, loads, self.let_ops)
        accesses = {}
        buf = s.buffer
        coef = _byte_coef(buf, s.indices, self.lets, self.ranges)
        accesses[buf] = [_Access(buf, coef, (), 0, 1)]
        readwrite = False
        for ld in loads:
            b = ld.buffer
            c = _byte_coef(b, ld.indices, self.lets, self.ranges)
            group = accesses.get(b)
            if group is None:
                accesses[b] = [_Access(b, c, (), 1, 0)]
                continue
            if b is buf:
                readwrite = readwrite or c == coef
            for a in group:
                if a.coef == c:
                    a.reads += 1
                    break
            else:
                group.append(_Access(b, c, (), 1, 0))
        constant = not loads and type(s.value) in (IntImm, FloatImm, Broadcast)
        self.row(buf, accesses, counts, readwrite, constant, False)

    def call(self, call):
        name = self.intrin
        extents, per_iter, params, n_writes, reads_output = _intrin_info(name)
        regions = list(self.regions)
        binding = {}
        real = []  # (buffer, mins, extents)
        for buf, args in regions:
            n = len(args) // 2
            mins = args[:n]
            exts = []
            for x in args[n:]:
                exts.append(x.value if type(x) is IntImm else _bound(x, f"a region of {buf.name}", self.ranges)[1])
            real.append((buf, mins, exts))
        used = set()
        for p in params:  # bind the description's shape variables to the matched regions' extents
            r = p.ndim
            for i, (buf, mins, exts) in enumerate(real):
                if i in used or buf.dtype != p.dtype or len(exts) < r:
                    continue
                tail = exts[len(exts) - r:]
                trial = dict(binding)
                ok = True
                for d, x in zip(p.shape, tail):
                    if type(d) is IntImm:
                        ok = d.value == x
                    elif isinstance(d, Var):
                        ok = trial.setdefault(d, x) == x
                    if not ok:
                        break
                if ok:
                    binding = trial
                    used.add(i)
                    break
        work = 1
        for x in extents:
            if isinstance(x, int):
                work *= x
            else:
                work *= binding.get(x, 1) if isinstance(x, Var) else 1
        counts = [c * work for c in per_iter]
        counts[_C["intrin.calls"]] = 1.0
        counts[_C["intrin.flops"]] = _flops(per_iter) * work
        accesses = {}
        out_buf = real[-1][0] if real else None
        for i, (buf, mins, exts) in enumerate(real):
            eb, strides, _ = _buffer_info(buf)
            coef = {}
            for m, st in zip(mins, strides):
                _, d = _affine(m, self.lets, self.ranges)
                for v, c in d.items():
                    coef[v] = coef.get(v, 0.0) + c * st * eb
            region = tuple((st * eb, x) for st, x in zip(strides, exts) if x > 1)
            write = i >= len(real) - n_writes
            acc = _Access(buf, coef, region, 1 if (not write or reads_output) else 0, 1 if write else 0)
            group = accesses.get(buf)
            if group is None:
                accesses[buf] = [acc]
            else:
                for a in group:
                    if a.coef == coef and a.region == region:
                        a.reads += acc.reads
                        a.writes += acc.writes
                        break
                else:
                    group.append(acc)
        if out_buf is None:
            return
        self.row(out_buf, accesses, counts, reads_output, False, True)

    def row(self, out_buf, accesses, counts, readwrite, constant, tensorized):
        f = [0.0] * NUM_FEATURES
        loops = self.loops
        n = len(loops)
        # loop levels (their extents as written)
        for k in range(min(n, LEVELS)):
            var, ext, kind, _ = loops[n - 1 - k]
            base = _I_LOOP + 5 * k
            f[base] = ext
            f[base + 1 + KINDS.index(kind)] = 1.0
        # innermost first; a loop an `if` pins to one value runs once for this store
        fixed = self.fixed
        inner = [(v, 1 if v in fixed else e, kd, st) for v, e, kd, st in reversed(loops)] if fixed else loops[::-1]
        prods = []                               # prods[k] = iterations of levels 0..k
        p = 1
        for _, ext, _, _ in inner:
            p *= ext
            prods.append(p)
        execs = prods[-1] if prods else 1
        rest = 1
        for _, ext, _, _ in inner[LEVELS:]:
            rest *= ext
        f[_I_LOOPS] = n
        f[_I_LOOPS + 1] = execs
        f[_I_LOOPS + 2] = rest if n > LEVELS else 0
        # annotations
        vec_lanes = vec_num = unroll_num = par_num = 0
        unroll_prod = par_ext = 1
        max_step = 0
        for _, ext, kind, step in inner:
            if kind == "vectorized":
                vec_num += 1
                if vec_lanes == 0:
                    vec_lanes = ext
            elif kind == "unrolled":
                unroll_num += 1
                unroll_prod *= ext
            elif kind == "parallel":
                par_num += 1
                par_ext *= ext
            if step > max_step:
                max_step = step
        a = _I_ANN
        f[a] = vec_lanes
        f[a + 1] = vec_num
        f[a + 2] = 1.0 if n and inner[0][2] == "vectorized" else 0.0
        f[a + 3] = vec_lanes * out_buf.dtype.bits / self.vector_bits if vec_lanes else 0.0
        f[a + 4] = unroll_num
        f[a + 5] = unroll_prod if unroll_num else 0
        f[a + 6] = max_step
        f[a + 7] = par_num
        f[a + 8] = par_ext if par_num else 0
        if par_num:
            chunks = -(-par_ext // self.threads)
            f[a + 9] = par_ext / (chunks * self.threads)
        f[a + 10] = 1.0 if n and loops[0][2] == "parallel" else 0.0
        for (_, ext, _, _), tag in zip(loops, self.tags):
            col = _GPU.get(tag)
            if col is not None:
                f[col] = f[col] * ext if f[col] else ext
        # compute (totals over all executions)
        flops_once = _flops(counts) if not tensorized else counts[_C["intrin.flops"]]
        for i, c in enumerate(counts):
            f[_I_COMP + i] = c * execs
        f[_I_COMP + _C["flops"]] = flops_once * execs
        # buffers
        slots = []
        row_bytes = row_ub = row_ul = 0.0
        level_bytes = [0.0] * max(n, 1)
        once_bytes = 0.0
        alloc_depth = self.allocs.get(out_buf)
        alloc_bytes = 0.0
        for buf, group in accesses.items():
            eb, _, cap = _buffer_info(buf)
            reads = sum(x.reads for x in group)
            writes = sum(x.writes for x in group)
            fb = [0.0] * n
            fl = [0.0] * n
            b_once = 0.0
            for acc in group:
                terms = list(acc.region)
                ob, _ = _footprint(terms, eb, cap)
                b_once = max(b_once, ob)
                for k in range(n):
                    var, ext, _, _ = inner[k]
                    c = acc.coef.get(var)
                    if c and ext > 1:
                        terms.append((abs(c), ext))
                    fbk, flk = _footprint(terms, eb, cap)
                    if fbk > fb[k]:
                        fb[k] = fbk
                    if flk > fl[k]:
                        fl[k] = flk
            elems_once = max(1.0, b_once / eb)
            total = execs * (reads + writes) * elems_once * eb
            ub = fb[-1] if n else b_once
            ul = fl[-1] if n else math.ceil(b_once / CACHE_LINE)
            once_bytes += b_once
            for k in range(n):
                level_bytes[k] += fb[k]
            # reuse: the innermost loop none of the buffer's accesses depend on
            reuse_k = -1
            for k in range(n):
                var, ext, _, _ = inner[k]
                if ext > 1 and all(not x.coef.get(var) for x in group):
                    reuse_k = k
                    break
            first = group[0]
            s0 = 0.0
            if n:
                s0 = abs(first.coef.get(inner[0][0], 0.0)) / eb
            sv = 0.0
            for k in range(n):
                c = first.coef.get(inner[k][0])
                if c and inner[k][1] > 1:
                    sv = abs(c) / eb
                    break
            if buf is out_buf and alloc_depth is not None:
                kk = n - 1 - alloc_depth
                alloc_bytes = fb[kk] if kk >= 0 else b_once
            slots.append((total, buf.name, reads, writes, total, ub, ul, fb, fl, reuse_k, s0, sv, b_once))
            row_bytes += total
            row_ub += ub
            row_ul += ul
        slots.sort(key=lambda x: (-x[0], x[1]))
        for s, (_, _, reads, writes, total, ub, ul, fb, fl, reuse_k, s0, sv, b_once) in enumerate(slots[:BUFFER_SLOTS]):
            base = _I_BUF + s * _NB
            f[base + (2 if reads and writes else 1 if writes else 0)] = 1.0
            f[base + 3] = total
            f[base + 4] = ub
            f[base + 5] = ul
            for k in range(min(n, LEVELS)):
                f[base + 6 + k] = fb[k]
                f[base + 6 + LEVELS + k] = fl[k]
            r = base + 6 + 2 * LEVELS
            if reuse_k >= 0:
                f[r] = 1.0
                f[r + 1] = prods[reuse_k - 1] if reuse_k > 0 else 1
                f[r + 2] = level_bytes[reuse_k - 1] if reuse_k > 0 else once_bytes
                f[r + 3] = inner[reuse_k][1]
            f[r + 4] = total / ub if ub else 0.0
            f[r + 5] = s0
            f[r + 6] = sv
        # the store itself
        st = _I_STORE
        f[st] = out_buf.dtype.bytes
        f[st + 1] = 1.0 if readwrite else 0.0
        f[st + 2] = 1.0 if constant else 0.0
        f[st + 3] = self.guards
        f[st + 4] = 1.0 if tensorized else 0.0
        f[st + 5] = len(accesses)
        f[st + 6] = row_bytes
        f[st + 7] = row_ub
        f[st + 8] = row_ul
        # arithmetic intensity per level: flops of one pass of the loop / bytes it touches
        for k in range(min(n, LEVELS)):
            if level_bytes[k]:
                f[_I_AI + k] = flops_once * prods[k] / level_bytes[k]
        if row_ub:
            f[_I_AI + LEVELS] = flops_once * execs / row_ub
        if alloc_depth is not None:
            f[_I_ALLOC] = 1.0
            f[_I_ALLOC + 1] = alloc_bytes
            outer = 1
            for _, ext, _, _ in loops[:alloc_depth]:
                outer *= ext
            f[_I_ALLOC + 2] = outer
            f[_I_ALLOC + 3] = 1.0 if out_buf.scope == "local" else 0.0
            f[_I_ALLOC + 4] = 1.0 if out_buf.scope.startswith("shared") else 0.0
        self.rows.append(f)


def _footprint(terms, eb, cap):
    """(unique bytes, unique cache lines) of a pattern: one element of eb bytes repeated along
    (byte stride, extent) terms. Terms are taken by increasing stride: a stride within the run
    covered so far extends the run, a larger one repeats it (Ansor-style footprint estimate)."""
    if not terms:
        return float(eb), 1.0
    terms = sorted(terms)
    run = run_l = float(eb)
    cnt = cnt_l = 1.0
    for s, e in terms:
        if s <= run:
            run += s * (e - 1)
        else:
            cnt *= e
        if s <= run_l or s <= CACHE_LINE:
            run_l += s * (e - 1)
        else:
            cnt_l *= e
    b = max(float(eb), min(cnt * run, float(cap)))
    lines = min(cnt_l * math.ceil(run_l / CACHE_LINE), b / eb, math.ceil(cap / CACHE_LINE))
    return b, max(lines, math.ceil(b / CACHE_LINE), 1.0)


# ---------------------------------------------------------------------------------------------
# the entry points
# ---------------------------------------------------------------------------------------------
def lowered_for_features(sch_or_func, target):
    """The PrimFuncs features are read from: the candidate through its target's pipeline up to and
    including lower_blocks (see the module docstring for why there)."""
    t = Target(target)
    passes = _prefix(t)
    out = []
    for func in functions_of(sch_or_func):
        for fn in passes:
            func = fn(func)
        out.append(func)
    return out


def extract_features(sch_or_func, target) -> np.ndarray:
    """Per-store features of a candidate (a tir.Schedule, PrimFunc or IRModule) for target:
    float32 (n_stores, NUM_FEATURES), one row per buffer store or tensor-intrinsic call, in program
    order; columns as feature_names() lists them."""
    t = Target(target)
    walker = _Walker(t)
    for func in lowered_for_features(sch_or_func, t):
        walker.stmt(func.body)
    if not walker.rows:
        return np.zeros((0, NUM_FEATURES), dtype=np.float32)
    x = np.asarray(walker.rows, dtype=np.float64)
    x[:, _LOG_MASK] = np.log2(1.0 + np.maximum(x[:, _LOG_MASK], 0.0))
    return x.astype(np.float32)


def extract_features_batch(schs, target) -> list:
    """extract_features of each candidate, in order (one target, the caches shared)."""
    t = Target(target)
    return [extract_features(s, t) for s in schs]


__all__ = ["extract_features", "extract_features_batch", "feature_names", "log_columns", "lowered_for_features",
           "NUM_FEATURES", "LEVELS", "BUFFER_SLOTS", "CACHE_LINE", "ADDITIVE", "FEATURE_VERSION"]
