"""What an exported library holds besides the ONNX file's weights (docs/deploying.md, "Library size"):
each constant of the optimized graph once, 64-byte aligned -- a Winograd convolution's transformed 3x3
weights (alpha^2 / 9 times the direct ones: ResNet-18's 82 MB library beside its 47 MB ONNX file)
instead of the original ones, not beside them; without the pass (`--disable-pass winograd`) the
library's weights are the ONNX file's."""
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tessera
from tessera.cli import main
from tessera.graph.passes.winograd import choose_tile_size
from tessera.target import Target

C = 64


def _conv_model(path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((C, C, 3, 3)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["y"])],
        "conv3x3", [helper.make_tensor_value_info("x", TP.FLOAT, [1, C, 16, 16])],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
        [helper.make_tensor("w", TP.FLOAT, w.shape, w.ravel()), helper.make_tensor("b", TP.FLOAT, b.shape, b)]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)
    return str(path), w.nbytes + b.nbytes, w


def _weights_bytes(header) -> int:
    return int(re.search(r"#define TESSERA_MODEL_WEIGHTS_BYTES (\d+)ULL", header.read_text()).group(1))


def _aligned_total(constants) -> int:
    top = 0
    for a in constants:
        top += -top % 64 + np.asarray(a).nbytes
    return top


def test_library_weights_are_the_optimized_graphs_constants_once(tmp_path):
    model, onnx_bytes, w = _conv_model(tmp_path / "conv.onnx")
    graph, params = tessera.frontend.from_onnx(model)

    exe = tessera.compile(graph, params)
    # whether the pass rewrites this 16x16 layer is the host target's (its GEMM micro-kernels, its costs)
    if choose_tile_size(1, C, C, 16, 16, Target("c")) is None:
        assert not any("winograd" in n.op for n in exe.graph.nodes), exe.graph.script()
        pytest.skip(f"the winograd pass keeps this layer direct on {Target('c')}: no transformed weights to measure")
    assert any("winograd" in n.op for n in exe.graph.nodes), exe.graph.script()
    consts = list(exe.graph.constants.values())
    assert main(["compile", model, "-o", str(tmp_path / "wino.so"), "-q"]) == 0
    wino = _weights_bytes(tmp_path / "wino.h")
    assert wino == _aligned_total(consts) > 1.7 * onnx_bytes       # F(2x2): 16/9, F(4x4): 36/9 of the 3x3 weights
    lib = (tmp_path / "wino.so").read_bytes()
    transformed = max(consts, key=lambda a: np.asarray(a).nbytes)
    assert lib.count(np.ascontiguousarray(transformed).tobytes()[:4096]) == 1     # stored once
    assert lib.count(w.tobytes()[:4096]) == 0                                     # the original not kept beside it

    assert main(["compile", model, "-o", str(tmp_path / "direct.so"), "-q", "--disable-pass", "winograd"]) == 0
    direct = _weights_bytes(tmp_path / "direct.h")
    assert onnx_bytes <= direct <= onnx_bytes + 64 * 4                            # the ONNX weights (+ alignment)
    assert (tmp_path / "direct.so").stat().st_size < (tmp_path / "wino.so").stat().st_size - (wino - direct) / 2
