"""The OpenCL backend end to end through pyopencl (PoCL on a CPU in CI): every GPU case against
numpy, device arrays, timing and the device's limits. Skipped, with the reason, where no OpenCL
device can build kernels (PoCL's LLVM refuses CPUs it does not know: "unknown target CPU")."""
import numpy as np
import pytest
from gpu_cases import CASES

import tessera
import tessera.backend
from tessera.runtime import opencl as rt

_OK, _WHY = rt.usable()
pytestmark = pytest.mark.skipif(not _OK, reason=f"OpenCL is not usable here: {_WHY}")


@pytest.fixture(scope="module")
def all_cases():
    """Every GPU case as one function of one OpenCL module (one program build), with its inputs."""
    made = {case: CASES[case]() for case in sorted(CASES)}
    mod = tessera.build(tessera.ir.IRModule({c: m[0].mod["main"] for c, m in made.items()}), target="opencl")
    return mod, made


@pytest.mark.parametrize("case", sorted(CASES))
def test_opencl_matches_numpy(case, all_cases):
    mod, made = all_cases
    _, args, want = made[case]
    mod.get_function(case)(*args)
    for i, w in want.items():
        np.testing.assert_allclose(args[i], w, rtol=1e-4, atol=1e-4)


def test_device_arrays_stay_on_the_device():
    sch, args, want = CASES["gemm_shared_ragged"]()
    mod = tessera.build(sch, target="opencl")
    dev = [rt.array(x) for x in args]
    mod(*dev)
    np.testing.assert_allclose(dev[2].numpy(), want[2], rtol=1e-4, atol=1e-4)
    assert isinstance(dev[2], rt.DeviceArray) and dev[2].shape == (20, 12)


def test_time_evaluator_measures_device_time():
    sch, args, _ = CASES["gemm_shared"]()
    mod = tessera.build(sch, target="opencl")
    res = mod.time_evaluator(number=2, repeat=2)(*args)
    assert len(res.results) == 2 and all(r > 0 for r in res.results)


def test_wrong_argument_shape_names_the_parameter():
    sch, args, _ = CASES["elementwise"]()
    mod = tessera.build(sch, target="opencl")
    with pytest.raises(tessera.ShapeError, match="argument A has shape"):
        mod(np.zeros(3, "float32"), args[1])


def test_too_many_threads_for_the_device_names_the_kernel():
    limit = rt.context()[2].max_work_group_size
    n = 2 * limit
    from tessera import te, tir
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "threadIdx.x")
    with pytest.raises(tessera.TesseraError, match=f"kernel main_kernel has {n} threads per work-group.*at most"):
        tessera.build(sch, target="opencl")


def test_nd_array_on_the_opencl_device():
    a = np.arange(12, dtype="float32").reshape(3, 4)
    d = tessera.nd.array(a, device="opencl")
    assert isinstance(d, rt.DeviceArray) and d.shape == (3, 4) and d.dtype == "float32"
    np.testing.assert_array_equal(d.numpy(), a)
    e = tessera.nd.empty((5,), "int32", device="opencl")
    assert e.shape == (5,) and e.dtype == "int32"
    # a DLPack producer (numpy) goes to the device through the host
    np.testing.assert_array_equal(tessera.nd.array(np.ones(3, "float32"), device="opencl").numpy(), 1)
    with pytest.raises(tessera.TesseraError, match="cannot be exported through DLPack"):
        np.from_dlpack(d)


def test_too_much_local_memory_for_the_device_names_the_kernel():
    """A shared cache computed at the thread loop holds the block's whole K extent of A: more
    __local memory than the device has."""
    from tessera import te, tir
    local = rt.context()[2].local_mem_size
    k = local // (4 * 4) + 64            # 4 rows of float32 over K: over the limit
    A = te.placeholder((4, k), name="A")
    B = te.placeholder((k, 4), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((4, 4), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, _ = sch.get_loops(c)
    sch.bind(i, "threadIdx.y")
    sch.bind(j, "threadIdx.x")
    sch.compute_at(sch.cache_read(c, 0, "shared"), j)
    with pytest.raises(tessera.TesseraError, match=f"kernel main_kernel declares {4 * k * 4} bytes of shared "
                                                   f"\\(__local\\) memory; the OpenCL device .* has {local}"):
        tessera.build(sch, target="opencl")


def test_time_evaluator_honours_min_repeat_ms():
    sch, args, _ = CASES["elementwise"]()
    mod = tessera.build(sch, target="opencl")
    f = mod.get_function(mod.entry_name)
    ran = []
    measure = f._launch

    def counting(*a):
        ran.append(1)
        return measure(*a)
    f._launch = counting
    res = mod.time_evaluator(number=1, repeat=1, min_repeat_ms=20)(*args)
    assert len(res.results) == 1 and res.results[0] > 0
    assert len(ran) > 2       # the warm-up and more than the one call `number` asked for
