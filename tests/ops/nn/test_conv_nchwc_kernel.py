"""Paths of the blocked convolution's row micro-kernel (tir/tensor_intrin/x86_conv.py) and of its default schedule:
register tiles across the rows of a map whose pixels are contiguous, the prefetch of streamed weights,
and an input padded per row group inside the parallel loop. Each result against onnxruntime, on an
AVX2 target and on the host's; what the schedule picks is derived from the target's vector width."""
import re

import numpy as np
import pytest
from conv_nchwc_ref import conv_bias_relu
from nn_onnx_ref import ort_run

import tessera
from tessera import te
from tessera.graph.ir import TensorType
from tessera.tir.tensor_intrin import x86_conv
from tessera.ops.nn.conv_nchwc import CONV, PREFETCH_BYTES
from tessera.ops.registry import ScheduleContext, get_op

RNG = np.random.default_rng(13)


def _isa(isa_target):
    isa = x86_conv.isa_of(isa_target)
    if isa is None:
        pytest.skip("the row micro-kernel needs AVX2+FMA or AVX-512")
    return isa, x86_conv.lanes_of(isa)


def _check(x, w, b, isa_target, threads=2, strides=(1, 1), padding=(0, 0, 0, 0), knobs=None):
    _, block = _isa(isa_target)
    y, src = conv_bias_relu(x, w, b, block, tessera.Target(f"{isa_target} -num-threads={threads}"), strides, padding, knobs)
    (ref,) = ort_run("Conv", [x, w, b], {"strides": list(strides), "pads": [padding[0], padding[1], padding[2],
                                                                            padding[3]]})
    np.testing.assert_allclose(y, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)
    return src


def _data(C, O, H, W, kh=1, kw=1, n=1):
    x = RNG.standard_normal((n, C, H, W)).astype("float32")
    w = (RNG.standard_normal((O, C, kh, kw)) / np.sqrt(C * kh * kw)).astype("float32")
    return x, w, RNG.standard_normal(O).astype("float32")


def test_flat_tiles_split_the_run_of_rows_into_fewer_tiles():
    # 7 rows of 7 pixels, 14-pixel tiles of two vectors: 13 + 12 + 12 + 12 instead of 7 x 7
    assert x86_conv.flat_tiles("avx512", 2, 7, 7, (1, 1)) == [(13, 1), (12, 3)]
    assert x86_conv.flat_tiles("avx512", 2, 7, 1, (1, 1)) is None          # one row
    assert x86_conv.flat_tiles("avx512", 2, 7, 7, (2, 2)) is None          # strided: rows apart
    assert x86_conv.flat_tiles("avx512", 2, 14, 4, (1, 1)) is None        # rows of whole tiles already
    assert x86_conv.flat_tiles("avx512", 2, 1, 7, (1, 1)) is None         # rows of one pixel: no w stride
    # AVX2, two vectors: 6-pixel tiles; 4 rows of 7 (2 tiles each) -> 28 pixels in 5 tiles
    assert x86_conv.flat_tiles("avx2", 2, 7, 4, (1, 1)) == [(6, 3), (5, 2)]


@pytest.mark.parametrize("kernel,padding", [((1, 1), (0, 0, 0, 0)), ((3, 1), (1, 0, 1, 0)), ((1, 3), (0, 1, 0, 1))],
                         ids=["1x1", "3x1_rows_contiguous", "1x3_rows_apart"])
def test_rows_of_a_7x7_map_run_as_one_row_of_tiles_where_contiguous(kernel, padding, isa_target):
    _, block = _isa(isa_target)
    # 16 output blocks: enough block groups for several rows a call, so the kernel is made for 7 rows
    x, w, b = _data(2 * block, 16 * block, 7, 7, *kernel)
    src = _check(x, w, b, isa_target, threads=1, padding=padding)
    (name,) = set(re.findall(r"tensor intrinsic (x86_\w+)", src))
    assert name.split("_conv2d_nchwc_")[1].startswith("7x7_")
    # the kernel has both sweeps; which one runs is decided at run time by the strides (a 1x3 kernel
    # reads input rows 9 pixels long: row by row, and the result above is still right)
    assert "const int flat = sa_h == 7 * sa_w" in src and "if (flat) {" in src


def test_row_kernels_without_contiguous_rows_have_no_flat_sweep(isa_target):
    _, block = _isa(isa_target)
    x, w, b = _data(2 * block, 16 * block, 14, 14)
    src = _check(x, w, b, isa_target, threads=1, strides=(2, 2))
    assert "if (flat)" not in src


@pytest.mark.parametrize("C,O,side", [(256, 256, 7), (64, 1024, 14)], ids=["7x7_chunks", "14x14_one_chunk"])
def test_weights_of_at_least_256kb_are_prefetched_and_the_result_is_unchanged(C, O, side, isa_target):
    x, w, b = _data(C, O, side, side)
    assert C * O * 4 >= PREFETCH_BYTES
    src = _check(x, w, b, isa_target)
    names = set(re.findall(r"tensor intrinsic (x86_\w+)", src))
    assert names and all(n.endswith("_pf") for n in names)
    assert "__builtin_prefetch((const void*)(ph + 4 * (uintptr_t)(0 * sb_v + o)));" in src


def test_smaller_weights_and_multi_tap_kernels_are_not_prefetched(isa_target):
    _, block = _isa(isa_target)
    x, w, b = _data(64, 64, 14, 14)
    assert 64 * 64 * 4 < PREFETCH_BYTES
    assert "_pf" not in " ".join(re.findall(r"tensor intrinsic (x86_\w+)", _check(x, w, b, isa_target)))
    x, w, b = _data(2 * block, 2 * block, 14, 14, 3, 3)
    assert "_pf" not in " ".join(re.findall(r"tensor intrinsic (x86_\w+)", _check(x, w, b, isa_target,
                                                                                   padding=(1, 1, 1, 1))))


def _main(src):
    kernel = src[src.index("main_kernel("):]
    return kernel[:kernel.index("\n}\n")]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_strided_3x3_pads_each_row_group_inside_the_parallel_loop(threads, isa_target):
    _, block = _isa(isa_target)
    # 28x28 -> 14x14, stride 2: the input outweighs the weights (row groups outer), a row group of one
    # output row pads 3 input rows for 2 rows of advance (1.5 times)
    x, w, b = _data(2 * block, 4 * block, 28, 28, 3, 3)
    kernel = _main(_check(x, w, b, isa_target, threads=threads, strides=(2, 2), padding=(1, 1, 1, 1)))
    loop = kernel.index("n_oh_0_fused = 0;")
    assert kernel.count("#pragma omp parallel for") == (1 if threads > 1 else 0)
    # the padded rows are a buffer of the row group's task, written before its block groups' calls
    assert loop < kernel.index("data_pad[") < kernel.index("oc_chunk_0 = 0; oc_chunk_0 < ") < kernel.index(
        "tensor intrinsic")


@pytest.mark.parametrize("side,per_group", [(64, False), (224, True)], ids=["few_row_groups", "stem"])
def test_a_7x7_stride_2_pads_per_row_group_only_with_enough_rows_a_group(side, per_group, isa_target):
    _, block = _isa(isa_target)
    # a group must have enough rows (7 for 2 threads: 13 + 6 halo input rows for 14 of advance) to pad
    # its own input rows at most 1.5 times, and there must be >= 4 such groups a thread (224 -> 112
    # rows: 16; 64 -> 32 rows: 4, too few): else the whole input is padded once, before the conv
    x, w, b = _data(block, 2 * block, side, side, 7, 7)
    kernel = _main(_check(x, w, b, isa_target, strides=(2, 2), padding=(3, 3, 3, 3)))
    if per_group:
        assert kernel.count("#pragma omp parallel for") == 1
        assert kernel.index("n_oh_0_fused = 0; n_oh_0_fused < 16;") < kernel.index("data_pad[")
    else:
        assert kernel.index("data_pad = ") < kernel.index("n_oh_0_oc_chunk_0_fused = 0;")
        assert kernel.count("#pragma omp parallel for") == 2


@pytest.mark.parametrize("C,O", [(144, 24), (48, 40)], ids=["three_blocks", "five_blocks"])
def test_8_channel_blocks_use_all_32_registers_with_avx512vl(C, O, isa_target):
    isa, _ = _isa(isa_target)
    target = tessera.Target(isa_target)
    x, w, b = _data(C, O, 14, 14)
    y, src = conv_bias_relu(x, w, b, 8, tessera.Target(f"{isa_target} -num-threads=2"))
    (ref,) = ort_run("Conv", [x, w, b], {})
    np.testing.assert_allclose(y, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)
    (name,) = set(re.findall(r"tensor intrinsic (x86_\w+)", src))
    if isa == "avx512" and target.has_feature("avx512vl"):
        # ymm vectors in 32 registers: three blocks a call where they divide the output blocks (27
        # accumulators in 9-pixel tiles), else one
        assert name.startswith("x86_avx512vl_conv2d_nchwc_")
        assert f"_{3 if (O // 8) % 3 == 0 else 1}x8o8i_" in name
    else:
        assert name.startswith("x86_avx2_fma_conv2d_nchwc_")


def test_sampled_points_of_the_knob_space_compute_the_same_convolution(isa_target):
    """Random points of the schedule's knob space (output blocks, loop order, per-row-group padding,
    rows, input-channel chunks, prefetch) on a padded strided 3x3 layer: each builds and is right."""
    from tessera.errors import TesseraError
    from tessera.ops.registry import Knobs

    _, block = _isa(isa_target)
    x, w, b = _data(2 * block, 4 * block, 28, 28, 3, 3)
    (ref,) = ort_run("Conv", [x, w, b], {"strides": [2, 2], "pads": [1, 1, 1, 1]})
    ref = np.maximum(ref, 0)
    op = get_op(CONV)
    attrs = op.normalize_attrs({"strides": (2, 2), "padding": (1, 1, 1, 1), "data_layout": f"NCHW{block}c",
                                "kernel_layout": f"OIHW{block}i{block}o", "out_layout": f"NCHW{block}c"})
    arrays = [np.ascontiguousarray(x.reshape(1, 2, block, 28, 28).transpose(0, 1, 3, 4, 2)),
              np.ascontiguousarray(w.reshape(4, block, 2, block, 3, 3).transpose(0, 2, 4, 5, 3, 1)),
              np.ascontiguousarray(b.reshape(1, -1, 1, 1, block))]
    types = [TensorType.of(a) for a in arrays[:2]]
    (ot,) = op.infer_types(types, attrs)
    target = tessera.Target(f"{isa_target} -num-threads=2")
    seen, knob_names = set(), set()
    for seed in range(12):
        phs = [te.placeholder(a.shape, name=nm) for nm, a in zip(("data", "weight", "bias"), arrays)]
        (out,) = op.compute(phs[:2], attrs)
        final = te.compute(out.shape, lambda *i, out=out, phs=phs: te.max(out[i] + phs[2][0, i[1], 0, 0, i[4]],
                                                                           te.const(0.0, "float32")), name="T_relu")
        sch = tessera.tir.Schedule(te.create_prim_func(phs + [final]), seed=seed)
        knobs = Knobs(seed=seed)
        try:
            op.schedule(sch, ScheduleContext(block=out.name, attrs=attrs, target=target, input_types=tuple(types),
                                             output_types=(ot,), epilogue=(final.name,), knobs=knobs))
        except TesseraError:
            continue        # a refused point makes no candidate
        knob_names.update(knobs.names)
        seen.add(str(sch.trace))
        y = np.zeros(ot.shape, "float32")
        tessera.build(sch, target=target)(*arrays, y)
        np.testing.assert_allclose(y.transpose(0, 1, 4, 2, 3).reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)
    assert {"conv.oc_blocks", "conv.rows_outer", "conv.pad_in_row_groups", "conv.rows",
            "conv.prefetch"} <= knob_names
    assert len(seen) >= 4


class _Forced:
    """Knobs (ScheduleContext.knobs) that take the given values where they are candidates, the defaults
    elsewhere; `candidates` keeps what each knob offered."""

    def __init__(self, values):
        self.values, self.names, self.candidates = values, [], {}

    def choose(self, sch, name, candidates, default):
        self.names.append(name)
        self.candidates[name] = list(candidates)
        value = self.values.get(name, default)
        return value if value in candidates else default


def _names(src):
    return set(re.findall(r"tensor intrinsic (x86_\w+)", src))


@pytest.mark.parametrize("rows", [1, 3, 5])
def test_per_row_group_padding_at_points_the_rule_does_not_pick(rows, isa_target):
    # the tuner may pad per row group with any rows a call: odd counts of a 15-row output (30x30 stride
    # 2), a batch of two (the row groups of both images in one parallel loop), with the weight prefetch
    _, block = _isa(isa_target)
    x, w, b = _data(2 * block, 4 * block, 30, 30, 3, 3, n=2)
    knobs = _Forced({"conv.rows_outer": True, "conv.pad_in_row_groups": True, "conv.rows": rows,
                     "conv.prefetch": True})
    src = _check(x, w, b, isa_target, strides=(2, 2), padding=(1, 1, 1, 1), knobs=knobs)
    assert rows in knobs.candidates["conv.rows"] and "conv.pad_in_row_groups" in knobs.names
    (name,) = _names(src)
    assert name.split("_conv2d_nchwc_")[1].startswith(f"{rows}x15_") and name.endswith("_pf")
    kernel = _main(src)
    assert kernel.index("n_oh_0_fused = 0;") < kernel.index("data_pad[")      # padded inside the row loop


@pytest.mark.parametrize("H,kernel", [(7, (1, 1)), (9, (3, 1))], ids=["1x1", "3x1"])
def test_flat_tiles_with_a_batch_of_two_prefetch_and_reduction_chunks(H, kernel, isa_target):
    # 7 rows a call of a 7x7 output whose input rows are 7 pixels long (contiguous: the flat sweep), two
    # images, the weights prefetched, the reduction in two chunks a call
    _, block = _isa(isa_target)
    x, w, b = _data(2 * block, 16 * block, H, 7, *kernel, n=2)
    knobs = _Forced({"conv.rows": 7, "conv.prefetch": True, "conv.ic_chunks_a_call": 1})
    src = _check(x, w, b, isa_target, threads=1, knobs=knobs)
    assert 7 in knobs.candidates["conv.rows"] and 1 in knobs.candidates["conv.ic_chunks_a_call"]
    (name,) = _names(src)
    assert name.split("_conv2d_nchwc_")[1].startswith("7x7_") and name.endswith("_pf")
    assert "if (flat) {" in src


@pytest.mark.parametrize("cpu,prefix", [("knl", "x86_avx2_fma_"), ("skylake-avx512", "x86_avx512vl_"),
                                        ("haswell", "x86_avx2_fma_")])
def test_8_channel_blocks_take_the_avx512vl_kernel_only_where_the_target_has_avx512vl(cpu, prefix):
    # scheduled for a named CPU, not built (the host need not run it): Knights Landing has AVX-512F but
    # not VL (its 8-lane blocks run the AVX2 kernel); Skylake-SP has both
    target = tessera.Target(f"c -mcpu={cpu}")
    assert target.has_feature("avx512vl") == (prefix == "x86_avx512vl_")
    op = get_op(CONV)
    attrs = op.normalize_attrs({"data_layout": "NCHW8c", "kernel_layout": "OIHW8i8o", "out_layout": "NCHW8c"})
    types = [TensorType((1, 6, 14, 14, 8), "float32"), TensorType((3, 6, 1, 1, 8, 8), "float32")]
    (ot,) = op.infer_types(types, attrs)
    phs = [te.placeholder(t.shape, name=nm) for nm, t in zip(("data", "weight"), types)]
    (out,) = op.compute(phs, attrs)
    sch = tessera.tir.Schedule(te.create_prim_func(phs + [out]))
    op.schedule(sch, ScheduleContext(block=out.name, attrs=attrs, target=target, input_types=tuple(types),
                                     output_types=(ot,)))
    (name,) = set(re.findall(r"x86_\w+?_conv2d_nchwc_\w+", str(sch.trace)))
    assert name.startswith(prefix)
