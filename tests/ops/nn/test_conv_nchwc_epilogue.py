"""The blocked convolution's epilogue folded into its micro-kernel (tir/transform/fuse_intrin_epilogue.py
with tir/tensor_intrin/x86_conv.py's variants): the zero init dropped, bias / residual / ReLU / clip applied in
registers before the one store, and everything that does not fit left as it was. Each result against
onnxruntime's convolution with the epilogue in numpy; what the schedule makes is derived from the target."""
import re

import numpy as np
import pytest
from conv_nchwc_ref import conv_epilogue
from nn_onnx_ref import ort_run

import tessera
from tessera import te
from tessera.tir.tensor_intrin import x86_conv

RNG = np.random.default_rng(29)


def _lanes(isa_target):
    isa = x86_conv.isa_of(isa_target)
    if isa is None:
        pytest.skip("the row micro-kernel needs AVX2+FMA or AVX-512")
    return x86_conv.lanes_of(isa)


class _Forced:
    """Knobs that take the given values (the defaults elsewhere)."""

    def __init__(self, values):
        self.values = values

    def choose(self, sch, name, candidates, default):
        return self.values[name] if self.values.get(name) in candidates else default


def _conv_ref(x, w):
    (y,) = ort_run("Conv", [x, w], {})
    return y


def _build(x, w, b, r, block, target, epilogue, n_extra, knobs=None):
    """(NCHW result, C source) of conv -> epilogue(out, bias[, residual]) (conv_nchwc_ref.conv_epilogue)."""
    return conv_epilogue(x, w, [b, r][:n_extra], epilogue, block, target, knobs=knobs)


def _data(C, O, side, kernel):
    x = RNG.standard_normal((1, C, side, side)).astype("float32")
    w = (RNG.standard_normal((O, C, kernel, kernel)) / np.sqrt(C * kernel * kernel)).astype("float32")
    b = RNG.standard_normal(O).astype("float32")
    r = RNG.standard_normal((1, O, side - kernel + 1, side - kernel + 1)).astype("float32")
    return x, w, b, r


ZERO, SIX = te.const(0.0, "float32"), te.const(6.0, "float32")
EPILOGUES = {   # name: (te epilogue, inputs after the weight, numpy reference)
    "bias": (lambda y, b: y + b, 1, lambda y, b, r: y + b[None, :, None, None]),
    "bias_relu": (lambda y, b: te.max(y + b, ZERO), 1, lambda y, b, r: np.maximum(y + b[None, :, None, None], 0)),
    "bias_clip": (lambda y, b: te.min(te.max(y + b, ZERO), SIX), 1,
                  lambda y, b, r: np.clip(y + b[None, :, None, None], 0, 6)),
    "bias_residual_relu": (lambda y, b, r: te.max(y + b + r, ZERO), 2,
                           lambda y, b, r: np.maximum(y + b[None, :, None, None] + r, 0)),
    "bias_residual": (lambda y, b, r: r + (y + b), 2, lambda y, b, r: r + (y + b[None, :, None, None])),
    # a clip with its upper bound open (ONNX Clip with min only, as some exporters write it)
    "bias_clip_open": (lambda y, b: te.min(te.max(y + b, ZERO), te.const(float("inf"), "float32")), 1,
                       lambda y, b, r: np.maximum(y + b[None, :, None, None], 0)),
}


@pytest.mark.parametrize("kind", list(EPILOGUES))
@pytest.mark.parametrize("C,O,side,kernel", [(1, 6, 14, 1), (4, 4, 7, 3)], ids=["1x1", "3x3"])
def test_epilogue_runs_in_the_kernel_and_matches_onnxruntime(kind, C, O, side, kernel, isa_target):
    """Bias, residual, ReLU and clip fold into the kernel's store (no zeroing pass, no second pass over the
    tile), whatever the blocks, rows and tiles the schedule picks; the result is the reference's."""
    block = _lanes(isa_target)
    epi, n_extra, ref = EPILOGUES[kind]
    x, w, b, r = _data(C * block, O * block, side, kernel)
    got, src = _build(x, w, b, r, block, tessera.Target(f"{isa_target} -num-threads=2"), epi, n_extra)
    np.testing.assert_allclose(got, ref(_conv_ref(x, w), b, r), rtol=1e-4, atol=1e-4)
    calls = re.findall(r"\n\s*(tintrin_\w+)\(", src)
    assert calls and all(re.search(r"_z_e[0-9a-f]{8}$", c) for c in calls), calls
    assert not re.search(r"for \(int32_t \w+_init ", src)          # no init nest
    assert not re.search(r"vstore_float32x\d+\(&T_out\[", src)      # the output written by the kernel alone


def test_nan_in_the_accumulated_value_survives_relu_and_clip(isa_target):
    """The kernel's min/max with constants keep a NaN of the sum (as numpy's maximum / minimum do)."""
    block = _lanes(isa_target)
    for kind in ("bias_relu", "bias_clip"):
        epi, n_extra, ref = EPILOGUES[kind]
        x, w, b, r = _data(block, 2 * block, 7, 1)
        x[0, 0, 3, 4] = np.nan
        got, _ = _build(x, w, b, r, block, tessera.Target(f"{isa_target} -num-threads=1"), epi, n_extra)
        want = ref(_conv_ref(x, w), b, r)
        assert np.isnan(got[0, :, 3, 4]).all()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_an_epilogue_it_cannot_fold_keeps_its_own_pass(isa_target):
    """A product with an input is not an epilogue the kernel takes: the zero start still folds, the
    epilogue stays a loop over the tile, and the result is the reference's."""
    block = _lanes(isa_target)
    x, w, b, r = _data(block, 2 * block, 7, 1)
    got, src = _build(x, w, b, r, block, tessera.Target(f"{isa_target} -num-threads=1"), lambda y, bb, rr: y * rr + bb, 2)
    np.testing.assert_allclose(got, _conv_ref(x, w) * r + b[None, :, None, None], rtol=1e-4, atol=1e-4)
    calls = re.findall(r"\n\s*(tintrin_\w+)\(", src)
    assert calls and all(c.endswith("_z") for c in calls), calls
    assert re.search(r"vstore_float32x\d+\(&T_out\[", src)        # the epilogue's own loop


def test_a_reduction_split_across_calls_fuses_with_first_and_last_flags(isa_target):
    """With the input channels in slices (several calls a tile: knob conv.ic_chunks_a_call), each call is
    told whether it is the first (zero start) and the last (the epilogue); the result is the reference's."""
    block = _lanes(isa_target)
    x, w, b, r = _data(8 * block, 2 * block, 7, 1)
    epi, n_extra, ref = EPILOGUES["bias_residual_relu"]
    target = tessera.Target(f"{isa_target} -num-threads=1")
    got, src = _build(x, w, b, r, block, target, epi, n_extra, knobs=_Forced({"conv.ic_chunks_a_call": 1}))
    np.testing.assert_allclose(got, ref(_conv_ref(x, w), b, r), rtol=1e-4, atol=1e-4)
    calls = re.findall(r"\n\s*(tintrin_\w+)\(", src)
    assert calls and all(re.search(r"_z_e[0-9a-f]{8}_s$", c) for c in calls), calls
    assert re.search(r"for \(int32_t icc_0 = 0; icc_0 < 8;", src)      # 8 calls a tile
    assert not re.search(r"for \(int32_t \w+_init ", src)


def test_eight_lane_blocks_on_avx512vl_fold_the_epilogue_too():
    """8-channel blocks on an AVX-512VL target (MobileNetV2's 24 channels: the ymm kernel in all 32
    registers) take the same zero start and epilogue."""
    target = tessera.Target("c -num-threads=2")         # the host's: the code runs here
    if not all(target.has_feature(f) for f in ("avx512f", "avx512vl")):
        pytest.skip("the 8-lane AVX-512VL kernel: the host has no AVX-512VL")
    epi, n_extra, ref = EPILOGUES["bias_residual_relu"]
    x, w, b, r = _data(24, 144, 14, 1)
    got, src = _build(x, w, b, r, 8, target, epi, n_extra)
    np.testing.assert_allclose(got, ref(_conv_ref(x, w), b, r), rtol=1e-4, atol=1e-4)
    calls = re.findall(r"\n\s*(tintrin_\w+)\(", src)
    assert calls and all(c.startswith("tintrin_avx512vl8_") and re.search(r"_z_e[0-9a-f]{8}$", c) for c in calls), calls
