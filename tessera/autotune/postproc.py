"""Postprocessors: turn a sampled schedule into a final candidate and drop invalid ones before
they are built (MetaSchedule's Postproc).

    ok = postprocess(sch, target)       # False: the candidate is invalid (do not build it)

Each Postproc has `apply(sch) -> bool`; `default_postprocs(ctx)` is, in order:
- RewriteParallelVectorizeUnroll: applies the root block's meta_schedule.parallel / .vectorize /
  .unroll_explicit annotations (rules/parallel_vectorize_unroll.py) to every loop nest of the root
  scope, then removes every meta_schedule.* annotation. Per loop nest (a chain of perfectly nested
  loops): the innermost loop around a block that stores one element is vectorized when it is data
  parallel and no longer than the vectorize limit; the outer data-parallel loops of a nest with no
  parallel loop in or around it are fused and run in parallel while their product fits the
  parallel limit (at least the first); a nonzero unroll depth annotates the outermost loop of each
  nest directly under the root block pragma_auto_unroll_max_step (explicit).
- VerifyParallelVectorize: every vectorized loop has a constant extent within the target's limit;
  no parallel loop is nested in a parallel or vectorized one.
- VerifyLowers: the program lowers through the target's pipeline (tir.transform.lower).
For a GPU target (ctx.is_gpu) the list is instead:
- RewriteCooperativeFetch: each shared-memory cache block annotated meta_schedule.cooperative_fetch
  (rules/multi_level_tiling_gpu.py) has its own loops fused, split by the threadIdx.x extent of the
  kernel it sits in (and by the annotated vector width, halved until it divides the copy) and bound
  to threadIdx.x, the vector part vectorized: the threads of the block copy the tile together;
- RewriteReductionBlock: a reduction block under thread-bound loops whose init is still inside it
  is decomposed (decompose_reduction) at its outermost reduction loop: the accumulator is zeroed
  once before the reduction instead of under an `if (k == 0)` in every step;
- RewriteParallelVectorizeUnroll, as above (only the unroll depth is there to apply: the outermost,
  block-bound loop of each kernel gets it);
- VerifyGPUCode: the program lowers and renders through the target's backend (tir pipeline,
  split_host_device, thread_sync, the renderer) and every kernel fits the target's threads per
  block and shared memory (SpaceContext.max_threads_per_block / max_shared_memory); as TVM's, it
  allows at most 8 virtual threads. Beyond TVM's: a thread's local arrays (its register tile) hold
  at most MAX_LOCAL_BYTES (more spills to memory), and where the backend has warps (CUDA's
  warp_size) a kernel of more than one block that stages tiles in shared memory runs at least a
  warp a block (fewer threads leave lanes of every
  warp idle and copy each tile with a few threads): random tilings of a large GEMM are mostly such
  candidates otherwise, each slower than the default schedule.
The rewriting is traced after an EnterPostproc instruction, so a candidate's trace replays it.
"""
from __future__ import annotations

from collections import OrderedDict

from ..backend import generate, get_backend
from ..errors import TesseraError
from ..ir import (
    BlockRealize,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    SeqStmt,
    Stmt,
    post_order_visit,
    structural_hash,
)
from ..ir.functor import collect_vars
from ..target import Target
from ..tir.schedule.analysis import loop_iter_type
from ..tir.schedule.state import child_realizes
from ..tir.transform import lower
from .rules.base import (
    ANN_COOP_FETCH,
    ANN_PARALLEL,
    ANN_UNROLL,
    ANN_VECTORIZE,
    META_PREFIX,
    SpaceContext,
    const_extent,
)



def _func_name(sch) -> str:
    """The name of the function a candidate's postprocessors work on ("main", else its only one)."""
    return "main" if "main" in sch.state.funcs else next(iter(sch.state.funcs))

class Postproc:
    """A postprocessor: apply(sch) -> False when the candidate must be dropped."""

    name = "postproc"

    def __init__(self, ctx: SpaceContext):
        self.ctx = ctx

    def apply(self, sch) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.apply")

    def __repr__(self):
        return f"<{type(self).__name__}>"


def _root(idx):
    body = idx.func.body
    if type(body) is BlockRealize and not body.block.iter_vars:
        return body
    return None


def _int_ann(node, key):
    v = node.annotations.get(key)
    return v.value if type(v) is IntImm else None


def _chain_heads(idx, root) -> list:
    """The loops of the root scope that start a loop nest (their parent is not a loop)."""
    heads = []
    for lp in idx.loops.values():
        if idx.scope_of(lp) is not root:
            continue
        if type(idx.parent_of(lp)) is not For:
            heads.append(lp)
    return heads


def _chain(head) -> list:
    """The perfectly nested loops from head down (each the only statement of its parent)."""
    out = [head]
    while type(out[-1].body) is For:
        out.append(out[-1].body)
    return out


def _children(s) -> list:
    """The statements directly inside s (a block's init and body included)."""
    t = type(s)
    if t is BlockRealize:
        b = s.block
        return [b.body] if b.init is None else [b.init, b.body]
    if t is SeqStmt:
        return list(s.seq)
    if t is IfThenElse:
        return [s.then_case] if s.else_case is None else [s.then_case, s.else_case]
    body = getattr(s, "body", None)
    return [body] if isinstance(body, Stmt) else []


def _plain(lp) -> bool:
    return lp.kind == ForKind.SERIAL and not lp.annotations


class RewriteParallelVectorizeUnroll(Postproc):
    """See the module docstring."""

    name = "RewriteParallelVectorizeUnroll"

    def apply(self, sch) -> bool:
        fname = _func_name(sch)
        idx = sch.state.index(fname)
        root = _root(idx)
        if root is None:
            return True
        max_par = _int_ann(root.block, ANN_PARALLEL)
        max_vec = _int_ann(root.block, ANN_VECTORIZE)
        unroll = _int_ann(root.block, ANN_UNROLL)
        self._strip_annotations(sch, idx)
        if max_par is None and max_vec is None and not unroll:
            return True
        idx = sch.state.index(fname)
        root = _root(idx)
        plans = []  # (a block of the nest, vectorized loop vars, parallel loop vars, head var)
        parallel = set()  # loops that are or will be parallel
        for head in sorted(_chain_heads(idx, root), key=lambda lp: len(idx.ancestors(lp))):
            at_root = idx.parent_of(head) is root.block or idx.parent_of(idx.parent_of(head)) is root.block
            chain = _chain(head)
            n_vec = self._vector_loops(chain, max_vec) if max_vec else 0
            n_par = 0
            inside = any(id(a) in parallel or (type(a) is For and a.kind != ForKind.SERIAL)
                         for a in idx.ancestors(head))
            if max_par and not inside and not self._has_parallel(head):
                n_par = self._parallel_loops(chain[:len(chain) - n_vec], max_par)
                parallel.update(id(lp) for lp in chain[:n_par])
            unroll_here = unroll if at_root else 0
            if not (n_vec or n_par or unroll_here):
                continue
            block = child_realizes(head.body)[0].block.name_hint
            vec = [lp.loop_var for lp in chain[len(chain) - n_vec:]] if n_vec else []
            plans.append((block, vec, [lp.loop_var for lp in chain[:n_par]], head.loop_var, unroll_here))
        for block, vec, par, head, unroll in plans:
            top = None
            if vec:
                vloop = self._fuse(sch, block, vec)
                sch.vectorize(vloop)
                if vec[0] is head:
                    top = vloop
            if par:
                ploop = self._fuse(sch, block, par)
                sch.parallel(ploop)
                top = ploop  # par starts at the head
            if unroll:
                if top is None:
                    top = self._loop_rvs(sch, block)[head]
                sch.annotate(top, "pragma_auto_unroll_max_step", int(unroll))
                sch.annotate(top, "pragma_unroll_explicit", 1)
        return True

    @staticmethod
    def _loop_rvs(sch, block) -> dict:
        """loop Var -> LoopRV of the loops above the block (a traced get_loops)."""
        rvs = sch.get_loops(sch.get_block(block))
        return {sch.get(rv).loop_var: rv for rv in rvs}

    @classmethod
    def _fuse(cls, sch, block, loop_vars):
        m = cls._loop_rvs(sch, block)
        rvs = [m[v] for v in loop_vars]
        return sch.fuse(*rvs) if len(rvs) > 1 else rvs[0]

    @staticmethod
    def _strip_annotations(sch, idx):
        for name, realize in list(idx.blocks.items()):
            keys = [k for k in realize.block.annotations if k.startswith(META_PREFIX)]
            if keys:
                rv = sch.get_block(name)
                for k in keys:
                    sch.unannotate(rv, k)

    @staticmethod
    def _has_parallel(head) -> bool:
        stack = [head]
        while stack:
            s = stack.pop()
            if type(s) is For and s.kind == ForKind.PARALLEL:
                return True
            stack.extend(_children(s))
        return False

    @staticmethod
    def _vector_loops(chain, max_vec) -> int:
        """1 when the innermost loop of the chain is vectorized, else 0: a plain data-parallel loop
        of constant extent in (1, max_vec] right around a block storing one element. It is not
        fused with the loops outside it: their fused index would address memory with a div/mod
        pattern, i.e. gathers and scatters (slow to run, and to compile once unrolled)."""
        last = chain[-1]
        if type(last.body) is not BlockRealize or type(last.body.block.body) is not BufferStore:
            return 0
        ext = const_extent(last)
        if ext is None or not 1 < ext <= max_vec or not _plain(last) or loop_iter_type(last) != "data_par":
            return 0
        return 1

    @staticmethod
    def _parallel_loops(chain, max_par) -> int:
        """How many outer loops of the chain to fuse into the parallel loop (0: none)."""
        n, prod = 0, 1
        for lp in chain:
            ext = const_extent(lp)
            if not _plain(lp) or loop_iter_type(lp) != "data_par":
                break
            if ext is None:
                if n == 0:
                    n = 1
                break
            if n and prod * ext > max_par:
                break
            prod *= ext
            n += 1
        return n if n and (prod > 1 or n > 1) else 0


class VerifyParallelVectorize(Postproc):
    """See the module docstring."""

    name = "VerifyParallelVectorize"

    def apply(self, sch) -> bool:
        for func in sch.state.funcs.values():
            if not self._ok(func.body, False):
                return False
        return True

    def _ok(self, s, in_par) -> bool:
        stack = [(s, in_par)]
        while stack:
            s, inside = stack.pop()
            if type(s) is For:
                if s.kind == ForKind.VECTORIZED:
                    ext = const_extent(s)
                    if ext is None or ext > self.ctx.max_vectorize_extent:
                        return False
                if s.kind == ForKind.PARALLEL and inside:
                    return False
                inside = inside or s.kind in (ForKind.PARALLEL, ForKind.VECTORIZED)
            stack.extend((c, inside) for c in _children(s))
        return True


class VerifyLowers(Postproc):
    """See the module docstring. Verdicts are remembered by the program's structural hash (a search
    meets the same candidate again: mutations that undo each other, a space's common points)."""

    name = "VerifyLowers"
    CACHE_SIZE = 4096

    def __init__(self, ctx: SpaceContext):
        super().__init__(ctx)
        self._seen: OrderedDict = OrderedDict()

    def apply(self, sch) -> bool:
        key = structural_hash(sch.mod)
        ok = self._seen.get(key)
        if ok is None:
            try:
                ok = self._check(sch.mod)
            except TesseraError:
                ok = False
            self._seen[key] = ok
            if len(self._seen) > self.CACHE_SIZE:
                self._seen.popitem(last=False)
        return ok

    def _check(self, mod) -> bool:
        lower(mod, self.ctx.target)
        return True


class RewriteCooperativeFetch(Postproc):
    """See the module docstring."""

    name = "RewriteCooperativeFetch"

    def apply(self, sch) -> bool:
        fname = _func_name(sch)
        idx = sch.state.index(fname)
        todo = [(name, _int_ann(r.block, ANN_COOP_FETCH)) for name, r in idx.blocks.items()
                if ANN_COOP_FETCH in r.block.annotations]
        for name, lanes in todo:
            idx = sch.state.index(fname)
            realize = idx.blocks[name]
            above = idx.loops_above(realize)
            threads = [lp for lp in above if lp.kind == ForKind.THREAD_BINDING
                       and lp.thread_binding.thread_tag == "threadIdx.x"]
            if len(threads) != 1 or const_extent(threads[0]) is None:
                return False        # no one thread loop to share the copy among
            tx = const_extent(threads[0])
            own = [lp for lp in above if all(r is realize for r in child_realizes(lp.body))]
            block = sch.get_block(name)
            sch.unannotate(block, ANN_COOP_FETCH)
            if not own or own[0] is not above[len(above) - len(own)]:
                return False
            rvs = sch.get_loops(block)[len(above) - len(own):]
            fused = sch.fuse(*rvs) if len(rvs) > 1 else rvs[0]
            n = const_extent(sch.get(fused))
            if n is None:
                return False
            vec = lanes if lanes and lanes > 1 else 1
            while vec > 1 and n % (tx * vec):
                vec //= 2
            parts = sch.split(fused, [None, tx, vec] if vec > 1 else [None, tx])
            sch.bind(parts[1], "threadIdx.x")
            if vec > 1:
                sch.vectorize(parts[2])
        return True


class RewriteReductionBlock(Postproc):
    """See the module docstring."""

    name = "RewriteReductionBlock"

    def apply(self, sch) -> bool:
        fname = _func_name(sch)
        idx = sch.state.index(fname)
        todo = []
        for name, r in idx.blocks.items():
            if r.block.init is None or not any(iv.iter_type == "reduce" for iv in r.block.iter_vars):
                continue
            above = idx.loops_above(r)
            if not any(lp.kind == ForKind.THREAD_BINDING for lp in above):
                continue
            red = set()
            for iv, v in zip(r.block.iter_vars, r.iter_values):
                if iv.iter_type == "reduce":
                    red |= set(collect_vars(v))
            pos = next((k for k, lp in enumerate(above) if lp.loop_var in red), None)
            if pos is not None and all(lp.kind != ForKind.THREAD_BINDING for lp in above[pos:]):
                todo.append((name, pos))
        for name, pos in todo:
            block = sch.get_block(name)
            sch.decompose_reduction(block, sch.get_loops(block)[pos])
        return True


class VerifyGPUCode(VerifyLowers):
    """See the module docstring (a VerifyLowers: the search runs it on the candidates it builds)."""

    name = "VerifyGPUCode"
    CUDA_BLOCK_DIMS = (1024, 1024, 64)
    MAX_VTHREAD = 8        # TVM's VerifyGPUCode limit: more virtual threads only unroll a longer serial loop
    MAX_LOCAL_BYTES = 512  # 128 float32 accumulators: with operands, about CUDA's 255 registers a thread

    def _check(self, mod) -> bool:
        ctx = self.ctx
        vthreads = []

        def visit(n):
            if type(n) is For and n.kind == ForKind.THREAD_BINDING and n.thread_binding.thread_tag.startswith("vthread"):
                vthreads.append(n)
        for func in mod.functions.values():
            post_order_visit(func.body, visit)
        if any(const_extent(lp) is None or const_extent(lp) > self.MAX_VTHREAD for lp in vthreads):
            return False
        src = generate(mod, ctx.target)
        warp = get_backend(ctx.target).warp_size     # lanes of a warp where the backend has them (CUDA)
        for m in src.meta:
            for k in m["kernels"]:
                block = k["block"]
                threads, blocks = block[0] * block[1] * block[2], k["grid"][0] * k["grid"][1] * k["grid"][2]
                if threads > ctx.max_threads_per_block:
                    return False
                if k["shared_bytes"] > ctx.max_shared_memory or k["local_bytes"] > self.MAX_LOCAL_BYTES:
                    return False
                if warp and k["shared_bytes"] and threads < warp and blocks > 1:
                    return False
                if ctx.target.kind == "cuda" and any(b > lim for b, lim in zip(block, self.CUDA_BLOCK_DIMS)):
                    return False
        return True


def gpu_postprocs(ctx: SpaceContext, verify_lowering: bool = True) -> list:
    """The GPU postprocessors, in order (see the module docstring)."""
    out = [RewriteCooperativeFetch(ctx), RewriteReductionBlock(ctx), RewriteParallelVectorizeUnroll(ctx)]
    if verify_lowering:
        out.append(VerifyGPUCode(ctx))
    return out


def default_postprocs(ctx: SpaceContext, verify_lowering: bool = True) -> list:
    """The target's postprocessors, in order (see the module docstring): gpu_postprocs for a GPU
    target."""
    if ctx.is_gpu:
        return gpu_postprocs(ctx, verify_lowering)
    out = [RewriteParallelVectorizeUnroll(ctx), VerifyParallelVectorize(ctx)]
    if verify_lowering:
        out.append(VerifyLowers(ctx))
    return out


_PREPARED: dict = {}  # Target (or id of a SpaceContext) -> (SpaceContext, default postprocessors)


def prepared(target) -> tuple:
    """(SpaceContext, default postprocessors) of a target (its text, a Target or a SpaceContext),
    built once: the postprocessors keep state worth sharing (VerifyLowers' verdicts)."""
    if isinstance(target, SpaceContext):
        hit = _PREPARED.get(id(target))
        if hit is None or hit[0] is not target:
            hit = _PREPARED[id(target)] = (target, default_postprocs(target))
        return hit
    t = Target(target)
    hit = _PREPARED.get(t)
    if hit is None:
        ctx = SpaceContext(t)
        hit = _PREPARED[t] = (ctx, default_postprocs(ctx))
    return hit


def postprocess(sch, target, postprocs=None) -> bool:
    """Run the postprocessors (default: the target's, see prepared) on sch, changing it (traced
    after EnterPostproc); False when one of them rejects the candidate."""
    sch.enter_postproc()
    for p in (prepared(target)[1] if postprocs is None else postprocs):
        try:
            if not p.apply(sch):
                return False
        except TesseraError:
            return False
    return True


__all__ = [
    "Postproc",
    "RewriteCooperativeFetch",
    "RewriteParallelVectorizeUnroll",
    "RewriteReductionBlock",
    "VerifyGPUCode",
    "VerifyLowers",
    "VerifyParallelVectorize",
    "default_postprocs",
    "gpu_postprocs",
    "postprocess",
]
