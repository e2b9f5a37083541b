"""Pools in the blocked layout NCHW{x}c (layout attribute) against onnxruntime on NCHW data, and
the unrolled windows' generated code (no padded copy, vectorized, parallel rows)."""
import numpy as np
import pytest

import tessera
from nn_onnx_ref import ort_run
from tessera import te
from tessera.errors import ShapeError, TesseraError
from tessera.graph.ir import TensorType
from tessera.ops.registry import ScheduleContext, get_op

RNG = np.random.default_rng(5)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def pack(x, b):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def unpack(y):
    n, cc, h, w, b = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cc * b, h, w)


def run_pool(op, x, threads=2, **attrs):
    opdef = get_op(op)
    attrs = opdef.normalize_attrs(attrs)
    types = [TensorType.of(x)]
    (ot,) = opdef.infer_types(types, attrs)
    d = te.placeholder(x.shape, name="data", dtype=str(x.dtype))
    (out,) = opdef.compute([d], attrs)
    sch = tessera.tir.Schedule(te.create_prim_func([d, out]))
    target = tessera.Target(f"c -num-threads={threads}")
    opdef.schedule(sch, ScheduleContext(block=out.name, attrs=attrs, target=target, input_types=tuple(types),
                                        output_types=(ot,)))
    lib = tessera.build(sch, target=target)
    y = np.zeros(ot.shape, x.dtype)
    lib(x, y)
    return y, lib.get_source()


CASES = [
    # name, op, (C, H, W), kernel, strides, padding, dilation, ceil, extra attrs, block
    ("max_3x3_s2_pad", "MaxPool", (16, 13, 12), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, {}, 8),
    ("max_ceil_asym", "MaxPool", (8, 9, 10), (3, 2), (2, 3), (1, 0, 1, 1), (1, 1), True, {}, 8),
    ("max_dilated", "MaxPool", (8, 11, 11), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), False, {}, 4),
    ("avg_excl_pad_ceil", "AveragePool", (16, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, {}, 8),
    ("avg_incl_pad", "AveragePool", (8, 7, 8), (2, 3), (1, 2), (1, 1, 0, 1), (1, 1), False,
     {"count_include_pad": 1}, 8),
    ("avg_large_window_reduces", "AveragePool", (8, 12, 12), (9, 9), (3, 3), (2, 2, 2, 2), (1, 1), False, {}, 8),
]


@pytest.mark.parametrize("name,onnx_op,dims,k,strides,padding,dilation,ceil,extra,x", CASES,
                         ids=[c[0] for c in CASES])
def test_blocked_pool_matches_onnxruntime(name, onnx_op, dims, k, strides, padding, dilation, ceil, extra, x):
    C, H, W = dims
    data = rand(2, C, H, W)
    op = "nn.max_pool2d" if onnx_op == "MaxPool" else "nn.avg_pool2d"
    attrs = dict(pool_size=k, strides=strides, padding=padding, dilation=dilation, ceil_mode=ceil,
                 layout=f"NCHW{x}c")
    if extra:
        attrs["count_include_pad"] = bool(extra["count_include_pad"])
    y, _ = run_pool(op, pack(data, x), **attrs)
    onnx_attrs = dict(kernel_shape=list(k), strides=list(strides), pads=list(padding), ceil_mode=int(ceil), **extra)
    if dilation != (1, 1):
        onnx_attrs["dilations"] = list(dilation)
    (ref,) = ort_run(onnx_op, [data], onnx_attrs)
    np.testing.assert_allclose(unpack(y), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,fn", [("nn.global_avg_pool", np.mean), ("nn.global_max_pool", np.max)])
def test_blocked_global_pools(op, fn):
    data = rand(2, 16, 7, 9)
    y, src = run_pool(op, pack(data, 8), layout="NCHW8c")
    assert y.shape == (2, 2, 1, 1, 8)
    np.testing.assert_allclose(unpack(y), fn(data, axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


def test_unrolled_window_reads_the_input_without_a_padded_copy():
    # the 3x3 stride-2 max pool of ResNet: vector loads of channel blocks straight from the input,
    # taps outside it masked, rows in parallel
    data = rand(1, 16, 112, 112)
    y, src = run_pool("nn.max_pool2d", pack(data, 8), pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1),
                      layout="NCHW8c")
    (ref,) = ort_run("MaxPool", [data], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    np.testing.assert_allclose(unpack(y), ref)
    kernel = src[src.index("main_kernel("):]
    kernel = kernel[:kernel.index("\n}\n")]
    assert "pad_temp" not in kernel and "tsr_alloc" not in kernel
    assert "#pragma omp parallel for" in kernel and "tsr_vload_float32x" in kernel


def test_plain_layout_pools_have_no_padded_copy_either():
    data = rand(1, 4, 20, 20)
    y, src = run_pool("nn.avg_pool2d", data, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    (ref,) = ort_run("AveragePool", [data], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)
    assert "pad_temp" not in src


@pytest.mark.parametrize("op,shape,attrs,err,match", [
    ("nn.max_pool2d", (1, 2, 5, 5, 8), dict(pool_size=(2, 2), layout="NCHW4c"), ShapeError, "blocks of 8"),
    ("nn.max_pool2d", (1, 2, 5, 5), dict(pool_size=(2, 2), layout="NCHW8c"), ShapeError, "rank 5"),
    ("nn.max_pool2d", (1, 2, 5, 5), dict(pool_size=(2, 2), layout="NHWC"), TesseraError, "not supported"),
    ("nn.max_pool1d", (1, 2, 5, 8), dict(pool_size=(2,), layout="NCHW8c"), TesseraError, "not supported"),
    ("nn.global_avg_pool", (1, 2, 5, 5, 8), dict(layout="NCHW16c"), ShapeError, "blocks of 8"),
])
def test_pool_layout_errors(op, shape, attrs, err, match):
    opdef = get_op(op)
    with pytest.raises(err, match=match):
        opdef.infer_types([TensorType(shape)], opdef.normalize_attrs(attrs))
