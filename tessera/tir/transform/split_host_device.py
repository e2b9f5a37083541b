"""split_host_device: a lowered GPU function becomes host code launching kernels (TVM's SplitHostDevice).

On a GPU target the statements outside the thread-bound loops run on the host, and each outermost
loop bound to blockIdx/threadIdx starts a kernel. This pass marks every kernel as
`AttrStmt(StringImm(name), "tsr.device_kernel", tsr.launch(gx, gy, gz, lx, ly, lz), body)`: the
launch grid (work-groups per axis) and work-group size are the largest extents of the loops bound
to each blockIdx / threadIdx axis in the kernel. Inside a kernel a loop smaller than its axis's
launch extent gets a guard (`if (tx < extent)`), and the "shared" allocations move to the top of
the kernel (OpenCL declares `__local` memory at kernel scope; it lives for the whole work-group).
A kernel that calls a warp-level tensor intrinsic (`AttrStmt(.., "tsr.warp_execution", 32)`) is
launched with threadIdx.x = 32, the warp's lanes; one that calls a block-level intrinsic
(`AttrStmt(.., "tsr.block_execution", n)`: every thread of the block calls it) with threadIdx.x = n
and nothing else bound to threads. `AttrStmt(.., "tsr.dynamic_shared", bytes)` around a call says it
needs that much dynamic shared memory: the launch's seventh extent (the largest in the kernel).

The host part may hold only kernels, sequences of them and allocations of "global" buffers
(workspaces the runtime allocates in device memory, passed to the kernels that use them). A
statement that would run on the host (a loop nobody bound, a store outside every kernel) is
refused by name, as are launch extents that are not constants, and buffers of scope "global" /
"local" allocated inside a kernel above its threadIdx loops (each thread would hold its own copy
of what the schedule says the threads share; scope "shared" is what shares it).
"""
from __future__ import annotations

from ...errors import BuildError
from ...ir import Allocate, AttrStmt, Call, Evaluate, For, ForKind, IfThenElse, IntImm, PrimFunc, SeqStmt, StringImm
from ...ir.functor import Visitor
from ._stmt_mutator import StmtMutator

KERNEL = "tsr.device_kernel"
WARP = "tsr.warp_execution"   # tensor_intrin/cuda.py: what it wraps runs in all 32 lanes of a warp
BLOCK_EXEC = "tsr.block_execution"   # tensor_intrin/cuda_gemm.py: what it wraps runs on every thread of the block
DYN_SHARED = "tsr.dynamic_shared"    # tensor_intrin/cuda_gemm.py: bytes of dynamic shared memory the call needs
LAUNCH = "tsr.launch"
GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
BLOCK_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
SHARED_SCOPES = ("shared", "shared.dyn")


def thread_tag(loop) -> str | None:
    """The blockIdx/threadIdx tag a loop is bound to, or None."""
    if type(loop) is not For or loop.kind != ForKind.THREAD_BINDING or loop.thread_binding is None:
        return None
    return loop.thread_binding.thread_tag


def split_host_device(func: PrimFunc) -> PrimFunc:
    """`func` with each kernel marked by a tsr.device_kernel attribute carrying its launch shape."""
    if kernels_of(func):   # already split
        return func
    count = _count_kernels(func.body)
    names = iter([f"{func.name}_kernel"] if count == 1 else [f"{func.name}_kernel{i}" for i in range(count)])
    body = _host(func, func.body, names)
    return func.with_body(body)


def _count_kernels(stmt) -> int:
    if thread_tag(stmt) is not None:
        return 1
    if type(stmt) is SeqStmt:
        return sum(_count_kernels(s) for s in stmt.seq)
    if type(stmt) in (Allocate, AttrStmt):
        return _count_kernels(stmt.body)
    return 0


def _describe(stmt) -> str:
    if type(stmt) is For:
        return f"loop {stmt.loop_var.name!r}"
    try:
        text = stmt.script().strip().splitlines()[0]
    except Exception:  # noqa: BLE001 - a description only
        text = type(stmt).__name__
    return f"statement `{text[:80]}`"


def _host(func, stmt, names):
    t = type(stmt)
    if thread_tag(stmt) is not None:
        return _kernel(func, stmt, next(names))
    if t is SeqStmt:
        return SeqStmt([_host(func, s, names) for s in stmt.seq])
    if t is Allocate:
        if stmt.buffer.scope not in ("global",):
            raise BuildError(f"{func.name}: buffer {stmt.buffer.name!r} of scope {stmt.buffer.scope!r} is allocated "
                             f"outside every kernel; only 'global' memory lives between kernels (compute it "
                             f"under the thread-bound loops of the kernel that uses it)")
        return stmt.replace(body=_host(func, stmt.body, names))
    if t is Evaluate and isinstance(stmt.value, IntImm):
        return stmt
    if t is AttrStmt and not stmt.attr_key.startswith("pragma_"):
        return stmt.replace(body=_host(func, stmt.body, names))
    raise BuildError(f"{func.name}: {_describe(stmt)} would run on the host: a GPU function runs only inside "
                     f"kernels; bind its loops to blockIdx/threadIdx (sch.bind(loop, 'blockIdx.x') ...)")


class _Launch(Visitor):
    """The largest extent bound to each thread tag in a kernel."""

    def __init__(self, func, name):
        super().__init__()
        self.func, self.name = func, name
        self.extents = {}
        self.warp = False     # a warp-level tensor intrinsic is called in the kernel
        self.block = None     # the thread count of a block-level tensor intrinsic called in the kernel
        self.dyn_shared = 0   # bytes of dynamic shared memory its calls need

    def visit_For(self, s):
        tag = thread_tag(s)
        if tag is not None:
            if tag not in GRID_TAGS + BLOCK_TAGS:
                raise BuildError(f"{self.func.name}: loop {s.loop_var.name!r} in kernel {self.name} is bound to "
                                 f"{tag!r}, which a GPU kernel does not have (vthread loops are lowered before)")
            if type(s.extent) is not IntImm:
                raise BuildError(f"{self.func.name}: loop {s.loop_var.name!r} in kernel {self.name} is bound to "
                                 f"{tag} with extent {s.extent.script()}, not a constant; the launch shape of a "
                                 f"kernel must be known when it is built (split the loop by a constant factor "
                                 f"and bind the constant part)")
            self.extents[tag] = max(self.extents.get(tag, 1), s.extent.value)
        self.generic_visit(s)

    def visit_AttrStmt(self, s):
        if s.attr_key == WARP:
            self.warp = True
        elif s.attr_key == BLOCK_EXEC:
            n = int(s.value.value)
            if self.block is not None and self.block != n:
                raise BuildError(f"{self.func.name}: kernel {self.name} calls block-level tensor intrinsics for "
                                 f"{self.block} and for {n} threads; one kernel has one block size")
            self.block = n
        elif s.attr_key == DYN_SHARED:
            self.dyn_shared = max(self.dyn_shared, int(s.value.value))
        self.generic_visit(s)

    def visit_PrimExpr(self, e):
        return None


class _Kernel(StmtMutator):
    """Guards thread loops smaller than the launch, lifts shared allocations out, checks private ones."""

    def __init__(self, func, name, extents):
        super().__init__()
        self.func, self.name, self.extents = func, name, extents
        self.shared = []
        self.in_threads = 0

    def visit_For(self, s):
        tag = thread_tag(s)
        if tag is not None and tag.startswith("threadIdx"):
            self.in_threads += 1
            body = self.visit(s.body)
            self.in_threads -= 1
        else:
            body = self.visit(s.body)
        if tag is not None and s.extent.value < self.extents[tag]:
            body = IfThenElse(s.loop_var < s.min + s.extent, body)
        return s if body is s.body else s.replace(body=body)

    def visit_Allocate(self, s):
        buf = s.buffer
        if buf.scope in SHARED_SCOPES:
            self.shared.append(buf)
            return self.visit(s.body)
        if not self.in_threads and _has_thread_loop(s.body):
            raise BuildError(f"{self.func.name}: buffer {buf.name!r} of scope {buf.scope!r} is allocated in kernel "
                             f"{self.name} above its threadIdx loops, so each thread would hold its own copy of "
                             f"it; give it scope 'shared' (shared by the work-group) or compute it under the "
                             f"thread-bound loops")
        return self.generic_visit(s)


def _has_thread_loop(stmt) -> bool:
    found = []

    class _V(Visitor):
        def visit_For(self, s):
            tag = thread_tag(s)
            if tag is not None and tag.startswith("threadIdx"):
                found.append(s)
            else:
                self.generic_visit(s)

        def visit_PrimExpr(self, e):
            return None

    _V().visit(stmt)
    return bool(found)


def _kernel(func, root, name):
    launch = _Launch(func, name)
    launch.visit(root)
    ext = launch.extents
    if launch.warp:
        if ext.get("threadIdx.x", 32) != 32:
            raise BuildError(f"{func.name}: kernel {name} calls a warp-level tensor intrinsic, so threadIdx.x is the "
                             f"warp's 32 lanes; the kernel binds threadIdx.x to {ext['threadIdx.x']} threads (bind "
                             f"warps to threadIdx.y / threadIdx.z)")
        ext["threadIdx.x"] = 32
    if launch.block is not None:
        bound = {t: n for t, n in ext.items() if t in BLOCK_TAGS}
        if bound:
            raise BuildError(f"{func.name}: kernel {name} calls a block-level tensor intrinsic, which runs on all "
                             f"{launch.block} threads of the block; the kernel also binds "
                             f"{', '.join(f'{t} ({n})' for t, n in bound.items())}: bind only blockIdx around it")
        ext["threadIdx.x"] = launch.block
    mut = _Kernel(func, name, ext)
    body = mut.visit(root)
    for buf in reversed(mut.shared):
        body = Allocate(buf, body)
    dims = [IntImm("int32", ext.get(t, 1)) for t in GRID_TAGS + BLOCK_TAGS] + [IntImm("int32", launch.dyn_shared)]
    return AttrStmt(StringImm(name), KERNEL, Call("int32", LAUNCH, dims), body)


def kernels_of(func: PrimFunc) -> list:
    """[(name, (grid x, y, z), (block x, y, z), body)] of a function split_host_device has marked
    (the launch's dynamic shared bytes, its seventh extent, are codegen's to read)."""
    out = []

    class _V(Visitor):
        def visit_AttrStmt(self, s):
            if s.attr_key == KERNEL:
                dims = [int(a.value) for a in s.value.args]
                out.append((s.node.value, tuple(dims[:3]), tuple(dims[3:6]), s.body))
            else:
                self.generic_visit(s)

        def visit_PrimExpr(self, e):
            return None

    _V().visit(func.body)
    return out


__all__ = ["split_host_device", "kernels_of", "KERNEL", "LAUNCH", "BLOCK_EXEC", "DYN_SHARED", "thread_tag"]
