"""The auto-tuner applies thousands of schedules: a tiled GEMM schedule plus lowering and code
generation must stay cheap. The bound is loose (shared CI machines), far above the ~10 ms it takes,
so it only catches a pathological slowdown (e.g. re-walking the IR per handle lookup)."""
import time

from tessera import tir
from tessera.codegen import c as codegen_c
from tessera.target import Target
from tessera.tir.transform import lower

from schedule_helpers import gemm


def schedule_gemm(func, target):
    sch = tir.Schedule(func, seed=1)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=64, decision=[8, 32]))
    j0, j1 = sch.split(j, [None, 32])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    fused = sch.fuse(i0, j0)
    sch.parallel(fused)
    sch.vectorize(j1)
    sch.unroll(k1)
    sch.annotate(fused, "pragma_auto_unroll_max_step", 16)
    assert len(sch.trace) == 12
    return codegen_c.generate_module([lower(sch.mod["main"], target)], target)


def test_twelve_primitive_gemm_schedule_lower_codegen_is_fast():
    func, target = gemm(256, 256, 256), Target("c")
    source = schedule_gemm(func, target)
    assert "#pragma omp parallel for" in source
    times = []
    for _ in range(7):
        t0 = time.process_time()
        schedule_gemm(func, target)
        times.append(time.process_time() - t0)
    assert sorted(times)[3] < 0.1, f"median {sorted(times)[3] * 1e3:.1f} ms"
