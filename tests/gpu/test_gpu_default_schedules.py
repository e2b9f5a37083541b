"""The default GPU schedules of ops/gpu (conv.py, rows.py, tensorcore.py): the lowered programs run on
the reference work-group executor (gpu_interp: barriers and data races checked) and, where OpenCL
works, through tessera.compile against ONNX Runtime; the tensor-core GEMM's CUDA source is checked
and built with nvcc (no GPU runs it here: benchmarks/gpu_check.py does on a device)."""
import shutil

import numpy as np
import onnxruntime as ort
import pytest
from gpu_interp import run_gpu
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera import te, tir
from tessera.backend import get_backend
from tessera.errors import ScheduleError, TesseraError
from tessera.ops.gpu import schedule_gemm_tensorcore, schedule_gpu_default
from tessera.ops.gpu.conv import conv_tiles
from tessera.ops.gpu.tensorcore import default_tile, tile_space
from tessera.runtime import opencl as cl_rt
from tessera.target import Target
from tessera.tir.tensor_intrin.cuda_gemm import shared_bytes, threads

_OK, _WHY = cl_rt.usable()
needs_opencl = pytest.mark.skipif(not _OK, reason=f"OpenCL is not usable here: {_WHY}")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on the PATH")
RNG = np.random.default_rng(7)


def _lower(sch, target="opencl"):
    target = Target(target)
    func = sch.mod["main"]
    for _, fn in get_backend(target).passes(target):
        func = fn(func)
    return func


def _conv_model(N, C, H, W, O, k, s, p):
    w = RNG.standard_normal((O, C, k, k)).astype("float32")
    b = RNG.standard_normal(O).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4),
             helper.make_node("Relu", ["c"], ["y"])]
    OH, OW = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TP.FLOAT, [N, C, H, W])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [N, O, OH, OW])],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _row_model(op, shape):
    inputs, inits = ["x"], []
    attrs = {"axis": -1}
    if op == "LayerNormalization":
        inits = [numpy_helper.from_array(RNG.standard_normal(shape[-1]).astype("float32"), n) for n in ("w", "b")]
        inputs += ["w", "b"]
        attrs["epsilon"] = 1e-5
    g = helper.make_graph([helper.make_node(op, inputs, ["y"], **attrs)], "rows",
                          [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, list(shape))], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _scheduled_kernel_func(model, target="opencl"):
    """The default GPU schedule of the model's one kernel, and the kernel's program."""
    from tessera.graph.kernels import get_program
    from tessera.graph.passes import optimize

    graph, _ = tessera.frontend.from_onnx(model)
    t = Target(target)
    (node,) = optimize(graph, 3, t, ()).nodes
    prog = get_program(node.op, node.attrs, [v.type for v in node.inputs], [v.type for v in node.outputs], t, node)
    return schedule_gpu_default(tir.Schedule(prog.func), t), prog


CONVS = [(1, 8, 10, 12, 12, 3, 1, 1),     # guarded tiles (12 columns)
         (2, 16, 9, 9, 40, 3, 2, 1),      # batch 2, stride 2, 40 channels (not a multiple of the tile)
         (1, 3, 20, 20, 16, 7, 2, 3),     # a 7x7 stem, 3 input channels
         (1, 16, 7, 7, 24, 1, 1, 0)]      # 1x1, no padding stage


@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c)))
def test_conv_tiles_through_shared_memory_and_matches_numpy(case):
    """The lowered convolution (shared input window with its padding, shared weights, register tile,
    the bias and ReLU in its write-back) on the work-group executor against numpy's convolution."""
    N, C, H, W, O, k, s, p = case
    model = _conv_model(*case)
    sch, prog = _scheduled_kernel_func(model)
    func = _lower(sch)
    src = tessera.backend.generate(sch, "opencl").text
    assert "__local float pad_temp_shared" in src or "__local float data_shared" in src
    assert "__local float weight_shared" in src
    x = RNG.standard_normal((N, C, H, W)).astype("float32")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    shapes = [tuple(int(d.value) for d in p.shape) for p in prog.func.params]
    args = [a.reshape(sh) for a, sh in zip((x, w, b), shapes)] + [np.full(want.shape, np.nan, np.float32)]
    assert len(prog.func.params) == len(args)
    run_gpu(func, args)
    np.testing.assert_allclose(args[-1], want, rtol=1e-4, atol=1e-4)


def test_conv_tiles_divide_the_resnet_shapes():
    """No guards in ResNet's layers: the tiles divide every output extent, within 512 threads."""
    for oc, oh, ow in ((64, 112, 112), (64, 56, 56), (128, 28, 28), (256, 14, 14), (512, 7, 7)):
        t = conv_tiles(oc, oh, ow)
        assert oc % (t["to"] * t["io"]) == 0 and oh % t["th"] == 0 and ow % (t["tw"] * t["iw"]) == 0
        assert t["to"] * t["th"] * t["tw"] <= 512


@needs_opencl
@pytest.mark.parametrize("case", CONVS[:2], ids=lambda c: "x".join(map(str, c)))
def test_conv_with_its_epilogue_is_one_kernel_on_opencl(case):
    model = _conv_model(*case)
    graph, params = tessera.frontend.from_onnx(model)
    exe = tessera.compile(graph, params, target="opencl")
    x = RNG.standard_normal(case[:4]).astype("float32")
    np.testing.assert_allclose(exe(x), ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)
    (kernel,) = exe.kernels
    (fn,) = kernel.module.functions.values()
    assert len(fn.meta["kernels"]) == 1


@pytest.mark.parametrize("target", ["opencl", "cuda"])
@pytest.mark.parametrize("op,shape", [("Softmax", (3, 40, 128)), ("Softmax", (16, 100)),
                                      ("LayerNormalization", (2, 9, 768)), ("LayerNormalization", (8, 70))])
def test_rows_are_one_kernel_without_races(op, shape, target):
    """Softmax and layer norm: the row statistics reduced by the block's threads (a shared-memory tree
    on OpenCL, warp shuffles and one barrier on CUDA) and the row normalized by the same block, one
    kernel; the work-group executor finds no race."""
    model = _row_model(op, shape)
    sch, prog = _scheduled_kernel_func(model, target)
    func = _lower(sch, target)
    src = tessera.backend.generate(sch, target)
    (meta,) = src.meta
    assert len(meta["kernels"]) == 1
    assert ("__shfl_xor_sync" in src.text) == (target == "cuda")
    x = RNG.standard_normal(shape).astype("float32")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    ins = [x] + [numpy_helper.to_array(t) for t in model.graph.initializer]
    shapes = [tuple(int(d.value) for d in p.shape) for p in prog.func.params]
    args = [a.reshape(sh) for a, sh in zip(ins, shapes)] + [np.full(shape, np.nan, np.float32)]
    run_gpu(func, args)
    np.testing.assert_allclose(args[-1], want, rtol=1e-5, atol=1e-5)


def _fp16_gemm(m, n, k):
    A = te.placeholder((m, k), name="A", dtype="float16")
    B = te.placeholder((k, n), name="B", dtype="float16")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r),
                   name="C")
    return te.create_prim_func([A, B, C])


def test_fp16_gemm_takes_the_tensor_cores_with_the_zero_start_folded_in():
    func = _fp16_gemm(256, 512, 96)
    sch = schedule_gpu_default(tir.Schedule(func), "cuda")
    tile = default_tile(256, 512, 96)
    src = tessera.backend.generate(sch, "cuda")
    (k,) = src.meta[0]["kernels"]
    bm, bn, bk, wm, wn, stages = tile
    assert k["block"] == [threads(bm, bn, wm, wn), 1, 1]
    assert k["grid"] == [512 // bn, 256 // bm, 1]
    assert k["dynamic_shared_bytes"] == shared_bytes(bm, bn, bk, stages)
    name = f"cuda_tc_gemm_f16f32_{bm}x{bn}x{bk}_w{wm}x{wn}_s{stages}"
    assert f"{name}_z(96, &A[" in src.text           # the call starts its accumulators at zero ...
    assert "= 0.0f;" not in src.text.split("main_kernel(")[1]   # ... so no thread zeroes C first
    assert f"__launch_bounds__({k['block'][0]})" in src.text


def test_tensor_core_schedule_refuses_what_it_cannot_tile():
    sch = tir.Schedule(_fp16_gemm(100, 128, 64))
    with pytest.raises(ScheduleError, match="M a multiple of 128"):
        schedule_gemm_tensorcore(sch, sch.get_block("C"))
    sch = tir.Schedule(_fp16_gemm(128, 128, 64))
    with pytest.raises(ScheduleError, match="warp tiles divide the block tile"):
        schedule_gemm_tensorcore(sch, sch.get_block("C"), bm=128, bn=128, wm=48, wn=64)
    # float32 GEMMs and other shapes keep the FFMA tiles; an fp16 GEMM for sm_75 too
    sch = schedule_gpu_default(tir.Schedule(_fp16_gemm(256, 256, 64)), "cuda -arch=sm_75")
    assert "cuda_tc_gemm" not in tessera.backend.generate(sch, "cuda -arch=sm_75").text
    with pytest.raises(TesseraError, match="needs sm_80 or newer"):
        sch = tir.Schedule(_fp16_gemm(128, 128, 64))
        schedule_gemm_tensorcore(sch, sch.get_block("C"))
        tessera.backend.generate(sch, "cuda -arch=sm_75")


def test_the_tuner_space_has_a_tensor_core_space_per_tile_shape():
    from tessera.autotune.space import generate_design_space

    spaces = generate_design_space(_fp16_gemm(512, 512, 512), Target("cuda"))
    tiles = tile_space(512, 512, 512)
    assert len(tiles) > 10 and len(spaces) == len(tiles) + 1      # + the FFMA tiling of MultiLevelTilingGPU
    assert all(shared_bytes(t[0], t[1], t[2], t[5]) <= 227 * 1024 for t in tiles)


@needs_nvcc
def test_tensor_core_gemms_compile_for_sm90_without_spills():
    funcs = {}
    for i, tile in enumerate([(128, 256, 32, 64, 64, 3), (64, 64, 32, 32, 32, 4), (16, 16, 32, 16, 16, 4)]):
        sch = tir.Schedule(_fp16_gemm(256, 256, 128))
        schedule_gemm_tensorcore(sch, sch.get_block("C"), *tile)
        funcs[f"g{i}"] = sch.mod["main"]
    mod = tessera.ir.IRModule(funcs)
    art = tessera.backend.build(mod, "cuda -arch=sm_90")
    assert len(art.module.ptxas) == 3
    for report in art.module.ptxas.values():
        assert report["spill_stores"] == 0 and report["spill_loads"] == 0 and report["registers"] > 0
