"""The blocked convolution's output blocks a micro-kernel call (conv_nchwc._group) on the shapes whose
rule is ISA-specific (ResNet-50's / MobileNetV2's 7x7 layers and one-input-block 1x1 layers): the
default schedule picks the measured V for the target's kernel, and the result equals onnxruntime's."""
import re

import numpy as np
import pytest
from conv_nchwc_ref import conv_bias_relu
from nn_onnx_ref import ort_run

import tessera
from tessera.tir.tensor_intrin import x86_conv
from tessera.ops.nn.conv_nchwc import _group

RNG = np.random.default_rng(12)


CASES = [
    # name, (C, O, H), kernel, stride, padding; what _group decides for a 16-lane (AVX-512) kernel
    ("1x1_7x7_even_chunks", (64, 64, 7), 1, 1, 0),        # rows of 7: two blocks
    ("1x1_7x7_projection", (64, 32, 7), 1, 1, 0),         # rows of 7, O < C: two blocks
    ("1x1_stride2_to_7x7_expansion", (32, 64, 14), 1, 2, 0),  # rows of 7, O > C: one
    ("3x3_stride2_to_7x7", (32, 32, 14), 3, 2, 1),        # rows of 7, several taps: two blocks
    ("1x1_7x7_odd_chunks", (32, 48, 7), 1, 1, 0),         # 3 output blocks: one
    ("1x1_one_input_block_long_rows", (16, 64, 28), 1, 1, 0),  # one input block: one
    ("1x1_14x14", (32, 64, 14), 1, 1, 0),                 # rows of 14: two (AVX-512), one (AVX2)
]


@pytest.mark.parametrize("name,dims,k,stride,pad", CASES, ids=[c[0] for c in CASES])
def test_conv_blocks_a_call_follow_the_isa_rule_and_match_onnxruntime(name, dims, k, stride, pad, isa_target):
    isa = x86_conv.isa_of(isa_target)
    if isa is None:
        pytest.skip("the row micro-kernel needs AVX2+FMA or AVX-512")
    block = x86_conv.lanes_of(isa)
    C, O, H = dims
    x = RNG.standard_normal((1, C, H, H)).astype("float32")
    w = (RNG.standard_normal((O, C, k, k)) / np.sqrt(C * k * k)).astype("float32")
    b = RNG.standard_normal(O).astype("float32")
    target = tessera.Target(f"{isa_target} -num-threads=2")
    y, src = conv_bias_relu(x, w, b, block, target, (stride, stride), (pad,) * 4)
    (ref,) = ort_run("Conv", [x, w, b], {"strides": [stride, stride], "pads": [pad] * 4})
    np.testing.assert_allclose(y, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)
    # the kernel the default schedule called: V output blocks of `block` lanes (its name says)
    ow = (H + 2 * pad - k) // stride + 1
    names = set(re.findall(r"tensor intrinsic x86_\w+?_conv2d_nchwc_\d+x(\d+)_(\d+)x(\d+)o", src))
    expected_v = _group(O // block, ow, k * k, isa, C // block)
    assert names == {(str(ow), str(expected_v), str(block))}


def test_group_rule_per_isa():
    # AVX-512: rows of <= 7 pixels take two blocks (when the blocks pair up) for several taps, a 1x1
    # that does not widen the channels or one over >= 16 input blocks; one input block takes one
    assert _group(32, 7, 1, "avx512", 128) == 2
    assert _group(32, 7, 1, "avx512", 32) == 2
    assert _group(128, 7, 1, "avx512", 32) == 2       # an expansion over >= 16 input blocks: two
    assert _group(60, 7, 1, "avx512", 10) == 1        # over fewer: one
    assert _group(32, 7, 9, "avx512", 32) == 2
    assert _group(3, 7, 1, "avx512", 2) == 1
    assert _group(6, 112, 1, "avx512", 1) == 1
    assert _group(16, 56, 1, "avx512", 4) == 2        # long rows, several input blocks: as AVX2
    assert _group(64, 14, 1, "avx512", 64) == 2       # rows of 14: two blocks on AVX-512, 1x1 too
    assert _group(3, 14, 1, "avx512", 64) == 1
    # AVX2 as measured before: two blocks only for long rows
    assert _group(128, 7, 1, "avx2", 64) == 1
    assert _group(12, 112, 1, "avx2", 2) == 2
    assert _group(12, 14, 9, "avx2", 4) == 2
    assert _group(64, 14, 1, "avx2", 64) == 1


@pytest.mark.parametrize("dims,rows_outer", [((32, 32, 28), True), ((32, 128, 7), False)],
                         ids=["input_larger_rows_outer", "weights_larger_blocks_outer"])
def test_row_groups_are_the_outer_loop_where_the_input_outweighs_the_weights(dims, rows_outer, isa_target):
    isa = x86_conv.isa_of(isa_target)
    if isa is None:
        pytest.skip("the row micro-kernel needs AVX2+FMA or AVX-512")
    block = x86_conv.lanes_of(isa)
    C, O, H = dims
    x = RNG.standard_normal((1, C, H, H)).astype("float32")
    w = (RNG.standard_normal((O, C, 1, 1)) / np.sqrt(C)).astype("float32")
    b = RNG.standard_normal(O).astype("float32")
    y, src = conv_bias_relu(x, w, b, block, tessera.Target(f"{isa_target} -num-threads=2"), (1, 1), (0,) * 4)
    (ref,) = ort_run("Conv", [x, w, b], {})
    np.testing.assert_allclose(y, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)
    # 28x28 input pixels > 32 x 1x1 weights per input channel: rows outer; 7x7 < 128: blocks outer
    assert ("n_oh_0_oc_chunk_0_fused" in src) == rows_outer
    assert ("n_oc_chunk_0_oh_0_fused" in src) == (not rows_outer)
