"""The language a kernel is written in (`import tessera.language as tl`), with triton.language's names.

A kernel runs as one program instance over blocks: every value is a `tensor` with a static block
shape (or a scalar). Each op here checks its operands' types and shapes (the type rules: broadcasting,
promotion, what an op accepts), then asks the current builder for the result: the tracer (trace.py)
records a tile-IR op, the interpreter (interpreter.py) computes it with numpy. An error names the
kernel's own source line (`KernelError`).
"""
from __future__ import annotations

import builtins
import numbers
import operator
import threading

from ..errors import TesseraError
from . import ir
from .ir import (DType, PointerType, TileType, bfloat16, float16, float32, float64, int1, int8, int16, int32,
                 int64, uint8, uint16, uint32, uint64)

_state = threading.local()


class KernelError(TesseraError):
    """A kernel's op refused its operands: the message names the kernel's file, line and source."""

    def __init__(self, message: str, loc: ir.Loc | None = None):
        self.loc, self.detail = loc, message
        if loc is not None:
            where = f"{loc.file}:{loc.line}, in kernel {loc.function}"
            text = f"{where}:\n    {loc.text.strip()}\n{message}" if loc.text else f"{where}: {message}"
        else:
            text = message
        super().__init__(text)


def builder():
    """The builder of the kernel being traced or interpreted (ops are only valid inside one)."""
    b = getattr(_state, "builder", None)
    if b is None:
        raise TesseraError("tessera.language ops run only inside a kernel (a @tessera.jit function launched "
                           "as kernel[grid](...), or traced by kernel.inspect)")
    return b


def error(message: str) -> KernelError:
    """A KernelError at the kernel line running now."""
    b = getattr(_state, "builder", None)
    return KernelError(message, b.location() if b is not None else None)


class constexpr:
    """Marks a parameter whose value is known when the kernel is compiled (`BLOCK: tl.constexpr`): it
    specializes the kernel, and may be a block shape. A kernel sees the plain Python value."""

    def __init__(self, value=None):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self):
        return f"constexpr({self.value!r})"

    def __index__(self):
        return operator.index(self.value)

    def __bool__(self):
        return bool(self.value)

    def __eq__(self, other):
        return self.value == (other.value if isinstance(other, constexpr) else other)

    def __hash__(self):
        return hash(self.value)


def pointer_type(element_ty: DType) -> PointerType:
    return PointerType(element_ty)


dtype = DType


# ---------------------------------------------------------------------------------------------
# tensor
# ---------------------------------------------------------------------------------------------
class tensor:
    """A value of a kernel: a block of `shape` elements of `dtype` (shape [] for a scalar).
    `handle` is the builder's: a tile-IR Value while tracing, a numpy array when interpreting."""

    __slots__ = ("handle", "type")

    def __init__(self, handle, type_: TileType):
        self.handle, self.type = handle, type_

    @property
    def dtype(self):
        return self.type.element

    @property
    def shape(self):
        return list(self.type.shape)

    @property
    def numel(self):
        return self.type.numel

    def __repr__(self):
        return f"tensor({self.type})"

    def __bool__(self):
        raise error("a runtime value is used as a Python bool (an `if`, `and`, `or`, `not` or a while "
                    "condition on a kernel value): Python control flow needs constexpr values; use "
                    "tl.where(cond, a, b) or a mask for data-dependent choices")

    def __index__(self):
        raise error("a runtime value is used where a Python int is needed (a block shape, a "
                    "static_range bound or a constexpr argument): block shapes must be constexpr")

    __int__ = __index__

    def __float__(self):
        raise error("a runtime value is used where a Python float is needed")

    def __iter__(self):
        raise error("a tensor cannot be iterated over; loop with range() and index with pointer offsets")

    def __len__(self):
        raise error("len() of a tensor: use x.shape[i] (a block's shape is static)")

    # arithmetic
    def __add__(self, o):
        return _binary("add", self, o)

    def __radd__(self, o):
        return _binary("add", o, self)

    def __sub__(self, o):
        return _binary("sub", self, o)

    def __rsub__(self, o):
        return _binary("sub", o, self)

    def __mul__(self, o):
        return _binary("mul", self, o)

    def __rmul__(self, o):
        return _binary("mul", o, self)

    def __truediv__(self, o):
        return _binary("truediv", self, o)

    def __rtruediv__(self, o):
        return _binary("truediv", o, self)

    def __floordiv__(self, o):
        return _binary("floordiv", self, o)

    def __rfloordiv__(self, o):
        return _binary("floordiv", o, self)

    def __mod__(self, o):
        return _binary("mod", self, o)

    def __rmod__(self, o):
        return _binary("mod", o, self)

    def __and__(self, o):
        return _binary("and", self, o)

    def __rand__(self, o):
        return _binary("and", o, self)

    def __or__(self, o):
        return _binary("or", self, o)

    def __ror__(self, o):
        return _binary("or", o, self)

    def __xor__(self, o):
        return _binary("xor", self, o)

    def __rxor__(self, o):
        return _binary("xor", o, self)

    def __lshift__(self, o):
        return _binary("shl", self, o)

    def __rshift__(self, o):
        return _binary("shr", self, o)

    def __lt__(self, o):
        return _binary("lt", self, o)

    def __le__(self, o):
        return _binary("le", self, o)

    def __gt__(self, o):
        return _binary("gt", self, o)

    def __ge__(self, o):
        return _binary("ge", self, o)

    def __eq__(self, o):
        return _binary("eq", self, o)

    def __ne__(self, o):
        return _binary("ne", self, o)

    __hash__ = object.__hash__

    def __neg__(self):
        if self.dtype.is_ptr():
            raise error(f"cannot negate a pointer ({self.type})")
        return _binary("sub", _zero_like(self), self)

    def __pos__(self):
        return self

    def __invert__(self):
        if not (self.dtype.is_int() or self.dtype.is_bool()):
            raise error(f"~ needs an integer or boolean operand, got {self.type}")
        return _unary("not", self)

    def __abs__(self):
        return abs(self)

    def __getitem__(self, slices):
        """`x[:, None]`: a new axis of size 1 where None stands (':' keeps an axis)."""
        if not isinstance(slices, tuple):
            slices = (slices,)
        out, axis = self, 0
        kept = 0
        for s in slices:
            if s is None:
                out = expand_dims(out, axis)
                axis += 1
            elif isinstance(s, slice) and s == slice(None):
                axis += 1
                kept += 1
            else:
                raise error(f"a tensor is indexed only with ':' and None (x[:, None]), got {s!r}; load "
                            f"elements through pointers")
        if kept != len(self.type.shape):
            raise error(f"x[...] must name every axis of the {len(self.type.shape)}-d tensor with ':' "
                        f"(got {kept})")
        return out

    def to(self, dtype, bitcast=False, **_):
        if bitcast:
            raise error("bitcast is not supported by tessera's tile language; cast with .to(dtype)")
        return cast(self, dtype)

    @property
    def T(self):
        return trans(self)

    # reductions and shape ops as methods, as triton.language has them
    def sum(self, axis=None, keep_dims=False):
        return sum(self, axis, keep_dims)

    def max(self, axis=None, keep_dims=False):
        return max(self, axis, keep_dims=keep_dims)

    def min(self, axis=None, keep_dims=False):
        return min(self, axis, keep_dims=keep_dims)

    def reshape(self, *shape):
        return reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)

    def expand_dims(self, axis):
        return expand_dims(self, axis)

    def broadcast_to(self, *shape):
        return broadcast_to(self, *shape)

    def trans(self, *dims):
        return trans(self, *dims)


# ---------------------------------------------------------------------------------------------
# helpers of the type rules
# ---------------------------------------------------------------------------------------------
_DTYPE_NAMES = {d.ir: d for d in ir.DTYPES.values()}
_DTYPE_NAMES.update({d.name: d for d in ir.DTYPES.values()})
_DTYPE_NAMES.update({"float": float32, "int": int32, "bool": int1, "half": float16})


def as_dtype(x) -> DType:
    """A DType from a DType, its name ("fp32", "float32") or a numpy dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, constexpr):
        return as_dtype(x.value)
    try:
        return _DTYPE_NAMES[str(x)]
    except KeyError:
        pass
    try:
        import numpy as np

        return _DTYPE_NAMES[np.dtype(x).name]
    except (TypeError, KeyError):
        raise error(f"{x!r} is not an element type (tl.float32, tl.int32, ...)") from None


def _unwrap(x):
    return x.value if isinstance(x, constexpr) else x


def _is_pow2(n) -> bool:
    return isinstance(n, int) and n > 0 and (n & (n - 1)) == 0


def static_shape(shape, what: str) -> tuple:
    """The block shape `shape` as ints, each a power of two; a runtime value refused by name."""
    shape = _unwrap(shape)
    if isinstance(shape, (int, tensor, constexpr)):
        shape = (shape,)
    out = []
    for s in shape:
        s = _unwrap(s)
        if isinstance(s, tensor):
            raise error(f"{what}: a runtime value ({s.type}) is used as a block shape; block shapes must be "
                        f"constexpr (a tl.constexpr parameter or a Python int)")
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise error(f"{what}: block shape entries are ints, got {s!r}")
        if not _is_pow2(int(s)):
            raise error(f"{what}: block shape {tuple(int(_unwrap(x)) for x in shape)} has {int(s)}, not a power "
                        f"of two (every block extent is a power of two)")
        out.append(int(s))
    return tuple(out)


def check_carried(name: str, init: tensor, y) -> None:
    """Refuses a loop-carried value `y` (after the loop body) whose type is not `init`'s (before the loop)."""
    if not isinstance(y, tensor) or y.type != init.type:
        got = y.type if isinstance(y, tensor) else type(y).__name__
        raise error(f"the loop-carried value {name!r} is {init.type} before the loop and {got} after its body; "
                    f"give it its final type before the loop (e.g. tl.zeros([BLOCK], tl.float32))")


def to_tensor(x, like: tensor | None = None) -> tensor:
    """x as a tensor: Python numbers become constants; with `like`, a number takes its kind of type
    (an int next to a float tensor is that float, as triton's weakly typed literals)."""
    x = _unwrap(x)
    if isinstance(x, tensor):
        return x
    if isinstance(x, bool):
        return _const(x, int1)
    if isinstance(x, numbers.Integral):
        x = int(x)
        if like is not None and not like.dtype.is_ptr() and not like.dtype.is_bool():
            el = like.dtype
            if el.is_floating() or (el.is_int() and _fits(x, el)):
                return _const(x, el)
        if -2**31 <= x < 2**31:
            return _const(x, int32)
        if -2**63 <= x < 2**63:
            return _const(x, int64)
        if x < 2**64:
            return _const(x, uint64)
        raise error(f"integer constant {x} does not fit in 64 bits")
    if isinstance(x, numbers.Real):
        if like is not None and like.dtype.is_floating():
            return _const(float(x), like.dtype)
        return _const(float(x), float32)
    raise error(f"{x!r} ({type(x).__name__}) is not a kernel value (a tensor, a number or a constexpr)")


def _fits(x: int, dt: DType) -> bool:
    bits = dt.bits
    if dt.is_signed():
        return -2**(bits - 1) <= x < 2**(bits - 1)
    return 0 <= x < 2**bits


def _const(value, dt: DType) -> tensor:
    ty = TileType(dt, ())
    return tensor(builder().constant(value, ty), ty)


def _zero_like(x: tensor) -> tensor:
    return _const(0, x.dtype)


def promote(a: DType, b: DType, op: str) -> DType:
    """The type two operands compute in (triton's rules): the wider float; a float over an int; the
    wider int (unsigned where one of equal width is); int1 under any int."""
    if a == b:
        return a
    if a.is_floating() or b.is_floating():
        if a.is_floating() and b.is_floating():
            if {a, b} == {float16, bfloat16}:
                return float32
            return a if a.bits > b.bits else b
        return a if a.is_floating() else b
    if a.is_bool():
        return b
    if b.is_bool():
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if not a.is_signed() else b


def broadcast_shapes(sa: tuple, sb: tuple, what: str) -> tuple:
    """numpy's broadcasting of two block shapes; mismatched extents refused with both shapes."""
    if len(sa) < len(sb):
        sa = (1,) * (len(sb) - len(sa)) + sa
    elif len(sb) < len(sa):
        sb = (1,) * (len(sa) - len(sb)) + sb
    out = []
    for i, (x, y) in enumerate(zip(sa, sb)):
        if x != y and x != 1 and y != 1:
            raise error(f"{what}: cannot broadcast blocks of shapes {list(sa)} and {list(sb)} (axis {i}: {x} vs {y})")
        out.append(y if x == 1 else x)
    return tuple(out)


def broadcast_to_shape(x: tensor, shape: tuple) -> tensor:
    """x broadcast to `shape` (a scalar splat, missing leading axes added, extents of 1 repeated)."""
    if tuple(x.type.shape) == tuple(shape):
        return x
    b = builder()
    if not x.type.shape:
        ty = x.type.with_shape(shape)
        return tensor(b.splat(x.handle, ty), ty)
    while len(x.type.shape) < len(shape):
        x = expand_dims(x, 0)
    for i, (s, t) in enumerate(zip(x.type.shape, shape)):
        if s != t and s != 1:
            raise error(f"cannot broadcast a block of shape {list(x.type.shape)} to {list(shape)} (axis {i})")
    ty = x.type.with_shape(shape)
    return tensor(b.broadcast(x.handle, ty), ty)


def _same_shape(*xs, what: str):
    shape = ()
    for x in xs:
        shape = broadcast_shapes(shape, tuple(x.type.shape), what)
    return [broadcast_to_shape(x, shape) for x in xs]


_ARITH = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "and": "&", "or": "|",
          "xor": "^", "shl": "<<", "shr": ">>", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==",
          "ne": "!=", "max": "maximum", "min": "minimum"}
_CMP = ("lt", "le", "gt", "ge", "eq", "ne")


def _binary(op: str, a, b) -> tensor:
    a, b = _unwrap(a), _unwrap(b)
    if not isinstance(a, tensor) and not isinstance(b, tensor):   # two constexprs: Python computes it
        return _py_binary(op, a, b)
    a = to_tensor(a, b if isinstance(b, tensor) else None)
    b = to_tensor(b, a)
    sym = _ARITH[op]
    if a.dtype.is_ptr() or b.dtype.is_ptr():
        return _pointer_binary(op, a, b, sym)
    if op == "truediv":
        dt = promote(a.dtype, b.dtype, op)
        if not dt.is_floating():
            dt = float32
    elif op in ("and", "or", "xor", "shl", "shr"):
        for x in (a, b):
            if x.dtype.is_floating():
                raise error(f"'{sym}' needs integer or boolean operands, got {a.type} {sym} {b.type}")
        dt = promote(a.dtype, b.dtype, op)
    else:
        dt = promote(a.dtype, b.dtype, op)
    a, b = cast(a, dt), cast(b, dt)
    a, b = _same_shape(a, b, what=f"'{sym}'")
    out_el = int1 if op in _CMP else dt
    ty = TileType(out_el, a.type.shape)
    return tensor(builder().binary(op, a.handle, b.handle, ty), ty)


def _py_binary(op, a, b):
    o = operator
    fns = {"add": o.add, "sub": o.sub, "mul": o.mul, "truediv": o.truediv, "floordiv": o.floordiv, "mod": o.mod,
           "and": o.and_, "or": o.or_, "xor": o.xor, "shl": o.lshift, "shr": o.rshift, "lt": o.lt, "le": o.le,
           "gt": o.gt, "ge": o.ge, "eq": o.eq, "ne": o.ne, "max": builtins.max, "min": builtins.min}
    return fns[op](a, b)


def _pointer_binary(op, a, b, sym) -> tensor:
    if op == "sub" and a.dtype.is_ptr() and not b.dtype.is_ptr():
        return _pointer_binary("add", a, _binary("sub", 0, b), "+")
    if op != "add" or (a.dtype.is_ptr() and b.dtype.is_ptr()):
        raise error(f"pointer arithmetic: only pointer + integer and pointer - integer are allowed, got "
                    f"{a.type} {sym} {b.type}")
    ptr, off = (a, b) if a.dtype.is_ptr() else (b, a)
    if not (off.dtype.is_int() or off.dtype.is_bool()):
        raise error(f"a pointer is offset by integers, got {off.type}")
    ptr, off = _same_shape(ptr, off, what="pointer offset")
    ty = ptr.type
    return tensor(builder().addptr(ptr.handle, off.handle, ty), ty)


def _unary(op: str, x: tensor, dt: DType | None = None) -> tensor:
    ty = TileType(dt or x.dtype, x.type.shape)
    return tensor(builder().unary(op, x.handle, ty), ty)


def cast(x, dtype) -> tensor:
    dt = as_dtype(dtype)
    x = to_tensor(x)
    if x.dtype == dt:
        return x
    if x.dtype.is_ptr():
        raise error(f"cannot cast a pointer ({x.type}) to {dt}")
    ty = TileType(dt, x.type.shape)
    return tensor(builder().cast(x.handle, ty), ty)


# ---------------------------------------------------------------------------------------------
# programs and blocks
# ---------------------------------------------------------------------------------------------
def program_id(axis) -> tensor:
    """The index of this program instance along grid axis 0, 1 or 2."""
    axis = _axis3(axis, "program_id")
    ty = TileType(int32, ())
    return tensor(builder().program_id(axis, ty), ty)


def num_programs(axis) -> tensor:
    """The number of program instances along grid axis 0, 1 or 2."""
    axis = _axis3(axis, "num_programs")
    ty = TileType(int32, ())
    return tensor(builder().num_programs(axis, ty), ty)


def _axis3(axis, what):
    axis = _unwrap(axis)
    if isinstance(axis, tensor) or axis not in (0, 1, 2):
        raise error(f"{what}: axis must be the constant 0, 1 or 2, got {axis!r}")
    return int(axis)


def arange(start, end) -> tensor:
    """The block [start, start + 1, ..., end - 1] (int32); end - start must be a power of two."""
    start, end = _unwrap(start), _unwrap(end)
    for v in (start, end):
        if isinstance(v, tensor):
            raise error(f"arange: its bounds must be constexpr, got a runtime value ({v.type}); a runtime value "
                        f"cannot be a block shape (offset a constant arange instead: base + tl.arange(0, BLOCK))")
        if not isinstance(v, numbers.Integral):
            raise error(f"arange: bounds are ints, got {v!r}")
    start, end = int(start), int(end)
    if end <= start:
        raise error(f"arange({start}, {end}): end must be greater than start")
    if not _is_pow2(end - start):
        raise error(f"arange({start}, {end}): its length {end - start} is not a power of two (blocks have "
                    f"power-of-two extents; mask the extra elements instead)")
    if end > 2**31:
        raise error(f"arange({start}, {end}): bounds must fit in int32")
    ty = TileType(int32, (end - start,))
    return tensor(builder().arange(start, end, ty), ty)


def full(shape, value, dtype) -> tensor:
    """A block of `shape` filled with value (a constant or a runtime scalar)."""
    shape = static_shape(shape, "full")
    dt = as_dtype(dtype)
    v = cast(to_tensor(value), dt)
    if v.type.shape:
        raise error(f"full: the fill value must be a scalar, got {v.type}")
    return broadcast_to_shape(v, shape)


def zeros(shape, dtype) -> tensor:
    return full(shape, 0, dtype)


def zeros_like(x) -> tensor:
    return full(x.shape, 0, x.dtype)


def expand_dims(x, axis) -> tensor:
    x = to_tensor(x)
    axes = _unwrap(axis)
    axes = [axes] if not isinstance(axes, (tuple, list)) else list(axes)
    for a in axes:
        a = _unwrap(a)
        nd = len(x.type.shape) + 1
        if not isinstance(a, int) or not -nd <= a < nd:
            raise error(f"expand_dims: axis {a!r} is out of range for a {nd - 1}-d block")
        a = a % nd
        shape = list(x.type.shape)
        shape.insert(a, 1)
        ty = x.type.with_shape(shape)
        x = tensor(builder().expand_dims(x.handle, a, ty), ty)
    return x


def broadcast_to(x, *shape) -> tensor:
    if len(shape) == 1 and isinstance(_unwrap(shape[0]), (tuple, list)):
        shape = _unwrap(shape[0])
    shape = static_shape(shape, "broadcast_to")
    x = to_tensor(x)
    return broadcast_to_shape(x, shape)


def broadcast(a, b):
    """a and b broadcast to their common shape."""
    return tuple(_same_shape(to_tensor(a), to_tensor(b, to_tensor(a)), what="broadcast"))


def reshape(x, *shape, can_reorder=False) -> tensor:
    """x with a new shape of as many elements (row-major order kept)."""
    if len(shape) == 1 and isinstance(_unwrap(shape[0]), (tuple, list)):
        shape = _unwrap(shape[0])
    x = to_tensor(x)
    shape = static_shape(shape, "reshape") if shape else ()
    n = 1
    for s in shape:
        n *= s
    if n != x.type.numel:
        raise error(f"reshape: a block of {x.type.numel} elements {x.shape} cannot have shape {list(shape)}")
    if tuple(shape) == tuple(x.type.shape):
        return x
    ty = x.type.with_shape(shape)
    return tensor(builder().reshape(x.handle, ty), ty)


view = reshape


def ravel(x) -> tensor:
    x = to_tensor(x)
    return reshape(x, (x.type.numel,))


def trans(x, *dims) -> tensor:
    """x with its axes permuted (a 2-d block transposed by default)."""
    x = to_tensor(x)
    nd = len(x.type.shape)
    if len(dims) == 1 and isinstance(_unwrap(dims[0]), (tuple, list)):
        dims = tuple(_unwrap(dims[0]))
    perm = tuple(int(_unwrap(d)) for d in dims) if dims else tuple(reversed(range(nd)))
    if nd < 2 and not dims:
        raise error(f"trans: a {nd}-d block has no axes to transpose")
    if sorted(perm) != list(range(nd)):
        raise error(f"trans: {list(perm)} is not a permutation of the {nd} axes of {x.type}")
    if perm == tuple(range(nd)):
        return x
    ty = x.type.with_shape(tuple(x.type.shape[p] for p in perm))
    return tensor(builder().trans(x.handle, perm, ty), ty)


permute = trans


# ---------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------
def _check_ptr(ptr, what):
    ptr = _unwrap(ptr)
    if not isinstance(ptr, tensor) or not ptr.dtype.is_ptr():
        got = ptr.type if isinstance(ptr, tensor) else repr(ptr)
        raise error(f"{what}: the first argument must be a pointer or a block of pointers (a tensor argument "
                    f"plus offsets), got {got}")
    return ptr


def _mask(mask, what):
    if mask is None:
        return None
    m = to_tensor(mask)
    if not m.dtype.is_bool():
        if m.dtype.is_int():
            return _binary("ne", m, 0)
        raise error(f"{what}: a mask must be boolean, got {m.type}")
    return m


def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False) -> tensor:
    """The elements the pointers address; where mask is False, `other` (undefined without it), and
    nothing is read there."""
    ptr = _check_ptr(pointer, "load")
    if boundary_check or padding_option:
        raise error("load: block pointers (boundary_check, padding_option) are not supported; use a block "
                    "of pointers with a mask")
    m = _mask(mask, "load")
    if other is not None and m is None:
        raise error("load: `other` is given without a `mask`")
    el = ptr.dtype.element_ty
    if m is not None:
        ptr, m = _same_shape(ptr, m, what="load mask")
        o = cast(to_tensor(other if other is not None else 0), el)
        o = broadcast_to_shape(o, tuple(ptr.type.shape))
    else:
        o = None
    ty = TileType(el, ptr.type.shape)
    return tensor(builder().load(ptr.handle, m.handle if m is not None else None,
                                 o.handle if o is not None else None, ty), ty)


def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy="") -> None:
    """Write value to the addressed elements where mask is True."""
    ptr = _check_ptr(pointer, "store")
    if boundary_check:
        raise error("store: block pointers (boundary_check) are not supported; use a block of pointers with a mask")
    v = to_tensor(value)
    m = _mask(mask, "store")
    shape = broadcast_shapes(tuple(ptr.type.shape), tuple(v.type.shape), "store value")
    if m is not None:
        shape = broadcast_shapes(shape, tuple(m.type.shape), "store mask")
    if tuple(shape) != tuple(ptr.type.shape):
        ptr = broadcast_to_shape(ptr, shape)
    v = broadcast_to_shape(cast(v, ptr.dtype.element_ty), shape)
    if m is not None:
        m = broadcast_to_shape(m, shape)
    builder().store(ptr.handle, v.handle, m.handle if m is not None else None)


def atomic_add(pointer, val, mask=None, sem=None, scope=None) -> tensor:
    """Add val to the addressed elements atomically; returns the values they held before."""
    ptr = _check_ptr(pointer, "atomic_add")
    el = ptr.dtype.element_ty
    if el not in (float32, int32, int64, uint32, uint64, float64):
        raise error(f"atomic_add: elements must be fp32, fp64, i32, i64, u32 or u64, got {el}")
    v = to_tensor(val)
    m = _mask(mask, "atomic_add")
    shape = broadcast_shapes(tuple(ptr.type.shape), tuple(v.type.shape), "atomic_add value")
    if m is not None:
        shape = broadcast_shapes(shape, tuple(m.type.shape), "atomic_add mask")
    ptr = broadcast_to_shape(ptr, shape)
    v = broadcast_to_shape(cast(v, el), shape)
    if m is not None:
        m = broadcast_to_shape(m, shape)
    ty = TileType(el, shape)
    return tensor(builder().atomic_add(ptr.handle, v.handle, m.handle if m is not None else None, ty), ty)


# ---------------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------------
def where(condition, x, y) -> tensor:
    """x where condition holds, else y (elementwise, broadcast)."""
    c = _mask(condition, "where")
    if c is None:
        raise error("where: the condition is None")
    x, y = _unwrap(x), _unwrap(y)
    xt = to_tensor(x, y if isinstance(y, tensor) else None)
    yt = to_tensor(y, xt)
    if xt.dtype.is_ptr() or yt.dtype.is_ptr():
        if xt.dtype != yt.dtype:
            raise error(f"where: pointers of different types {xt.type} and {yt.type}")
        dt = xt.dtype
    else:
        dt = promote(xt.dtype, yt.dtype, "where")
        xt, yt = cast(xt, dt), cast(yt, dt)
    c, xt, yt = _same_shape(c, xt, yt, what="where")
    ty = TileType(dt, c.type.shape)
    return tensor(builder().where(c.handle, xt.handle, yt.handle, ty), ty)


def maximum(x, y, propagate_nan=None) -> tensor:
    return _binary("max", x, y)


def minimum(x, y, propagate_nan=None) -> tensor:
    return _binary("min", x, y)


def clamp(x, min, max, propagate_nan=None) -> tensor:  # noqa: A002 - triton's names
    return minimum(maximum(x, min), max)


def _float_unary(op):
    def fn(x, **_):
        x = to_tensor(x)
        if x.dtype.is_ptr() or not (x.dtype.is_floating() or x.dtype.is_int() or x.dtype.is_bool()):
            raise error(f"{op} needs a numeric operand, got {x.type}")
        if not x.dtype.is_floating():
            x = cast(x, float32)
        return _unary(op, x)

    fn.__name__ = op
    fn.__doc__ = f"Elementwise {op} (integers computed as fp32)."
    return fn


exp = _float_unary("exp")
exp2 = _float_unary("exp2")
log = _float_unary("log")
log2 = _float_unary("log2")
sqrt = _float_unary("sqrt")
sqrt_rn = sqrt
rsqrt = _float_unary("rsqrt")
sigmoid = _float_unary("sigmoid")
erf = _float_unary("erf")
sin = _float_unary("sin")
cos = _float_unary("cos")
tanh = _float_unary("tanh")
floor = _float_unary("floor")
ceil = _float_unary("ceil")


def abs(x) -> tensor:  # noqa: A001 - triton's name
    x = to_tensor(x)
    if x.dtype.is_ptr() or x.dtype.is_bool():
        raise error(f"abs needs a numeric operand, got {x.type}")
    if x.dtype.is_int() and not x.dtype.is_signed():
        return x
    return _unary("abs", x)


def fma(x, y, z) -> tensor:
    """x * y + z, rounded once."""
    xs = [to_tensor(v) for v in (x, y, z)]
    dt = promote(promote(xs[0].dtype, xs[1].dtype, "fma"), xs[2].dtype, "fma")
    if not dt.is_floating():
        raise error(f"fma needs float operands, got {', '.join(str(v.type) for v in xs)}")
    xs = _same_shape(*[cast(v, dt) for v in xs], what="fma")
    ty = xs[0].type
    return tensor(builder().fma(xs[0].handle, xs[1].handle, xs[2].handle, ty), ty)


def cdiv(x, div):
    """ceil(x / div) for integers (Python ints stay Python ints)."""
    return (x + div - 1) // div


def div_rn(x, y):
    return _binary("truediv", x, y)


fdiv = div_rn


def umulhi(x, y):
    raise error("umulhi is not supported by tessera's tile language")


# ---------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------
def _reduce_input(x, axis, what):
    x = to_tensor(x)
    if x.dtype.is_ptr():
        raise error(f"{what}: cannot reduce pointers")
    if not x.type.shape:
        raise error(f"{what}: the input is a scalar; reductions take a block")
    axis = _unwrap(axis)
    if axis is None:
        if len(x.type.shape) > 1:
            x = reshape(x, (x.type.numel,))
        return x, 0
    if isinstance(axis, tensor) or not isinstance(axis, int):
        raise error(f"{what}: axis must be a constant int or None, got {axis!r}")
    nd = len(x.type.shape)
    if not -nd <= axis < nd:
        raise error(f"{what}: axis {axis} is out of range for a {nd}-d block {x.type}")
    return x, axis % nd


def _reduced(x, axis, keep_dims, el):
    shape = list(x.type.shape)
    if keep_dims:
        shape[axis] = 1
    else:
        del shape[axis]
    return TileType(el, tuple(shape))


def sum(input, axis=None, keep_dims=False, dtype=None):  # noqa: A001 - triton's name
    """The sum along axis (all axes when None); small integers are summed as int32."""
    x, ax = _reduce_input(input, axis, "sum")
    if dtype is not None:
        x = cast(x, dtype)
    elif x.dtype.is_bool() or (x.dtype.is_int() and x.dtype.bits < 32):
        x = cast(x, int32 if x.dtype.is_bool() or x.dtype.is_signed() else uint32)
    ty = _reduced(x, ax, keep_dims, x.dtype)
    return tensor(builder().reduce("sum", x.handle, ax, ty), ty)


def _minmax(kind):
    def fn(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
        x, ax = _reduce_input(input, axis, kind)
        if x.dtype.is_bool():
            x = cast(x, int32)
        ty = _reduced(x, ax, keep_dims, x.dtype)
        v = tensor(builder().reduce(kind, x.handle, ax, ty), ty)
        if return_indices:
            ity = _reduced(x, ax, keep_dims, int32)
            return v, tensor(builder().reduce("arg" + kind, x.handle, ax, ity), ity)
        return v

    fn.__name__ = kind
    fn.__doc__ = f"The {kind}imum along axis (all axes when None); with return_indices, also its first index."
    return fn


max = _minmax("max")  # noqa: A001 - triton's name
min = _minmax("min")  # noqa: A001 - triton's name


def _argminmax(kind):
    def fn(input, axis, tie_break_left=True, keep_dims=False):
        x, ax = _reduce_input(input, axis, "arg" + kind)
        if x.dtype.is_bool():
            x = cast(x, int32)
        ty = _reduced(x, ax, keep_dims, int32)
        return tensor(builder().reduce("arg" + kind, x.handle, ax, ty), ty)

    fn.__name__ = "arg" + kind
    fn.__doc__ = f"The index of the first {kind}imum along axis (int32)."
    return fn


argmax = _argminmax("max")
argmin = _argminmax("min")


def xor_sum(input, axis=None, keep_dims=False):
    return reduce(input, axis, _xor_combine, keep_dims=keep_dims)


def _xor_combine(a, b):
    return a ^ b


def reduce(input, axis, combine_fn, keep_dims=False):
    """Reduce along axis with combine_fn(a, b) -> value (associative and commutative), a Python or
    @jit function of scalars; input may be a tuple of blocks, then combine_fn takes and returns tuples."""
    single = not isinstance(input, (tuple, list))
    xs = [input] if single else list(input)
    pairs = [_reduce_input(x, axis, "reduce") for x in xs]
    xs = [p[0] for p in pairs]
    ax = pairs[0][1]
    shape = tuple(xs[0].type.shape)
    for x in xs:
        if tuple(x.type.shape) != shape:
            raise error(f"reduce: the inputs' shapes differ ({', '.join(str(y.type) for y in xs)})")
    fn = getattr(combine_fn, "fn", combine_fn)
    if not callable(fn):
        raise error(f"reduce: combine_fn must be a function, got {combine_fn!r}")
    tys = [_reduced(x, ax, keep_dims, x.dtype) for x in xs]
    handles = builder().reduce_fn([x.handle for x in xs], ax, fn, [x.type for x in xs], tys, len(xs))
    outs = [tensor(h, t) for h, t in zip(handles, tys)]
    return outs[0] if single else tuple(outs)


def associative_scan(*_, **__):
    raise error("associative_scan is not supported by tessera's tile language")


# ---------------------------------------------------------------------------------------------
# dot
# ---------------------------------------------------------------------------------------------
_DOT_OUT = {float32: float32, float16: float32, bfloat16: float32, int8: int32, uint8: int32, float64: float64}


def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=None) -> tensor:
    """The matrix product input (M x K) @ other (K x N) (+ acc): fp32 in and out; fp16/bf16 in, fp32
    out; int8 in, int32 out."""
    a, b = to_tensor(input), to_tensor(other)
    if len(a.type.shape) != 2 or len(b.type.shape) != 2:
        raise error(f"dot: both operands must be 2-d blocks, got {a.type} and {b.type}")
    (m, k), (k2, n) = a.type.shape, b.type.shape
    if k != k2:
        raise error(f"dot: inner extents differ: {a.type} @ {b.type} ({k} vs {k2})")
    if a.dtype != b.dtype:
        raise error(f"dot: operand element types differ: {a.dtype} and {b.dtype} (cast one with .to())")
    if a.dtype not in _DOT_OUT:
        raise error(f"dot: operands of {a.dtype} are not supported (fp32, fp16, bf16, fp64, i8, u8)")
    out = as_dtype(out_dtype) if out_dtype is not None else _DOT_OUT[a.dtype]
    if out != _DOT_OUT[a.dtype] and not (a.dtype in (float16, bfloat16) and out in (float16, bfloat16)):
        raise error(f"dot: out_dtype {out} is not supported for {a.dtype} operands")
    ty = TileType(out, (m, n))
    if acc is None:
        c = zeros((m, n), out)
    else:
        c = to_tensor(acc)
        if tuple(c.type.shape) != (m, n):
            raise error(f"dot: the accumulator {c.type} is not {m} x {n}")
        c = cast(c, out)
    return tensor(builder().dot(a.handle, b.handle, c.handle, ty), ty)


# ---------------------------------------------------------------------------------------------
# compile-time helpers
# ---------------------------------------------------------------------------------------------
def static_range(*args):
    """range() unrolled when the kernel is traced: its bounds are constexpr."""
    vals = []
    for a in args:
        a = _unwrap(a)
        if isinstance(a, tensor):
            raise error("static_range: bounds must be constexpr (the loop is unrolled when the kernel is traced)")
        vals.append(int(a))
    return builtins.range(*vals)


def range(*args, num_stages=None, loop_unroll_factor=None, **_):  # noqa: A001 - triton's name
    """A runtime loop (the same as range() in a kernel)."""
    return builtins.range(*(_unwrap(a) for a in args)) if all(not isinstance(_unwrap(a), tensor) for a in args) \
        else _runtime_range_error()


def _runtime_range_error():
    raise error("tl.range over runtime bounds is only valid as the iterable of a for loop in a @jit kernel")


def static_assert(cond, msg=""):
    """Fail when the kernel is compiled unless cond (a constexpr condition) holds."""
    cond = _unwrap(cond)
    if isinstance(cond, tensor):
        raise error("static_assert: the condition must be constexpr, got a runtime value")
    if not cond:
        raise error("static_assert failed" + (f": {msg}" if msg else ""))


def static_print(*args):
    builtins.print(*args)


def device_assert(cond, msg=""):
    raise error("device_assert is not supported by tessera's tile language (the interpreter checks "
                "accesses; use static_assert for constexpr conditions)")


def multiple_of(x, values):
    """A promise that x's elements are multiples of values (per axis): alignment for the compiler."""
    return _hint(x, "multiple_of", values)


def max_contiguous(x, values):
    """A promise that runs of `values` consecutive elements of x are consecutive integers."""
    return _hint(x, "max_contiguous", values)


def _hint(x, kind, values):
    x = to_tensor(x)
    vals = _unwrap(values)
    vals = tuple(int(_unwrap(v)) for v in (vals if isinstance(vals, (tuple, list)) else [vals]))
    if not x.dtype.is_int():
        raise error(f"{kind}: hints apply to integer blocks, got {x.type}")
    if len(vals) != builtins.max(1, len(x.type.shape)):
        raise error(f"{kind}: one value per axis of {x.type}, got {list(vals)}")
    if any(v <= 0 for v in vals):
        raise error(f"{kind}: values must be positive, got {list(vals)}")
    return tensor(builder().hint(x.handle, kind, vals, x.type), x.type)


def debug_barrier():
    """A no-op: the compiler places barriers where shared data needs them."""
    return None


__all__ = [
    "KernelError", "constexpr", "tensor", "dtype", "pointer_type", "program_id", "num_programs", "arange", "full",
    "zeros", "zeros_like", "expand_dims", "broadcast", "broadcast_to", "reshape", "view", "ravel", "trans", "permute",
    "load", "store", "atomic_add", "where", "maximum", "minimum", "clamp", "exp", "exp2", "log", "log2", "sqrt",
    "sqrt_rn", "rsqrt", "sigmoid", "erf", "sin", "cos", "tanh", "floor", "ceil", "abs", "fma", "cdiv", "div_rn",
    "fdiv", "sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce", "dot", "static_range", "range",
    "static_assert", "static_print", "multiple_of", "max_contiguous", "debug_barrier", "cast",
    "int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
    "float32", "float64",
]
