"""tune_tir for GPU targets end to end on PoCL: candidates of the GPU design space built by the
LocalBuilder, checked against the untuned program under its default GPU schedule and timed on the
OpenCL device by the LocalRunner, recorded, and the best one right against numpy."""
import time

import numpy as np
import pytest

import tessera
from tessera import autotune, te, tir
from tessera.autotune.measure import (
    LocalBuilder,
    LocalRunner,
    MeasureCandidate,
    measure,
)
from tessera.autotune.space import generate_design_space, sample_candidate
from tessera.ops.gpu import schedule_gpu_default
from tessera.runtime import opencl as cl_rt

from autotune_programs import gemm

pytestmark = pytest.mark.skipif(not cl_rt.usable()[0], reason=f"OpenCL: {cl_rt.usable()[1]}")


@pytest.fixture(scope="module")
def builder():
    """One build worker and one measuring worker for the file's quick tests (each costs a start)."""
    with LocalBuilder(max_workers=1) as b:
        yield b


@pytest.fixture(scope="module")
def runner():
    with LocalRunner(number=1, repeat=1, min_repeat_ms=1) as r:
        yield r


def check_gemm(sch, m, n, k):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    c = np.full((m, n), np.nan, "float32")
    lib = tessera.build(sch, target="opencl")
    lib(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    return lib, (a, b, c)


def test_tune_tir_on_opencl_end_to_end(tmp_path, builder, runner):
    m, n, k = 96, 40, 24
    func = gemm(m, n, k)
    db = autotune.Database(str(tmp_path / "gpu.jsonl"))
    res = autotune.tune_tir(func, target="opencl", max_trials=4, batch_size=4, database=db, strategy="random",
                            cost_model="random", seed=0, progress=False, builder=builder, runner=runner)
    assert res.trials == 4 and res.errors == 0 and res.run_secs > 0
    recs = list(db.records())
    assert len(recs) == 4 and all(r.target == "opencl" and r.error is None and r.run_secs for r in recs)
    check_gemm(res.schedule, m, n, k)
    again = autotune.apply_best(func, db, "opencl")
    assert again is not None and tessera.ir.structural_equal(again.mod, res.schedule.mod)
    # the untuned schedule is the first trial: the tuner's pick is never slower than it
    first = tir.Schedule(func)
    tir.schedule.Trace.apply_json_to_schedule(recs[0].trace, first)
    assert tessera.ir.structural_equal(first.mod, schedule_gpu_default(tir.Schedule(func), "opencl").mod)
    assert res.run_secs <= min(r.secs for r in recs if r.is_valid)


def test_the_runner_checks_gpu_candidates_against_the_default_gpu_schedule(builder, runner):
    """A candidate of another program of the same signature computes other values: the runner's
    check (against the untuned program under its default GPU schedule) calls it a wrong result."""
    m, n, k = 32, 32, 16
    func = gemm(m, n, k)
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j] * 2.0, axis=r), name="C")
    other = te.create_prim_func([A, B, C])
    space = generate_design_space(func, "opencl")[0]
    sch = next(s for s in (sample_candidate(func, space, "opencl", seed) for seed in range(20)) if s is not None)
    # the same trace replays on both programs (same loops and blocks), so the second candidate is
    # `other`'s program measured as a candidate of `func`
    cand = MeasureCandidate(func, sch.trace.as_json())
    [ok] = measure([cand], "opencl", builder=builder, runner=runner)
    assert ok.ok and ok.run_secs[0] > 0
    [br] = builder.build([MeasureCandidate(other, sch.trace.as_json())], "opencl")
    assert br.ok
    [bad] = runner.run([cand], [br], "opencl")     # func's reference, other's library
    assert bad.error_kind == "wrong_result"


@pytest.mark.slow
@pytest.mark.parametrize("size", [(256, 256, 256), (200, 120, 72)], ids=lambda s: "x".join(map(str, s)))
def test_tuning_gemm_on_opencl_prints_figures_beside_the_default_gpu_schedule(size):
    """Prints the figures (never asserted: timings are the machine's); asserts only correctness."""
    m, n, k = size
    func = gemm(m, n, k)
    t0 = time.perf_counter()
    res = autotune.tune_tir(func, target="opencl", max_trials=32, seed=0, progress=False)
    secs = time.perf_counter() - t0
    tuned_lib, args = check_gemm(res.schedule, m, n, k)
    default_lib, _ = check_gemm(schedule_gpu_default(tir.Schedule(func), "opencl"), m, n, k)
    timer = {"number": 10, "repeat": 5, "min_repeat_ms": 50}
    tuned = tuned_lib.time_evaluator(**timer)(*args).median
    default = default_lib.time_evaluator(**timer)(*args).median
    print(f"\nGEMM {m}x{n}x{k} on OpenCL ({cl_rt.context()[2].name.strip()}): default GPU schedule "
          f"{default * 1e3:.3f} ms, tuned ({res.trials} trials, {secs:.0f} s) {tuned * 1e3:.3f} ms, "
          f"{default / tuned:.2f}x")
