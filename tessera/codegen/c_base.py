"""The C-style renderer that the C, CUDA and OpenCL backends share: names, types, precedence,
scalar expressions and the statements of a lowered PrimFunc (docs/internals.md, "C code generation").

Nothing here is CPU-only (no OpenMP, no heap, no error strings): a backend is a subclass that sets
the class attributes of `CodeGenCBase` (kernel prefix, buffer qualifiers, shared-memory prefix,
barrier, thread-index spelling, type maps) and overrides a few methods: vector code (`vector_type`,
`vector_native`, `vector_store`), loop pragmas (`loop_header`, `loop_enter`/`loop_exit`), how a
failure is reported (`fail`), memory the stack cannot hold (`allocate_dynamic`) and the kernel's
prologue and epilogue. The C/OpenMP renderer is `codegen.c.CodeGenC`. Everything here keeps the
program's own names and prints one statement a line, indented by nesting, with the fewest
parentheses C needs (plus the ones C's precedence makes surprising: shifts, bitwise operators, `&&`
inside `||`).

Numeric policy (so results equal numpy's): float16/bfloat16 values are computed as `float` and
every arithmetic result is rounded back to the narrow type (round to nearest even); so are the
float8/float4 storage types (ml_dtypes' conversions, runtime_c/tsr_lowp.h), and int4/uint4/int2/uint2
values are 8-bit integers wrapped to their bits; these take a byte each in memory; integer
FloorDiv/FloorMod floor; 8/16-bit integer arithmetic wraps to its type; Min/Max on floats
propagate NaN (like np.minimum/np.maximum, unlike fminf/fmaxf); `round` is round-half-to-even.
int32/int64 arithmetic is plain C (overflow is not defined, which lets the compiler optimize
index arithmetic).
"""
from __future__ import annotations

import hashlib
import math
import re

import numpy as np

from ..abi import c_string
from ..errors import TesseraError, UnsupportedOpError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..ir.dtype import DataType, numpy_dtype
from ..ir.dtype import MINIFLOATS
from ..ir.functor import Mutator, Visitor, children
from ..ir.names import numbered_name
from ..ir.node import set_field
from .c_files import sections

# C operator precedence (higher binds tighter)
P_PRIMARY, P_UNARY, P_MUL, P_ADD, P_SHIFT, P_REL, P_EQ = 16, 15, 13, 12, 11, 10, 9
P_BAND, P_XOR, P_BOR, P_LAND, P_LOR, P_COND, P_ASSIGN = 8, 7, 6, 5, 4, 3, 2

C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union unsigned
void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn
_Static_assert _Thread_local asm typeof __restrict bool true false NULL main
""".split())

# names of the C library and of the types the generated code uses: a program name never shadows them
C_LIBRARY_NAMES = frozenset("""
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t ptrdiff_t intptr_t
uintptr_t INT8_MIN INT16_MIN INT32_MIN INT64_MIN INT32_MAX INT64_MAX UINT32_MAX INFINITY NAN
abs labs llabs memcpy memset memmove malloc calloc realloc free aligned_alloc printf snprintf
fprintf stderr stdout exit abort clock_gettime timespec CLOCK_MONOTONIC errno isnan isinf
isfinite signbit fabs fabsf exp expf exp2 exp2f expm1 expm1f log logf log2 log2f log10 log10f
log1p log1pf sqrt sqrtf cbrt cbrtf sin sinf cos cosf tan tanf asin asinf acos acosf atan atanf
atan2 atan2f sinh sinhf cosh coshf tanh tanhf asinh asinhf acosh acoshf atanh atanhf erf erff
pow powf fmod fmodf floor floorf ceil ceilf trunc truncf rint rintf nearbyint nearbyintf round
roundf fma fmaf fmin fminf fmax fmaxf copysign copysignf hypot hypotf stdin linux unix
""".split())
# object-like macros of the included headers (a variable of that name would be rewritten)
_MACRO_NAME = re.compile(r"(M_\w+|U?INT\w*_(MAX|MIN|C)|SIZE_MAX|PTRDIFF_\w+|SIG_ATOMIC_\w+|WCHAR_\w+|"
                         r"WINT_\w+|FP_\w+|HUGE_VAL\w*|MATH_\w+|CLOCK\w*|TIME_UTC|EOF|BUFSIZ|"
                         r"FILENAME_MAX|FOPEN_MAX|RAND_MAX|EXIT_\w+|MB_CUR_MAX|L_\w+|SEEK_\w+|TMP_MAX\w*|"
                         r"P_tmpdir)\Z")

NOT_IDENT_CHAR = re.compile(r"[^0-9A-Za-z_]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_VECTOR_TYPE_NAME = re.compile(r"(u?int|float|bfloat|bool)\d*x\d+\Z")
_RESERVED_PREFIXES = ("tsr_", "tessera_", "__")

VALUE_C = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
            "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
            "uint64": "uint64_t", "float16": "float", "bfloat16": "float", "float32": "float",
            "float64": "double"}
# the low-precision storage types: a value is a float or an 8-bit integer, an element one byte
VALUE_C.update({t: "float" for t in MINIFLOATS})
VALUE_C.update({"int4": "int8_t", "int2": "int8_t", "uint4": "uint8_t", "uint2": "uint8_t"})
STORAGE_C = dict(VALUE_C, float16="_Float16", bfloat16="uint16_t")
STORAGE_C.update({t: "uint8_t" for t in list(MINIFLOATS) + ["int4", "int2", "uint4", "uint2"]})
_NARROW_INT = frozenset(DataType(t) for t in ("int8", "int16", "uint8", "uint16"))
SUBBYTE_INT = frozenset(DataType(t) for t in ("int4", "uint4", "int2", "uint2"))
HALF_TYPES = frozenset(DataType(t) for t in ("float16", "bfloat16"))
MINIFLOAT_TYPES = frozenset(DataType(t) for t in MINIFLOATS)
NARROW_FLOATS = HALF_TYPES | MINIFLOAT_TYPES   # computed as float, every result rounded back
LOWP_FILE = "tsr_lowp.h"
_F32, _F64, _I32 = (DataType(t) for t in ("float32", "float64", "int32"))

# float math: op -> (C name of the double version, exact?) where exact means the result of a
# float16/bfloat16 input is already representable (no rounding back needed)
_MATH = {
    "exp": ("exp", False), "exp2": ("exp2", False), "expm1": ("expm1", False),
    "log": ("log", False), "log2": ("log2", False), "log10": ("log10", False),
    "log1p": ("log1p", False), "sqrt": ("sqrt", False), "cbrt": ("cbrt", False),
    "sin": ("sin", False), "cos": ("cos", False), "tan": ("tan", False), "asin": ("asin", False),
    "acos": ("acos", False), "atan": ("atan", False), "sinh": ("sinh", False),
    "cosh": ("cosh", False), "tanh": ("tanh", False), "asinh": ("asinh", False),
    "acosh": ("acosh", False), "atanh": ("atanh", False), "erf": ("erf", False),
    "floor": ("floor", True), "ceil": ("ceil", True), "trunc": ("trunc", True),
    "round": ("rint", True), "nearbyint": ("rint", True), "abs": ("fabs", True),
    "fabs": ("fabs", True), "pow": ("pow", False), "power": ("pow", False),
    "fmod": ("fmod", False), "atan2": ("atan2", False), "hypot": ("hypot", False),
    "copysign": ("copysign", True), "fma": ("fma", False),
    "fast_exp": ("exp", False), "fast_tanh": ("tanh", False), "fast_erf": ("erf", False),
}
_MATH_ARITY = {"pow": 2, "power": 2, "fmod": 2, "atan2": 2, "hypot": 2, "copysign": 2, "fma": 3}
_BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "shift_left": "<<",
            "shift_right": ">>"}
# intrinsics codegen knows (everything else is an extern C function)
INTRINSICS = frozenset(_MATH) | frozenset(_BITWISE) | frozenset({
    "rsqrt", "sigmoid", "exp10", "isnan", "isinf", "isfinite", "bitwise_not", "if_then_else",
    "likely", "popcount", "clz", "reinterpret", "tvm_storage_sync", "fmax", "fmin", "warp_shuffle_xor"})


# byte (a latin-1 character of the UTF-8 text) -> its text inside a C string literal: printable ASCII
# as itself, but '"', '\\' and '?' ('??/' is a trigraph under -std=c11) escaped; the rest octal
def c_comment(text) -> str:
    """`text` safe inside a C comment: no `*/` to end it, no `/*` (which -Wcomment warns of)."""
    text = str(text)
    while "*/" in text or "/*" in text:
        text = text.replace("*/", "* /").replace("/*", "/ *")
    return text


_FLOAT_TEXT: dict = {}


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class NameTable:
    """Valid, unique C identifiers for program names (Vars, Buffers), scoped by C blocks.

    A name is released when the C block that declared it closes, so sibling loops both read `i`;
    nested or clashing ones become `i_1`, `i_2`. Keywords, C library names, vector type names and
    the `tsr_`/`tessera_` prefixes are never handed out (`int` becomes `int_`).
    """

    def __init__(self, reserved=frozenset()):
        self._reserved = reserved
        self._used: set[str] = set()
        self._names: dict = {}
        self._frames: list[list] = [[]]
        self._suffix: dict[str, int] = {}

    def sanitize(self, hint: str) -> str:
        name = NOT_IDENT_CHAR.sub("_", hint) or "v"
        if name[0].isdigit():
            name = "v" + name
        if (name in C_KEYWORDS or name in C_LIBRARY_NAMES or name in self._reserved
                or name.startswith(_RESERVED_PREFIXES) or _VECTOR_TYPE_NAME.match(name)
                or _MACRO_NAME.match(name)):
            name += "_"
        return name

    def fresh(self, hint: str) -> str:
        """A new unused name for hint, declared in the innermost open scope."""
        base = self.sanitize(hint)
        name = base
        if name in self._used:
            name = numbered_name(base, self._suffix, self._used, self._reserved)
        self._used.add(name)
        self._frames[-1].append(name)
        return name

    def define(self, node, hint: str | None = None) -> str:
        name = self.fresh(node.name if hint is None else hint)
        self._names[node] = name
        self._frames[-1].append(node)
        return name

    def alias(self, node, name: str):
        """Print node with an existing name (a flat buffer and its parameter; a lane of a vector)."""
        self._names[node] = name
        self._frames[-1].append(node)

    def get(self, node):
        return self._names.get(node)

    def push(self):
        self._frames.append([])

    def pop(self):
        for x in self._frames.pop():
            if type(x) is str:
                self._used.discard(x)
            else:
                self._names.pop(x, None)


class _StoredBuffers(Visitor):
    """Does an expression load from a given buffer?"""

    def __init__(self, buf):
        super().__init__()
        self.buf, self.found = buf, False

    def visit_BufferLoad(self, e):
        if e.buffer is self.buf:
            self.found = True
        self.generic_visit(e)


class _Lane(Mutator):
    """The scalar expression of one lane (`lane`, an int32 Var) of a vector expression."""

    def __init__(self, gen: "CodeGenCBase", lane: E.Var):
        super().__init__()
        self.gen, self.lane = gen, lane

    def visit(self, node):
        if isinstance(node, E.PrimExpr) and node.dtype.lanes == 1:
            return node
        return super().visit(node)

    def visit_Ramp(self, e):
        k = self.lane if e.base.dtype == self.lane.dtype else E.Cast(e.base.dtype, self.lane)
        stride = e.stride
        if type(stride) is E.IntImm and stride.value == 1:
            return e.base + k
        return e.base + k * stride

    def visit_Broadcast(self, e):
        return e.value

    def visit_Var(self, v):
        return self.gen.lane_var(v, self.lane)

    def visit_Let(self, e):
        var = E.Var(e.var.name, e.var.dtype.element_of())
        value = self.visit(e.value)
        self.gen.lane_lets[e.var] = var
        return E.Let(var, value, self.visit(e.body))

    def visit_Call(self, e):
        return e.replace(dtype=e.dtype.element_of(), args=tuple(self.visit(a) for a in e.args))

    def generic_visit(self, node):
        new = super().generic_visit(node)
        if isinstance(new, E.PrimExpr) and new.dtype.lanes != 1:
            if new is node:
                new = node.replace()
            set_field(new, "dtype", new.dtype.element_of())
        return new


# An expression deeper than this many levels is printed as several C statements (shallow_expr): the
# renderer recurses per level, so a long fused chain (hundreds of elementwise ops) would exhaust
# Python's recursion limit, and its one-line C would be unreadable anyway.
MAX_EXPR_DEPTH = 32


def _operands(e):
    """(field, index or None, child, lazy) for the PrimExpr operands of e; lazy: C evaluates the
    operand only under a condition (a branch of if_then_else or Select, the right side of && and ||)
    or it reads a variable bound there (a Let's body), so nothing in it may move before e."""
    t = type(e)
    lazy_fields = (("true_value", "false_value") if t is E.Select else ("b",) if t is E.And or t is E.Or
                   else ("body",) if t is E.Let else ())
    for f in e._fields:
        v = getattr(e, f)
        if isinstance(v, E.PrimExpr):
            yield f, None, v, f in lazy_fields
        elif isinstance(v, tuple):
            for i, x in enumerate(v):
                if isinstance(x, E.PrimExpr):
                    yield f, i, x, t is E.Call and e.op == "if_then_else" and i > 0


def shallow_expr(value, hint: str, limit: int = MAX_EXPR_DEPTH):
    """(bindings, expr): value with each subexpression that reaches `limit` levels replaced by a new
    variable named after hint; bindings: the (Var, subexpression) pairs in the order they must be
    bound before expr, none of them deeper than limit. A part inside a lazy operand (see _operands)
    is bound inside that operand instead (a Let expression around it), so it is evaluated exactly
    when it was before. Walked with an explicit stack, so any depth works; a value that is not deep
    comes back as it is, with no bindings."""
    outer: list = []
    scopes = [outer]      # the binding lists: the statement's, and one per lazy operand that needs one
    done: dict = {}       # (id(node), id(scope)) -> (node with its deep parts bound, levels)
    stack = [(value, outer, True, None)]
    while stack:
        node, scope, top, kids = stack.pop()
        key = (id(node), id(scope))
        if kids is None:
            if key in done:
                continue
            kids = []
            for f, i, c, lazy in _operands(node):
                inner = [] if lazy else scope
                if lazy:
                    scopes.append(inner)
                kids.append((f, i, c, inner, lazy))
            stack.append((node, scope, top, kids))
            stack.extend((c, inner, lazy, None) for _, _, c, inner, lazy in kids if (id(c), id(inner)) not in done)
            continue
        levels, changed = 1, {}
        for f, i, c, inner, _ in kids:
            new, n = done[(id(c), id(inner))]
            levels = max(levels, n + 1)
            if new is not c:
                if i is None:
                    changed[f] = new
                else:
                    changed.setdefault(f, list(getattr(node, f)))[i] = new
        if changed:
            node = node.replace(**{f: tuple(v) if isinstance(v, list) else v for f, v in changed.items()})
        if top and scope is not outer:      # a lazy operand: its own parts bound inside it
            for var, part in reversed(scope):
                node = E.Let(var, part, node)
            levels += len(scope)
        elif not top and levels >= limit:
            var = E.Var(hint, node.dtype)
            scope.append((var, node))
            node, levels = var, 1
        done[key] = (node, levels)
    return outer, done[(id(value), id(outer))][0]


class CodeGenCBase:
    """Renders lowered TIR as C-family source. The class attributes are what a backend's renderer
    sets (the defaults are C's); the methods a backend overrides are named in the module docstring."""

    indent_unit = "  "
    func_qualifier = "static inline"  # of generated helper functions (CUDA: "static __device__ inline")
    kernel_prefix = "static "         # before a kernel's return type (CUDA: 'extern "C" __global__ ')
    kernel_return = "int32_t"         # a kernel's return type (C: a status; CUDA, OpenCL: "void")
    buffer_prefix = ""                # address space of a buffer parameter (OpenCL: "__global ")
    restrict = "restrict"             # the no-alias qualifier of buffer parameters (CUDA: "__restrict__")
    smem_prefix = None                # declaration prefix of a "shared" buffer (CUDA: "__shared__ ",
    #                                   OpenCL: "__local "); None: the backend has no shared memory
    barrier = None                    # a work-group barrier, the expression tvm_storage_sync prints
    #                                   (CUDA: "__syncthreads()"); None: the backend has none
    warp_shuffle_xor = None           # warp_shuffle_xor(v, m) as text with {value} and {mask} (CUDA:
    #                                   __shfl_xor_sync); None: the backend has none
    thread_index: dict = {}           # thread tag -> its index expression ("threadIdx.x": "threadIdx.x",
    #                                   OpenCL "get_local_id(0)"); empty: bound loops are refused
    backend_name = "C"               # in messages: "the C backend cannot ..."
    array_attribute = " __attribute__((aligned(64)))"  # after a constant-size buffer's declaration
    type_map = VALUE_C               # dtype -> C type of a value (float16/bfloat16 compute as float)
    storage_map = STORAGE_C          # dtype -> C type of one buffer element
    has_lowp = False                 # whether the low-precision conversions (tsr_lowp.h) compile here

    def __init__(self, helpers: "HelperRegistry", reserved=frozenset()):
        self.helpers = helpers
        self.names = NameTable(reserved)
        self.lines: list = []
        self.indent = 1
        self._indents = [self.indent_unit * i for i in range(64)]
        self._expr_cache = {}
        self._nonneg: set = set()
        self._data_vars: set = set()  # let-bound variables holding values that depend on tensor data
        self._reads_data_memo: dict = {}
        self.lane_lets: dict = {}
        self._lane_vars: dict = {}
        self.array_vars: set = set()  # vector let vars stored as C arrays (not native vectors)
        self.buffer_names: dict = {}  # Buffer -> C name (params and allocations)
        self.stored: set = set()  # buffers written (params not among them are const)
        self.fail_points = 0  # failure checks emitted so far (a loop whose body has one may need care)
        self.func_name = "main"

    # -- output -----------------------------------------------------------------------------
    def emit(self, text: str):
        ind = self.indent
        self.lines.append((self._indents[ind] if ind < 64 else self.indent_unit * ind) + text)

    def open_block(self, head: str):
        self.emit(f"{head} {{" if head else "{")
        self.indent += 1
        self.names.push()

    def close_block(self, tail: str = "}"):
        self.names.pop()
        self.indent -= 1
        self.emit(tail)

    # -- types ------------------------------------------------------------------------------
    def value_type(self, dtype: DataType) -> str:
        """C type of a value of dtype (float16/bfloat16 compute as float)."""
        if dtype.lanes != 1:
            return self.vector_type(dtype)
        t = self.type_map.get(dtype)
        if t is None:
            raise TesseraError(f"the {self.backend_name} backend has no value type for dtype {dtype}")
        return t

    def storage_type(self, dtype: DataType) -> str:
        """C type of one buffer element of dtype."""
        t = self.storage_map.get(dtype)
        if t is None:
            raise TesseraError(f"the {self.backend_name} backend cannot store buffers of dtype {dtype}"
                               + (" (vector element types are not supported)" if dtype.lanes > 1 else ""))
        return t

    def vector_type(self, dtype: DataType) -> str:
        raise TesseraError(f"this backend has no vector type for {dtype}")

    # -- names ------------------------------------------------------------------------------
    def var_name(self, v: E.Var) -> str:
        name = self.names.get(v)
        if name is None:
            raise TesseraError(f"variable {v.name!r} ({v.dtype}) is used in {self.func_name} where it "
                               f"is not defined (not a parameter, shape variable, loop or let variable)")
        return name

    def buffer_name(self, buf: Buffer, nindices: int) -> str:
        name = self.buffer_names.get(buf)
        if name is None:
            raise TesseraError(f"buffer {buf.name!r} is accessed in {self.func_name} but is neither a "
                               f"parameter nor allocated there")
        if nindices != 1:
            raise TesseraError(f"buffer {buf.name!r} is accessed with {nindices} indices in "
                               f"{self.func_name}; codegen needs lowered IR with 1-D accesses (run "
                               f"tessera.tir.transform.lower first)")
        return name

    def lane_var(self, v: E.Var, lane: E.Var) -> E.Var:
        """The scalar Var that prints as lane `lane` of vector variable v (`x[lane]`)."""
        let = self.lane_lets.get(v)
        if let is not None:
            return let
        key = (v, lane)
        lv = self._lane_vars.get(key)
        if lv is None:
            lv = self._lane_vars[key] = E.Var(v.name, v.dtype.element_of())
        text = f"{self.var_name(v)}[{self.var_name(lane)}]"
        if v.dtype.code == "bool" and v not in self.array_vars:
            text = f"({text} != 0)"  # a lane of a mask is 0 or -1
        self.names.alias(lv, text)
        return lv

    # -- expressions ------------------------------------------------------------------------
    def expr(self, e) -> tuple[str, int]:
        """(C text, precedence) of expression e."""
        cls = type(e)
        fn = self._expr_cache.get((cls, e.dtype.lanes != 1))
        if fn is None:
            fn = self._lookup_expr(cls, e.dtype.lanes != 1)
        return fn(e)

    def _lookup_expr(self, cls, vector):
        fn = None
        for klass in cls.__mro__:
            fn = getattr(self, ("vec_" if vector else "scalar_") + klass.__name__, None)
            if fn is not None:
                break
        if fn is None:
            def fn(e, _cls=cls):
                raise UnsupportedOpError(_cls.__name__, None, "the C backend cannot print this "
                                         "expression in lowered code" + (" as a vector" if vector else ""))
        self._expr_cache[(cls, vector)] = fn
        return fn

    def text(self, e, prec: int = 0) -> str:
        """Text of e, parenthesized when it binds looser than prec."""
        s, p = self.expr(e)
        return s if p >= prec else f"({s})"

    def text_right(self, e, prec: int) -> str:
        """Text of the right operand of a left-associative operator of precedence prec."""
        s, p = self.expr(e)
        return s if p > prec and not (p == P_UNARY and s[0] == "-") else f"({s})"

    # constants
    def scalar_IntImm(self, e):
        dt, v = e.dtype, e.value
        if dt.code == "bool":
            return ("true" if v else "false"), P_PRIMARY
        if dt.code == "int":
            if dt.bits == 64:
                if v == -(1 << 63):
                    return "INT64_MIN", P_PRIMARY
                s = f"{v}LL"
            elif dt.bits == 32 and v == -(1 << 31):
                return "INT32_MIN", P_PRIMARY
            else:
                s = str(v)
        else:
            s = f"{v}U" if dt.bits == 32 else f"{v}ULL" if dt.bits == 64 else str(v)
        return s, (P_UNARY if v < 0 else P_PRIMARY)

    def scalar_FloatImm(self, e):
        return self.float_literal(e.value, e.dtype)

    def float_literal(self, value: float, dtype: DataType) -> tuple[str, int]:
        key = (value, math.copysign(1.0, value), dtype)  # 0.0 == -0.0, but they print differently
        hit = _FLOAT_TEXT.get(key)
        if hit is None:
            hit = _FLOAT_TEXT[key] = self._float_literal(value, dtype)
        return hit

    @staticmethod
    def _float_literal(value: float, dtype: DataType) -> tuple[str, int]:
        if dtype != _F64:  # the value the constant has in its type (may overflow to inf)
            with np.errstate(over="ignore"):
                value = float(np.asarray(value, dtype=np.float64).astype(
                    _np_dtype(dtype) if dtype in NARROW_FLOATS else np.float32))
        if math.isinf(value) or math.isnan(value):
            s = "NAN" if math.isnan(value) else "INFINITY"
            if dtype == _F64:
                s = f"(double){s}"
            if value < 0:
                return "-" + s, P_UNARY
            return s, (P_UNARY if dtype == _F64 else P_PRIMARY)
        if dtype == _F64:
            s = repr(float(value))
        else:
            s = str(np.float32(value))
            if "." not in s and "e" not in s:
                s += ".0"
            s += "f"
        return s, (P_UNARY if s[0] == "-" else P_PRIMARY)

    def scalar_StringImm(self, e):
        return c_string(e.value), P_PRIMARY

    def scalar_Var(self, e):
        return self.var_name(e), P_PRIMARY

    # arithmetic
    def _round_result(self, dt, s, prec):
        """Wrap an arithmetic result so it has exactly dt's range/precision (narrow types)."""
        if dt in _NARROW_INT:
            return f"({self.type_map[dt]})({s})", P_UNARY
        if dt in NARROW_FLOATS:
            return f"{self.round_helper(dt)}({s})", P_PRIMARY
        if dt in SUBBYTE_INT:
            return f"{self.lowp_helper(f'tsr_wrap_{dt}', dt)}({s})", P_PRIMARY
        return s, prec

    def lowp_helper(self, name: str, dt) -> str:
        """Require the section `name` of runtime_c/tsr_lowp.h (and those it uses); returns name."""
        if not self.has_lowp:
            raise TesseraError(f"the {self.backend_name} backend has no conversions for {dt} (the low-precision "
                               f"storage types compile for the C target)")
        secs = sections(LOWP_FILE)
        for dep in secs[name].deps:
            self.lowp_helper(dep, dt)
        return self.helpers.require(name, secs[name].code)

    def round_helper(self, dt) -> str:
        """Name of the scalar helper rounding a float to float16/bfloat16/float8/float4 precision."""
        if dt in MINIFLOAT_TYPES:
            return self.lowp_helper(f"tsr_round_{dt}", dt)
        if dt == "float16":
            return self.helpers.require("tsr_round_float16", (
                f"/* the rounding to float16 stays where the program has it: the empty asm keeps the compiler\n"
                f"   from fusing it away (an AVX512-FP16 target would contract a*b+c into one rounding) */\n"
                f"{self.func_qualifier} float tsr_round_float16(float x) {{\n"
                f"  _Float16 h = (_Float16)x;\n"
                f"#if defined(__clang__)  /* clang cannot give a _Float16 an xmm asm operand */\n"
                f"  __asm__(\"\" : \"+r\"(h));\n#else\n  __asm__(\"\" : \"+x\"(h));\n#endif\n"
                f"  return (float)h;\n}}"))
        self.bf16_helpers()
        self.helpers.require("tsr_round_bfloat16", (
            f"{self.func_qualifier} float tsr_round_bfloat16(float f) {{\n"
            f"  return tsr_bfloat16_to_float(tsr_float_to_bfloat16(f));\n}}"))
        return "tsr_round_bfloat16"

    def bf16_helpers(self):
        q = self.func_qualifier
        self.helpers.require("tsr_bfloat16_to_float", (
            f"/* bfloat16 is stored as the upper 16 bits of a float32 */\n"
            f"{q} float tsr_bfloat16_to_float(uint16_t h) {{\n"
            f"  uint32_t u = (uint32_t)h << 16;\n  float f;\n  memcpy(&f, &u, sizeof(f));\n  return f;\n}}"))
        self.helpers.require("tsr_float_to_bfloat16", (
            f"/* float32 -> bfloat16, round to nearest even; NaN becomes the quiet NaN (as ml_dtypes) */\n"
            f"{q} uint16_t tsr_float_to_bfloat16(float f) {{\n"
            f"  uint32_t u;\n  memcpy(&u, &f, sizeof(u));\n"
            f"  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);\n"
            f"  u += 0x7fffu + ((u >> 16) & 1u);\n  return (uint16_t)(u >> 16);\n}}"))

    # Signed int32/int64 arithmetic on tensor data wraps around on overflow (ONNX and numpy say so);
    # in C signed overflow is undefined (gcc -O3 may assume it never happens, UBSan reports it), so
    # data arithmetic goes through the unsigned type. Index arithmetic (loads of no tensor) stays
    # signed: the loop optimizers rely on it not wrapping, and shapes keep it in range.
    def wraps(self, e) -> bool:
        dt = e.dtype
        return dt.code == "int" and dt.bits >= 32 and self.reads_data(e)

    def reads_data(self, e) -> bool:
        """Whether the value of e depends on tensor data (a buffer load, or a variable bound to one)."""
        t = type(e)
        if t is E.Var:
            return e in self._data_vars
        if t is E.BufferLoad:
            return True
        if t is E.IntImm or t is E.FloatImm or t is E.SizeVar:
            return False
        memo = self._reads_data_memo
        hit = memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        if t is E.Let and self.reads_data(e.value):
            self._data_vars.add(e.var)
        r = any(self.reads_data(c) for c in children(e) if isinstance(c, E.PrimExpr))
        memo[id(e)] = (e, r)
        return r

    def note_let(self, var, value):
        """A variable is bound to value: remember whether it holds tensor data."""
        if self.reads_data(value):
            self._data_vars.add(var)

    def _wrapping_arith(self, e, sym):
        ut, st = f"uint{e.dtype.bits}_t", f"int{e.dtype.bits}_t"
        a, b = self.text(e.a, P_UNARY), self.text(e.b, P_UNARY)
        return f"({st})(({ut}){a} {sym} ({ut}){b})", P_UNARY

    def _arith(self, e, sym, prec):
        if sym in ("+", "-", "*") and self.wraps(e):
            return self._wrapping_arith(e, sym)
        a = self.text(e.a, prec)
        b = self.text_right(e.b, prec)
        return self._round_result(e.dtype, f"{a} {sym} {b}", prec)

    def scalar_Add(self, e):
        return self._arith(e, "+", P_ADD)

    def scalar_Sub(self, e):
        a = e.a
        if type(a) is E.IntImm and a.value == 0 and e.dtype.code != "bool":
            if self.wraps(e):      # -INT_MIN wraps to INT_MIN (numpy), not undefined behaviour
                bits = e.dtype.bits
                return f"(int{bits}_t)-(uint{bits}_t){self.text(e.b, P_UNARY)}", P_UNARY
            return self._round_result(e.dtype, "-" + self.text(e.b, P_UNARY), P_UNARY)
        return self._arith(e, "-", P_ADD)

    def scalar_Mul(self, e):
        return self._arith(e, "*", P_MUL)

    def scalar_Div(self, e):
        return self._arith(e, "/", P_MUL)

    def scalar_Mod(self, e):
        dt = e.dtype
        if dt.is_float():
            return self._round_result(dt, f"{self.math_name('fmod', dt)}({self.text(e.a)}, "
                                          f"{self.text(e.b)})", P_PRIMARY)
        return self._arith(e, "%", P_MUL)

    def scalar_FloorDiv(self, e):
        dt = e.dtype
        if dt.is_float():
            q = f"{self.text(e.a, P_MUL)} / {self.text_right(e.b, P_MUL)}"
            return self._round_result(dt, f"{self.math_name('floor', dt)}({q})", P_PRIMARY)
        if dt.code != "int" or self.plain_division(e):
            return self._arith(e, "/", P_MUL)
        return self._int_helper_call("floordiv", e)

    def scalar_FloorMod(self, e):
        dt = e.dtype
        if dt.is_float():
            name = self.scalar_helper_floormod_float(dt)
            return self._round_result(dt, f"{name}({self.text(e.a)}, {self.text(e.b)})", P_PRIMARY)
        if dt.code != "int" or self.plain_division(e):
            return self._arith(e, "%", P_MUL)
        return self._int_helper_call("floormod", e)

    def _int_helper_call(self, kind, e):
        dt = e.dtype
        wide = dt if dt.bits >= 32 else _I32
        name = f"tsr_{kind}_{wide}"
        t = self.type_map[wide]
        if kind == "floordiv":
            body = (f"  {t} q = a / b;\n  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;")
            doc = "/* floor division (C's / truncates toward zero) */\n"
        else:
            body = (f"  {t} r = a % b;\n  return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;")
            doc = "/* floor modulo: the result has the sign of the divisor */\n"
        self.helpers.require(name, f"{doc}{self.func_qualifier} {t} {name}({t} a, {t} b) {{\n{body}\n}}")
        s = f"{name}({self.text(e.a)}, {self.text(e.b)})"
        if dt in SUBBYTE_INT:
            return self._round_result(dt, s, P_PRIMARY)
        if dt.bits < 32:
            return f"({self.type_map[dt]}){s}", P_UNARY
        return s, P_PRIMARY

    def scalar_helper_floormod_float(self, dt):
        ct = "double" if dt == _F64 else "float"
        fmod = "fmod" if dt == _F64 else "fmodf"
        name = f"tsr_floormod_{ct}"
        return self.helpers.require(name, (
            f"/* floor modulo of floats, as numpy's np.mod: the result has the sign of b */\n"
            f"{self.func_qualifier} {ct} {name}({ct} a, {ct} b) {{\n"
            f"  {ct} r = {fmod}(a, b);\n"
            f"  if (r != 0 && (r < 0) != (b < 0)) r += b;\n"
            f"  return r;\n}}"))

    def plain_division(self, e) -> bool:
        """FloorDiv/FloorMod where C's truncating / and % agree (both sides provably >= 0)."""
        b = e.b
        if type(b) is E.Broadcast:
            b = b.value
        return type(b) is E.IntImm and b.value > 0 and self.nonneg(e.a)

    def nonneg(self, e) -> bool:
        t = type(e)
        if t is E.IntImm:
            return e.value >= 0
        if t is E.Var:
            return e in self._nonneg
        if t is E.SizeVar:
            return True
        if t is E.Add or t is E.Mul:
            return self.nonneg(e.a) and self.nonneg(e.b)
        if t is E.FloorDiv or t is E.FloorMod:
            return self.plain_division(e)
        if t is E.Ramp:
            return self.nonneg(e.base) and self.nonneg(e.stride)
        if t is E.Broadcast:
            return self.nonneg(e.value)
        return False

    def _minmax(self, e, kind, skip_nan=False):
        """Min/Max: on floats NaN propagates; with skip_nan it is C's fmin/fmax (NaN only where both
        are), a helper with the running result first (gcc calls libm for fmaxf)."""
        dt = e.dtype
        a, b = e.a, e.b
        if not dt.is_float() and isinstance(a, (E.Var, E.IntImm)) and isinstance(b, (E.Var, E.IntImm)):
            op = "<" if kind == "min" else ">"
            return f"({self.text(a)} {op} {self.text(b)} ? {self.text(a)} : {self.text(b)})", P_PRIMARY
        t = self.value_type(dt)
        op = "<" if kind == "min" else ">"
        name = f"tsr_{'f' if skip_nan and dt.is_float() else ''}{kind}_{dt}"
        if dt.is_float() and skip_nan:
            doc = f"/* {kind} that skips NaN (C's f{kind}): NaN only when both are */\n"
            body = f"  return (a {op}= b || b != b) ? a : b;"
        elif dt.is_float():
            doc = (f"/* {kind} that propagates NaN (as numpy's np.{kind}imum) */\n")
            body = f"  return (a {op} b || a != a) ? a : b;"
        else:
            doc = ""
            body = f"  return a {op} b ? a : b;"
        self.helpers.require(name, f"{doc}{self.func_qualifier} {t} {name}({t} a, {t} b) {{\n{body}\n}}")
        return f"{name}({self.text(a)}, {self.text(b)})", P_PRIMARY

    def scalar_Min(self, e):
        return self._minmax(e, "min")

    def scalar_Max(self, e):
        return self._minmax(e, "max")

    # comparisons and logic
    def _cmp(self, e, sym, prec):
        return f"{self.text(e.a, P_REL + 1)} {sym} {self.text(e.b, P_REL + 1)}", prec

    def scalar_LT(self, e):
        return self._cmp(e, "<", P_REL)

    def scalar_LE(self, e):
        return self._cmp(e, "<=", P_REL)

    def scalar_GT(self, e):
        return self._cmp(e, ">", P_REL)

    def scalar_GE(self, e):
        return self._cmp(e, ">=", P_REL)

    def scalar_EQ(self, e):
        return self._cmp(e, "==", P_EQ)

    def scalar_NE(self, e):
        return self._cmp(e, "!=", P_EQ)

    def scalar_And(self, e):
        return self._logic(e, "&&", P_LAND, P_LOR)

    def scalar_Or(self, e):
        return self._logic(e, "||", P_LOR, P_LAND)

    def _logic(self, e, sym, prec, other):
        parts = []
        for i, x in enumerate((e.a, e.b)):
            s, p = self.expr(x)
            if p < prec or p == other or (i == 1 and p == prec and type(x) is not type(e)):
                s = f"({s})"
            parts.append(s)
        return f"{parts[0]} {sym} {parts[1]}", prec

    def scalar_Not(self, e):
        return "!" + self.text(e.a, P_UNARY), P_UNARY

    def scalar_Select(self, e):
        return (f"({self.text(e.condition, P_COND + 1)} ? {self.text(e.true_value, P_COND + 1)} : "
                f"{self.text(e.false_value, P_COND)})"), P_PRIMARY

    def scalar_Cast(self, e):
        return self.cast_text(e.value, e.dtype)

    def cast_text(self, value, dst: DataType) -> tuple[str, int]:
        src = value.dtype
        if src == dst:
            return self.expr(value)
        if dst.code == "bool":
            return f"({self.text(value, P_EQ + 1)} != 0)", P_PRIMARY
        if dst in MINIFLOAT_TYPES:   # through float32, as ml_dtypes converts (float64 and ints too)
            return f"{self.round_helper(dst)}({self.text(value)})", P_PRIMARY
        if dst in SUBBYTE_INT:       # ml_dtypes: a float truncates to int32, then wraps to the bits
            inner = f"(int32_t){self.text(value, P_UNARY)}" if src.is_float() else self.text(value)
            return f"{self.lowp_helper(f'tsr_wrap_{dst}', dst)}({inner})", P_PRIMARY
        if src in MINIFLOAT_TYPES:   # its value is a float holding the float8/float4 value
            src = _F32
        if dst in HALF_TYPES:
            if src in HALF_TYPES or src == _F32 or dst == "bfloat16":
                inner = self.text(value) if src.is_float() and src != _F64 else f"(float){self.text(value, P_UNARY)}"
                return f"{self.round_helper(dst)}({inner})", P_PRIMARY
            return f"(float)(_Float16){self.text(value, P_UNARY)}", P_UNARY
        if (src in HALF_TYPES or src == _F32) and dst == _F32:
            return self.expr(value)
        return f"({self.type_map[dst]}){self.text(value, P_UNARY)}", P_UNARY

    def scalar_Let(self, e):
        # a GNU statement expression: ({ const T x = value; body; })
        self.names.push()
        t = self.let_type(e.var, e.value)
        value = self.text(e.value)
        name = self.define_var(e.var)
        self.note_let(e.var, e.value)
        body = self.text(e.body)
        self.names.pop()
        return f"({{ const {t} {name} = {value}; {body}; }})", P_PRIMARY

    def define_var(self, v: E.Var) -> str:
        return self.names.define(v)

    def scalar_BufferLoad(self, e):
        buf = e.buffer
        name = self.buffer_name(buf, len(e.indices))
        s = f"{name}[{self.text(e.indices[0])}]"
        dt = buf.dtype
        if dt == "float16":
            return "(float)" + s, P_UNARY
        if dt == "bfloat16":
            self.bf16_helpers()
            return f"tsr_bfloat16_to_float({s})", P_PRIMARY
        if dt in MINIFLOAT_TYPES:
            return f"{self.lowp_helper(f'tsr_{dt}_to_float', dt)}({s})", P_PRIMARY
        if dt in SUBBYTE_INT:
            return f"{self.lowp_helper(f'tsr_{dt}_value', dt)}({s})", P_PRIMARY
        return s, P_PRIMARY

    def store_value(self, buf_dtype: DataType, value) -> str:
        """Text of value converted for a store into an element of buf_dtype."""
        if buf_dtype in HALF_TYPES and type(value) is E.Cast and value.value.dtype in (_F32, buf_dtype):
            value = value.value  # the store rounds once; a rounding cast before it is redundant
        if buf_dtype in MINIFLOAT_TYPES:
            if type(value) is E.Cast and value.dtype == buf_dtype:
                value = value.value  # the store rounds (from float32): no rounding before it
            return f"{self.lowp_helper(f'tsr_float_to_{buf_dtype}', buf_dtype)}({self.text(value)})"
        if buf_dtype in SUBBYTE_INT:  # the value is in range: keep its low bits (ml_dtypes' byte)
            unsigned = DataType(f"uint{buf_dtype.bits}")
            return f"{self.lowp_helper(f'tsr_wrap_{unsigned}', buf_dtype)}({self.text(value)})"
        if buf_dtype == "float16":
            return "(_Float16)" + self.text(value, P_UNARY)
        if buf_dtype == "bfloat16":
            self.bf16_helpers()
            return f"tsr_float_to_bfloat16({self.text(value)})"
        return self.text(value, P_ASSIGN)

    # calls
    def math_name(self, op: str, dt: DataType) -> str:
        base = _MATH[op][0]
        return base if dt == _F64 else base + "f"

    def scalar_Call(self, e):
        op, dt, args = e.op, e.dtype, e.args
        for a in args:
            if a.dtype.lanes != 1:
                raise TesseraError(f"call {op} has dtype {dt} but a vector argument of dtype "
                                   f"{a.dtype}; a vector call needs a vector dtype")
        if op == "if_then_else":
            self._arity(e, 3)
            return (f"({self.text(args[0], P_COND + 1)} ? {self.text(args[1], P_COND + 1)} : "
                    f"{self.text(args[2], P_COND)})"), P_PRIMARY
        if op == "likely":
            self._arity(e, 1)
            return self.expr(args[0])
        if op in _BITWISE:
            self._arity(e, 2)
            self._need_int(e)
            if dt.code == "bool" and op in ("shift_left", "shift_right"):
                raise TesseraError(f"{op} needs integer operands, got bool")
            s = f"({self.text(args[0], P_UNARY)} {_BITWISE[op]} {self.text(args[1], P_UNARY)})"
            if dt in _NARROW_INT and op == "shift_left":
                return f"({self.type_map[dt]}){s}", P_UNARY
            if dt in SUBBYTE_INT:
                return self._round_result(dt, s, P_PRIMARY)
            return s, P_PRIMARY
        if op == "bitwise_not":
            self._arity(e, 1)
            self._need_int(e)
            if dt.code == "bool":
                return "!" + self.text(args[0], P_UNARY), P_UNARY
            s = "~" + self.text(args[0], P_UNARY)
            if dt in SUBBYTE_INT:
                return self._round_result(dt, s, P_UNARY)
            return (f"({self.type_map[dt]})({s})", P_UNARY) if dt in _NARROW_INT else (s, P_UNARY)
        if op in ("isnan", "isinf", "isfinite"):
            self._arity(e, 1)
            x = args[0]
            if not x.dtype.is_float():
                return ("true" if op == "isfinite" else "false"), P_PRIMARY
            return f"{op}({self.text(x)})", P_PRIMARY
        if op in ("popcount", "clz"):
            return self._bitcount(e)
        if op == "reinterpret":
            return self._reinterpret(e)
        if op in _MATH or op in ("rsqrt", "sigmoid", "exp10"):
            return self._math_call(e)
        if op in ("fmax", "fmin"):
            self._arity(e, 2)
            return self._minmax((E.Max if op == "fmax" else E.Min)(*args), op[1:], skip_nan=True)
        if op == "address_of":
            return self.address_of(e)
        if op == "tvm_storage_sync":
            if self.barrier is None:
                raise UnsupportedOpError(op, None, f"in {self.func_name}: the {self.backend_name} backend has no "
                                         f"barrier (threads of a work group synchronize on a GPU target)")
            return self.barrier, P_PRIMARY
        if op == "warp_shuffle_xor":
            self._arity(e, 2)
            if self.warp_shuffle_xor is None:
                raise UnsupportedOpError(op, None, f"in {self.func_name}: the {self.backend_name} backend has no "
                                         f"warp shuffle (lower_cross_thread_reduction emits it for CUDA)")
            return self.warp_shuffle_xor.format(value=self.text(args[0]), mask=self.text(args[1])), P_PRIMARY
        return self.extern_call(e)

    def address_of(self, e):
        """`T.address_of(A[i])`: the address of a buffer element (a pointer argument of an extern
        call, e.g. a tensor intrinsic's micro-kernel). The buffer counts as written (not const)."""
        self._arity(e, 1)
        load = e.args[0]
        if type(load) is not E.BufferLoad or load.dtype.lanes != 1:
            raise TesseraError(f"address_of in {self.func_name} takes one scalar buffer element "
                               f"(T.address_of(A[i])), got {load.script()}")
        name = self.buffer_name(load.buffer, len(load.indices))
        self.stored.add(load.buffer)
        idx = load.indices[0]
        if type(idx) is E.IntImm and idx.value == 0:
            return name, P_PRIMARY
        return f"&{name}[{self.text(idx)}]", P_UNARY

    def _arity(self, e, n):
        if len(e.args) != n:
            raise TesseraError(f"intrinsic {e.op} takes {n} argument(s), got {len(e.args)}")

    def _need_int(self, e):
        for a in e.args:
            if not (a.dtype.is_integer() or a.dtype.is_bool()):
                raise TesseraError(f"intrinsic {e.op} needs integer operands, got {a.dtype}")

    def _bitcount(self, e):
        self._arity(e, 1)
        self._need_int(e)
        x = e.args[0]
        bits = x.dtype.bits
        wide = bits == 64
        u = "uint64_t" if wide else "uint32_t"
        mask = "" if bits >= 32 else f" & {(1 << bits) - 1}U"
        arg = f"({u}){self.text(x, P_UNARY)}" + mask
        if e.op == "popcount":
            s = f"__builtin_popcount{'ll' if wide else ''}({arg})"
        else:
            name = f"tsr_clz_{bits}"
            builtin = "__builtin_clzll" if wide else "__builtin_clz"
            adjust = "" if bits in (32, 64) else f" - {32 - bits}"
            self.helpers.require(name, (
                f"/* count leading zeros of a {bits}-bit value ({bits} for 0) */\n"
                f"{self.func_qualifier} int32_t {name}({u} x) {{\n"
                f"  return x == 0 ? {bits} : {builtin}(x){adjust};\n}}"))
            s = f"{name}({arg})"
        return self.cast_result(s, _I32, e.dtype)

    def _reinterpret(self, e):
        """The bits of the operand read as e.dtype (TVM's reinterpret): same width, via memcpy."""
        self._arity(e, 1)
        x = e.args[0]
        src, dst = x.dtype, e.dtype
        if src.bits != dst.bits or src.lanes != 1:
            raise TesseraError(f"reinterpret: {src} and {dst} must be scalars of one width")
        if src == dst:
            return self.expr(x)
        if src.is_bool() or dst.is_bool():   # bool is a byte holding 0 or 1
            return self.cast_text(x, dst)
        if src.is_lowp() or dst.is_lowp():
            return self._reinterpret_lowp(x, src, dst)
        if not src.is_float() and not dst.is_float():
            return f"({self.type_map[dst]}){self.text(x, P_UNARY)}", P_UNARY   # two's complement, as gcc defines
        name = f"tsr_reinterpret_{src}_{dst}"
        bits = {8: "uint8_t", 16: "uint16_t", 32: "uint32_t", 64: "uint64_t"}[src.bits]
        if src == "float16":
            load = f"  _Float16 h = (_Float16)x;\n  {bits} u;\n  memcpy(&u, &h, sizeof(u));\n"
        elif src == "bfloat16":
            self.bf16_helpers()
            load = f"  {bits} u = tsr_float_to_bfloat16(x);\n"
        else:
            load = f"  {bits} u;\n  memcpy(&u, &x, sizeof(u));\n"
        if dst == "float16":
            store = "  _Float16 h2;\n  memcpy(&h2, &u, sizeof(h2));\n  return (float)h2;\n"
        elif dst == "bfloat16":
            self.bf16_helpers()
            store = "  return tsr_bfloat16_to_float(u);\n"
        elif dst.is_float():
            store = f"  {self.type_map[dst]} r;\n  memcpy(&r, &u, sizeof(r));\n  return r;\n"
        else:
            store = f"  return ({self.type_map[dst]})u;\n"
        self.helpers.require(name, (
            f"/* the bits of a {src} read as {dst} */\n"
            f"{self.func_qualifier} {self.type_map[dst]} {name}({self.type_map[src]} x) {{\n{load}{store}}}"))
        return f"{name}({self.text(x)})", P_PRIMARY

    def cast_result(self, s, have: DataType, want: DataType):
        if have == want:
            return s, P_PRIMARY
        return f"({self.value_type(want)}){s}", P_UNARY

    def _reinterpret_lowp(self, x, src, dst):
        """reinterpret where a side is float8/float4/int4/int2: the value's bits in the format
        (encoded, or the low bits of the integer), then read as dst (decoded, sign-extended)."""
        s = self.text(x)
        if src.is_minifloat():
            bits = f"{self.lowp_helper(f'tsr_float_to_{src}', src)}({s})"
        elif src.is_subbyte():
            bits = f"{self.lowp_helper(f'tsr_wrap_uint{src.bits}', src)}({s})"
        else:
            bits = f"(uint8_t){self.text(x, P_UNARY)}"
        if dst.is_minifloat():
            return f"{self.lowp_helper(f'tsr_{dst}_to_float', dst)}({bits})", P_PRIMARY
        if dst.is_subbyte():
            return f"{self.lowp_helper(f'tsr_{dst}_value', dst)}({bits})", P_PRIMARY
        return f"({self.type_map[dst]}){bits}", P_UNARY

    def _math_call(self, e):
        op, dt = e.op, e.dtype
        if not dt.is_float():
            if op in ("abs", "fabs") and (dt.is_integer() or dt.is_bool()):
                return self._int_abs(e)
            if op in ("floor", "ceil", "trunc", "round", "nearbyint") and dt.is_integer() \
                    and e.args[0].dtype == dt:
                return self.expr(e.args[0])
            raise TesseraError(f"intrinsic {op} on {dt} needs a float dtype; cast the operand "
                               f"to a float type first (in {self.func_name})")
        arity = _MATH_ARITY.get(op, 1)
        self._arity(e, arity)
        f = "" if dt == _F64 else "f"
        one = "1.0" + f
        if op == "sigmoid":
            x, px = self._as(e.args[0], dt)
            x = x if px >= P_UNARY else f"({x})"
            s, exact, p = f"{one} / ({one} + exp{f}(-{x}))", False, P_MUL
            return self._round_result(dt, s, p) if dt in NARROW_FLOATS else (s, p)
        args = [self._as(a, dt)[0] for a in e.args]
        if op == "rsqrt":
            s, exact, p = f"{one} / sqrt{f}({args[0]})", False, P_MUL
        elif op == "exp10":
            s, exact, p = f"pow{f}(10.0{f}, {args[0]})", False, P_PRIMARY
        else:
            name, exact = _MATH[op]
            s, p = f"{name}{f}({', '.join(args)})", P_PRIMARY
        if dt in NARROW_FLOATS and not exact:
            return self._round_result(dt, s, p)
        return s, p

    def _as(self, a, dt) -> tuple[str, int]:
        """a converted to dtype dt (a math intrinsic's operand)."""
        return self.expr(a) if a.dtype == dt else self.cast_text(a, dt)

    def _int_abs(self, e):
        self._arity(e, 1)
        x, dt = e.args[0], e.dtype
        if x.dtype != dt:
            raise TesseraError(f"abs: operand is {x.dtype}, result {dt}")
        if dt.code in ("uint", "bool"):
            return self.expr(x)
        if dt.bits < 32:
            return f"({self.type_map[dt]})abs({self.text(x)})", P_UNARY
        # abs(INT_MIN) is undefined in C (libc abs/llabs); numpy's wraps to INT_MIN
        name = f"tsr_abs_{dt}"
        t, ut = self.type_map[dt], f"uint{dt.bits}_t"
        self.helpers.require(name, (
            f"/* |x| with two's complement wrap-around: abs(INT_MIN) is INT_MIN, as numpy's */\n"
            f"{self.func_qualifier} {t} {name}({t} x) {{\n  return x < 0 ? ({t})-({ut})x : x;\n}}"))
        return f"{name}({self.text(x)})", P_PRIMARY

    def extern_call(self, e):
        op = e.op
        if not _IDENT.match(op) or op in C_KEYWORDS or op.startswith(_RESERVED_PREFIXES):
            raise UnsupportedOpError(op, None, f"in {self.func_name}: not an intrinsic the C backend "
                                     f"knows, and not a valid C function name for an extern call")
        arg_types = tuple(self.extern_arg_type(a) for a in e.args)
        ret = "void" if e.dtype.is_handle() else self.value_type(e.dtype)
        self.helpers.extern(op, ret, arg_types)
        self.on_extern(op)
        s = f"{op}({', '.join(self.text(a) for a in e.args)})"
        if e.dtype in NARROW_FLOATS:
            return self._round_result(e.dtype, s, P_PRIMARY)
        return s, P_PRIMARY

    def extern_arg_type(self, a) -> str:
        """C type of an argument in an extern function's prototype."""
        if type(a) is E.StringImm:
            return "const char*"
        if a.dtype.is_handle():
            if type(a) is E.Call and a.op == "address_of" and a.args:
                return self.storage_type(a.args[0].dtype) + "*"
            return "void*"
        return self.value_type(a.dtype)

    def on_extern(self, name: str):
        """Hook: an extern function name is used (the C backend checks it shadows no local)."""

    # -- statements -------------------------------------------------------------------------
    def stmt(self, s):
        getattr(self, "stmt_" + type(s).__name__, self._unknown_stmt)(s)

    def _unknown_stmt(self, s):
        raise TesseraError(f"{type(s).__name__} is not allowed in lowered code given to codegen "
                           f"({self.func_name}); run tessera.tir.transform.lower first")

    def stmt_SeqStmt(self, s):
        stmt = self.stmt
        for x in s.seq:
            stmt(x)

    def stmt_Evaluate(self, s):
        v = s.value
        if isinstance(v, (E.IntImm, E.FloatImm)):
            return
        v = self.shallow(v, "part")
        if v.dtype.lanes != 1:
            self.scalarize(lambda lane, m: self.emit(self.text(m.visit(v)) + ";"), v.dtype.lanes,
                           "vector evaluation")
            return
        s_, _ = self.expr(v)
        self.emit(s_ + ";" if type(v) is E.Call else f"(void)({s_});")

    def stmt_BufferStore(self, s):
        buf = s.buffer
        name = self.buffer_name(buf, len(s.indices))
        self.stored.add(buf)
        value = self.shallow(s.value, buf.name + "_part")
        if value is not s.value:
            s = s.replace(value=value)
        idx = s.indices[0]
        if value.dtype.lanes == 1 and idx.dtype.lanes == 1:
            self.emit(f"{name}[{self.text(idx)}] = {self.store_value(buf.dtype, value)};")
        elif not self.vector_store(s, name):
            self.scalarize_store(s, name)

    def vector_store(self, s, name: str) -> bool:
        """Emit a vector store natively; False leaves it to the lane-by-lane fallback."""
        return False

    def scalarize(self, body, lanes: int, what: str):
        """Emit `for (lane...) body(lane, lane mutator)`: the always-correct vector fallback."""
        lane = E.Var("lane", "int32")
        self.names.push()
        k = self.define_var(lane)
        self.emit(f"for (int32_t {k} = 0; {k} < {lanes}; ++{k}) {{  // {what}, {lanes} lanes one by one")
        self.indent += 1
        self._nonneg.add(lane)
        body(lane, _Lane(self, lane))
        self.close_block()

    def scalarize_store(self, s, name):
        buf = s.buffer
        lanes = s.value.dtype.lanes
        finder = _StoredBuffers(buf)
        finder.visit(s.value)
        if not finder.found:
            def body(lane, m):
                idx, val = m.visit(s.indices[0]), m.visit(s.value)
                self.emit(f"{name}[{self.text(idx)}] = {self.store_value(buf.dtype, val)};")
            self.scalarize(body, lanes, "vector store")
            return
        # the value reads the buffer it writes: all lanes load before any lane stores
        self.open_block("")
        tv = E.Var("tmp", s.value.dtype.element_of())
        tmp = self.define_var(tv)
        self.emit(f"{self.value_type(tv.dtype)} {tmp}[{lanes}];")
        self.scalarize(lambda lane, m: self.emit(f"{tmp}[{self.var_name(lane)}] = "
                                                 f"{self.text(m.visit(s.value))};"), lanes, "vector value")

        def store(lane, m):
            self.names.alias(tv, f"{tmp}[{self.var_name(lane)}]")
            self.emit(f"{name}[{self.text(m.visit(s.indices[0]))}] = {self.store_value(buf.dtype, tv)};")
        self.scalarize(store, lanes, "vector store")
        self.close_block()

    def shallow(self, value, hint: str):
        """value, its parts deeper than MAX_EXPR_DEPTH bound to C variables first (shallow_expr)."""
        bindings, value = shallow_expr(value, hint)
        for var, part in bindings:
            self.bind_let(var, part)
        return value

    def stmt_LetStmt(self, s):
        self.bind_let(s.var, self.shallow(s.value, s.var.name + "_part"))
        self.stmt(s.body)

    def bind_let(self, var, value):
        """Declare the C variable of var, bound to value, in the current block."""
        if value.dtype.lanes != 1 and not self.vector_native(value):
            lanes = value.dtype.lanes
            name = self.define_var(var)
            self.note_let(var, value)
            self.array_vars.add(var)
            self.emit(f"{self.value_type(value.dtype.element_of())} {name}[{lanes}];")
            self.scalarize(lambda lane, m: self.emit(f"{name}[{self.var_name(lane)}] = "
                                                     f"{self.text(m.visit(value))};"), lanes, "vector let")
        else:
            t = self.let_type(var, value)
            text = self.text(value, P_ASSIGN)
            name = self.define_var(var)
            self.note_let(var, value)
            if self.nonneg(value) and value.dtype.lanes == 1:
                self._nonneg.add(var)
            self.emit(f"const {t} {name} = {text};")

    def let_type(self, var, value) -> str:
        return self.value_type(var.dtype)

    def vector_native(self, e) -> bool:
        """Can the backend print vector expression e as one vector value?"""
        return False

    def stmt_IfThenElse(self, s):
        cond = s.condition
        if cond.dtype.lanes != 1:
            raise TesseraError(f"an if statement in {self.func_name} has a vector condition "
                               f"({cond.dtype}); lowering must scalarize it")
        self.open_block(f"if ({self.text(cond)})")
        self.stmt(s.then_case)
        other = s.else_case
        while other is not None and not (type(other) is S.Evaluate and isinstance(other.value, E.IntImm)):
            if type(other) is S.IfThenElse and other.condition.dtype.lanes == 1:
                self.close_block(f"}} else if ({self.text(other.condition)}) {{")
                self.indent += 1
                self.names.push()
                self.stmt(other.then_case)
                other = other.else_case
                continue
            self.close_block("} else {")
            self.indent += 1
            self.names.push()
            self.stmt(other)
            break
        self.close_block()

    def stmt_For(self, s):
        kind = s.kind
        if kind == "thread_binding":
            self.thread_binding(s)
            return
        var = s.loop_var
        lo, ext = s.min, s.extent
        t = self.value_type(var.dtype)
        lo_text = self.text(lo, P_ASSIGN)
        if type(lo) is E.IntImm and lo.value == 0:
            end = self.text(ext, P_REL + 1)
        elif type(lo) is E.IntImm and type(ext) is E.IntImm:
            total = lo.value + ext.value
            dt = ext.dtype if ext.dtype.bits >= lo.dtype.bits else lo.dtype
            end = self.text(E.IntImm(dt if dt.bits >= 64 or -(1 << 31) <= total < (1 << 31) else "int64", total))
        else:
            end = f"{self.text(lo, P_ADD)} + {self.text_right(ext, P_ADD)}"
        if type(lo) is E.IntImm and lo.value >= 0:
            self._nonneg.add(var)
        head_pos = len(self.lines)
        self.lines.append(None)  # pragma slot, filled once the body is known
        state = self.loop_enter(s)
        self.names.push()
        name = self.define_var(var)
        self.emit(f"for ({t} {name} = {lo_text}; {name} < {end}; ++{name}) {{")
        self.indent += 1
        self.stmt(s.body)
        self.indent -= 1
        self.names.pop()
        self.emit("}")
        pragma = self.loop_exit(s, state)
        if pragma is not None:
            self.lines[head_pos] = self._indents[self.indent] + pragma

    def loop_enter(self, s):
        """Before a loop's body is rendered; what it returns is given to loop_exit."""
        return self.fail_points

    def loop_exit(self, s, state):
        """After a loop (its closing brace emitted): the pragma/comment line before it, or None."""
        return self.loop_header(s, self.fail_points != state)

    def loop_header(self, s, body_has_checks: bool):
        """The pragma/comment line before a loop (None for none)."""
        return None

    def thread_binding(self, s):
        """A loop bound to a thread axis: its variable is the thread's index (`thread_index`),
        offset by the loop's start; a backend without that axis refuses it by name."""
        tag = s.thread_binding.thread_tag if s.thread_binding is not None else None
        index = self.thread_index.get(tag) if tag is not None else None
        if index is None:
            raise TesseraError(f"loop {s.loop_var.name} is bound to {tag or 'a thread axis'}; "
                               + (f"the {self.backend_name} backend binds only {', '.join(self.thread_index)}"
                                  if self.thread_index else "build for a GPU target or remove the binding")
                               + f" (in {self.func_name})")
        var = s.loop_var
        t = self.value_type(var.dtype)
        lo = s.min
        value = f"({t}){index}" if type(lo) is E.IntImm and lo.value == 0 else \
            f"{self.text(lo, P_ADD)} + ({t}){index}"
        self.names.push()
        self.emit(f"{{  // {var.name}: {tag}, extent {self.text(s.extent)}")
        self.indent += 1
        self._nonneg.add(var)
        name = self.define_var(var)
        self.emit(f"const {t} {name} = {value};")
        self.stmt(s.body)
        self.close_block()

    def stmt_AttrStmt(self, s):
        key = s.attr_key
        v = s.value
        if key.startswith("pragma_") and type(v) is E.StringImm and "\n" not in v.value:
            self.emit(f"#pragma {key[7:]} {v.value}".rstrip())
        else:
            if isinstance(v, (E.StringImm, E.IntImm, E.FloatImm)):
                vtext = str(v.value)
            else:
                try:
                    vtext = self.text(v)
                except TesseraError:
                    vtext = type(v).__name__
            self.emit(f"// {key}: " + vtext.replace("\n", " "))
        self.stmt(s.body)

    def stmt_AssertStmt(self, s):
        cond = s.condition
        if cond.dtype.lanes != 1:
            raise TesseraError(f"assert in {self.func_name} has a vector condition")
        self.failure(self.text(cond, P_UNARY), self.assert_message(s), lambda: self.stmt(s.body), negate=True)

    def assert_message(self, s, lane: str | None = None) -> str:
        """The printf arguments of an assert's message: each {} prints the next arg, integers as long
        long, floats as double; a vector arg prints its lane `lane` (a C expression)."""
        if not s.args:
            return f'"%s", {c_string(s.message)}'
        specs, values = [], []
        for a in s.args:
            if a.dtype.lanes != 1 and lane is None:
                raise TesseraError(f"assert in {self.func_name} has a vector argument {a.script()}")
            text = self.text(a, P_UNARY) if a.dtype.lanes == 1 else f"({self.text(a)})[{lane}]"
            is_float = a.dtype.is_float()
            specs.append("%.9g" if is_float else "%lld")
            values.append(f"({'double' if is_float else 'long long'}){text}")
        pieces = [p.replace("%", "%%") for p in s.message.split("{}")]
        text = pieces[0] + "".join(spec + p for spec, p in zip(specs, pieces[1:]))
        return ", ".join([c_string(text)] + values)

    def stmt_Allocate(self, s):
        self.allocate(s)

    # -- allocation -------------------------------------------------------------------------
    def allocate(self, s):
        """A buffer of constant size is an array declared in place (a "shared" one with
        `smem_prefix`); others go to allocate_dynamic."""
        buf = s.buffer
        prefix = self.scope_prefix(buf)
        count = 1
        for d in buf.shape:
            if type(d) is E.IntImm and count is not None:
                count *= d.value
            else:
                count = None
        elem = self.storage_type(buf.dtype)
        name = self.names.define(buf)
        self.buffer_names[buf] = name
        if count is not None and (prefix or self.fits_in_place(count * max(1, buf.dtype.bits // 8))):
            self.emit(f"{prefix}{elem} {name}[{max(count, 1)}]{self.array_attribute};")
            self.stmt(s.body)
            return
        if prefix:
            raise TesseraError(f"buffer {buf.name!r} in {self.func_name} has storage scope {buf.scope!r} and a "
                               f"symbolic size; {buf.scope} memory needs a constant size")
        self.allocate_dynamic(s, name, elem, count)

    def scope_prefix(self, buf) -> str:
        """The declaration prefix of a buffer of buf's storage scope ("" for global and local)."""
        scope = buf.scope
        if scope in ("global", "local"):
            return ""
        if scope == "shared" and self.smem_prefix is not None:
            return self.smem_prefix
        raise TesseraError(f"buffer {buf.name!r} in {self.func_name} has storage scope {scope!r}, which the "
                           f"{self.backend_name} backend cannot allocate"
                           + (" (it is a GPU or accelerator scope); use 'global' or 'local'"
                              if self.smem_prefix is None else ""))

    def fits_in_place(self, nbytes: int) -> bool:
        """Whether a constant-size buffer of nbytes is declared as an array where it is allocated."""
        return True

    def allocate_dynamic(self, s, name: str, elem: str, count):
        """A buffer that is not an array in place (symbolic size; count None) or too large for one."""
        raise TesseraError(f"buffer {s.buffer.name!r} in {self.func_name}: the {self.backend_name} backend "
                           f"allocates only buffers of constant size")

    # -- failures (asserts, allocation) -----------------------------------------------------
    def failure(self, cond: str, fmt_args: str, body=None, negate: bool = False):
        """`if (cond) { fail(fmt_args) }` then body(): a failed check reports (printf-style
        `fmt_args`) and leaves the kernel, as the backend's `fail` does it."""
        self.fail_points += 1
        test = f"!{cond}" if negate else cond
        self.open_block(f"if ({test})")
        self.fail(fmt_args)
        self.close_block()
        if body is not None:
            body()

    def fail(self, fmt_args: str):
        """The statements inside a failed check: report the message and leave the kernel."""
        raise TesseraError(f"{self.func_name} has a run-time check (an assertion or an allocation) and the "
                           f"{self.backend_name} backend has no way to report its failure")

    # -- the kernel function ----------------------------------------------------------------
    def buffer_param(self, dtype: DataType, name: str, const: bool) -> str:
        """A buffer parameter: `[buffer_prefix][const ]T* restrict name`."""
        return f"{self.buffer_prefix}{'const ' if const else ''}{self.storage_type(dtype)}* {self.restrict} {name}"

    def kernel_head(self, name: str, params: list) -> str:
        """The kernel's first line: `kernel_prefix kernel_return name(params) {`."""
        return f"{self.kernel_prefix}{self.kernel_return} {name}({', '.join(params) or 'void'}) {{"

    def kernel_prologue(self) -> list:
        """Lines at the top of the kernel's body, before the rendered statements."""
        return []

    def kernel_epilogue(self) -> list:
        """Lines at the end of the kernel's body."""
        return []

    def kernel_text(self, name: str, params: list, comment: str | None = None) -> str:
        """The kernel function around the statements rendered so far."""
        lines = [f"/* {c_comment(comment)} */"] if comment else []
        lines.append(self.kernel_head(name, params))
        lines.extend(self.kernel_prologue())
        lines.extend(x for x in self.lines if x is not None)
        lines.extend(self.kernel_epilogue())
        lines.append("}")
        return "\n".join(lines)


def _np_dtype(dt):
    return numpy_dtype(dt)


class HelperRegistry:
    """Helper functions, vector typedefs and extern prototypes a translation unit needs, each
    emitted once, in first-use order (deterministic for a given program)."""

    def __init__(self):
        self.typedefs: dict[str, str] = {}
        self.functions: dict[str, str] = {}
        self.externs: dict[str, tuple] = {}
        self.imported: dict[str, str] = {}  # C function name -> key of the imported source defining it

    def mark(self):
        """A snapshot to roll back to (a function regenerated from scratch)."""
        return len(self.typedefs), len(self.functions), len(self.externs), len(self.imported)

    def rollback(self, mark):
        for d, n in zip((self.typedefs, self.functions, self.externs, self.imported), mark):
            for key in list(d)[n:]:
                del d[key]

    def import_c(self, names, code: str) -> None:
        """C source defining the functions `names` (a tensor intrinsic's micro-kernel), emitted
        once among the helpers; calls of those functions then get no extern declaration. One name
        defined by two different sources is an error."""
        key = "import_c:" + hashlib.sha1(code.encode("utf-8")).hexdigest()
        for name in names:
            prev = self.imported.get(name)
            if prev is not None and prev != key:
                raise TesseraError(f"C function {name} is defined by two different imported sources "
                                   f"(pragma_import_c); give the tensor intrinsics' functions distinct names")
        self.require(key, code)
        for name in names:
            self.imported.setdefault(name, key)

    def require(self, name: str, code: str) -> str:
        if name not in self.functions:
            self.functions[name] = code
        return name

    def typedef(self, name: str, code: str) -> str:
        if name not in self.typedefs:
            self.typedefs[name] = code
        return name

    def extern(self, name: str, ret: str, args: tuple):
        sig = (ret, args)
        prev = self.externs.get(name)
        if prev is None:
            self.externs[name] = sig
        elif prev != sig:
            raise TesseraError(f"extern function {name} is called as {ret}({', '.join(args)}) and as "
                               f"{prev[0]}({', '.join(prev[1])}); one C function has one signature")

    def extern_decls(self) -> list[str]:
        return [f"extern {ret} {name}({', '.join(args) or 'void'});"
                for name, (ret, args) in self.externs.items() if name not in self.imported]
