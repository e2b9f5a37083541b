"""A reference interpreter for tessera PrimFuncs on numpy arrays (a test oracle, not a backend).

`run(func, *args)` executes `func` (with blocks, or lowered) on numpy arrays (updated in place) and
Python/numpy scalars for scalar parameters. The IR is compiled once into Python closures; values
are numpy scalars of the node's dtype (vectors: 1-D numpy arrays), so int32 wraps and float32
rounds as the generated code would. Semantics: Div on ints truncates (Mod is the C remainder),
FloorDiv/FloorMod floor, integer division by zero raises; Select evaluates both sides, the
if_then_else intrinsic only the taken one; a block's init runs when all its reduce iter vars are at
their minimum; every load and store is bounds-checked. Freshly allocated float buffers hold NaN.
Anything it does not know raises InterpError naming the node.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from tessera import ir
from tessera.errors import ShapeError, TesseraError
from tessera.ir import expr as E
from tessera.ir import stmt as S
from tessera.ir.dtype import numpy_dtype


class InterpError(TesseraError):
    """The interpreted program did something invalid (out-of-bounds access, unbound variable, ...)."""


def run(func: ir.PrimFunc, *args):
    """Execute func on args: numpy arrays for Buffer params (written in place), scalars for Var params."""
    if len(args) != len(func.params):
        raise InterpError(f"{func.name} takes {len(func.params)} arguments, got {len(args)}")
    env = {}
    for p, a in zip(func.params, args):
        if isinstance(p, ir.Var):
            env[p] = numpy_dtype(p.dtype).type(a)
        else:
            if not isinstance(a, np.ndarray):
                raise InterpError(f"argument {p.name!r} must be a numpy array, got {type(a).__name__}")
            if a.dtype != numpy_dtype(p.dtype):
                raise InterpError(f"argument {p.name!r} is {a.dtype}, the function expects {p.dtype}")
            if a.ndim != p.ndim:
                raise ShapeError(f"argument {p.name!r} has {a.ndim} dimensions, expected {p.ndim}")
            env[p] = a
            for d, s in enumerate(p.shape):
                if isinstance(s, ir.Var) and s not in env:
                    env[s] = numpy_dtype(s.dtype).type(a.shape[d])
    for p, a in zip(func.params, args):
        if isinstance(p, ir.Buffer):
            for d, s in enumerate(p.shape):
                want = int(_expr(s)(env))
                if a.shape[d] != want:
                    raise ShapeError(f"argument {p.name!r}: dimension {d} is {a.shape[d]}, expected {want}")
    flat = func.attrs.get("flat_params")
    if flat:
        for fp, p, a in zip(flat, func.params, args):
            if fp is not None:
                if not a.flags.c_contiguous:
                    raise InterpError(f"argument {p.name!r} must be C-contiguous for a flattened function")
                env[fp] = a.reshape(-1)
    body = _stmt(func.body)
    with np.errstate(all="ignore"):
        body(env)


# ---------------------------------------------------------------------------------------------
# expressions
# ---------------------------------------------------------------------------------------------
def _np(dtype):
    return numpy_dtype(dtype.element_of())


def _caster(dtype):
    npdt = _np(dtype)
    if dtype.lanes > 1:
        return lambda v: np.asarray(v).astype(npdt)
    typ = npdt.type
    if dtype.is_bool():
        return lambda v: np.bool_(v != 0)
    return lambda v: v if type(v) is typ else np.asarray(v).astype(npdt)[()]


def _check_nonzero(b, node):
    if (b == 0) if type(b) is not np.ndarray else np.any(b == 0):
        raise InterpError(f"integer division by zero in {type(node).__name__} ({_show(node)})")


def _show(node):
    try:
        return node.script()
    except Exception:  # the printer may be mid-rewrite; a type name still says where
        return type(node).__name__


def _int_div(node):
    def f(a, b):
        _check_nonzero(b, node)
        return (a - np.fmod(a, b)) // b

    return f


def _int_mod(node):
    def f(a, b):
        _check_nonzero(b, node)
        return np.fmod(a, b)

    return f


def _checked(fn, node):
    def f(a, b):
        _check_nonzero(b, node)
        return fn(a, b)

    return f


_ARITH = {E.Add: operator.add, E.Sub: operator.sub, E.Mul: operator.mul, E.Min: np.minimum,
          E.Max: np.maximum, E.EQ: operator.eq, E.NE: operator.ne, E.LT: operator.lt, E.LE: operator.le,
          E.GT: operator.gt, E.GE: operator.ge}


def _binary_fn(node):
    cls = type(node)
    fn = _ARITH.get(cls)
    if fn is not None:
        return fn
    is_float = node.a.dtype.is_float()
    if cls is E.Div:
        return operator.truediv if is_float else _int_div(node)
    if cls is E.Mod:
        return np.fmod if is_float else _int_mod(node)
    if cls is E.FloorDiv:
        return np.floor_divide if is_float else _checked(np.floor_divide, node)
    if cls is E.FloorMod:
        return np.remainder if is_float else _checked(np.remainder, node)
    raise InterpError(f"the interpreter does not know {cls.__name__} ({_show(node)})")


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


_CALLS = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": _erf, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "atan": np.arctan, "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "round": np.rint, "pow": np.power, "fmod": np.fmod, "isnan": np.isnan, "isinf": np.isinf,
    "fma": lambda a, b, c: np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64),
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "bitwise_not": np.invert, "shift_left": np.left_shift, "shift_right": np.right_shift,
    "likely": lambda x: x,
}


def _expr(node):
    """Compile an expression into a closure env -> value."""
    t = type(node)
    if t is E.IntImm:
        v = np.bool_(node.value) if node.dtype.is_bool() else _np(node.dtype).type(node.value)
        return lambda env: v
    if t is E.FloatImm:
        v = _np(node.dtype).type(node.value)
        return lambda env: v
    if t is E.StringImm:
        v = node.value
        return lambda env: v
    if isinstance(node, E.Var):
        def var(env, node=node):
            try:
                return env[node]
            except KeyError:
                raise InterpError(f"variable {node.name!r} is used before it is defined") from None

        return var
    if isinstance(node, (E.BinaryOp, E.CmpOp)):
        fa, fb, fn = _expr(node.a), _expr(node.b), _binary_fn(node)
        return lambda env: fn(fa(env), fb(env))
    if t is E.And or t is E.Or:
        fa, fb = _expr(node.a), _expr(node.b)
        if node.dtype.lanes > 1:
            fn = np.logical_and if t is E.And else np.logical_or
            return lambda env: fn(fa(env), fb(env))
        if t is E.And:
            return lambda env: np.bool_(fa(env) and fb(env))
        return lambda env: np.bool_(fa(env) or fb(env))
    if t is E.Not:
        fa = _expr(node.a)
        return lambda env: np.logical_not(fa(env))
    if t is E.Select:
        fc, ft, ff = _expr(node.condition), _expr(node.true_value), _expr(node.false_value)
        if node.dtype.lanes > 1:
            return lambda env: np.where(fc(env), ft(env), ff(env)).astype(_np(node.dtype))
        return lambda env: (lambda c, a, b: a if c else b)(fc(env), ft(env), ff(env))
    if t is E.Cast:
        fv, cast = _expr(node.value), _caster(node.dtype)
        return lambda env: cast(fv(env))
    if t is E.Let:
        fv, fb, var = _expr(node.value), _expr(node.body), node.var

        def let(env):
            env[var] = fv(env)
            return fb(env)

        return let
    if t is E.Ramp:
        fb, fs, lanes, npdt = _expr(node.base), _expr(node.stride), node.lanes, _np(node.dtype)
        return lambda env: (fb(env) + fs(env) * np.arange(lanes, dtype=npdt)).astype(npdt)
    if t is E.Broadcast:
        fv, lanes, npdt = _expr(node.value), node.lanes, _np(node.dtype)
        return lambda env: np.full(lanes, fv(env), dtype=npdt)
    if t is E.BufferLoad:
        return _load(node)
    if t is E.Call:
        return _call(node)
    if t is E.Reduce:
        raise InterpError("a Reduce expression cannot be executed: it belongs in te.compute bodies and is "
                          "turned into blocks by te.create_prim_func")
    raise InterpError(f"the interpreter does not know expression {t.__name__}")


def _call(node):
    args = [_expr(a) for a in node.args]
    op = node.op
    if op == "if_then_else":
        fc, ft, ff = args
        if node.args[0].dtype.lanes > 1:
            raise InterpError("if_then_else with a vector condition is not defined; use Select")
        return lambda env: ft(env) if fc(env) else ff(env)
    fn = _CALLS.get(op)
    if fn is None:
        raise InterpError(f"the interpreter does not know the call {op!r} ({_show(node)})")
    cast = _caster(node.dtype)
    if len(args) == 1:
        (fa,) = args
        return lambda env: cast(fn(fa(env)))
    return lambda env: cast(fn(*[f(env) for f in args]))


# ---------------------------------------------------------------------------------------------
# buffer access
# ---------------------------------------------------------------------------------------------
def _array(env, buf):
    try:
        return env[buf]
    except KeyError:
        raise InterpError(f"buffer {buf.name!r} is neither a parameter nor allocated here") from None


def _addresser(buf):
    """Closure (env, index values) -> numpy index into the array bound to buf, bounds-checked."""
    if buf.dtype.lanes != 1:
        raise InterpError(f"buffer {buf.name!r} has vector dtype {buf.dtype}; not supported")
    offset_zero = isinstance(buf.elem_offset, E.IntImm) and buf.elem_offset.value == 0
    if not buf.strides and offset_zero:
        def address(env, arr, idx):
            if arr.ndim != len(idx):
                raise InterpError(f"buffer {buf.name!r}: {len(idx)} indices for an array of {arr.ndim} dims")
            for d, i in enumerate(idx):
                if (not 0 <= i < arr.shape[d]) if type(i) is not np.ndarray else \
                        (np.any(i < 0) or np.any(i >= arr.shape[d])):
                    raise InterpError(f"buffer {buf.name!r}: index {i} out of bounds [0, {arr.shape[d]}) "
                                      f"in dimension {d}")
            return tuple(idx)

        return address
    fshape = [_expr(s) for s in buf.shape]
    fstrides = [_expr(s) for s in buf.strides]
    foff = _expr(buf.elem_offset)

    def address(env, arr, idx):
        if fstrides:
            strides = [int(f(env)) for f in fstrides]
        else:
            strides, acc = [], 1
            for f in reversed(fshape):
                strides.append(acc)
                acc *= int(f(env))
            strides.reverse()
        flat = foff(env)
        for i, s in zip(idx, strides):
            flat = flat + np.asarray(i, np.int64) * s
        size = arr.size
        if np.any(flat < 0) or np.any(flat >= size):
            raise InterpError(f"buffer {buf.name!r}: element offset {flat} out of bounds [0, {size})")
        return (flat,) if arr.ndim == 1 else np.unravel_index(flat, arr.shape)

    return address


def _load(node):
    buf = node.buffer
    fidx = [_expr(i) for i in node.indices]
    address = _addresser(buf)

    def load(env):
        arr = _array(env, buf)
        return arr[address(env, arr, [f(env) for f in fidx])]

    return load


# ---------------------------------------------------------------------------------------------
# statements
# ---------------------------------------------------------------------------------------------
def _alloc(buf):
    fshape = [_expr(s) for s in buf.shape]
    npdt = _np(buf.dtype)
    fill = np.nan if buf.dtype.is_float() else (True if buf.dtype.is_bool() else 0x5A)

    def alloc(env):
        env[buf] = np.full(tuple(int(f(env)) for f in fshape), fill, dtype=npdt)

    return alloc


def _stmt(node):
    """Compile a statement into a closure env -> None."""
    t = type(node)
    if t is S.SeqStmt:
        parts = [_stmt(s) for s in node.seq]

        def seq(env):
            for p in parts:
                p(env)

        return seq
    if t is S.For:
        fmin, fext, body, var = _expr(node.min), _expr(node.extent), _stmt(node.body), node.loop_var
        typ = _np(var.dtype).type

        def loop(env):
            lo = int(fmin(env))
            for x in range(lo, lo + int(fext(env))):
                env[var] = typ(x)
                body(env)

        return loop
    if t is S.BlockRealize:
        return _block_realize(node)
    if t is S.BufferStore:
        buf = node.buffer
        fv, fidx, address = _expr(node.value), [_expr(i) for i in node.indices], _addresser(buf)

        def store(env):
            arr = _array(env, buf)
            arr[address(env, arr, [f(env) for f in fidx])] = fv(env)

        return store
    if t is S.LetStmt:
        fv, body, var = _expr(node.value), _stmt(node.body), node.var

        def let(env):
            env[var] = fv(env)
            body(env)

        return let
    if t is S.IfThenElse:
        fc, then = _expr(node.condition), _stmt(node.then_case)
        other = _stmt(node.else_case) if node.else_case is not None else None

        def if_(env):
            if fc(env):
                then(env)
            elif other is not None:
                other(env)

        return if_
    if t is S.Allocate:
        alloc, body = _alloc(node.buffer), _stmt(node.body)

        def allocate(env):
            alloc(env)
            body(env)

        return allocate
    if t is S.Evaluate:
        fv = _expr(node.value)

        def evaluate(env):
            fv(env)

        return evaluate
    if t is S.AttrStmt:
        return _stmt(node.body)
    if t is S.AssertStmt:
        fc, body, msg = _expr(node.condition), _stmt(node.body), node.message

        def check(env):
            if not fc(env):
                raise InterpError(f"assertion failed: {msg}")
            body(env)

        return check
    if t is S.Block:
        if node.iter_vars:
            raise InterpError(f"block {node.name_hint!r} has iteration variables but no BlockRealize")
        return _block_realize(S.BlockRealize((), True, node))
    raise InterpError(f"the interpreter does not know statement {t.__name__}")


def _block_realize(node):
    block = node.block
    if block.match_buffers:
        raise InterpError(f"block {block.name_hint!r}: match_buffers are not supported by the interpreter")
    fvals = [_expr(v) for v in node.iter_values]
    ivars = [iv.var for iv in block.iter_vars]
    fpred = None if (isinstance(node.predicate, E.IntImm) and node.predicate.value) else _expr(node.predicate)
    allocs = [_alloc(b) for b in block.alloc_buffers]
    body = _stmt(block.body)
    init = _stmt(block.init) if block.init is not None else None
    reduce_at_min = [(iv.var, _expr(iv.dom.min)) for iv in block.iter_vars if iv.iter_type == "reduce"]

    def realize(env):
        values = [f(env) for f in fvals]
        if fpred is not None and not fpred(env):
            return
        for v, x in zip(ivars, values):
            env[v] = x
        for a in allocs:
            a(env)
        if init is not None and all(env[v] == fm(env) for v, fm in reduce_at_min):
            init(env)
        body(env)

    return realize
