"""The default reduction schedule (tessera/ops/_schedule.py): inner contiguous reductions reduced on
vector partial results (rfactor by the lanes), and the row schedule of multi-block ops."""
import numpy as np
import pytest
from op_check import npdt, run_ops

import tessera
from tessera import te
from tessera.graph.ir import TensorType
from tessera.ops.registry import ScheduleContext, get_op

RNG = np.random.default_rng(5)


def _rand(shape, dtype):
    d = npdt(dtype)
    if np.issubdtype(d, np.integer):
        return RNG.integers(-20, 20, size=shape).astype(d)
    return RNG.uniform(-3, 3, size=shape).astype(np.float32).astype(d)


def _source(op_name, arrays, target="c -num-threads=2", **attrs):
    """The C source of op_name's kernel with its default schedule."""
    op = get_op(op_name)
    attrs = op.normalize_attrs(attrs)
    types = [TensorType.of(a) for a in arrays]
    phs = [te.placeholder(a.shape, str(t.dtype), f"x{k}") for k, (a, t) in enumerate(zip(arrays, types))]
    outs = op.compute(phs, attrs)
    sch = tessera.tir.Schedule(te.create_prim_func(phs + outs))
    op.schedule(sch, ScheduleContext(block=outs[0].name, attrs=attrs, target=tessera.Target(target),
                                     input_types=tuple(types), output_types=tuple(op.infer_types(types, attrs))))
    return tessera.build(sch, target=target).get_source()


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int8"])
def test_inner_reductions_on_vector_partials_match_numpy(dtype):
    a = _rand((6, 4, 64), dtype)
    specs = [(name, {"axis": axes}, [0]) for name in ("sum", "max", "min", "mean") for axes in ((2,), (1, 2))]
    outs = run_ops([a], specs)
    for (name, attrs, _), (y,) in zip(specs, outs):
        ref = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[name]
        acc = np.float64 if np.issubdtype(npdt(dtype), np.floating) else None
        want = ref(a.astype(acc) if acc else a, axis=attrs["axis"])
        if not acc and name in ("sum", "mean"):
            want = ref(a, axis=attrs["axis"], dtype=npdt(dtype)) if name == "sum" else \
                np.trunc(a.astype(np.int64).sum(axis=attrs["axis"]) / np.prod([a.shape[k] for k in attrs["axis"]]))
        tol = 2e-3 if dtype == "float16" else 1e-5
        np.testing.assert_allclose(y.astype(np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol,
                                   err_msg=f"{name} {attrs}")


def _lanes(target):
    """float32 lanes of the target's vectors."""
    return tessera.Target(target).vector_bits // 32


def test_row_sum_source_accumulates_one_vector_per_row(isa_target):
    a = _rand((16, 128), "float32")
    target = f"{isa_target} -num-threads=2"
    src = _source("sum", [a], target=target, axis=(1,))
    kernel = src[src.index("main_kernel("):]
    v = f"float32x{_lanes(target)}"
    assert f"T_sum_rf[{_lanes(target)}]" in kernel
    assert f"tsr_vload_{v}(&T_sum_rf[0]) + tsr_vload_{v}(&x0[" in kernel
    assert "#pragma omp parallel for" not in kernel  # 2048 elements: too little work for threads
    (y,), = run_ops([a], [("sum", {"axis": (1,)}, [0])], target=target)
    np.testing.assert_allclose(y, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def test_reduction_not_along_the_contiguous_axis_stays_serial_and_right():
    a = _rand((64, 24), "float32")
    src = _source("sum", [a], axis=(0,))
    assert "_rf" not in src[src.index("main_kernel("):]
    (y,), = run_ops([a], [("sum", {"axis": (0,)}, [0])])
    np.testing.assert_allclose(y, a.astype(np.float64).sum(0), rtol=1e-5)


def test_max_propagates_nan_through_the_partials():
    a = _rand((4, 32), "float32")
    a[1, 13] = np.nan
    a[2, 31] = np.inf
    (y,), = run_ops([a], [("max", {"axis": (1,)}, [0])])
    assert np.isnan(y[1]) and y[2] == np.inf
    np.testing.assert_array_equal(y[[0, 3]], a[[0, 3]].max(1))


def test_softmax_and_layer_norm_compute_rows_in_one_loop_nest(isa_target):
    x = _rand((12, 64, 64), "float32")
    target = f"{isa_target} -num-threads=2"
    lanes = _lanes(target)
    src = _source("nn.softmax", [x], target=target)
    kernel = src[src.index("main_kernel("):src.index("main_args_t")]
    # one parallel row loop; the row's intermediates are per-row locals; exp on whole vectors
    assert kernel.count("#pragma omp parallel for") == 1
    assert "float softmax_exp[64]" in kernel and f"tsr_vexp_float32x{lanes}(" in kernel
    g, b = _rand((64,), "float32"), _rand((64,), "float32")
    src = _source("nn.layer_norm", [x, g, b], target=target, axis=-1)
    kernel = src[src.index("main_kernel("):src.index("main_args_t")]
    assert kernel.count("#pragma omp parallel for") == 1 and f"layer_norm_sqdev_rf[{lanes}]" in kernel
