"""The tile IR (the Triton paper's Triton-IR): SSA values of block type, one kernel a Function.

A value has a `TileType`: an element type (a `DType`, or a `PointerType` to one) and a static shape
(`()` for a scalar). Ops are immutable; a `for` loop holds its body as a `Region` whose arguments are
the induction variable and the loop-carried values and whose `yields` are their next values, as in
MLIR's scf.for. Passes (passes.py) are functions Function -> Function.

    %3 = arange 0, 128 : <128 x i32>                      # at kernel.py:12
    %5 = load %4, mask=%7, other=%8 : <128 x fp32>
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..errors import TesseraError


# ---------------------------------------------------------------------------------------------
# types
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DType:
    """An element type: `name` is Triton's short name (fp32, i32, i1), `ir` tessera's dtype string."""

    name: str
    ir: str

    @property
    def bits(self) -> int:
        return 1 if self.ir == "bool" else int("".join(c for c in self.ir if c.isdigit()))

    def is_floating(self) -> bool:
        return self.ir.startswith(("float", "bfloat"))

    def is_int(self) -> bool:
        return self.ir.startswith(("int", "uint"))

    def is_signed(self) -> bool:
        return self.ir.startswith("int")

    def is_bool(self) -> bool:
        return self.ir == "bool"

    def is_ptr(self) -> bool:
        return False

    def __str__(self):
        return self.name

    __repr__ = __str__


@dataclass(frozen=True)
class PointerType:
    """A pointer to elements of `element_ty` (a kernel's tensor argument, offset by integers)."""

    element_ty: DType

    @property
    def name(self) -> str:
        return f"ptr<{self.element_ty.name}>"

    def is_ptr(self) -> bool:
        return True

    def is_floating(self) -> bool:
        return False

    def is_int(self) -> bool:
        return False

    def is_bool(self) -> bool:
        return False

    def __str__(self):
        return self.name

    __repr__ = __str__


int1 = DType("i1", "bool")
int8 = DType("i8", "int8")
int16 = DType("i16", "int16")
int32 = DType("i32", "int32")
int64 = DType("i64", "int64")
uint8 = DType("u8", "uint8")
uint16 = DType("u16", "uint16")
uint32 = DType("u32", "uint32")
uint64 = DType("u64", "uint64")
float16 = DType("fp16", "float16")
bfloat16 = DType("bf16", "bfloat16")
float32 = DType("fp32", "float32")
float64 = DType("fp64", "float64")
DTYPES = {d.ir: d for d in (int1, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16,
                            float32, float64)}


def dtype_of(ir_name: str) -> DType:
    """The DType of a tessera dtype string ("float32", "bool")."""
    try:
        return DTYPES[str(ir_name)]
    except KeyError:
        raise TesseraError(f"the tile language has no element type for dtype {ir_name!r}; it has "
                           f"{', '.join(DTYPES)}") from None


@dataclass(frozen=True)
class TileType:
    """A block of `shape` elements of `element` (shape () is a scalar)."""

    element: DType | PointerType
    shape: tuple = ()

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def with_shape(self, shape) -> "TileType":
        return TileType(self.element, tuple(shape))

    def __str__(self):
        if not self.shape:
            return str(self.element)
        return f"<{' x '.join(str(s) for s in self.shape)} x {self.element}>"


# ---------------------------------------------------------------------------------------------
# values, ops, regions
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Loc:
    """Where in the kernel's source an op was written."""

    file: str
    line: int
    function: str
    text: str = ""

    def __str__(self):
        return f"{self.file}:{self.line} (in {self.function})"


_ids = itertools.count()


class Value:
    """An SSA value; compared by identity. `hint` is a user's name for printing (a parameter's name)."""

    __slots__ = ("type", "hint", "uid")

    def __init__(self, type_: TileType, hint: str = ""):
        self.type, self.hint, self.uid = type_, hint, next(_ids)

    def __repr__(self):
        return f"Value({self.hint or self.uid}: {self.type})"


@dataclass(frozen=True, eq=False)
class Region:
    """A body: `args` bound on entry, `ops` in order, `yields` the values it ends with."""

    args: tuple
    ops: tuple
    yields: tuple = ()


@dataclass(frozen=True, eq=False)
class Op:
    """One operation: `kind`, operand Values, result Values, attributes (a tuple of (key, value)),
    the source location, and for `for` and `reduce` with a combine function a Region."""

    kind: str
    operands: tuple
    results: tuple
    attrs: tuple = ()
    loc: Loc | None = None
    region: Region | None = None

    def attr(self, key, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise TesseraError(f"op {self.kind} has {len(self.results)} results, not one")
        return self.results[0]

    def replace(self, **kw) -> "Op":
        fields = dict(kind=self.kind, operands=self.operands, results=self.results, attrs=self.attrs,
                      loc=self.loc, region=self.region)
        fields.update(kw)
        return Op(**fields)


@dataclass(frozen=True)
class Param:
    """A kernel parameter: a pointer (a tensor argument), or a runtime scalar."""

    name: str
    value: Value
    kind: str                 # "pointer" | "scalar"


@dataclass(frozen=True, eq=False)
class Function:
    """A specialized kernel: its runtime parameters, constexpr bindings and body."""

    name: str
    params: tuple
    body: Region
    constexprs: tuple = ()    # (name, value) of the bindings it was specialized for
    grid_rank: int = 1        # how many program-id axes the kernel may read
    meta: tuple = field(default=())

    def replace(self, **kw) -> "Function":
        fields = dict(name=self.name, params=self.params, body=self.body, constexprs=self.constexprs,
                      grid_rank=self.grid_rank, meta=self.meta)
        fields.update(kw)
        return Function(**fields)


def walk(region: Region):
    """Every op of region and its nested regions, in order (an op before those inside it)."""
    for op in region.ops:
        yield op
        if op.region is not None:
            yield from walk(op.region)


# ---------------------------------------------------------------------------------------------
# printing
# ---------------------------------------------------------------------------------------------
def _fmt_attr(v):
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt_attr(x) for x in v) + ")"
    if isinstance(v, Region):
        return "<region>"
    return str(v)


def script(func: Function, locations: bool = True) -> str:
    """The readable text of a tile-IR function (kernel.inspect shows it)."""
    names: dict[int, str] = {}
    counter = itertools.count()

    def name(v: Value) -> str:
        if v.uid not in names:
            names[v.uid] = f"%{v.hint}" if v.hint else f"%{next(counter)}"
        return names[v.uid]

    lines = []
    params = ", ".join(f"{name(p.value)}: {p.value.type}" for p in func.params)
    cx = ", ".join(f"{k}={v!r}" for k, v in func.constexprs)
    lines.append(f"tile.func @{func.name}({params})" + (f" [{cx}]" if cx else "") + " {")

    def emit(region: Region, depth: int):
        pad = "  " * depth
        for op in region.ops:
            res = ", ".join(name(r) for r in op.results)
            lhs = f"{res} = " if res else ""
            args = ", ".join(name(o) for o in op.operands)
            attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in op.attrs)
            body = " ".join(x for x in (args, f"{{{attrs}}}" if attrs else "") if x)
            ty = ", ".join(str(r.type) for r in op.results)
            where = f"  # line {op.loc.line}" if locations and op.loc else ""
            if op.region is None:
                lines.append(f"{pad}{lhs}{op.kind} {body}" + (f" : {ty}" if ty else "") + where)
            else:
                rargs = ", ".join(f"{name(a)}: {a.type}" for a in op.region.args)
                lines.append(f"{pad}{lhs}{op.kind} {body} ({rargs}) {{" + where)
                emit(op.region, depth + 1)
                if op.region.yields:
                    lines.append(f"{pad}  yield " + ", ".join(name(y) for y in op.region.yields))
                lines.append(f"{pad}}}" + (f" : {ty}" if ty else ""))

    emit(func.body, 1)
    lines.append("}")
    return "\n".join(lines)
