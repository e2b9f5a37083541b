"""C code generation for CPUs: a lowered PrimFunc becomes one C translation unit (docs/internals.md).

`CodeGenC` is the C/OpenMP renderer, a subclass of the C-style base (c_base.CodeGenCBase): the
kernel keeps the program's loops and names; parallel loops become OpenMP (a failure inside one is
recorded under `omp critical` and checked after it), vector code uses GCC vector extensions
(`typedef float float32x8 __attribute__((vector_size(32)))`), with a lane-by-lane loop wherever a
vector cannot be one C vector; buffers live on the stack or, large or symbolic, on the heap (a
symbolic one on the stack when its size at run time fits).
`render_module` puts a unit together: the includes, ABI header and entry helpers of runtime_c/, the
helpers the kernels need, each kernel, and around it the ABI side that c_entry writes (entry
`tessera_call_NAME`, timer `tessera_time_NAME`, the JSON `tessera_metadata`).
"""
from __future__ import annotations

from ..errors import TesseraError, UnsupportedOpError
from ..ir import expr as E
from ..ir.buffer import Buffer
from ..ir.dtype import DataType
from ..ir.function import IRModule, PrimFunc
from ..ir.functor import collect_vars
from ..target import Target, canon_feature, needed_features
from .. import abi
from .c_base import (HALF_TYPES, STORAGE_C, VALUE_C, INTRINSICS, P_ADD, P_ASSIGN, P_COND, P_LOR, P_MUL,
                     P_PRIMARY, P_REL, P_UNARY, NOT_IDENT_CHAR, CodeGenCBase, HelperRegistry,
                     NameTable, c_comment, c_string, is_pow2)
from .c_entry import C_HEADER, WRITTEN_PARAMS, EntryWriter, entry_helpers, fmt, includes, metadata_text
from .vector_math import VECTOR_MATH, helper_name, helper_sources

_F32 = DataType("float32")
_MAX_VECTOR_LANES = 64
# a buffer of a constant size up to this many bytes is a 64-byte aligned array on the stack, a larger
# (or symbolic) one is heap memory: a tile allocated per parallel iteration (a conv's row of accumulators,
# 5-7 KB in MobileNetV2 and ResNet) otherwise costs an aligned_alloc and a free every iteration, measured
# ~0.2-0.3 ms of a 7 ms MobileNetV2 run on 2 threads; 16 KB stays far below any thread's stack
STACK_BYTES = 16384
# the vector Calls printed as one vector expression (the rest of INTRINSICS go lane by lane
# through a helper; an if_then_else of one condition for all lanes is a ?: of vectors, one of a lane's own
# condition and extern calls are scalarized with the whole statement)
_VECTOR_OPERATOR_CALLS = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
                          "shift_left": "<<", "shift_right": ">>"}
# x86 MINPS/MAXPS (and PD) by vector size in bytes: [(guard, builtin call on c and x)], first match wins
# (AVX-512's builtins differ between clang and gcc)
_X86_MINMAX = {
    ("float32", 16): [("defined(__SSE__)", "__builtin_ia32_{kind}ps({c}, {x})")],
    ("float32", 32): [("defined(__AVX__)", "__builtin_ia32_{kind}ps256({c}, {x})")],
    ("float32", 64): [("defined(__AVX512F__) && defined(__clang__)", "__builtin_ia32_{kind}ps512({c}, {x}, 4)"),
                      ("defined(__AVX512F__)", "__builtin_ia32_{kind}ps512_mask({c}, {x}, {x}, (uint16_t)-1, 4)")],
    ("float64", 16): [("defined(__SSE2__)", "__builtin_ia32_{kind}pd({c}, {x})")],
    ("float64", 32): [("defined(__AVX__)", "__builtin_ia32_{kind}pd256({c}, {x})")],
    ("float64", 64): [("defined(__AVX512F__) && defined(__clang__)", "__builtin_ia32_{kind}pd512({c}, {x}, 4)"),
                      ("defined(__AVX512F__)", "__builtin_ia32_{kind}pd512_mask({c}, {x}, {x}, (uint8_t)-1, 4)")],
}


def x86_minmax(kind: str, elem: str, size: int, c: str, x: str) -> list:
    """[(preprocessor guard, C expression)]: x86's MINPS/MAXPS (MINPD/MAXPD) computing `c op x ? c : x`
    (x's NaN kept) on vectors of `size` bytes of `elem` named c and x, first matching guard wins; [] where
    there is none (the micro-kernels' epilogues use it too)."""
    return [(g, call.format(kind=kind, c=c, x=x)) for g, call in _X86_MINMAX.get((elem, size), [])]


def _const_bound(e):
    """(the other operand, the constant) of a float Min/Max with a broadcast constant that is not NaN, or
    None."""
    for x, c in ((e.a, e.b), (e.b, e.a)):
        if type(c) is E.Broadcast and type(c.value) is E.FloatImm and c.value.value == c.value.value:
            return x, c
    return None


class _Restart(Exception):
    """An extern function name was met that a local name may shadow: regenerate with it reserved."""

    def __init__(self, name):
        self.name = name


class CodeGenC(CodeGenCBase):
    """The C backend: GCC vector extensions, OpenMP loops, stack/heap allocation."""

    has_lowp = True  # float8/float4/int4/int2 through runtime_c/tsr_lowp.h

    def __init__(self, helpers: HelperRegistry, reserved=frozenset(), num_threads: int = 0,
                 max_vector_bytes: int = 32, target=None):
        super().__init__(helpers, reserved)
        self.num_threads = num_threads
        self.target = target  # the Target (its CPU features decide which tensor intrinsics build)
        # a C vector is at most one machine register: wider ones would cross function
        # boundaries in a non-native ABI (GCC notes it); those statements go lane by lane
        self.max_vector_bytes = max_vector_bytes
        self.mask_bits: dict = {}  # bool vector let var -> its mask element width
        self._reserved_names = reserved
        self.parallel_depth = 0  # OpenMP parallel loops around the statement being rendered
        self._par_fail_mark = 0  # fail_points when the outermost parallel loop began
        self.omp_pragmas = 0  # OpenMP constructs emitted so far (no `omp simd` around one)
        self.heap_live: list = []  # heap buffers to free on an early return
        self.needs_err = False  # the kernel reports failures: it takes (err, err_len)
        self.needs_status = False  # a parallel loop can fail: the kernel keeps tsr_status

    # -- extern calls must not be shadowed by a local of the same name -----------------------
    def on_extern(self, name):
        if name not in self._reserved_names:
            raise _Restart(name)

    # -- vector types ----------------------------------------------------------------------
    def vtype(self, dt: DataType) -> str:
        """Typedef name of a concrete C vector type (element float16 is _Float16 here)."""
        name = str(dt)
        if name not in self.helpers.typedefs:
            elem = dt.element_of()
            ctype = STORAGE_C[elem] if elem != "bool" else "int8_t"
            size = max(1, elem.bits // 8) * dt.lanes
            self.helpers.typedef(name, f"typedef {ctype} {name} __attribute__((vector_size({size})));")
        return name

    def repr_dtype(self, dt: DataType) -> DataType:
        """The C vector a value of vector dtype dt lives in (float16/bfloat16 compute as float32)."""
        elem = dt.element_of()
        if elem in HALF_TYPES:
            return _F32.with_lanes(dt.lanes)
        if elem == "bool":
            return DataType(f"int32x{dt.lanes}")
        return dt

    def vector_type(self, dt: DataType) -> str:
        return self.vtype(self.repr_dtype(dt))

    def mask_type(self, bits: int, lanes: int) -> str:
        return self.vtype(DataType(f"int{bits}x{lanes}"))

    def repr_bits(self, dt: DataType) -> int:
        elem = dt.element_of()
        return 32 if elem in HALF_TYPES else elem.bits

    def let_type(self, var, value) -> str:
        if value.dtype.lanes != 1 and value.dtype.code == "bool":
            bits = self.natural(value) or 32
            self.mask_bits[var] = bits
            return self.mask_type(bits, value.dtype.lanes)
        return self.value_type(var.dtype)

    # -- which vector expressions are one C vector -----------------------------------------
    def vector_native(self, e) -> bool:
        lanes = e.dtype.lanes
        return is_pow2(lanes) and 2 <= lanes <= _MAX_VECTOR_LANES and self._native(e)

    def _native(self, e) -> bool:
        dt = e.dtype
        if dt.lanes == 1:
            return True
        if dt.element_of().is_lowp() or (type(e) is E.BufferLoad and e.buffer.dtype.is_lowp()):
            return False  # float8/float4/int4 lanes convert one at a time (runtime_c/tsr_lowp.h)
        bits = (self.natural(e) or 32) if dt.code == "bool" else self.repr_bits(dt)
        if dt.lanes * bits > 8 * self.max_vector_bytes:
            return False
        t = type(e)
        if t is E.Ramp or t is E.Broadcast:
            return True
        if t is E.Var or t is E.SizeVar:
            return e not in self.array_vars
        if t is E.BufferLoad:
            if e.buffer.dtype.lanes != 1 or len(e.indices) != 1:
                return False
            idx = e.indices[0]
            return type(idx) is E.Broadcast or self._native(idx)
        if dt.element_of() not in VALUE_C:
            return False
        if isinstance(e, (E.BinaryOp, E.CmpOp, E.And)):
            return self._native(e.a) and self._native(e.b)
        if t is E.Not:
            return self._native(e.a)
        if t is E.Cast:
            return self._native(e.value)
        if t is E.Select:
            return (self._native(e.condition) and self._native(e.true_value)
                    and self._native(e.false_value))
        if t is E.Call:
            if e.op == "if_then_else":      # one condition for all lanes: a C ?: of two vectors
                return e.args[0].dtype.lanes == 1 and all(self._native(a) for a in e.args[1:])
            if e.op not in INTRINSICS:
                return False
            if dt.code != "bool" and any(a.dtype.code == "bool" and a.dtype.lanes != 1 for a in e.args):
                return False
            return all(self._native(a) for a in e.args)
        if t is E.Let:
            return dt.code != "bool" and self._native(e.value) and self._native(e.body)
        return False

    # -- vector expressions ---------------------------------------------------------------
    def expr(self, e):
        dt = e.dtype
        if dt.lanes != 1 and dt.code == "bool":
            return self.mask(e, self.natural(e) or 32)
        return super().expr(e)

    def _vop(self, e, prec):
        """Operands of a vector binary operator; a Broadcast side stays a scalar (GCC splats it)."""
        a, b = e.a, e.b
        ta, tb = type(a) is E.Broadcast, type(b) is E.Broadcast
        if ta and not tb:
            return self._scalar_operand(a, prec), self.text_right(b, prec)
        if tb and not ta:
            return self.text(a, prec), self._scalar_operand(b, prec, right=True)
        return self.text(a, prec), self.text_right(b, prec)

    def _scalar_operand(self, bc, prec, right=False):
        v = bc.value
        elem = v.dtype
        if elem in HALF_TYPES or elem in ("float32", "float64", "int32", "int64"):
            return self.text_right(v, prec) if right else self.text(v, prec)
        return f"({VALUE_C[elem]}){self.text(v, P_UNARY)}"

    def _varith(self, e, sym, prec):
        if sym in ("+", "-", "*") and self.wraps(e):
            return self._vwrapping_arith(e, sym)
        a, b = self._vop(e, prec)
        s = f"{a} {sym} {b}"
        if e.dtype.element_of() in HALF_TYPES:
            return f"{self.vround_helper(e.dtype)}({s})", P_PRIMARY
        return s, prec

    def wraps(self, e) -> bool:
        dt = e.dtype.element_of()
        return dt.code == "int" and dt.bits >= 32 and self.reads_data(e)

    def _vwrapping_arith(self, e, sym):
        """Signed lanes computed in the unsigned vector type (wrap-around, see CodeGenCBase.wraps)."""
        dt = e.dtype
        bits = dt.element_of().bits
        uv, sv = self.vtype(DataType(f"uint{bits}x{dt.lanes}")), self.vtype(dt)

        def operand(x):
            if type(x) is E.Broadcast:      # a scalar: GCC splats it
                return f"(uint{bits}_t){self.text(x.value, P_UNARY)}"
            return f"({uv}){self.text(x, P_UNARY)}"

        if type(e.a) is E.Broadcast and type(e.b) is E.Broadcast:
            return f"({sv})(({uv}){{}} + {operand(e.a)} {sym} {operand(e.b)})", P_UNARY
        return f"({sv})({operand(e.a)} {sym} {operand(e.b)})", P_UNARY

    def vec_Add(self, e):
        return self._varith(e, "+", P_ADD)

    def vec_Sub(self, e):
        return self._varith(e, "-", P_ADD)

    def vec_Mul(self, e):
        return self._varith(e, "*", P_MUL)

    def vec_Div(self, e):
        return self._varith(e, "/", P_MUL)

    def vec_Mod(self, e):
        if e.dtype.is_float():
            return self.lanewise(e)
        return self._varith(e, "%", P_MUL)

    def vec_FloorDiv(self, e):
        dt = e.dtype
        if dt.is_float():
            return self.lanewise(e)
        if dt.code != "int" or self.plain_division(e):
            return self._varith(e, "/", P_MUL)
        return self._vfloor_helper(e, "floordiv")

    def vec_FloorMod(self, e):
        dt = e.dtype
        if dt.is_float():
            return self.lanewise(e)
        if dt.code != "int" or self.plain_division(e):
            return self._varith(e, "%", P_MUL)
        return self._vfloor_helper(e, "floormod")

    def _vfloor_helper(self, e, kind):
        dt = e.dtype
        v = self.vtype(dt)
        name = f"tsr_{kind}_{dt}"
        fix = "(r != 0) & ((r < 0) != (b < 0))"  # lanes whose truncated result must be corrected
        ret = f"q + ({fix})" if kind == "floordiv" else f"r + (({fix}) & b)"
        self.helpers.require(name, (
            f"{self.func_qualifier} {v} {name}({v} a, {v} b) {{\n"
            f"  {v} q = a / b, r = a % b;\n  (void)q;\n  return {ret};\n}}"))
        return f"{name}({self.text(e.a)}, {self.text(e.b)})", P_PRIMARY

    def _vminmax(self, e, kind, skip_nan=False):
        """Min/Max of vectors (NaN propagates), or fmin/fmax with skip_nan (NaN only where both are;
        codegen/c_base.py's _minmax)."""
        dt = e.dtype
        rep = self.repr_dtype(dt)
        bound = _const_bound(e) if dt.is_float() and not skip_nan else None
        if bound is not None:
            return self._vminmax_const(kind, rep, *bound)
        v = self.vtype(rep)
        m = self.mask_type(self.repr_bits(dt), dt.lanes)
        sel = self.select_helper(rep)
        op = "<" if kind == "min" else ">"
        cond = f"a {op} b"
        if dt.is_float():
            cond = f"(a {op}= b) | (b != b)" if skip_nan else f"(a {op} b) | (a != a)"
        name = f"tsr_{'f' if skip_nan and dt.is_float() else ''}{kind}_{rep}"
        self.helpers.require(name, (
            f"{self.func_qualifier} {v} {name}({v} a, {v} b) {{\n"
            f"  {m} m = {cond};\n  return {sel}(m, a, b);\n}}"))
        return f"{name}({self.text(e.a)}, {self.text(e.b)})", P_PRIMARY

    def _vminmax_const(self, kind, rep, x, c):
        """min/max of a vector and a constant that is not NaN (a ReLU's 0, a clip's bounds): `c op x ? c
        : x` keeps x's NaN, and is x86's MAXPS/MINPS (first operand c) exactly, so one instruction where
        the vector is an SSE, AVX or AVX-512 register (gcc does not fold the masked select into it)."""
        v = self.vtype(rep)
        m = self.mask_type(self.repr_bits(rep), rep.lanes)
        op = "<" if kind == "min" else ">"
        name = f"tsr_{kind}c_{rep}"
        size = rep.element_of().bits // 8 * rep.lanes
        elem = str(rep.element_of())
        x86 = x86_minmax(kind, elem, size, "c", "x")
        lines = [f"{self.func_qualifier} {v} {name}({v} x, {v} c) {{  /* {kind}(x, c), c not NaN: x's NaN kept */"]
        for k, (guard, call) in enumerate(x86):
            lines += [f"#{'el' if k else ''}if {guard}", f"  return {call};"]
        if x86:
            lines.append("#else")
        lines.append(f"  {m} m = c {op} x;\n  return {self.select_helper(rep)}(m, c, x);")
        if x86:
            lines.append("#endif")
        self.helpers.require(name, "\n".join(lines) + "\n}")
        return f"{name}({self.text(x)}, {self.text(c)})", P_PRIMARY

    def vec_Min(self, e):
        return self._vminmax(e, "min")

    def vec_Max(self, e):
        return self._vminmax(e, "max")

    def select_helper(self, rep: DataType) -> str:
        """`tsr_select_<V>(mask, a, b)`: lanes of a where mask is set, else of b."""
        v = self.vtype(rep)
        m = self.mask_type(rep.element_of().bits, rep.lanes)
        name = f"tsr_select_{rep}"
        if v == m:
            body = "(a & m) | (b & ~m)"
        else:
            body = f"({v})((({m})a & m) | (({m})b & ~m))"
        return self.helpers.require(name, (
            f"{self.func_qualifier} {v} {name}({m} m, {v} a, {v} b) {{\n  return {body};\n}}"))

    def vec_Select(self, e):
        dt = e.dtype
        cond = e.condition
        if cond.dtype.lanes == 1:
            return (f"({self.text(cond, P_REL)} ? {self.text(e.true_value, P_REL)} : "
                    f"{self.text(e.false_value, P_REL)})"), P_PRIMARY
        rep = self.repr_dtype(dt)
        m, _ = self.mask(cond, rep.element_of().bits)
        return (f"{self.select_helper(rep)}({m}, {self.text(e.true_value)}, "
                f"{self.text(e.false_value)})"), P_PRIMARY

    def vec_Ramp(self, e):
        dt = e.dtype
        lanes = dt.lanes
        elem = dt.element_of()
        base, stride = e.base, e.stride
        if elem in ("int32", "int64"):
            v = self.vtype(dt)
            if type(stride) is E.IntImm:
                vec = f"({v}){{{', '.join(str(k * stride.value) for k in range(lanes))}}}"
                if type(base) is E.IntImm and base.value == 0:
                    return vec, P_PRIMARY
                return f"{self.text(base, P_ADD)} + {vec}", P_ADD
            iota = f"({v}){{{', '.join(str(k) for k in range(lanes))}}}"
            return f"{self.text(base, P_ADD)} + {self.text(stride, P_MUL)} * {iota}", P_ADD
        v = self.vtype(dt)
        t = VALUE_C[elem]
        name = f"tsr_ramp_{dt}"
        self.helpers.require(name, (
            f"{self.func_qualifier} {v} {name}({t} base, {t} stride) {{\n"
            f"  {v} v = {{0}};\n  for (int k = 0; k < {lanes}; ++k) v[k] = ({t})(base + k * stride);\n"
            f"  return v;\n}}"))
        return f"{name}({self.text(base)}, {self.text(stride)})", P_PRIMARY

    def vec_Broadcast(self, e):
        rep = self.repr_dtype(e.dtype)
        v = self.vtype(rep)
        t = VALUE_C[rep.element_of()]
        name = f"tsr_splat_{rep}"
        self.helpers.require(name, (
            f"{self.func_qualifier} {v} {name}({t} x) {{\n"
            f"  return ({v}){{{', '.join('x' for _ in range(rep.lanes))}}};\n}}"))
        return f"{name}({self.text(e.value)})", P_PRIMARY

    def vec_Var(self, e):
        return self.var_name(e), P_PRIMARY

    def vec_Let(self, e):
        return self.scalar_Let(e)

    def widen_source(self, src: DataType, dst: DataType, xs: str) -> str:
        """xs, the operand of a widening conversion of 8- or 16-bit integer lanes in an SSE register
        (8 or 16 bytes), through an empty asm that holds it in one: gcc (12) otherwise makes a
        conversion of loaded bytes one scalar load and insert per lane (an int8 depthwise convolution
        ran 30x slower than with vpmovzxbd)."""
        e = src.element_of()
        if e.code not in ("int", "uint") or e.bits not in (8, 16) or dst.element_of().bits <= e.bits \
                or e.bits * src.lanes not in (64, 128):
            return xs
        v = self.vtype(src)
        name = f"tsr_widen_src_{src}"
        self.helpers.require(name, (
            f"{self.func_qualifier} {v} {name}({v} x) {{\n"
            f"#if defined(__GNUC__) && !defined(__clang__) && defined(__SSE2__)\n"
            f"  __asm__(\"\" : \"+x\"(x));\n#endif\n  return x;\n}}"))
        return f"{name}({xs})"

    def vec_Cast(self, e):
        dst, x = e.dtype, e.value
        src = x.dtype
        lanes = dst.lanes
        if src.code == "bool":
            rep = self.repr_dtype(dst)
            m, p = self.mask(x, rep.element_of().bits)
            m = m if p >= P_UNARY and m[0] != "-" else f"({m})"
            return f"__builtin_convertvector(-{m}, {self.vtype(rep)})", P_PRIMARY
        srep, drep = self.repr_dtype(src), self.repr_dtype(dst)
        xs, xp = self.expr(x)
        if srep == drep:
            out = xs
        elif dst == DataType("float16").with_lanes(lanes) and srep != _F32.with_lanes(lanes):
            h = self.vtype(DataType(f"float16x{lanes}"))
            return (f"__builtin_convertvector(__builtin_convertvector({xs}, {h}), "
                    f"{self.vtype(drep)})"), P_PRIMARY
        elif srep.element_of().code in ("int", "uint") and srep.element_of().bits in (8, 16) \
                and drep.element_of().code == "float":
            # through int32 lanes: gcc (12) converts 8/16-bit lanes to float one lane at a time
            i32 = self.vtype(DataType(f"int32x{lanes}"))
            out = (f"__builtin_convertvector(__builtin_convertvector({self.widen_source(srep, drep, xs)}, {i32}), "
                   f"{self.vtype(drep)})")
        elif srep.element_of().code == "float" and srep.element_of().bits == 32 \
                and drep.element_of().code in ("int", "uint") and drep.element_of().bits in (8, 16):
            # float32 -> 8/16-bit lanes through int32 (vcvttps2dq + vpmovdb): gcc (12) converts a
            # float vector to narrow integers one lane at a time (a quantize ran 10x slower)
            i32 = self.vtype(DataType(f"int32x{lanes}"))
            out = f"__builtin_convertvector(__builtin_convertvector({xs}, {i32}), {self.vtype(drep)})"
        else:
            out = f"__builtin_convertvector({self.widen_source(srep, drep, xs)}, {self.vtype(drep)})"
        if dst.element_of() in HALF_TYPES and src.element_of() != dst.element_of():
            return f"{self.vround_helper(dst)}({out})", P_PRIMARY
        return out, (xp if out is xs else P_PRIMARY)

    def vround_helper(self, dt: DataType) -> str:
        """`tsr_round_<half>x<L>(float32xL)`: round every lane to float16/bfloat16 precision."""
        lanes = dt.lanes
        f = self.vtype(_F32.with_lanes(lanes))
        if dt.element_of() == "float16":
            h = self.vtype(DataType(f"float16x{lanes}"))
            name = f"tsr_round_float16x{lanes}"
            return self.helpers.require(name, (
                f"{self.func_qualifier} {f} {name}({f} x) {{\n"
                f"  return __builtin_convertvector(__builtin_convertvector(x, {h}), {f});\n}}"))
        u = self.vtype(DataType(f"uint32x{lanes}"))
        name = f"tsr_round_bfloat16x{lanes}"
        return self.helpers.require(name, (
            f"/* round each lane to bfloat16 (nearest even); NaN becomes the quiet NaN */\n"
            f"{self.func_qualifier} {f} {name}({f} x) {{\n"
            f"  {u} u = ({u})x;\n"
            f"  {u} r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;\n"
            f"  {u} nan = ({u})(x != x);\n"
            f"  {u} qnan = (u & 0x80000000u) | 0x7fc00000u;\n"
            f"  return ({f})((r & ~nan) | (qnan & nan));\n}}"))

    # masks (bool vectors are signed integer vectors: all ones for true)
    def natural(self, e):
        """Element width of the mask e naturally produces (None: any width)."""
        t = type(e)
        if isinstance(e, E.CmpOp):
            if e.a.dtype.code == "bool":
                return self.natural(e.a) or self.natural(e.b)
            return self.repr_bits(e.a.dtype)
        if t is E.And or t is E.Or:
            return self.natural(e.a) or self.natural(e.b)
        if t is E.Not:
            return self.natural(e.a)
        if t is E.Var or t is E.SizeVar:
            return self.mask_bits.get(e)
        if t is E.BufferLoad:
            return 8
        if t is E.Cast:
            x = e.value
            return self.natural(x) if x.dtype.code == "bool" else self.repr_bits(x.dtype)
        if t is E.Select:
            return self.natural(e.true_value) or self.natural(e.false_value)
        if t is E.Call:
            if e.op in ("isnan", "isinf", "isfinite"):
                return self.repr_bits(e.args[0].dtype)
            for a in e.args:
                if a.dtype.lanes != 1 and a.dtype.code == "bool":
                    w = self.natural(a)
                    if w:
                        return w
        return None

    def mask(self, e, bits: int) -> tuple[str, int]:
        """Text of bool vector e as a mask of `bits`-bit lanes."""
        lanes = e.dtype.lanes
        m = self.mask_type(bits, lanes)
        t = type(e)
        if t is E.Broadcast:
            return f"({m}){{0}} - (int{bits}_t){self.text(e.value, P_UNARY)}", P_ADD
        if t is E.And or t is E.Or:
            return f"({self._mask_operand(e.a, bits)} {'&' if t is E.And else '|'} {self._mask_operand(e.b, bits)})", P_PRIMARY
        if t is E.Not:
            a, p = self.mask(e.a, bits)
            return "~" + (a if p >= P_UNARY else f"({a})"), P_UNARY
        if t is E.Select:
            if e.condition.dtype.lanes == 1:
                return (f"({self.text(e.condition, P_REL)} ? {self.mask(e.true_value, bits)[0]} : "
                        f"{self.mask(e.false_value, bits)[0]})"), P_PRIMARY
            sel = self.select_helper(DataType(f"int{bits}x{lanes}"))
            return (f"{sel}({self.mask(e.condition, bits)[0]}, {self.mask(e.true_value, bits)[0]}, "
                    f"{self.mask(e.false_value, bits)[0]})"), P_PRIMARY
        if t is E.Call and e.op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            a, b = (self._mask_operand(x, bits) for x in e.args)
            return f"({a} {_VECTOR_OPERATOR_CALLS[e.op]} {b})", P_PRIMARY
        if t is E.Call and e.op == "bitwise_not":
            a, p = self.mask(e.args[0], bits)
            return "~" + (a if p >= P_UNARY else f"({a})"), P_UNARY
        if t is E.Call and e.op == "likely":
            return self.mask(e.args[0], bits)
        # the rest have a natural width; convert when it differs
        if isinstance(e, E.CmpOp):
            nat = self.natural(e) or bits
            sym = _CMP_SYMBOL[t]
            prec = P_REL if sym[0] in "<>" else P_REL - 1
            if e.a.dtype.code == "bool":
                s = f"{self.mask(e.a, nat)[0]} {sym} {self.mask(e.b, nat)[0]}"
            else:
                a, b = self._vop(e, P_REL + 1)
                s = f"{a} {sym} {b}"
        elif t is E.Var or t is E.SizeVar:
            nat, s, prec = self.mask_bits.get(e, 32), self.var_name(e), P_PRIMARY
        elif t is E.BufferLoad:
            nat = 8
            s, prec = self.vector_load(e)
        elif t is E.Cast:
            x = e.value
            if x.dtype.code == "bool":
                return self.mask(x, bits)
            nat = self.repr_bits(x.dtype)
            s, prec = f"{self.text(x, P_REL)} != 0", P_REL - 1
        elif t is E.Call and e.op in ("isnan", "isinf", "isfinite"):
            nat = self.repr_bits(e.args[0].dtype)
            s, prec = self.lanewise(e, mask_bits=nat)
        else:
            raise TesseraError(f"the C backend cannot print a {type(e).__name__} of dtype {e.dtype} "
                               f"as a vector mask")
        if nat == bits:
            return s, prec
        return f"__builtin_convertvector({s}, {m})", P_PRIMARY

    def _mask_operand(self, e, bits):
        s, p = self.mask(e, bits)
        return s if p >= P_UNARY else f"({s})"

    # loads
    def vec_BufferLoad(self, e):
        return self.vector_load(e)

    def vector_load(self, e):
        buf = e.buffer
        name = self.buffer_name(buf, len(e.indices))
        idx = e.indices[0]
        lanes = e.dtype.lanes
        elem = buf.dtype
        if type(idx) is E.Ramp:
            if type(idx.stride) is E.IntImm and idx.stride.value == 1:
                fn = self._vmem_helper("load", elem, lanes)
                return f"{fn}(&{name}[{self.text(idx.base)}])", P_PRIMARY
            fn = self._vmem_helper("gather", elem, lanes)
            return f"{fn}({name}, {self.text(idx.base)}, {self.text(idx.stride)})", P_PRIMARY
        if type(idx) is E.Broadcast:
            scalar = E.BufferLoad(buf, [idx.value])
            if elem == "bool":
                return self.mask(E.Broadcast(scalar, lanes), 8)
            return self.vec_Broadcast(E.Broadcast(scalar, lanes))
        fn = self._vmem_helper("gather", elem, lanes, idx.dtype)
        return f"{fn}({name}, {self.text(idx)})", P_PRIMARY

    def _vmem_helper(self, kind, elem: DataType, lanes: int, idx_dtype=None) -> str:
        """Vector load/store/gather/scatter helpers for buffer element type elem."""
        q = self.func_qualifier
        st = STORAGE_C[elem]
        vdt = elem.with_lanes(lanes)
        if elem == "bool":
            v = self.mask_type(8, lanes)
            load_lane, store_lane = "(p[{i}] ? -1 : 0)", "(bool)(v[k] != 0)"
        else:
            v = self.vector_type(vdt)
            load_lane, store_lane = "p[{i}]", "v[k]"
            if elem == "float16":
                load_lane, store_lane = "(float)p[{i}]", "(_Float16)v[k]"
            elif elem == "bfloat16":
                load_lane, store_lane = "tsr_bfloat16_to_float(p[{i}])", "tsr_float_to_bfloat16(v[k])"
        suffix = f"_by_{idx_dtype}" if idx_dtype is not None else ""
        name = f"tsr_v{kind}_{vdt}{suffix}"
        if name in self.helpers.functions:
            return name
        if elem == "bfloat16" and kind in ("gather", "scatter"):
            self.bf16_helpers()   # lane by lane through the scalar conversions (load/store convert vectors)
        if kind == "load":
            if elem == "float16":
                h = self.vtype(DataType(f"float16x{lanes}"))
                body = (f"  {h} h;\n  memcpy(&h, p, sizeof(h));\n"
                        f"  return __builtin_convertvector(h, {v});")
            elif elem == "bfloat16":
                h = self.vtype(DataType(f"uint16x{lanes}"))
                u = self.vtype(DataType(f"uint32x{lanes}"))
                body = (f"  {h} h;\n  memcpy(&h, p, sizeof(h));\n"
                        f"  return ({v})(__builtin_convertvector(h, {u}) << 16);")
            elif elem == "bool":
                body = f"  {v} b;\n  memcpy(&b, p, sizeof(b));\n  return b != 0;"
            else:
                body = f"  {v} v;\n  memcpy(&v, p, sizeof(v));\n  return v;"
            code = f"{q} {v} {name}(const {st}* p) {{\n{body}\n}}"
        elif kind == "store":
            if elem == "float16":
                h = self.vtype(DataType(f"float16x{lanes}"))
                body = f"  {h} h = __builtin_convertvector(v, {h});\n  memcpy(p, &h, sizeof(h));"
            elif elem == "bfloat16":
                h = self.vtype(DataType(f"uint16x{lanes}"))
                u = self.vtype(DataType(f"uint32x{lanes}"))
                body = (f"  {h} h = __builtin_convertvector(({u})v >> 16, {h});\n"
                        f"  memcpy(p, &h, sizeof(h));")
            elif elem == "bool":
                body = f"  {v} b = -v;\n  memcpy(p, &b, sizeof(b));"
            else:
                body = "  memcpy(p, &v, sizeof(v));"
            code = f"{q} void {name}({st}* p, {v} v) {{\n{body}\n}}"
        elif kind == "gather":
            if idx_dtype is None:
                params, at = "int64_t base, int64_t stride", "base + k * stride"
            else:
                params, at = f"{self.vtype(idx_dtype)} idx", "idx[k]"
            code = (f"{q} {v} {name}(const {st}* p, {params}) {{\n  {v} v = {{0}};\n"
                    f"  for (int k = 0; k < {lanes}; ++k) v[k] = {load_lane.format(i=at)};\n"
                    f"  return v;\n}}")
        else:  # scatter
            if idx_dtype is None:
                params, at = "int64_t base, int64_t stride", "base + k * stride"
            else:
                params, at = f"{self.vtype(idx_dtype)} idx", "idx[k]"
            code = (f"{q} void {name}({st}* p, {params}, {v} v) {{\n"
                    f"  for (int k = 0; k < {lanes}; ++k) p[{at}] = {store_lane};\n}}")
        return self.helpers.require(name, code)

    def vector_store(self, s, name) -> bool:
        value, idx = s.value, s.indices[0]
        buf = s.buffer
        lanes = value.dtype.lanes
        if buf.dtype.lanes != 1 or value.dtype.lanes != idx.dtype.lanes or not self.vector_native(value):
            return False
        elem = buf.dtype
        if type(idx) is E.Ramp:
            if type(idx.stride) is E.IntImm and idx.stride.value == 1:
                where = f"&{name}[{self.text(idx.base)}]"
                kind = "store"
            else:
                where = f"{name}, {self.text(idx.base)}, {self.text(idx.stride)}"
                kind = "scatter"
            fn = self._vmem_helper(kind, elem, lanes)
        elif type(idx) is not E.Broadcast and self.vector_native(idx):
            fn = self._vmem_helper("scatter", elem, lanes, idx.dtype)
            where = f"{name}, {self.text(idx)}"
        else:
            return False
        v = self.mask(value, 8)[0] if elem == "bool" else self.text(value)
        self.emit(f"{fn}({where}, {v});")
        return True

    # calls
    def vec_Call(self, e):
        op, args = e.op, e.args
        if op in _VECTOR_OPERATOR_CALLS:
            a, b = args
            if e.dtype.code != "bool" and (a.dtype.is_float() or b.dtype.is_float()):
                raise TesseraError(f"intrinsic {op} needs integer operands, got {a.dtype}")
            return f"({self._vtext_operand(a)} {_VECTOR_OPERATOR_CALLS[op]} {self._vtext_operand(b)})", P_PRIMARY
        if op == "bitwise_not":
            return "~" + self.text(args[0], P_UNARY), P_UNARY
        if op == "likely":
            return self.expr(args[0])
        if op in ("fmax", "fmin") and all(a.dtype == e.dtype for a in args):
            self._arity(e, 2)
            return self._vminmax((E.Max if op == "fmax" else E.Min)(*args), op[1:], skip_nan=True)
        if op == "fma" and all(a.dtype == e.dtype for a in args):
            s = f"{self.text(args[0], P_MUL)} * {self.text_right(args[1], P_MUL)} + {self.text_right(args[2], P_ADD)}"
            if e.dtype.element_of() in HALF_TYPES:
                return f"{self.vround_helper(e.dtype)}({s})", P_PRIMARY
            return s, P_ADD
        if op == "if_then_else" and args[0].dtype.lanes == 1:
            # the condition is every lane's: C evaluates one branch only, as the scalar form does
            return (f"({self.text(args[0], P_LOR)} ? {self.text(args[1], P_COND)} : "
                    f"{self.text(args[2], P_COND)})", P_PRIMARY)
        if op == "if_then_else" or op not in INTRINSICS:
            raise TesseraError(f"vector call {op} must be scalarized (internal: the statement "
                               f"should have taken the lane-by-lane path)")
        if op in VECTOR_MATH and self.repr_dtype(e.dtype).element_of() == _F32 \
                and all(a.dtype == e.dtype for a in args):
            return self.vector_math(e)
        if op in ("pow", "power") and len(args) == 2 and type(args[1]) is E.Broadcast \
                and self.repr_dtype(e.dtype).element_of() == _F32 and args[0].dtype == e.dtype:
            return self.vector_pow(e)
        return self.lanewise(e)

    def vector_pow(self, e):
        """pow of a float32 vector by one exponent: small integer exponents (GELU's x^3, squares)
        by multiplication, others lane by lane through powf."""
        rep = self.repr_dtype(e.dtype)
        v = self.vtype(rep)
        name = f"tsr_vpow_{rep}"
        self.helpers.require(name, (
            f"/* pow(x, y), one exponent for every lane: y = 1, 2, 3, 4, -1 by multiplication (within 1 ulp\n"
            f"   of powf, the same special values), any other y lane by lane through powf */\n"
            f"{self.func_qualifier} {v} {name}({v} x, float y) {{\n"
            f"  if (y == 2.0f) return x * x;\n"
            f"  if (y == 3.0f) return x * x * x;\n"
            f"  if (y == 1.0f) return x;\n"
            f"  if (y == 4.0f) {{\n    const {v} s = x * x;\n    return s * s;\n  }}\n"
            f"  if (y == -1.0f) return 1.0f / x;\n"
            f"  {v} r = {{0}};\n"
            f"  for (int k = 0; k < {rep.lanes}; ++k) r[k] = powf(x[k], y);\n  return r;\n}}"))
        y = e.args[1].value
        s = f"{name}({self.text(e.args[0])}, {self.cast_text(y, _F32)[0] if y.dtype != _F32 else self.text(y)})"
        if e.dtype.element_of() in HALF_TYPES:
            return f"{self.vround_helper(e.dtype)}({s})", P_PRIMARY
        return s, P_PRIMARY

    def vector_math(self, e):
        """exp/log/tanh/erf/sigmoid of a float32 (or float16/bfloat16, computed in float32) vector
        by the polynomial helpers of vector_math.py, not lane by lane through libm."""
        rep = self.repr_dtype(e.dtype)
        v = self.vtype(rep)
        itype = self.vtype(DataType(f"int32x{rep.lanes}"))
        sel = self.select_helper(rep)
        base = VECTOR_MATH[e.op]
        for name, code in helper_sources(base, v, itype, sel):
            self.helpers.require(name, code)
        s = f"{helper_name(base, v)}({self.text(e.args[0])})"
        if e.dtype.element_of() in HALF_TYPES:
            return f"{self.vround_helper(e.dtype)}({s})", P_PRIMARY
        return s, P_PRIMARY

    def _vtext_operand(self, a):
        if type(a) is E.Broadcast:
            return f"({VALUE_C[a.value.dtype]}){self.text(a.value, P_UNARY)}"
        return self.text(a, P_UNARY)

    def lanewise(self, e, mask_bits=None):
        """A helper applying the scalar form of e to every lane (math calls, float modulo)."""
        dt = e.dtype
        lanes = dt.lanes
        elem = dt.element_of()
        args = list(e.args) if type(e) is E.Call else [e.a, e.b]
        op = e.op if type(e) is E.Call else type(e).__name__.lower()
        name = "_".join([f"tsr_{op}", str(dt)] + [str(a.dtype) for a in args if a.dtype != dt])
        if name not in self.helpers.functions:
            saved = self.names
            self.names = NameTable()
            params, lane_args = [], []
            for i, a in enumerate(args):  # vector operands are x0[k], x1[k]; scalar ones x0, x1
                pv = E.Var(f"x{i}", a.dtype.element_of())
                params.append(f"{self.value_type(a.dtype)} x{i}")
                self.names.alias(pv, f"x{i}[k]" if a.dtype.lanes != 1 else f"x{i}")
                lane_args.append(pv)
            if type(e) is E.Call:
                scalar = E.Call(elem, e.op, lane_args)
            else:
                scalar = e.replace(dtype=elem, a=lane_args[0], b=lane_args[1])
            try:
                lane = self.text(scalar, P_ASSIGN)
            finally:
                self.names = saved
            if elem == "bool":
                rv = self.mask_type(mask_bits or 32, lanes)
                lane = f"({lane}) ? -1 : 0"
            else:
                rv = self.vector_type(dt)
            self.helpers.require(name, (
                f"{self.func_qualifier} {rv} {name}({', '.join(params)}) {{\n  {rv} r = {{0}};\n"
                f"  for (int k = 0; k < {lanes}; ++k) r[k] = {lane};\n  return r;\n}}"))
        return f"{name}({', '.join(self.text(a) for a in args)})", P_PRIMARY

    # -- tensor intrinsics: imported C source, required CPU features ------------------------
    def stmt_AttrStmt(self, s):
        key = s.attr_key
        if key == "pragma_import_c":
            # TVM's pragma_import_c: C source (a micro-kernel) emitted once into the unit; node
            # names the functions it defines (comma separated), which then need no extern declaration
            if type(s.value) is not E.StringImm or type(s.node) is not E.StringImm:
                raise TesseraError(f"pragma_import_c in {self.func_name}: expected the function names and "
                                   f"the C source as strings")
            names = [n.strip() for n in s.node.value.split(",") if n.strip()]
            self.helpers.import_c(names, s.value.value)
            self.reserve_extern_names(names)
            self.stmt(s.body)
            return
        if key == "tensor_intrin":
            # node: the intrinsic's name; value: the CPU features it needs, comma separated
            name = s.node.value if type(s.node) is E.StringImm else str(s.node)
            needs = [canon_feature(f) for f in s.value.value.split(",") if f] if type(s.value) is E.StringImm else []
            target = self.target if self.target is not None else Target("c")
            if needs:
                missing = [f for f in needs if not target.has_feature(f)]
                if missing:
                    raise UnsupportedOpError(
                        name, None, f"tensor intrinsic {name!r} in {self.func_name} needs the CPU "
                        f"feature{'s' if len(missing) > 1 else ''} {', '.join(missing)}, which target "
                        f"{str(target)!r} lacks (its features: {_x86_summary(target)}); build for a target "
                        f"that has {'them' if len(missing) > 1 else 'it'} (e.g. -mattr=+{',+'.join(missing)}) "
                        f"or tensorize with an intrinsic of this target")
            self.emit(f"/* tensor intrinsic {name} */")
            self.stmt(s.body)
            return
        super().stmt_AttrStmt(s)

    def reserve_extern_names(self, names):
        for n in names:
            self.on_extern(n)

    # -- loops and allocation ---------------------------------------------------------------
    def loop_header(self, s, body_has_checks):
        kind = s.kind
        if kind == "parallel":
            self.omp_pragmas += 1
            n = self.num_threads
            return "#pragma omp parallel for" + (f" num_threads({n})" if n else "")
        if kind == "vectorized":
            if body_has_checks:
                return "// vectorized (no omp simd: the body has checks or OpenMP constructs)"
            self.omp_pragmas += 1
            return "#pragma omp simd"
        if kind == "unrolled":
            ext = s.extent
            n = ext.value if type(ext) is E.IntImm and 0 < ext.value <= 64 else 8
            return f"#pragma GCC unroll {n}"
        return None

    def loop_enter(self, s):
        if s.kind == "parallel":
            if self.parallel_depth == 0:
                self._par_fail_mark = self.fail_points
            self.parallel_depth += 1
        return self.fail_points, self.omp_pragmas

    def loop_exit(self, s, state):
        """The loop's pragma (`omp simd` only over a body without checks or OpenMP constructs);
        after the outermost parallel loop whose body can fail, the check of the recorded status."""
        fail0, omp0 = state
        parallel = s.kind == "parallel"
        if parallel:
            self.parallel_depth -= 1
        pragma = self.loop_header(s, self.fail_points != fail0 or self.omp_pragmas != omp0)
        if parallel and self.parallel_depth == 0 and self.fail_points != self._par_fail_mark:
            self.emit_status_check()
        return pragma

    # -- failures: an error message in (err, err_len) and a status -----------------------------
    def failure(self, cond: str, fmt_args: str, body=None, negate: bool = False):
        """`if (cond) report; else body()` — an early return outside parallel loops; inside them
        (no return allowed there) the first failure is recorded and the iteration skips body."""
        if self.parallel_depth == 0:
            super().failure(cond, fmt_args, body, negate)
            return
        self.fail_points += 1
        self.needs_err = self.needs_status = True
        self.omp_pragmas += 1
        self.open_block(f"if ({'!' + cond if negate else cond})")
        self.emit("#pragma omp critical(tsr_failure)")
        self.open_block("if (tsr_status == 0)")
        self.emit(f"tsr_status = {abi.STATUS_RUNTIME};")
        self.emit(f"snprintf(err, err_len, {fmt_args});")
        self.close_block()
        if body is not None:
            self.close_block("} else {")
            self.indent += 1
            self.names.push()
            body()
        self.close_block()

    def stmt_AssertStmt(self, s):
        """A vector condition (a check vectorized with its loop) tests every lane at once; only where
        one fails is the first failing lane found and its values reported."""
        cond = s.condition
        lanes = cond.dtype.lanes
        if lanes == 1:
            super().stmt_AssertStmt(s)
            return
        bits = self.natural(cond) or 32
        mtype = self.mask_type(bits, lanes)
        ok, lane = self.names.fresh("ok"), self.names.fresh("lane")
        self.emit(f"const {mtype} {ok} = {self.mask(cond, bits)[0]};")
        self.emit(f"int32_t {lane};")
        first = self._first_unset(mtype, bits // 8 * lanes, lanes)
        self.failure(f"({lane} = {first}({ok})) >= 0", self.assert_message(s, lane), lambda: self.stmt(s.body))

    def _first_unset(self, mtype: str, size: int, lanes: int) -> str:
        """`tsr_first_unset_<mask>(m)`: the first clear lane of a mask of `size` bytes, -1 when all are
        set. Whether all are set is one test of the whole register on x86 (PTEST, the halves of a
        wider mask ANDed first); elsewhere the mask's words are ANDed."""
        name = f"tsr_first_unset_{mtype}"
        word = next(w for w in (8, 4, 2, 1) if size % w == 0)
        lines = [f"/* the first lane of mask m that is clear (a failed check), or -1 when every lane is set */",
                 f"{self.func_qualifier} int32_t {name}({mtype} m) {{"]
        x86 = [(16, "__SSE4_1__", "ptestc128", 2), (32, "__AVX__", "ptestc256", 4)]
        fits = [(n, guard, fn, q) for n, guard, fn, q in x86 if size >= n and size % n == 0]
        for k, (n, guard, fn, q) in enumerate(reversed(fits)):
            lines += [f"#{'el' if k else ''}if defined({guard})",
                      f"  typedef long long v{n} __attribute__((vector_size({n})));",
                      f"  v{n} part[{size // n}], all;",
                      f"  memcpy(part, &m, sizeof part);",
                      f"  all = part[0];",
                      f"  for (int32_t k = 1; k < {size // n}; ++k) all &= part[k];",
                      f"  if (__builtin_expect(__builtin_ia32_{fn}(all, all == all), 1)) return -1;"]
        if fits:
            lines.append("#else")
        lines += [f"  uint{word * 8}_t w[{size // word}], all = (uint{word * 8}_t)-1;",
                  "  memcpy(w, &m, sizeof w);",
                  f"  for (int32_t k = 0; k < {size // word}; ++k) all &= w[k];",
                  f"  if (__builtin_expect(all == (uint{word * 8}_t)-1, 1)) return -1;"]
        if fits:
            lines.append("#endif")
        lines += [f"  for (int32_t k = 0; k < {lanes}; ++k) if (!m[k]) return k;", "  return -1;", "}"]
        self.helpers.require(name, "\n".join(lines))
        return name

    def fail(self, fmt_args: str):
        self.needs_err = True
        for name in reversed(self.heap_live):
            self.emit(f"free({name});")
        self.emit(f"snprintf(err, err_len, {fmt_args});")
        self.emit(f"return {abi.STATUS_RUNTIME};")

    def emit_status_check(self):
        self.open_block("if (tsr_status != 0)")
        for name in reversed(self.heap_live):
            self.emit(f"free({name});")
        self.emit("return tsr_status;")
        self.close_block()

    def kernel_prologue(self) -> list:
        return ["  int32_t tsr_status = 0;  /* first failure inside a parallel loop */"] if self.needs_status else []

    def kernel_epilogue(self) -> list:
        return ["  return 0;"]

    # -- allocation: arrays on the stack up to STACK_BYTES, else 64-byte aligned heap memory ----
    def fits_in_place(self, nbytes: int) -> bool:
        return nbytes <= STACK_BYTES

    def allocate_dynamic(self, s, name: str, elem: str, count):
        buf = s.buffer
        if count is not None:
            size = f"{count * max(1, buf.dtype.bits // 8)}"
        else:
            dims = " * ".join(self.text(d, P_MUL) for d in buf.shape)
            dims = dims if len(buf.shape) == 1 and self.expr(buf.shape[0])[1] >= P_UNARY else f"({dims})"
            size = f"(size_t){dims} * sizeof({elem})"
        self.helpers.require("tsr_alloc", (
            "/* 64-byte aligned heap memory (aligned_alloc needs a multiple of the alignment) */\n"
            f"{self.func_qualifier} void* tsr_alloc(size_t bytes) {{\n"
            "  if (bytes > SIZE_MAX - 63) return NULL;\n"
            "  return aligned_alloc(64, bytes == 0 ? 64 : (bytes + 63) & ~(size_t)63);\n}"))
        freed = name
        if count is None:
            # a symbolic size: on the stack when it fits (a per-row buffer of a dynamic length would
            # otherwise cost a malloc per row), else on the heap
            stack = self.names.fresh(f"{name}_stack")
            self.emit(f"{elem} {stack}[{STACK_BYTES} / sizeof({elem})]{self.array_attribute};")
            self.emit(f"{elem}* {name} = {size} <= sizeof({stack}) ? {stack} : ({elem}*)tsr_alloc({size});")
            freed = f"{name} == {stack} ? NULL : {name}"
        else:
            self.emit(f"{elem}* {name} = ({elem}*)tsr_alloc({size});")
        msg = c_string(f"out of memory: buffer {fmt(buf.name)} of {fmt(self.func_name)} needs %zu bytes")

        def body():
            if self.parallel_depth == 0:
                self.heap_live.append(freed)
            self.stmt(s.body)
            if self.parallel_depth == 0:
                self.heap_live.pop()
            self.emit(f"free({freed});")
        self.failure(f"{name} == NULL", f"{msg}, {size if count is None else f'(size_t){size}'}", body)


_CMP_SYMBOL = {E.LT: "<", E.LE: "<=", E.GT: ">", E.GE: ">=", E.EQ: "==", E.NE: "!="}


def _x86_summary(target) -> str:
    feats = sorted(f for f in target.features if f.startswith(("avx", "fma", "sse4", "amx")))
    return ", ".join(feats) or "none of the SIMD extensions"


# ---------------------------------------------------------------------------------------------
# the translation unit
# ---------------------------------------------------------------------------------------------
def generate(func: PrimFunc, target=None) -> str:
    """C source (one translation unit) for one lowered PrimFunc; see docs/internals.md.

    target: a tessera Target (or its text); None means "c" with OpenMP's default thread count."""
    return generate_module(func if isinstance(func, IRModule) else [func], target)


def generate_module(funcs, target=None) -> str:
    """One translation unit holding several lowered PrimFuncs (a list, or an IRModule whose
    keys name the functions); `tessera_metadata` lists them all."""
    return render_module(funcs, target)[0]


def render_module(funcs, target=None) -> tuple:
    """(C source, one dict per function): generate_module's text and, per function, its metadata
    (name, entry and timer symbols, params) plus what a caller in the same translation unit needs:
    the kernel body's symbol ("kernel"), its C parameter types ("kernel_params": the buffers and
    scalars, then the symbolic extents "shape_vars"), and whether it takes (err, err_len) last."""
    if isinstance(funcs, PrimFunc):
        funcs = [funcs]
    if isinstance(funcs, IRModule):
        items = [(name, f) for name, f in funcs]
    else:
        items = []
        for f in funcs:
            if not isinstance(f, PrimFunc):
                raise TesseraError(f"generate_module takes PrimFuncs, got {type(f).__name__}")
            items.append((f.name, f))
    if not items:
        raise TesseraError("generate_module: no functions to generate")
    if isinstance(target, str):
        target = Target(target)
    num_threads = int(getattr(target, "num_threads", 0) or 0) if target is not None else 0
    vector_bits = int(getattr(target, "vector_bits", 256) or 256) if target is not None else 256
    wide = target is not None and hasattr(target, "has_feature") and target.has_feature("avx512f")
    max_vector_bytes = max(16, min(vector_bits, 512 if wide else 256) // 8)
    helpers = HelperRegistry()
    seen, reserved = {}, set()
    entries = []
    for name, f in items:
        if not isinstance(f, PrimFunc):
            raise TesseraError(f"generate_module takes PrimFuncs, got {type(f).__name__} for {name!r}")
        cname = NOT_IDENT_CHAR.sub("_", name) or "f"
        if cname[0].isdigit():
            cname = "f" + cname
        if cname in seen:
            raise TesseraError(f"functions {seen[cname]!r} and {name!r} get the same C name "
                               f"tessera_call_{cname}; rename one")
        seen[cname] = name
        entries.append((name, cname, f))
    reserved.update(f"{c}_kernel" for _, c, _ in entries)
    reserved.update(f"{c}_unpack" for _, c, _ in entries)
    reserved.update(f"{c}_args_t" for _, c, _ in entries)
    functions, meta, infos = [], [], []
    for name, cname, f in entries:
        while True:
            mark = helpers.mark()
            try:
                writer = _FunctionWriter(f, name, cname, helpers, frozenset(reserved), num_threads,
                                         max_vector_bytes, target)
                text, m = writer.write()
                break
            except _Restart as r:
                helpers.rollback(mark)
                reserved.add(r.name)
        functions.append(text)
        meta.append(m)
        infos.append({**m, **writer.kernel_info})
    target_text = str(target) if target is not None else "c"
    return _assemble(helpers, functions, meta, target_text, len(entries)), infos


def _assemble(helpers: HelperRegistry, functions, meta, target_text, count) -> str:
    out = [f"/* Generated by tessera: {count} function{'s' if count != 1 else ''} for target "
           f"{c_comment(target_text)}. */", includes(), C_HEADER.strip(), ""]
    if helpers.typedefs:
        out.append("/* vector types (GCC vector extensions) */")
        out.extend(helpers.typedefs.values())
        out.append("")
    for code in helpers.functions.values():
        out.append(code)
        out.append("")
    out.extend(c + "\n" for c in entry_helpers("\n".join(functions)))
    decls = helpers.extern_decls()
    if decls:
        out.append("/* extern functions the program calls */")
        out.extend(decls)
        out.append("")
    out.extend(functions)
    out.append(metadata_text(meta, target_text, needed_features(target_text)))
    out.append("")
    return "\n".join(out)


class _FunctionWriter:
    """One PrimFunc: its parameters and symbolic extents, the kernel CodeGenC renders, and around
    it the ABI side (c_entry.EntryWriter: argument struct, unpacking, entry, timer, metadata)."""

    def __init__(self, func: PrimFunc, name: str, cname: str, helpers, reserved, num_threads,
                 max_vector_bytes=32, target=None):
        self.func, self.name, self.cname = func, name, cname
        self.helpers = helpers
        self.gen = CodeGenC(helpers, reserved | {"err", "err_len"}, num_threads, max_vector_bytes, target)
        self.kernel_info = {}
        self.gen.func_name = name

    def write(self):
        func, gen = self.func, self.gen
        flat = func.attrs.get("flat_params") if func.attrs else None
        if flat is not None and len(flat) != len(func.params):
            raise TesseraError(f"{self.name}: attrs['flat_params'] has {len(flat)} entries for "
                               f"{len(func.params)} parameters")
        params = []  # (kind, param, cname)
        for i, p in enumerate(func.params):
            if isinstance(p, Buffer):
                self._check_param_buffer(i, p)
                cn = gen.names.define(p)
                gen.buffer_names[p] = cn
                fb = flat[i] if flat is not None else None
                if fb is not None:
                    if not isinstance(fb, Buffer):
                        raise TesseraError(f"{self.name}: flat_params[{i}] should be the flat Buffer "
                                           f"of {p.name}, got {type(fb).__name__}")
                    gen.buffer_names[fb] = cn
                params.append(("tensor", p, cn, fb))
            else:
                if p.dtype not in VALUE_C or p.dtype.is_lowp():
                    raise TesseraError(f"{self.name}: scalar parameter {p.name} has dtype {p.dtype}, "
                                       f"which the C backend cannot pass")
                params.append(("scalar", p, gen.names.define(p), None))
        # symbolic shape/stride variables not passed as parameters
        param_vars = {p for k, p, _, _ in params if k == "scalar"}
        shape_vars = []
        for k, p, _, _ in params:
            if k != "tensor":
                continue
            for d in p.shape:
                if isinstance(d, E.Var):
                    gen._nonneg.add(d)  # an extent: the entry binds it from a shape, >= 0
                for v in collect_vars(d):
                    if v not in param_vars and v not in shape_vars:
                        shape_vars.append(v)
            for d in p.strides:
                for v in collect_vars(d):
                    if v not in param_vars and v not in shape_vars:
                        shape_vars.append(v)
        for v in shape_vars:
            if not v.dtype.is_integer():
                raise TesseraError(f"{self.name}: shape variable {v.name} has dtype {v.dtype}; "
                                   f"extents are integers")
            gen.names.define(v)
        gen.stmt(func.body)
        entry = EntryWriter(self.name, self.cname, gen, params, shape_vars,
                            func.attrs.get(WRITTEN_PARAMS) if func.attrs else None)
        kernel = self._kernel(params, shape_vars, entry)
        text, meta = entry.write()
        return kernel + "\n\n" + text, meta

    def _check_param_buffer(self, i, p):
        if p.dtype.lanes != 1 or p.dtype not in STORAGE_C:
            raise TesseraError(f"{self.name}: parameter {i} ({p.name}) has dtype {p.dtype}, which "
                               f"the C backend cannot pass (scalar element types only)")
        off = p.elem_offset
        if not (type(off) is E.IntImm and off.value == 0):
            raise TesseraError(f"{self.name}: parameter {p.name} has an element offset; the ABI passes "
                               f"the address of element 0, so parameters must have elem_offset 0")

    # -- the kernel -------------------------------------------------------------------------
    def _kernel(self, params, shape_vars, entry):
        gen = self.gen
        sig = []
        for kind, p, cn, fb in params:
            if kind == "tensor":
                sig.append(gen.buffer_param(p.dtype, cn, const=not (p in gen.stored or fb in gen.stored)))
            else:
                sig.append(f"{gen.value_type(p.dtype)} {cn}")
        for v in shape_vars:
            sig.append(f"{gen.value_type(v.dtype)} {gen.names.get(v)}")
        self.kernel_info = {"kernel": f"{self.cname}_kernel",
                            "kernel_params": [x.rsplit(" ", 1)[0] for x in sig],
                            "kernel_takes_err": gen.needs_err, "shape_vars": [v.name for v in shape_vars]}
        if gen.needs_err:
            sig.append("char* err")
            sig.append("int32_t err_len")
        return gen.kernel_text(f"{self.cname}_kernel", sig, f"{self.name}: {entry.describe(params)}")
