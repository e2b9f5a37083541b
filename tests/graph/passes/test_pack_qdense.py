"""pack_matmul_weights on integer matmuls: a qnn.dense over a constant int8 weight gets the weight packed
in the int8 GEMM micro-kernel's panels (quads of four k, zeros past K) and the input zero point folded
into the bias; scheduled on the micro-kernel (AMX tiles on a host with AMX, vpdpbusd with AVX512-VNNI,
vpmaddwd on AVX2), the results are ONNX Runtime's integers exactly (QDQ MatMul + bias, as quantize_static writes it)."""
import re

import numpy as np
import pytest

import tessera
from tessera.ops.integer import int8_gemm_isa
from tessera.tir.tensor_intrin import x86

from qdq_models import QDQ, ort_run, steps

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(41)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def matmul_model(M, K, N):
    m = QDQ()
    x = m.q("x", -3.0, 2.0)                       # an asymmetric range: a nonzero input zero point
    w, ws = m.weight(rand(K, N, scale=0.1), axis=1)
    y = m.node("Add", [m.node("MatMul", [x, w], "mm"), m.bias(rand(N), m.scales[x], ws)], "mmb")
    out = m.q(m.node("Relu", [y]), 0.0, 4.0)
    return m, m.model([("x", [1, M, K])], out, [1, M, N]), out, {"x": rand(1, M, K, scale=1.2)}


@pytest.mark.parametrize("M,K,N", [(128, 256, 128), (24, 30, 64), (1, 64, 40), (32, 198, 128)],
                         ids=["bert_like", "k_tail", "one_row", "tile_rows_k_tail"])
def test_packed_qdense_equals_onnxruntime(M, K, N, isa_target):
    m, model, out, feeds = matmul_model(M, K, N)
    g, p = tessera.frontend.from_onnx(model)
    exe = tessera.compile(g, p, target=f"{isa_target} -num-threads=2")
    (got,) = exe.run(feeds)
    assert steps(got, ort_run(model, feeds)[0], m.scales[out]).max() == 0
    (dense,) = [n for n in exe.graph.nodes if n.op == "qnn.dense" or
                (n.op == "fused" and any(b.op == "qnn.dense" for b in n.attrs["function"].body.nodes))]
    body = dense.attrs["function"].body.nodes if dense.op == "fused" else [dense]
    (qd,) = [b for b in body if b.op == "qnn.dense"]
    kernels = {name for k in exe.kernels for name in re.findall(r"x86_\w+?_gemm_\w+_u8s8s32", str(k.prim.trace))}
    if M == 1:             # no tile divides one row: the weight stays as it is, the matmul schedule
        assert qd.attrs["b_panel"] == 0 and not kernels
        return
    nr = qd.attrs["b_panel"]
    assert nr and qd.attrs["input_zero_point"] == 0 and tuple(qd.inputs[1].type.shape) == (N // nr, -(-K // 4), nr, 4)
    # the target's ISA and its first tile dividing the rows (AMX's 16 x 64 where the CPU has AMX: then
    # K % 64 (and K % 4) of tile_rows_k_tail run on its VNNI fallback, in the same call)
    isa = int8_gemm_isa(isa_target)
    mr = next(mr for mr, n in x86.INT8_GEMM[isa] if n == nr and M % mr == 0)
    assert kernels == {x86.int8_gemm_name(isa, mr, nr)}, kernels


def test_a_folded_bias_past_int32_leaves_the_qdense_unpacked():
    # the input zero point's share (-zp * column sums) would carry the bias past int32: packing (which
    # folds it) would change the results, so the weight stays as it is and the op keeps its zero point
    from tessera.graph import Builder
    from tessera.graph.passes.pack_matmul_weights import pack_matmul_weights

    K, N = 64, 64
    gb = Builder("qd")
    x = gb.input("x", (1, 24, K), dtype="uint8")
    w = np.full((K, N), -128, np.int8)
    bias = np.full(N, 2**31 - 1000, np.int32)
    y = gb.op("qnn.dense", x, gb.const(w, "w"), gb.const(bias, "b"), gb.const(np.full(N, 1e-9, np.float32), "m"),
              input_zero_point=200, output_zero_point=0, out_dtype="uint8", out_min=0, out_max=255)
    gb.output(y)
    g = gb.finish()
    (qd,) = [n for n in pack_matmul_weights(g, "c -mcpu=haswell").nodes if n.op == "qnn.dense"]
    assert not qd.attrs.get("b_panel") and qd.attrs["input_zero_point"] == 200
    # the same graph with a bias that stays in range is packed (the test is not vacuous)
    gb = Builder("qd")
    x = gb.input("x", (1, 24, K), dtype="uint8")
    y = gb.op("qnn.dense", x, gb.const(w, "w"), gb.const(np.zeros(N, np.int32), "b"),
              gb.const(np.full(N, 1e-3, np.float32), "m"), input_zero_point=200, output_zero_point=0,
              out_dtype="uint8", out_min=0, out_max=255)
    gb.output(y)
    (qd,) = [n for n in pack_matmul_weights(gb.finish(), "c -mcpu=haswell").nodes if n.op == "qnn.dense"]
    assert qd.attrs["b_panel"] == 8 and qd.attrs["input_zero_point"] == 0
