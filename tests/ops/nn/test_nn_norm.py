"""Normalization ops against onnxruntime (and onnx's reference evaluator where ORT lacks a case)."""
from functools import partial

import numpy as np
import pytest

import tessera
from nn_onnx_ref import ort_run, reference_run
from op_check import infer, run_op as _run_op

run_op = partial(_run_op, schedule=True)  # every op runs with its default schedule
RNG = np.random.default_rng(5)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


X = rand(2, 6, 5, 4)
C = X.shape[1]
GAMMA, BETA, MEAN, VAR = rand(C), rand(C), rand(C), RNG.random(C).astype(np.float32) + 0.1


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_batch_norm_inference():
    (y,) = run_op("nn.batch_norm", X, GAMMA, BETA, MEAN, VAR, epsilon=1e-3)
    close(y, ort_run("BatchNormalization", [X, GAMMA, BETA, MEAN, VAR], dict(epsilon=1e-3))[0])


def test_batch_norm_training_returns_updated_running_stats():
    ys = run_op("nn.batch_norm_training", X, GAMMA, BETA, MEAN, VAR, epsilon=1e-3, momentum=0.8)
    ref = ort_run("BatchNormalization", [X, GAMMA, BETA, MEAN, VAR], dict(epsilon=1e-3, momentum=0.8,
                                                                        training_mode=1), num_outputs=3)
    for got, want in zip(ys, ref):
        close(got, want)


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_layer_norm_with_stats(axis):
    w, b = rand(*X.shape[axis:]), rand(*X.shape[axis:])
    ys = run_op("nn.layer_norm", X, w, b, axis=axis, epsilon=1e-4, return_stats=True)
    ref = ort_run("LayerNormalization", [X, w, b], dict(axis=axis, epsilon=1e-4), num_outputs=3, opset=17)
    for got, want in zip(ys, ref):
        assert got.shape == want.shape
        close(got, want)


def test_layer_norm_without_beta_broadcast_gamma_symbolic_batch():
    w = rand(4)
    (y,) = run_op("nn.layer_norm", X, w, axis=-2, sym={0: ("N", 6, 5, 4)})
    mu = X.mean(axis=(2, 3), keepdims=True)
    close(y, (X - mu) / np.sqrt(X.var(axis=(2, 3), keepdims=True) + 1e-5) * w)
    types = infer("nn.layer_norm", (("N", "S", 8), "float32"), ((8,), "float32"), return_stats=True)
    assert types[1].shape == ("N", "S", 1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layer_norm_half_precision_computes_in_float32(dtype):
    x, w, b = rand(3, 64, dtype=dtype), rand(64, dtype=dtype), rand(64, dtype=dtype)
    (y,) = run_op("nn.layer_norm", x, w, b)
    xf = x.astype(np.float64)
    want = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-5) * w.astype(np.float64) \
        + b.astype(np.float64)
    tol = 2e-3 if dtype == "float16" else 2e-2
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("axis", [1, -1])
def test_rms_norm(axis):
    w = rand(*X.shape[axis:])
    (y,) = run_op("nn.rms_norm", X, w, axis=axis, epsilon=1e-3)
    close(y, ort_run("RMSNormalization", [X, w], dict(axis=axis, epsilon=1e-3), opset=23)[0])


def test_instance_norm():
    (y,) = run_op("nn.instance_norm", X, GAMMA, BETA, epsilon=1e-3)
    close(y, ort_run("InstanceNormalization", [X, GAMMA, BETA], dict(epsilon=1e-3))[0])


@pytest.mark.parametrize("per", ["channel", "group"])
def test_group_norm_per_channel_and_per_group_affine(per):
    g, b = (GAMMA, BETA) if per == "channel" else (GAMMA[:3], BETA[:3])
    (y,) = run_op("nn.group_norm", X, g, b, num_groups=3, epsilon=1e-3)
    opset = 21 if per == "channel" else 18
    (ref,) = (ort_run if per == "channel" else reference_run)(
        "GroupNormalization", [X, g, b], dict(num_groups=3, epsilon=1e-3), opset=opset)
    close(y, ref)


def test_mean_variance_normalization():
    (y,) = run_op("nn.mean_variance_normalization", X)
    close(y, ort_run("MeanVarianceNormalization", [X], {})[0])
    (z,) = run_op("nn.mean_variance_normalization", X, axes=(1,))
    close(z, ort_run("MeanVarianceNormalization", [X], dict(axes=[1]))[0])


@pytest.mark.parametrize("size,beta", [(3, 0.75), (4, 0.6), (5, 0.75)])
def test_lrn_window_across_channels(size, beta):
    (y,) = run_op("nn.lrn", X, size=size, alpha=0.02, beta=beta, bias=1.5)
    if size % 2:
        (ref,) = ort_run("LRN", [X], dict(size=size, alpha=0.02, beta=beta, bias=1.5))
    else:  # onnxruntime takes odd sizes only: the ONNX definition, window [c - 1, c + 2] for size 4
        sq = np.pad(X.astype(np.float64) ** 2, ((0, 0), (1, 2), (0, 0), (0, 0)))
        ssum = sum(sq[:, k:k + C] for k in range(size))
        ref = X / (1.5 + 0.02 / size * ssum) ** beta
    close(y, ref)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalize_zero_norm_gives_zero(p):
    x = X.copy()
    x[0, :, 1, 2] = 0
    (y,) = run_op("nn.lp_normalize", x, axis=1, p=p)
    close(y, ort_run("LpNormalization", [x], dict(axis=1, p=p))[0])
    assert not np.isnan(y).any()


@pytest.mark.parametrize("op,types,attrs,error,match", [
    ("nn.batch_norm", [((2, 3, 4), "float32")] + [((4,), "float32")] * 4, {}, tessera.ShapeError,
     "one entry per channel"),
    ("nn.batch_norm", [((2, 3, 4), "int32")] + [((3,), "int32")] * 4, {}, tessera.DTypeError, "int32"),
    ("nn.layer_norm", [((2, 3, 4), "float32"), ((3,), "float32")], {}, tessera.ShapeError, "broadcast"),
    ("nn.layer_norm", [((2, 3, 4), "float32"), ((4,), "float32")], {"axis": 3}, tessera.ShapeError, "out of range"),
    ("nn.layer_norm", [((2, 3, "S"), "float32"), ((1,), "float32")], {}, tessera.ShapeError, "static"),
    ("nn.group_norm", [((2, 6, 4), "float32"), ((6,), "float32"), ((6,), "float32")], {"num_groups": 4},
     tessera.ShapeError, "not divisible"),
    ("nn.group_norm", [((2, 6, 4), "float32"), ((2,), "float32"), ((6,), "float32")], {"num_groups": 3},
     tessera.ShapeError, "per channel"),
    ("nn.lp_normalize", [((2, 3), "float32")], {"p": 3}, tessera.TesseraError, "1 or 2"),
    ("nn.mean_variance_normalization", [((2, 3), "float32")], {"axes": (0, 0)}, tessera.TesseraError, "repeat"),
])
def test_norm_infer_refuses_bad_input(op, types, attrs, error, match):
    with pytest.raises(error, match=match):
        infer(op, *types, **attrs)
