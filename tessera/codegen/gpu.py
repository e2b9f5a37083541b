"""What the GPU renderers (OpenCL, CUDA) share: a kernel per `tsr.device_kernel` of a lowered
function, its parameters (the buffers and scalars the kernel uses), and the launch metadata the
runtime needs (docs/gpu.md).

A lowered GPU function (after tir.transform.split_host_device and thread_sync) is host code that
allocates "global" workspaces and launches kernels in order. `render_gpu_module` renders every
kernel through a `GPUCodeGen` subclass (the C-style base with the backend's attributes) into one
translation unit and returns, as data, for each function: its parameters, its workspaces and per
kernel the launch grid, the work-group size, the shared memory it declares, the local (per-thread)
arrays it declares and its arguments (["param", i] or ["workspace", j]).
"""
from __future__ import annotations

from ..errors import TesseraError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..ir.function import IRModule, PrimFunc
from ..ir.functor import Visitor
from ..target import Target
from .c_base import NOT_IDENT_CHAR, CodeGenCBase, HelperRegistry, c_comment

KERNEL = "tsr.device_kernel"   # tir.transform.split_host_device's mark (codegen does not import tir)


class GPUCodeGen(CodeGenCBase):
    """The C-style base for a GPU kernel: no status, no heap, no failure reporting."""

    kernel_return = "void"
    array_attribute = ""
    backend_name = "GPU"
    preamble = ""                 # text at the top of a translation unit (typedefs, includes)

    target = None                 # the Target being rendered for (set by render_gpu_module)
    block_threads = None          # threads per block of the kernel being rendered (set by render_gpu_module)

    def kernel_head(self, name: str, params: list) -> str:
        return f"{self.kernel_prefix}{self.kernel_return} {name}({', '.join(params) or 'void'}) {{"

    def stmt_AttrStmt(self, s):
        key = s.attr_key
        if key == "pragma_import_c":
            # a tensor intrinsic's device functions, emitted once into the unit
            names = [n.strip() for n in s.node.value.split(",") if n.strip()]
            self.helpers.import_c(names, s.value.value)
            self.stmt(s.body)
            return
        if key == "tensor_intrin":
            name = s.node.value if type(s.node) is E.StringImm else str(s.node)
            needs = [f for f in s.value.value.split(",") if f] if type(s.value) is E.StringImm else []
            self.check_intrin(name, needs)
            self.emit(f"/* tensor intrinsic {name} */")
            self.stmt(s.body)
            return
        super().stmt_AttrStmt(s)

    def check_intrin(self, name: str, needs: list):
        """Refuse a tensor intrinsic this backend cannot run (its features name what it needs)."""
        if needs:
            raise TesseraError(f"tensor intrinsic {name!r} in {self.func_name} needs {', '.join(needs)}, which the "
                               f"{self.backend_name} backend does not have")


class _Uses(Visitor):
    """Buffers accessed and variables read in a kernel body, in first-use order; buffers it allocates."""

    def __init__(self):
        super().__init__()
        self.buffers, self.allocated, self.vars = {}, set(), {}

    def visit_BufferLoad(self, n):
        self.buffers.setdefault(n.buffer, None)
        self.generic_visit(n)

    def visit_BufferStore(self, n):
        self.buffers.setdefault(n.buffer, None)
        self.generic_visit(n)

    def visit_Allocate(self, s):
        self.allocated.add(s.buffer)
        self.generic_visit(s)

    def visit_Var(self, v):
        self.vars.setdefault(v, None)


def _items(funcs):
    if isinstance(funcs, PrimFunc):
        funcs = [funcs]
    if isinstance(funcs, IRModule):
        return [(name, f) for name, f in funcs]
    out = []
    for f in funcs:
        if not isinstance(f, PrimFunc):
            raise TesseraError(f"a GPU module is made of PrimFuncs, got {type(f).__name__}")
        out.append((f.name, f))
    if not out:
        raise TesseraError("render a GPU module: no functions")
    return out


def _host_parts(func: PrimFunc):
    """(workspaces [Buffer], kernels [(name, dims, body)]) of a split function, in launch order."""
    workspaces, kernels = [], []

    def walk(s):
        t = type(s)
        if t is S.AttrStmt and s.attr_key == KERNEL:
            kernels.append((s.node.value, [int(a.value) for a in s.value.args], s.body))
        elif t is S.SeqStmt:
            for x in s.seq:
                walk(x)
        elif t is S.Allocate:
            workspaces.append(s.buffer)
            walk(s.body)
        elif t is S.AttrStmt:
            walk(s.body)
        elif t is S.Evaluate and isinstance(s.value, E.IntImm):
            pass
        else:
            raise TesseraError(f"{func.name}: {t.__name__} outside every kernel; a GPU function must be lowered "
                               f"through its backend's pipeline (split_host_device) before rendering")

    walk(func.body)
    return workspaces, kernels


def _static_shape(func, buf, what) -> list:
    dims = []
    for d in buf.shape:
        if type(d) is not E.IntImm:
            raise TesseraError(f"{func.name}: {what} {buf.name!r} has the symbolic shape "
                               f"({', '.join(x.script() for x in buf.shape)}); GPU functions are built for static "
                               f"shapes")
        dims.append(int(d.value))
    return dims


def _alloc_bytes(body) -> dict:
    """Bytes of a kernel body's constant-shaped allocations by scope (per block for shared memory, per
    thread for local), in one walk."""
    total: dict = {}

    class _V(Visitor):
        def visit_Allocate(self, s):
            n = 1
            for d in s.buffer.shape:
                n *= int(d.value) if type(d) is E.IntImm else 0
            total[s.buffer.scope] = total.get(s.buffer.scope, 0) + n * max(1, s.buffer.dtype.bits // 8)
            self.generic_visit(s)

        def visit_PrimExpr(self, e):
            return None

    _V().visit(body)
    return total


def render_gpu_module(funcs, target, gen_cls) -> tuple:
    """(source text, [function metadata]) of lowered, split GPU functions (see module docstring)."""
    target = Target(target)
    helpers = HelperRegistry()
    kernel_texts, metas = [], []
    used_names = set()
    for name, func in _items(funcs):
        flat = func.attrs.get("flat_params") if func.attrs else None
        params, pmeta, pbuf = [], [], {}
        for i, p in enumerate(func.params):
            if isinstance(p, Buffer):
                if p.dtype.lanes != 1 or p.dtype not in gen_cls.storage_map:
                    raise TesseraError(f"{name}: parameter {p.name} has dtype {p.dtype}, which the "
                                       f"{gen_cls.backend_name} backend cannot pass")
                shape = _static_shape(func, p, "parameter")
                pmeta.append({"name": p.name, "kind": "tensor", "dtype": str(p.dtype), "shape": shape})
                pbuf[p] = ("param", i)
                if flat is not None and flat[i] is not None:
                    pbuf[flat[i]] = ("param", i)
            else:
                if p.dtype not in gen_cls.type_map:
                    raise TesseraError(f"{name}: scalar parameter {p.name} has dtype {p.dtype}, which the "
                                       f"{gen_cls.backend_name} backend cannot pass")
                pmeta.append({"name": p.name, "kind": "scalar", "dtype": str(p.dtype)})
            params.append(p)
        workspaces, kernels = _host_parts(func)
        wmeta = []
        for j, w in enumerate(workspaces):
            count = 1
            for d in _static_shape(func, w, "workspace"):
                count *= d
            wmeta.append({"name": w.name, "dtype": str(w.dtype), "count": count})
            pbuf[w] = ("workspace", j)
        kmeta = []
        written = set()
        for kname, dims, body in kernels:
            cname = NOT_IDENT_CHAR.sub("_", kname)
            if cname in used_names:
                raise TesseraError(f"two kernels are named {cname}; rename one of the functions")
            used_names.add(cname)
            text, args, stores = _render_kernel(func, cname, body, gen_cls, helpers, pbuf, params, target,
                                                dims[3] * dims[4] * dims[5])
            written |= stores
            kernel_texts.append(text)
            alloc = _alloc_bytes(body)
            kmeta.append({"name": cname, "grid": dims[:3], "block": dims[3:6], "args": args,
                          "shared_bytes": alloc.get("shared", 0) + alloc.get("shared.dyn", 0),
                          "local_bytes": alloc.get("local", 0), "dynamic_shared_bytes": dims[6] if len(dims) > 6 else 0})
        metas.append({"name": name, "params": pmeta, "workspaces": wmeta, "kernels": kmeta,
                      "writes": sorted(i for kind, i in written if kind == "param")})
    head = [f"/* Generated by tessera: {len(metas)} function{'s' if len(metas) != 1 else ''} for target "
            f"{c_comment(str(target))}. */", gen_cls.preamble.strip(), ""]
    for code in helpers.typedefs.values():
        head.append(code)
    for code in helpers.functions.values():
        head.append(code)
        head.append("")
    decls = helpers.extern_decls()
    if decls:
        raise TesseraError(f"the {gen_cls.backend_name} backend cannot call extern functions "
                           f"({', '.join(d.split('(')[0].split()[-1] for d in decls)})")
    return "\n".join(head) + "\n" + "\n\n".join(kernel_texts) + "\n", metas


def _render_kernel(func, cname, body, gen_cls, helpers, pbuf, params, target, block_threads):
    uses = _Uses()
    uses.visit(body)
    gen = gen_cls(helpers)
    gen.target = target
    gen.block_threads = block_threads
    gen.func_name = f"{func.name} (kernel {cname})"
    args, order = [], []
    for buf in uses.buffers:
        if buf in uses.allocated:
            continue
        where = pbuf.get(buf)
        if where is None:
            raise TesseraError(f"{func.name}: kernel {cname} uses buffer {buf.name!r}, which is neither a parameter, "
                               f"a workspace nor allocated in the kernel")
        order.append((tuple(where), buf))
    order.sort(key=lambda x: (x[0][0] != "param", x[0][1]))
    named = {}
    for where, buf in order:
        if where in named:   # a parameter and its flat buffer
            gen.buffer_names[buf] = named[where]
            continue
        cn = gen.names.define(buf, buf.name)
        gen.buffer_names[buf] = named[where] = cn
        args.append(list(where))
    scalars = [p for p in params if not isinstance(p, Buffer) and p in uses.vars]
    for p in scalars:
        gen.names.define(p)
        args.append(["param", params.index(p)])
    gen.stmt(body)
    stored, sig = set(), []
    for where in dict.fromkeys(w for w, _ in order):
        bufs = [b for w, b in order if w == where]
        const = not any(b in gen.stored for b in bufs)
        if not const:
            stored.add(where)
        sig.append(gen.buffer_param(bufs[0].dtype, named[where], const))
    for p in scalars:
        sig.append(f"{gen.value_type(p.dtype)} {gen.names.get(p)}")
    return gen.kernel_text(cname, sig, f"{func.name}: kernel {cname}"), args, stored


__all__ = ["GPUCodeGen", "render_gpu_module", "KERNEL"]
