"""GPU lowering (host/device split, cooperative shared memory, barriers) checked by running the
lowered programs on the reference work-group executor (gpu_interp) against numpy: it runs the
threads of a block between barriers one after another and reports data races, so it needs no
GPU and no working OpenCL."""
import numpy as np
import pytest
from gpu_cases import CASES, gemm_shared
from gpu_interp import RaceError, run_gpu

import tessera
from tessera import te, tir
from tessera.backend import get_backend
from tessera.errors import BuildError, TesseraError
from tessera.ir import Call, Evaluate, Visitor
from tessera.target import Target
from tessera.tir.transform.split_host_device import kernels_of


def _lower(sch, target="opencl", skip=()):
    target = Target(target)
    func = sch.mod["main"]
    for name, fn in get_backend(target).passes(target):
        if name not in skip:
            func = fn(func)
    return func


def _syncs(func) -> int:
    n = [0]

    class _V(Visitor):
        def visit_Call(self, c):
            if c.op == "tvm_storage_sync":
                n[0] += 1
            self.generic_visit(c)

    _V().visit(func.body)
    return n[0]


@pytest.mark.parametrize("target", ["opencl", "cuda"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_lowered_gpu_program_matches_numpy(case, target):
    sch, args, want = CASES[case]()
    run_gpu(_lower(sch, target), args)
    for i, w in want.items():
        np.testing.assert_allclose(args[i], w, rtol=1e-4, atol=1e-4)


def test_launch_shape_comes_from_the_bound_extents():
    sch, _, _ = gemm_shared(m=20, n=12, k=24, tile=8)
    (name, grid, block, _), = kernels_of(_lower(sch))
    assert name == "main_kernel"
    assert grid == (2, 3, 1) and block == (8, 8, 1)


def test_shared_cache_holds_the_whole_block_tile():
    """compute_at of a "shared" cache under threadIdx loops relaxes over them: the copy covers
    the tile of every thread of the block (8 x 8), not one thread's row."""
    sch, _, _ = gemm_shared(tile=8)
    src = tessera.backend.generate(sch, "opencl").text
    assert "__local float A_shared[64];" in src and "__local float B_shared[64];" in src


def test_gemm_barriers_between_copy_and_compute_and_before_the_next_copy():
    sch, _, _ = gemm_shared()
    func = _lower(sch)
    assert _syncs(func) == 2
    src = tessera.backend.generate(sch, "opencl").text
    body = src[src.index("for (int32_t k_0"):]
    copy_b, first, compute, second = (body.index(s) for s in ("B_shared[ax0", "barrier(", "for (int32_t k_1",
                                                             "barrier(CLK_LOCAL_MEM_FENCE);\n          }"))
    assert copy_b < first < compute < second


def test_without_barriers_the_threads_race():
    """The barrier-placement test: with thread_sync left out, the shared tiles are read before
    other threads wrote them (the executor reports the race)."""
    sch, args, _ = gemm_shared()
    func = _lower(sch, skip=("thread_sync",))
    assert _syncs(func) == 0
    with pytest.raises(RaceError, match="with no barrier between"):
        run_gpu(func, args)


def test_without_the_trailing_barrier_the_next_copy_overwrites_a_tile_being_read():
    sch, args, _ = gemm_shared()
    func = _lower(sch)

    class _DropLast(tessera.ir.Mutator):
        def visit_SeqStmt(self, s):
            items = [self.visit(x) for x in s.seq]
            last = items[-1]
            if type(last) is Evaluate and type(last.value) is Call and last.value.op == "tvm_storage_sync":
                items = items[:-1]
            return tessera.ir.SeqStmt(items)

        def visit_PrimExpr(self, e):
            return e

    broken = func.with_body(_DropLast().visit(func.body))
    assert _syncs(broken) == 1
    with pytest.raises(RaceError, match="_shared.* with no barrier between"):
        run_gpu(broken, args)


def test_unbound_loop_is_refused_by_name():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(BuildError, match="loop 'i' would run on the host.*bind"):
        tessera.backend.generate(te.create_prim_func([A, B]), "opencl")


def test_symbolic_thread_extent_is_refused():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    with pytest.raises(BuildError, match="bound to blockIdx.x with extent n, not a constant"):
        tessera.backend.generate(sch, "opencl")


def test_too_many_threads_names_the_kernel_and_the_limit():
    sch, _, _ = CASES["elementwise"]()   # 64 threads per block
    with pytest.raises(TesseraError, match="kernel main_kernel has 64 threads per block .* at most 32"):
        tessera.backend.build(sch, "opencl -max-threads-per-block=32")
    with pytest.raises(TesseraError, match="kernel main_kernel has 64 threads per block .* at most 32"):
        tessera.backend.build(sch, "cuda -max-threads-per-block=32")


def test_too_much_shared_memory_names_the_kernel_and_the_limit():
    """A shared cache computed at the thread loop holds the block's whole K extent: 8 x 4096 floats
    of A and 4096 x 8 of B (256 KiB), over CUDA's 48 KiB of static shared memory."""
    k = 4096
    A = te.placeholder((16, k), name="A")
    B = te.placeholder((k, 16), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, _ = sch.get_loops(c)
    io, ii = sch.split(i, [None, 8])
    jo, ji = sch.split(j, [None, 8])
    sch.reorder(io, jo, ii, ji)
    sch.bind(io, "blockIdx.y")
    sch.bind(jo, "blockIdx.x")
    sch.bind(ii, "threadIdx.y")
    sch.bind(ji, "threadIdx.x")
    for idx in (0, 1):
        sch.compute_at(sch.cache_read(c, idx, "shared"), ji)
    with pytest.raises(TesseraError, match=r"kernel main_kernel declares 262144 bytes of shared memory; .* at most 49152"):
        tessera.backend.build(sch, "cuda")


def test_cpu_pipeline_still_makes_shared_caches_per_iteration():
    """The C target keeps its behaviour: a "shared" cache is plain memory ("global") and no
    kernels are split out."""
    sch, _, _ = gemm_shared()
    low = tessera.lower(sch.mod, "c")
    assert 'T.allocate([64], "float32", "global")' in low.script() and '"shared"' not in low.script()
    assert not kernels_of(low)


def test_cross_thread_reduction_is_a_shared_memory_tree():
    """k_1 bound to threadIdx.x (32 threads): each thread's partial sum into shared memory, then
    log2(32) = 5 halving steps, each behind a barrier."""
    sch, args, want = CASES["row_sum_tree"]()
    func = _lower(sch)
    assert _syncs(func) == 6          # after the partials, after each of the 5 steps
    src = tessera.backend.generate(sch, "opencl").text
    assert "__local float B_red_shared[32];" in src and "B_red_shared[k_1 + 16]" in src
    run_gpu(func, args)
    np.testing.assert_allclose(args[1], want[1], rtol=1e-5, atol=1e-5)


def _shuffles_in(node) -> int:
    n = [0]

    class _V(Visitor):
        def visit_Call(self, c):
            n[0] += c.op == "warp_shuffle_xor"
            self.generic_visit(c)

    _V().visit(node)
    return n[0]


def _shuffles(func) -> int:
    return _shuffles_in(func.body)


@pytest.mark.parametrize("threads", [32, 64, 128])
def test_cross_thread_reduction_on_cuda_shuffles_within_warps(threads):
    """A warp reduces by 5 xor shuffles, no barrier; more warps meet once in shared memory (one
    barrier, a slot a warp). 24 threads (not whole warps) keep the tree."""
    from gpu_cases import row_sum_tree
    sch, args, want = row_sum_tree(m=3, n=300, threads=threads)
    func = _lower(sch, "cuda")
    warp = get_backend(Target("cuda")).warp_size
    assert _shuffles(func) == warp.bit_length() - 1          # a butterfly: log2(warp) xor steps
    assert _syncs(func) == (0 if threads == warp else 1)
    src = tessera.backend.generate(sch, "cuda").text
    assert f"__shfl_xor_sync(0xffffffffu, B_red_local[0], {warp // 2})" in src
    assert ("B_red_shared" in src) == (threads > warp) and (f"B_red_shared[{threads // warp}]" in src or threads == warp)
    run_gpu(func, args)
    np.testing.assert_allclose(args[1], want[1], rtol=1e-5, atol=1e-5)
    sch, _, _ = row_sum_tree(m=3, n=100, threads=24)
    assert _shuffles(_lower(sch, "cuda")) == 0


def test_the_executor_refuses_a_shuffle_not_every_lane_of_the_warp_reaches():
    """The executor's shuffle is CUDA's: every lane of the warp takes part (a lane that skips it
    is an error, not a value from nowhere)."""
    from gpu_cases import row_sum_tree
    from gpu_interp import InterpError
    from tessera.ir import LT, For, IfThenElse, post_order_visit
    from tessera.tir.transform._stmt_mutator import StmtMutator

    sch, args, _ = row_sum_tree(m=1, n=64, threads=32)
    func = _lower(sch, "cuda")
    lanes = []
    post_order_visit(func.body, lambda n: lanes.append(n.loop_var) if type(n) is For and n.thread_binding is not None
                     and n.thread_binding.thread_tag == "threadIdx.x" else None)

    class _HalfWarp(StmtMutator):       # the first shuffle run by lanes 0-15 only
        done = False

        def visit_BufferStore(self, st):
            if self.done or _shuffles_in(st.value) == 0:
                return st
            self.done = True
            return IfThenElse(LT(lanes[0], 16), st)

    with pytest.raises(InterpError, match="not every lane"):
        run_gpu(func.with_body(_HalfWarp().visit(func.body)), args)


def test_cross_thread_reduction_without_barriers_races():
    sch, args, _ = CASES["row_sum_tree"]()
    with pytest.raises(RaceError):
        run_gpu(_lower(sch, skip=("thread_sync",)), args)


def test_cross_thread_reduction_needs_the_reduction_loops_below_the_thread_loop():
    A = te.placeholder((4, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    i, kk = sch.get_loops(sch.get_block("B"))
    ko, ki = sch.split(kk, [None, 16])
    sch.bind(ki, "threadIdx.x")           # k_0 stays outside the thread loop
    sch.bind(i, "blockIdx.x")
    with pytest.raises(BuildError, match="block 'B' is reduced across the threads"):
        tessera.backend.generate(sch, "opencl")


def test_bind_still_refuses_reduction_loops_on_block_axes():
    A = te.placeholder((4, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    _, kk = sch.get_loops(sch.get_block("B"))
    with pytest.raises(tessera.ScheduleError, match="reduction"):
        sch.bind(kk, "blockIdx.x")


def test_unknown_device_is_refused():
    with pytest.raises(TesseraError, match="unknown device 'tpu'"):
        tessera.nd.array(np.zeros(2, "float32"), device="tpu")


def test_nd_array_on_cpu_is_an_ndarray():
    assert isinstance(tessera.nd.array(np.zeros(2, "float32"), device="cpu"), tessera.nd.NDArray)


def _kernel_of(body_of_tx, shared, param):
    """A split function: one kernel of 8 threads, `shared` allocated at its top."""
    from tessera.ir import Allocate, AttrStmt, For, IntImm, PrimFunc, StringImm, Var
    from tessera.tir.schedule.loops import thread_iter_var
    from tessera.tir.transform.split_host_device import KERNEL, LAUNCH
    tx = Var("tx")
    loop = For(tx, 0, 8, "thread_binding", body_of_tx(tx), thread_iter_var("threadIdx.x"))
    launch = Call("int32", LAUNCH, [IntImm("int32", v) for v in (1, 1, 1, 8, 1, 1)])
    return PrimFunc([param], AttrStmt(StringImm("k"), KERNEL, launch, Allocate(shared, loop)))


def test_thread_sync_puts_the_barrier_between_a_shared_write_and_the_read_of_other_threads():
    from tessera.ir import Buffer, BufferStore, SeqStmt
    from tessera.tir.transform.thread_sync import thread_sync
    S, A = Buffer((8,), "float32", "S", scope="shared"), Buffer((8,), "float32", "A")
    func = _kernel_of(lambda tx: SeqStmt([BufferStore(S, A[tx], [tx]), BufferStore(A, S[7 - tx], [tx])]), S, A)
    out = thread_sync(func)
    assert _syncs(out) == 1
    a = np.arange(8, dtype="float32")
    run_gpu(out, [a])
    np.testing.assert_array_equal(a, np.arange(8)[::-1])
    with pytest.raises(RaceError):
        run_gpu(func, [np.arange(8, dtype="float32")])


def test_thread_sync_refuses_a_hazard_under_a_thread_dependent_condition():
    from tessera.ir import Buffer, BufferStore, IfThenElse, SeqStmt
    from tessera.tir.transform.thread_sync import thread_sync
    S, A = Buffer((8,), "float32", "S", scope="shared"), Buffer((8,), "float32", "A")
    func = _kernel_of(lambda tx: IfThenElse(tx < 4, SeqStmt([BufferStore(S, A[tx], [tx]),
                                                            BufferStore(A, S[3 - tx], [tx])])), S, A)
    with pytest.raises(BuildError, match="in kernel k, shared buffer S is written and read by different threads "
                                         "under a thread-dependent condition"):
        thread_sync(func)


def test_device_timing_grows_number_until_a_repeat_lasts_min_repeat_ms():
    """The GPU runtimes' min_repeat_ms follows the C timer loop: `number` grows until a measurement
    lasts that long, and each figure is seconds per call."""
    from tessera.runtime.gpu import timed_repeats
    calls = []

    def measure(n):            # a fake device: 1 ms per call
        calls.append(n)
        return n * 1e-3
    res = timed_repeats(measure, number=2, repeat=3, min_repeat_ms=10)
    assert calls[0] == 2 and all(n * 1e-3 >= 10e-3 for n in calls[1:])
    assert len(res.results) == 3 and all(abs(r - 1e-3) < 1e-12 for r in res.results)
    calls.clear()
    timed_repeats(measure, number=2, repeat=2, min_repeat_ms=0)
    assert calls == [2, 2]
