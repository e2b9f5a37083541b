"""What every design-space rule shares: the ScheduleRule interface, the target-derived limits
(SpaceContext), the annotation keys the rules leave for the postprocessors, and block analyses.

A rule is MetaSchedule's ScheduleRule: `apply(sch, block) -> list[Schedule]` maps one schedule to
the schedules it branches into (the input itself, unchanged, when the rule does not apply). A rule
changes a schedule only through traced primitives, so every decision it samples is in the trace.
"""
from __future__ import annotations

import math

from ...errors import ScheduleError, TesseraError
from ...ir import BufferLoad, BufferStore, IntImm, Visitor
from ...ir.functor import collect_vars
from ...runtime import opencl as cl_rt
from ...target import Target
from ...tir.schedule.analysis import loop_iter_type
from ...tir.analysis import accesses

# annotations a rule leaves for the postprocessors (MetaSchedule's keys)
ANN_PARALLEL = "meta_schedule.parallel"            # root block: the most iterations fused into one parallel loop
ANN_VECTORIZE = "meta_schedule.vectorize"          # root block: the longest vectorized loop
ANN_UNROLL = "meta_schedule.unroll_explicit"       # root block: the auto-unroll depth (0: none)
ANN_TILING = "meta_schedule.tiling_structure"      # a tiled block: its structure ("SSRSRS")
ANN_TENSORIZED = "meta_schedule.auto_tensorize"    # a tensorized block: the intrinsic's name
ANN_COOP_FETCH = "meta_schedule.cooperative_fetch"  # a shared-memory cache block: its copy's vector lanes
META_PREFIX = "meta_schedule."

UNROLL_CANDIDATES = (0, 16, 64, 512)
PARALLEL_JOBS_PER_THREAD = (1, 4, 16, 64)


GPU_KINDS = ("opencl", "cuda")
GPU_UNROLL_CANDIDATES = (0, 16, 64, 512, 1024)   # MetaSchedule's GPU auto-unroll depths
GPU_THREAD_CANDIDATES = (32, 64, 128, 256, 512, 1024)   # AutoBind's threads per block
GPU_FETCH_LANES = (1, 2, 4)                      # cooperative-fetch vector widths (float4 at most)
CUDA_MAX_THREADS = 1024                          # every architecture since sm_20
CUDA_MAX_SHARED = 48 * 1024                      # static __shared__ bytes per block (sm_90 too)
OPENCL_FALLBACK_THREADS = 256                    # without a usable device: a common work-group limit
OPENCL_FALLBACK_SHARED = 32 * 1024               # OpenCL 1.2's minimum local memory


def gpu_limits(target) -> tuple:
    """(threads per block, shared-memory bytes per block) a GPU target's candidates must fit: CUDA's
    (1024, 48 KiB, as the cuda backend checks them); an OpenCL target's from its device (the one
    `-device=` names, through pyopencl) when one is usable, else (256, 32 KiB); either capped by the
    target's -max-threads-per-block."""
    t = Target(target)
    if t.kind == "cuda":
        threads, shared = CUDA_MAX_THREADS, CUDA_MAX_SHARED
    else:
        threads, shared = OPENCL_FALLBACK_THREADS, OPENCL_FALLBACK_SHARED
        if cl_rt.available() and cl_rt.usable()[0]:
            try:
                _, _, dev = cl_rt.context(t.attrs.get("device"))
                threads, shared = int(dev.max_work_group_size), int(dev.local_mem_size)
            except TesseraError:
                pass
    limit = t.attrs.get("max-threads-per-block")
    if limit is not None:
        threads = min(threads, int(limit))
    return threads, shared


class SpaceContext:
    """The limits of one target the rules and postprocessors size the space by.

    CPU targets: lanes: float32 lanes of a SIMD register; max_vectorize_extent: the longest loop
    vectorized (four registers of float32: codegen splits a longer vector into registers, and a loop
    longer than that is better tiled than vectorized); parallel_candidates: the parallel extents
    ParallelizeVectorizeUnroll chooses from (threads x 1/4/16/64 jobs each).
    GPU targets (opencl, cuda; is_gpu): max_threads_per_block and max_shared_memory (gpu_limits),
    thread_candidates (AutoBind's block sizes within the limit), lanes: the widest cooperative-fetch
    vector (4: float4), unroll_candidates MetaSchedule's GPU ones; nothing is parallelized."""

    __slots__ = (
        "is_gpu",
        "lanes",
        "max_innermost_factor",
        "max_shared_memory",
        "max_threads_per_block",
        "max_vectorize_extent",
        "num_threads",
        "parallel_candidates",
        "target",
        "thread_candidates",
        "unroll_candidates",
    )

    def __init__(self, target, max_innermost_factor: int = 64):
        t = Target(target)
        if not t.is_cpu and t.kind not in GPU_KINDS:
            raise TesseraError(f"the design-space rules generate CPU (c) and GPU ({', '.join(GPU_KINDS)}) "
                               f"schedules; target {str(t)!r} is neither")
        self.target = t
        self.max_innermost_factor = max_innermost_factor
        self.is_gpu = t.kind in GPU_KINDS
        if self.is_gpu:
            self.max_threads_per_block, self.max_shared_memory = gpu_limits(t)
            self.thread_candidates = tuple(c for c in GPU_THREAD_CANDIDATES if c <= self.max_threads_per_block) \
                or (self.max_threads_per_block,)
            self.num_threads = 1
            self.lanes = max(GPU_FETCH_LANES)
            self.max_vectorize_extent = self.lanes
            self.parallel_candidates = ()
            self.unroll_candidates = GPU_UNROLL_CANDIDATES
            return
        self.max_threads_per_block = self.max_shared_memory = None
        self.thread_candidates = ()
        self.num_threads = t.num_threads
        self.lanes = t.vector_bits // 32
        self.max_vectorize_extent = 4 * self.lanes
        self.parallel_candidates = tuple(self.num_threads * j for j in PARALLEL_JOBS_PER_THREAD)
        self.unroll_candidates = UNROLL_CANDIDATES

    def __repr__(self):
        if self.is_gpu:
            return (f"<SpaceContext {self.target}: <= {self.max_threads_per_block} threads and "
                    f"{self.max_shared_memory} shared bytes per block>")
        return (f"<SpaceContext {self.target}: {self.num_threads} threads, {self.lanes} lanes, "
                f"vectorize <= {self.max_vectorize_extent}>")


class ScheduleRule:
    """A design-space rule (see the module docstring); subclasses set `name` and define apply."""

    name = "rule"

    def __init__(self, ctx: SpaceContext):
        self.ctx = ctx

    def apply(self, sch, block) -> list:
        raise NotImplementedError(f"{type(self).__name__}.apply")

    def __repr__(self):
        return f"<{type(self).__name__}>"


# ---------------------------------------------------------------------------------------------
# block analyses
# ---------------------------------------------------------------------------------------------
def node_of(sch, block):
    """(FuncIndex, BlockRealize) of a BlockRV."""
    _, idx, realize = sch._block(block, "rule")
    return idx, realize


def block_alive(sch, block) -> bool:
    try:
        sch._block(block, "rule")
    except ScheduleError:
        return False
    return True


def is_root(idx, realize) -> bool:
    """Whether the block is the function's root block (its body, with no iterators)."""
    return idx.func.body is realize and not realize.block.iter_vars


def trivial_binding_loops(idx, realize):
    """The loops above the block when each binds exactly one iterator as `v = loop_var` (one loop
    per iterator, in order), else None."""
    loops = idx.loops_above(realize)
    if len(loops) != len(realize.block.iter_vars):
        return None
    for lp, value in zip(loops, realize.iter_values):
        if value is not lp.loop_var or not (isinstance(lp.min, IntImm) and lp.min.value == 0):
            return None
    return loops


def is_spatial(realize) -> bool:
    return all(iv.iter_type == "data_par" for iv in realize.block.iter_vars)


def is_reduction(realize) -> bool:
    b = realize.block
    return b.init is not None and any(iv.iter_type == "reduce" for iv in b.iter_vars)


def const_extent(lp):
    return lp.extent.value if type(lp.extent) is IntImm else None


def needs_multi_level_tiling(realize) -> bool:
    """TVM's NeedsMultiLevelTiling: a reduction block writing one buffer whose reads leave some
    spatial iterator unused (data reuse across it: matmul, conv), with constant read regions."""
    b = realize.block
    if len(b.writes) != 1 or not b.reads or is_spatial(realize) or b.init is None:
        return False
    out = b.writes[0].buffer
    spatial = [iv.var for iv in b.iter_vars if iv.iter_type == "data_par"
               and not (type(iv.dom.extent) is IntImm and iv.dom.extent.value == 1)]
    seen, unused = set(), 0
    for region in b.reads:
        if region.buffer in seen:
            return False
        seen.add(region.buffer)
        if region.buffer is out:
            continue
        used = set()
        for r in region.region:
            if type(r.extent) is not IntImm:
                return False
            used |= set(collect_vars(r.min))
        unused += sum(1 for v in spatial if v not in used)
    return unused >= 1


class _HasBranch(Visitor):
    def __init__(self):
        super().__init__()
        self.found = False

    def visit_Select(self, e):
        self.found = True

    def visit_Call(self, e):
        if e.op == "if_then_else":
            self.found = True
        self.generic_visit(e)

    def visit_IfThenElse(self, s):
        self.found = True


def has_branch(stmt) -> bool:
    """Whether the statement computes with if_then_else / Select / if."""
    v = _HasBranch()
    v.visit(stmt)
    return v.found


def is_pure_copy(realize) -> bool:
    """A block whose body only copies one element (a packing / layout transform)."""
    body = realize.block.body
    return type(body) is BufferStore and type(body.value) is BufferLoad


def elementwise_reads(realize, buf) -> bool:
    """Whether the block reads buf only at exactly its own iterators, in order (`B[v0, v1, ...]`)."""
    ivars = [iv.var for iv in realize.block.iter_vars]
    found = False
    for kind, b, indices in accesses(realize.block.body):
        if b is not buf or kind != "read":
            continue
        found = True
        if len(indices) != len(ivars) or any(i is not v for i, v in zip(indices, ivars)):
            return False
    return found


def divisors(n: int) -> list:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def loop_is_data_par(lp) -> bool:
    return loop_iter_type(lp) == "data_par"


__all__ = [
    "ANN_COOP_FETCH",
    "ANN_PARALLEL",
    "ANN_TENSORIZED",
    "ANN_TILING",
    "ANN_UNROLL",
    "ANN_VECTORIZE",
    "META_PREFIX",
    "ScheduleRule",
    "SpaceContext",
    "block_alive",
    "const_extent",
    "divisors",
    "elementwise_reads",
    "gpu_limits",
    "has_branch",
    "is_pure_copy",
    "is_reduction",
    "is_root",
    "is_spatial",
    "loop_is_data_par",
    "needs_multi_level_tiling",
    "node_of",
    "trivial_binding_loops",
]
