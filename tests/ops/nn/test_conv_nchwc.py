"""nn.contrib_conv2d_NCHWc / nn.contrib_depthwise_conv2d_NCHWc (blocked layouts) against
onnxruntime on the same data in NCHW, with their default schedules (the x86 row micro-kernel
where the host has AVX2/AVX-512, the loop schedule otherwise)."""
import shutil
import subprocess

import numpy as np
import pytest

import tessera
from conv_nchwc_ref import pack_data, pack_weight, unpack
from nn_onnx_ref import ort_run
from tessera import te
from tessera.errors import ShapeError, TesseraError
from tessera.graph.ir import TensorType
from tessera.tir.tensor_intrin import x86_conv
from tessera.ops.nn.conv_nchwc import CONV, DEPTHWISE
from tessera.ops.registry import ScheduleContext, get_op

RNG = np.random.default_rng(11)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


def run_scheduled(op, arrays, threads=2, epilogue=None, isa_target="c", **attrs):
    """(outputs, generated C) of op with its default schedule; epilogue(out, inputs) adds an
    elementwise stage after the op that the schedule gets as ScheduleContext.epilogue."""
    opdef = get_op(op)
    attrs = opdef.normalize_attrs(attrs)
    types = [TensorType.of(a) for a in arrays[:2]]
    (ot,) = opdef.infer_types(types, attrs)
    names = ["data", "weight"] + [f"extra{k}" for k in range(len(arrays) - 2)]
    phs = [te.placeholder(a.shape, name=nm, dtype=str(a.dtype)) for nm, a in zip(names, arrays)]
    (out,) = opdef.compute(phs[:2], attrs)
    final, epi = out, ()
    if epilogue is not None:
        final = epilogue(out, phs)
        epi = (final.name,)
    sch = tessera.tir.Schedule(te.create_prim_func(phs + [final]))
    target = tessera.Target(f"{isa_target} -num-threads={threads}")
    opdef.schedule(sch, ScheduleContext(block=out.name, attrs=attrs, target=target, input_types=tuple(types),
                                        output_types=(ot,), epilogue=epi))
    lib = tessera.build(sch, target=target)
    y = np.zeros(ot.shape, arrays[0].dtype)
    lib(*arrays, y)
    return y, lib.get_source()


CONV_CASES = [
    # name, (C, O, H, W), kernel, strides, padding, dilation, (ib, ob), batch
    ("3x3_pad", (16, 32, 9, 11), 3, (1, 1), (1, 1, 1, 1), (1, 1), (8, 8), 1),
    ("1x1_stride2", (8, 16, 10, 10), 1, (2, 2), (0, 0, 0, 0), (1, 1), (8, 8), 2),
    ("rgb_7x7_stride2_block3", (3, 16, 15, 13), 7, (2, 2), (3, 3, 3, 3), (1, 1), (3, 8), 1),
    ("dilated_three_out_blocks", (16, 24, 11, 11), 3, (1, 1), (2, 2, 2, 2), (2, 2), (8, 8), 1),
    ("asymmetric_pad_stride", (8, 16, 12, 9), 3, (2, 1), (1, 0, 2, 1), (1, 1), (8, 8), 1),
    ("blocks_of_16", (32, 32, 6, 6), 3, (1, 1), (1, 1, 1, 1), (1, 1), (16, 16), 1),
    ("in_block_4", (12, 8, 5, 7), 3, (1, 1), (1, 1, 1, 1), (1, 1), (4, 8), 1),
]


@pytest.mark.parametrize("name,dims,k,strides,padding,dilation,blocks,batch", CONV_CASES,
                         ids=[c[0] for c in CONV_CASES])
def test_conv2d_nchwc_matches_onnxruntime(name, dims, k, strides, padding, dilation, blocks, batch, isa_target):
    C, O, H, W = dims
    ib, ob = blocks
    x, w = rand(batch, C, H, W), rand(O, C, k, k)
    y, src = run_scheduled(CONV, [pack_data(x, ib), pack_weight(w, ib, ob)], strides=strides, padding=padding,
                           dilation=dilation, data_layout=f"NCHW{ib}c", kernel_layout=f"OIHW{ib}i{ob}o",
                           out_layout=f"NCHW{ob}c", isa_target=isa_target)
    (ref,) = ort_run("Conv", [x, w], dict(strides=list(strides), pads=list(padding), dilations=list(dilation)))
    np.testing.assert_allclose(unpack(y), ref, rtol=1e-4, atol=1e-4)
    # the micro-kernel of the block's vector width ran: 8 channels (256 bits) on AVX2 and AVX-512
    # targets (with AVX-512VL in 32 registers), 16 (512 bits) on AVX-512 ones
    isa = x86_conv.isa_of(isa_target)
    kernel_isa = {8: "avx2", 16: "avx512"}.get(ob)
    if ob == 8 and isa == "avx512" and tessera.Target(isa_target).has_feature("avx512vl"):
        kernel_isa = "avx512vl"
    if kernel_isa is not None and isa in {"avx2": ("avx2", "avx512"), "avx512vl": ("avx512",),
                                          "avx512": ("avx512",)}[kernel_isa]:
        assert f"tensor intrinsic x86_{kernel_isa}_" in src and "conv2d_nchwc_" in src


def test_conv2d_nchwc_tensorized_row_is_parallel_with_the_epilogue_in_the_row_loop(isa_target):
    if x86_conv.isa_of(isa_target) is None:
        pytest.skip("the row micro-kernel needs AVX2+FMA or AVX-512")
    x, w, b = rand(1, 16, 48, 48), rand(32, 16, 3, 3), rand(1, 4, 1, 1, 8)

    def bias_relu(out, phs):
        return te.compute(out.shape, lambda *i: te.max(out[i] + phs[2][0, i[1], 0, 0, i[4]], te.const(0.0, "float32")),
                          name="T_relu")

    y, src = run_scheduled(CONV, [pack_data(x, 8), pack_weight(w, 8, 8), b], epilogue=bias_relu,
                           padding=(1, 1, 1, 1), isa_target=isa_target)
    (ref,) = ort_run("Conv", [x, w], dict(pads=[1, 1, 1, 1]))
    ref = np.maximum(ref + unpack(np.broadcast_to(b, (1, 4, 48, 48, 8))), 0)
    np.testing.assert_allclose(unpack(y), ref, rtol=1e-4, atol=1e-4)
    kernel = src[src.index("main_kernel("):]
    kernel = kernel[:kernel.index("\n}\n")]
    assert kernel.count("#pragma omp parallel for") == 2          # the padding copy and the rows
    # the fused (n, row group, block group) loop, the row groups outer here (the input is larger
    # than the weights)
    body = kernel[kernel.index("n_oh_0_oc_chunk_0_fused"):]
    # per row: the micro-kernel, then bias + relu on the row while it is in cache (a row-sized
    # buffer, not a whole conv output)
    assert body.index("tensor intrinsic") < body.index("T_relu[")
    assert "float conv2d_NCHWc[" in body


def test_conv2d_nchwc_loop_schedule_for_other_dtypes():
    x, w = rand(1, 8, 7, 7).astype("float64"), rand(16, 8, 3, 3).astype("float64")
    y, src = run_scheduled(CONV, [pack_data(x, 8), pack_weight(w, 8, 8)], padding=(1, 1, 1, 1))
    (ref,) = ort_run("Conv", [x.astype("float32"), w.astype("float32")], dict(pads=[1, 1, 1, 1]))
    np.testing.assert_allclose(unpack(y), ref, rtol=1e-4, atol=1e-4)
    # float64 all the way: the float32 reference is off by its own rounding only
    assert abs(unpack(y) - ref).max() < 1e-4 and unpack(y).dtype == np.float64
    assert "tensor intrinsic" not in src


DW_CASES = [
    # name, (C, H, W), kernel, strides, padding, block
    ("3x3", (16, 9, 10), 3, (1, 1), (1, 1, 1, 1), 8),
    ("3x3_stride2", (24, 11, 11), 3, (2, 2), (1, 1, 1, 1), 8),
    ("5x5_block4", (8, 12, 12), 5, (1, 2), (2, 2, 2, 2), 4),
    ("9x9_reduction", (8, 12, 12), 9, (1, 1), (4, 4, 4, 4), 8),
    # enough work for parallel rows (each row's filter then copied into a local array)
    ("3x3_parallel_rows", (32, 40, 40), 3, (1, 1), (1, 1, 1, 1), 8),
    ("3x3_stride2_parallel_rows", (32, 41, 40), 3, (2, 2), (1, 1, 1, 1), 8),
]


@pytest.mark.parametrize("name,dims,k,strides,padding,x", DW_CASES, ids=[c[0] for c in DW_CASES])
def test_depthwise_conv2d_nchwc_matches_onnxruntime(name, dims, k, strides, padding, x):
    C, H, W = dims
    data, w = rand(2, C, H, W), rand(C, 1, k, k)
    y, _ = run_scheduled(DEPTHWISE, [pack_data(data, x), pack_weight(w, 1, x)], strides=strides, padding=padding,
                         data_layout=f"NCHW{x}c", kernel_layout=f"OIHW1i{x}o", out_layout=f"NCHW{x}c")
    (ref,) = ort_run("Conv", [data, w], dict(strides=list(strides), pads=list(padding), group=C))
    np.testing.assert_allclose(unpack(y), ref, rtol=1e-4, atol=1e-4)


DW_BORDER_CASES = [
    # name, (H, W), kernel, strides, padding (top, left, bottom, right), dilation
    ("asymmetric_padding", (9, 11), 3, (1, 1), (0, 2, 2, 1), (1, 1)),
    ("dilated_stride2", (13, 12), 3, (2, 2), (2, 2, 2, 2), (2, 2)),
    ("no_interior_pixel", (3, 4), 3, (1, 1), (2, 2, 2, 2), (1, 1)),
    ("window_wider_than_input", (4, 4), 5, (1, 1), (2, 2, 2, 2), (1, 1)),
]


@pytest.mark.parametrize("name,hw,k,strides,padding,dilation", DW_BORDER_CASES, ids=[c[0] for c in DW_BORDER_CASES])
def test_depthwise_conv2d_nchwc_border_and_interior_pixels_match_onnxruntime(name, hw, k, strides, padding, dilation):
    # pixels whose window lies inside the input take an unclamped path, the others clamp and select
    # per tap: every mix of the two (asymmetric padding, dilation, windows never inside) must agree
    (H, W), C = hw, 16
    data, w = rand(1, C, H, W), rand(C, 1, k, k)
    y, _ = run_scheduled(DEPTHWISE, [pack_data(data, 8), pack_weight(w, 1, 8)], strides=strides, padding=padding,
                         dilation=dilation)
    (ref,) = ort_run("Conv", [data, w], dict(strides=list(strides), pads=list(padding), dilations=list(dilation),
                                             group=C))
    np.testing.assert_allclose(unpack(y), ref, rtol=1e-4, atol=1e-4)


def _infer(op, data, weight, **attrs):
    opdef = get_op(op)
    return opdef.infer_types([TensorType(data), TensorType(weight)], opdef.normalize_attrs(attrs))


def test_conv2d_nchwc_infers_the_blocked_output_shape():
    (t,) = _infer(CONV, ("N", 2, 9, 9, 8), (4, 2, 3, 3, 8, 8), strides=(2, 2), padding=(1, 1, 1, 1))
    assert t.shape == ("N", 4, 5, 5, 8)
    (t,) = _infer(CONV, (1, 1, 9, 9, 3), (2, 1, 7, 7, 3, 16), padding=(3, 3, 3, 3), data_layout="NCHW3c",
                  kernel_layout="OIHW3i16o", out_layout="NCHW16c")
    assert t.shape == (1, 2, 9, 9, 16)


@pytest.mark.parametrize("data,weight,attrs,err,match", [
    ((1, 2, 9, 9, 8), (4, 2, 3, 3, 8, 8), dict(data_layout="NCHW4c"), ShapeError, "data_layout"),
    ((1, 2, 9, 9, 8), (4, 3, 3, 3, 8, 8), {}, ShapeError, "blocks"),
    ((1, 2, 9, 9, 8), (4, 2, 3, 3, 8, 8), dict(out_layout="NCHW16c"), ShapeError, "out_layout"),
    ((1, 2, 9, 9, 8), (4, 2, 3, 3, 8, 8), dict(data_layout="NHWC"), TesseraError, "not a blocked layout"),
    ((1, 2, 9, 9, 8), (4, 2, 3, 3, 8, 8), dict(groups=2), TesseraError, "groups=2"),
    ((1, 2, 9, 9), (4, 2, 3, 3, 8, 8), {}, ShapeError, "rank 5"),
    ((1, 2, 2, 2, 8), (4, 2, 3, 3, 8, 8), {}, ShapeError, "larger than the padded input"),
])
def test_conv2d_nchwc_refuses_inconsistent_layouts(data, weight, attrs, err, match):
    with pytest.raises(err, match=match):
        _infer(CONV, data, weight, **attrs)


def test_depthwise_nchwc_refuses_a_block_change():
    with pytest.raises(ShapeError, match="keeps the block"):
        _infer(DEPTHWISE, (1, 2, 9, 9, 8), (1, 1, 3, 3, 1, 16), kernel_layout="OIHW1i16o", out_layout="NCHW16c")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("isa,flags", [("avx2", ["-mavx2", "-mfma"]), ("avx512", ["-mavx512f"])])
def test_row_micro_kernel_source_compiles_for_each_isa(tmp_path, isa, flags):
    # AVX-512 hosts are not always at hand: the generated C is at least compiled for them
    src = x86_conv.c_source(isa, 2, 8, (1, 2), (1, 1), 28) + "\n" + x86_conv.c_source(isa, 3, 3, (2, 1), (2, 2), 7, 7)
    path = tmp_path / "k.c"
    path.write_text("#include <stdint.h>\n" + src)
    subprocess.run(["gcc", "-O2", "-std=gnu11", "-fsyntax-only", *flags, str(path)], check=True)
    bad = subprocess.run(["gcc", "-O2", "-std=gnu11", "-fsyntax-only", "-mno-avx", str(path)],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "needs" in bad.stderr      # the ISA guard refuses


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_row_tiles_cover_the_row_with_equal_tiles_that_fit_the_registers(isa):
    for v in range(1, x86_conv.MAX_V + 1):
        R = x86_conv.row_tile(isa, v)
        assert R * v + v + 1 <= x86_conv.ISA[isa][1]
        for ow in (1, 5, 7, 14, 28, 56, 112, 113):
            plan = x86_conv.row_tiles(isa, v, ow)
            assert sum(r * c for r, c in plan) == ow
            sizes = [r for r, _ in plan]
            assert max(sizes) <= R and max(sizes) - min(sizes) <= 1
