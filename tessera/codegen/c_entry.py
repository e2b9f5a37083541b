"""The ABI side of a generated C function (docs/internals.md, "C code generation"): around each
kernel the renderer wrote, the argument struct `NAME_args_t`, the unpacking `NAME_unpack` (every
argument checked against the parameter: kind, dtype, rank, extents, strides; symbolic extents bound),
the entry `tessera_call_NAME`, the timer `tessera_time_NAME` and the function's entry in the JSON
`tessera_metadata`. The C helpers they call are runtime_c/tsr_entry.c, pasted (only those used) into
the unit by `entry_helpers`. `timer_loop` is the one C timer loop (the model entry of codegen/c_aot.py
uses it too).
"""
from __future__ import annotations

import json
import re

from ..errors import TesseraError
from ..ir import expr as E
from ..ir.buffer import Buffer
from ..ir.functor import Visitor, collect_vars
from ..ir.stmt import Block, BufferStore
from .. import abi
from .c_base import HALF_TYPES, STORAGE_C, VALUE_C, CodeGenCBase, NameTable, c_comment, c_string
from ..target import CPUID_FEATURES, needed_features
from .c_files import section, used_sections

# the C side of tessera_tensor_t (runtime_c/tsr_abi.h), pasted into every generated translation unit
C_HEADER = "\n" + section("tsr_abi.h", "tessera_tensor_t") + "\n"

ENTRY_FILE = "tsr_entry.c"
# names the entry functions use for their own parameters and locals
_ENTRY_RESERVED = frozenset({"a", "args", "kinds", "num_args", "err", "err_len", "number", "repeat",
                             "min_repeat_ms", "results", "status"})

_INT_RANGE = {"int8": ("-128", "127"), "int16": ("-32768", "32767"), "int32": ("INT32_MIN", "INT32_MAX"),
              "int64": ("INT64_MIN", "INT64_MAX"), "uint8": ("0", "255"), "uint16": ("0", "65535"),
              "uint32": ("0", "UINT32_MAX"), "uint64": ("0", "INT64_MAX"), "bool": ("INT64_MIN", "INT64_MAX")}


# the PrimFunc attribute naming the buffer parameters a function writes (indices into its params):
# the C backend takes it from the function before lowering (backend/c.py), while its blocks still
# declare what they write; the entry's metadata records it ("writes") and the entry refuses an
# argument that overlaps a written one
WRITTEN_PARAMS = "written_params"


def written_params(func) -> tuple:
    """Indices of the buffer parameters `func` writes: those a block declares it writes, a store
    targets, or a call takes the address of outside a block that declares its writes (a tensor
    intrinsic reaches its operands by address: the block's regions say which it writes). On a
    function that already carries WRITTEN_PARAMS, that attribute."""
    known = func.attrs.get(WRITTEN_PARAMS) if func.attrs else None
    if known is not None:
        return tuple(known)
    index = {}
    flat = func.attrs.get("flat_params") if func.attrs else None
    for i, p in enumerate(func.params):
        if isinstance(p, Buffer):
            index[id(p)] = i
            if flat is not None and isinstance(flat[i], Buffer):
                index[id(flat[i])] = i
    finder = _Writes(index)
    finder.visit(func.body)
    return tuple(sorted(finder.found))


class _Writes(Visitor):
    def __init__(self, index):
        super().__init__()
        self.index, self.found, self.declared = index, set(), 0

    def _add(self, buf):
        i = self.index.get(id(buf))
        if i is not None:
            self.found.add(i)

    def visit_Block(self, b):
        for r in b.writes:
            self._add(r.buffer)
        self.declared += bool(b.writes)
        self.generic_visit(b)
        self.declared -= bool(b.writes)

    def visit_BufferStore(self, s):
        self._add(s.buffer)
        self.generic_visit(s)

    def visit_Call(self, c):
        if c.op == "address_of" and not self.declared and c.args and isinstance(c.args[0], E.BufferLoad):
            self._add(c.args[0].buffer)
        self.generic_visit(c)


def includes() -> str:
    """The #include lines every generated unit starts with (runtime_c/tsr_includes.h)."""
    return section("tsr_includes.h", "includes")


def entry_helpers(code: str) -> list:
    """The C helpers of runtime_c/tsr_entry.c that `code` (the units' functions) uses, in file order."""
    return used_sections(ENTRY_FILE, code)


def fmt(text: str) -> str:
    """text for use inside a printf format."""
    return text.replace("%", "%%")


def timer_loop(call: str, now: str = "tsr_now", indent: str = "  ") -> list:
    """The C lines of TVM's time_evaluator around `call`: one warm-up call, then `repeat` measurements
    of `number` calls each (`number` grows until a measurement takes min_repeat_ms), seconds per call
    in results[r]. `call` is a C statement without its `;` that returns the status on failure
    (`TSR_TRY(f(...))`); the enclosing function has int32_t number, repeat, min_repeat_ms and
    double* results, and `now()` is a clock in seconds."""
    lines = [
        f"{call};  /* warm-up */",
        "int64_t n = number;",
        "for (int32_t r = 0; r < repeat; ++r) {",
        "  double elapsed;",
        "  for (;;) {",
        f"    double t0 = {now}();",
        f"    for (int64_t k = 0; k < n; ++k) {call};",
        f"    elapsed = {now}() - t0;",
        "    if (min_repeat_ms <= 0 || elapsed * 1e3 >= (double)min_repeat_ms || n >= ((int64_t)1 << 40)) break;",
        "    double grow = elapsed > 0 ? ceil((double)min_repeat_ms / (elapsed * 1e3)) : 1e9;",
        "    n *= grow < 2 ? 2 : grow > 1e9 ? (int64_t)1000000000 : (int64_t)grow;",
        "  }",
        "  results[r] = elapsed / (double)n;",
        "}",
    ]
    return [indent + x for x in lines]


def metadata_text(meta: list, target_text: str, cpu_features=()) -> str:
    """`const char tessera_metadata[]`: the JSON the runtime reads (one line per function and parameter);
    cpu_features: what the code needs from the CPU (target.needed_features), which the loader checks."""
    doc = json.dumps({"version": 1, "functions": meta, "target": target_text, "cpu_features": list(cpu_features)},
                     separators=(", ", ": "))
    chunks = re.split(r'(?=\{"name": )', doc)
    return "const char tessera_metadata[] =\n" + "\n".join("  " + c_string(c) for c in chunks) + ";"


def cpu_check(target) -> str:
    """C of `tsr_cpu_check(err, err_len)`: 0 when the CPU running the library has every feature its
    code may use (target.needed_features), else STATUS_RUNTIME and a message naming the missing
    ones; checked once, compiled for the baseline x86-64 (runtime_c/tsr_entry.c tsr_cpu_missing). The
    model entry points (codegen/c_aot.py) call it before anything that may use those instructions."""
    needed = needed_features(target)
    rows = [f'  {{"{f}", {CPUID_FEATURES[f][0]:#x}, {CPUID_FEATURES[f][1]}, {CPUID_FEATURES[f][2]}, '
            f'{CPUID_FEATURES[f][3]}, {CPUID_FEATURES[f][4]:#x}ULL}},' for f in needed]
    return "\n".join([
        section(ENTRY_FILE, "tsr_cpu_missing"), "",
        f"/* the CPU features the code of this library may use (target {c_comment(str(target))}) */",
        f"static const tsr_cpu_feature_t tsr_cpu_needs[{max(len(rows), 1)}] = {{",
        *(rows or ['  {"", 0, 0, 0, 0, 0},']),
        "};",
        "",
        "TSR_BASELINE static int32_t tsr_cpu_check(char* err, int32_t err_len) {",
        "  static int checked;",
        "  if (__atomic_load_n(&checked, __ATOMIC_ACQUIRE)) return 0;",
        f"  if (tsr_cpu_missing(tsr_cpu_needs, {len(rows)}, {c_string(str(target))}, err, err_len)) "
        f"return {abi.STATUS_RUNTIME};",
        "  __atomic_store_n(&checked, 1, __ATOMIC_RELEASE);",
        "  return 0;",
        "}",
        ""])


class EntryWriter:
    """Argument struct, unpacking checks, entry, timer and metadata of one function whose kernel
    `gen` (a CodeGenC that has rendered the body) wrote. params: (kind, param, C name, flat
    buffer) per parameter; shape_vars: the symbolic extents the kernel takes after them."""

    def __init__(self, name: str, cname: str, gen, params, shape_vars, written=None):
        self.name, self.cname, self.gen = name, cname, gen
        self.helpers = gen.helpers
        self.params, self.shape_vars = params, shape_vars
        # the tensor parameters the function writes: WRITTEN_PARAMS when the function has it, else
        # the buffers the kernel's C may write (stores, addresses taken: its non-const pointers)
        if written is None:
            written = [i for i, (k, p, _, fb) in enumerate(params) if p in gen.stored or fb in gen.stored]
        self.writes = [i for i in sorted(set(written)) if 0 <= i < len(params) and params[i][0] == "tensor"]
        # the kernel's arguments in order: the fields of NAME_args_t
        self.kernel_args = [cn for _, _, cn, _ in params] + [gen.names.get(v) for v in shape_vars]

    def describe(self, params) -> str:
        """`A float32[n, 64], alpha float32`: the parameters for a comment."""
        out = []
        for kind, p, _, _ in params:
            if kind == "tensor":
                out.append(f"{p.name} {p.dtype}[{', '.join(self._dim_text(d) for d in p.shape)}]")
            else:
                out.append(f"{p.name} {p.dtype}")
        return c_comment(", ".join(out))

    def _dim_text(self, d):
        if type(d) is E.IntImm:
            return str(d.value)
        return self._expr_text(d, {v: self.gen.names.get(v) for v in collect_vars(d)})

    def _expr_text(self, e, names: dict) -> str:
        """e printed with the given names for its variables (shape expressions)."""
        p = CodeGenCBase(self.helpers)
        for v, n in names.items():
            p.names.alias(v, n or v.name)
        return p.text(e)

    # -- entry, timer, metadata ---------------------------------------------------------------
    def write(self):
        """(C text of the argument struct, unpacking, entry and timer; the function's metadata)."""
        gen, cname, params, shape_vars = self.gen, self.cname, self.params, self.shape_vars
        names = NameTable(_ENTRY_RESERVED)
        n = len(params)
        arg_list = ", ".join(p.name for _, p, _, _ in params)
        struct = [f"/* {self.name}: the kernel's arguments, checked */", "typedef struct {"]
        for kind, p, cn, _ in params:
            t = f"{STORAGE_C[p.dtype]}*" if kind == "tensor" else VALUE_C[p.dtype]
            struct.append(f"  {t} {cn};")
        for v in shape_vars:
            struct.append(f"  {VALUE_C[v.dtype]} {gen.names.get(v)};")
        if len(struct) == 2:
            struct.append("  char unused;")
        struct.append(f"}} {cname}_args_t;")

        count_msg = f"expected {n} argument{'s' if n != 1 else ''} ({fmt(arg_list)}), got %d"
        body = [f"static int32_t {cname}_unpack({cname}_args_t* a, void** args, const int32_t* kinds, "
                f"int32_t num_args, char* err, int32_t err_len) {{",
                f"  if (num_args != {n}) {{",
                f"    snprintf(err, err_len, {c_string(count_msg)}, (int)num_args);",
                f"    return {abi.STATUS_ARG_COUNT};", "  }"]
        bound = {}  # Var -> (local name, source text)
        # scalars first: they may be extents of tensors
        for i, (kind, p, cn, _) in enumerate(params):
            if kind != "scalar":
                continue
            dt = p.dtype
            loc = names.fresh(p.name + "_arg")
            if dt.is_float():
                body.append(f"  double {loc};")
                body.append(f"  TSR_TRY(tsr_get_float(args, kinds, {i}, {c_string(p.name)}, "
                            f"\"{dt}\", &{loc}, err, err_len));")
                if dt in HALF_TYPES:
                    body.append(f"  a->{cn} = {self._half_from_double(loc, dt)};")
                else:
                    body.append(f"  a->{cn} = ({VALUE_C[dt]}){loc};")
            else:
                lo, hi = _INT_RANGE[str(dt)]
                body.append(f"  int64_t {loc};")
                body.append(f"  TSR_TRY(tsr_get_int(args, kinds, {i}, {c_string(p.name)}, {lo}, {hi}, "
                            f"\"{dt}\", &{loc}, err, err_len));")
                body.append(f"  a->{cn} = " + (f"{loc} != 0;" if dt == "bool" else f"({VALUE_C[dt]}){loc};"))
                bound[p] = (loc, f"argument {i} ({p.name})")
        deferred = []
        tensors = {}   # param index -> the local holding its tensor_t
        for i, (kind, p, cn, _) in enumerate(params):
            if kind != "tensor":
                continue
            t = tensors[i] = names.fresh(cn)
            dt = p.dtype
            src = f"argument {i} ({p.name})"
            qn = c_string(p.name)
            body.append(f"  /* argument {i}: {self.describe([(kind, p, cn, None)])} */")
            body.append(f"  const tessera_tensor_t* {t} = NULL;")
            body.append(f"  TSR_TRY(tsr_get_tensor(args, kinds, {i}, {qn}, {p.ndim}, "
                        f"{abi.DTYPE_CODE[dt.code]}, {8 if dt == 'bool' else dt.bits}, \"{dt}\", &{t}, err, err_len));")
            for what, exprs, status in (("extent", p.shape, abi.STATUS_SHAPE),
                                        ("stride", p.strides, abi.STATUS_STRIDE)):
                for d, x in enumerate(exprs):
                    actual = f"{t}->shape[{d}]" if what == "extent" else f"tsr_stride({t}, {d})"
                    if type(x) is E.IntImm:
                        body.append(f"  TSR_TRY(tsr_expect({actual}, {x.value}LL, {status}, {i}, {qn}, {d}, "
                                    f"\"{what}\", NULL, NULL, err, err_len));")
                    elif isinstance(x, E.Var) and x not in bound:
                        loc = names.fresh(gen.names.get(x) or x.name)
                        body.append(f"  const int64_t {loc} = {actual};")
                        if x.dtype != "int64":
                            lo, hi = _INT_RANGE[str(x.dtype)]
                            body.append(f"  TSR_TRY(tsr_check_fits({loc}, {lo}, {hi}, {i}, {qn}, {d}, "
                                        f"\"{what}\", \"{x.name}\", \"{x.dtype}\", err, err_len));")
                        bound[x] = (loc, src)
                    elif isinstance(x, E.Var):
                        loc, where = bound[x]
                        body.append(f"  TSR_TRY(tsr_expect({actual}, {loc}, {status}, {i}, {qn}, {d}, "
                                    f"\"{what}\", {c_string(x.name)}, {c_string(where)}, err, err_len));")
                    else:
                        check = (actual, x, status, i, qn, d, what)
                        if all(v in bound for v in collect_vars(x)):
                            body.append(self._expr_check(check, bound))
                        else:
                            deferred.append(check)
                if what == "extent" and not p.strides:
                    body.append(f"  TSR_TRY(tsr_check_compact({t}, {i}, {qn}, err, err_len));")
            body.append(f"  a->{cn} = ({STORAGE_C[dt]}*){t}->data;")
        for check in deferred:
            missing = [v.name for v in collect_vars(check[1]) if v not in bound]
            if missing:
                raise TesseraError(f"{self.name}: the {check[6]} of dimension {check[5]} of {params[check[3]][1].name} "
                                   f"is {self._expr_text(check[1], {v: v.name for v in collect_vars(check[1])})}, but {', '.join(missing)} is not the "
                                   f"extent or stride of any dimension nor a parameter, so it cannot be bound")
            body.append(self._expr_check(check, bound))
        for w in self.writes:
            for j in tensors:
                if j != w and not (j in self.writes and j < w):
                    body.append(f"  TSR_TRY(tsr_check_disjoint({tensors[w]}, {w}, {c_string(params[w][1].name)}, "
                                f"{tensors[j]}, {j}, {c_string(params[j][1].name)}, err, err_len));")
        for v in shape_vars:
            if v not in bound:
                raise TesseraError(f"{self.name}: shape variable {v.name} cannot be bound from the arguments")
            body.append(f"  a->{gen.names.get(v)} = ({VALUE_C[v.dtype]}){bound[v][0]};")
        body.append("  return 0;")
        body.append("}")

        call_args = ", ".join([f"a.{x}" for x in self.kernel_args] + (["err", "err_len"] if gen.needs_err else []))
        kcall = f"{cname}_kernel({call_args})"
        entry = [
            f"int32_t tessera_call_{cname}(void** args, const int32_t* kinds, int32_t num_args, char* err, int32_t err_len) {{",
            f"  {cname}_args_t a;",
            f"  TSR_TRY({cname}_unpack(&a, args, kinds, num_args, err, err_len));",
            f"  return {kcall};",
            "}",
        ]
        timer = [
            "/* TVM's time_evaluator: one warm-up call, then `repeat` measurements of `number` calls each;",
            "   a measurement shorter than min_repeat_ms grows `number` and is taken again. */",
            f"int32_t tessera_time_{cname}(void** args, const int32_t* kinds, int32_t num_args, int32_t number,",
            f"                          int32_t repeat, int32_t min_repeat_ms, double* results, char* err, int32_t err_len) {{",
            f"  {cname}_args_t a;",
            f"  TSR_TRY({cname}_unpack(&a, args, kinds, num_args, err, err_len));",
            "  if (number < 1 || repeat < 1) {",
            "    snprintf(err, err_len, \"time evaluator: number and repeat must be >= 1, got number=%d, repeat=%d\", (int)number, (int)repeat);",
            f"    return {abi.STATUS_RUNTIME};",
            "  }",
            *timer_loop(f"TSR_TRY({kcall})"),
            "  return 0;",
            "}",
        ]
        text = "\n".join(struct) + "\n\n" + "\n".join(body) + "\n\n" + "\n".join(entry) + "\n\n" + "\n".join(timer) + "\n"
        return text, self._metadata(params)

    def _half_from_double(self, loc, dt):
        if dt == "float16":
            return f"(float)(_Float16){loc}"
        return f"{self.gen.round_helper('bfloat16')}((float){loc})"

    def _expr_check(self, check, bound):
        actual, x, status, i, qn, d, what = check
        names = {v: bound[v][0] for v in collect_vars(x)}
        value = self._expr_text(E.Cast("int64", x) if x.dtype != "int64" else x, names)
        shown = self._expr_text(x, {v: v.name for v in names})
        return (f"  TSR_TRY(tsr_expect({actual}, {value}, {status}, {i}, {qn}, {d}, \"{what}\", "
                f"{c_string(shown)}, NULL, err, err_len));")

    def _metadata(self, params):
        out = []
        for kind, p, _, _ in params:
            if kind == "tensor":
                out.append({"name": p.name, "kind": "tensor", "dtype": str(p.dtype),
                            "shape": [self._meta_dim(d) for d in p.shape],
                            "strides": [self._meta_dim(d) for d in p.strides] if p.strides else None})
            else:
                out.append({"name": p.name, "kind": "scalar", "dtype": str(p.dtype)})
        return {"name": self.name, "entry": f"tessera_call_{self.cname}",
                "timer": f"tessera_time_{self.cname}", "params": out, "writes": list(self.writes)}

    def _meta_dim(self, d):
        if type(d) is E.IntImm:
            return d.value
        if isinstance(d, E.Var):
            return d.name
        return self._expr_text(d, {v: v.name for v in collect_vars(d)})
