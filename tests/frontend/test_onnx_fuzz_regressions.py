"""Regression tests for what the ONNX differential fuzzer (onnx_fuzz.py) found: each a small explicit
graph, checked against onnxruntime, the bug named in its docstring."""
import ctypes
import textwrap

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.runtime.c_compiler import compile_source


def _run_both(model, feeds, target="c"):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    graph, params = tessera.frontend.from_onnx(model, target=target)
    outs = {}
    for level in (0, 3):
        outs[level] = tessera.compile(graph, params, target=target, opt_level=level).run(dict(feeds))
    return want, outs


def _assert_matches(want, outs):
    for level, got in outs.items():
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (level, g.shape, g.dtype, w.shape, w.dtype)
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=0, err_msg=f"opt_level {level}")


_MASKED_SELECT_C = textwrap.dedent("""\
    #include <stdint.h>
    void probe(const float* restrict A, const float* restrict B, float* restrict T) {
      for (int32_t i1 = 0; i1 < 5; ++i1) {
        for (int32_t i2 = 0; i2 < 2; ++i2) {
          T[i1 * 2 + i2] = (i1 < 3 ? A[i1 * 2 + i2] : B[i1 * 2 + i2 - 6]);
        }
      }
    }
    """)


def _c_compiler_drops_masked_loads(target) -> bool:
    """Whether the C compiler, with the target's flags, miscompiles the select of two masked loads
    that tessera emits for this concatenation (the exact C of its kernel, run here)."""
    lib = ctypes.CDLL(compile_source(_MASKED_SELECT_C, target=target, name_hint="probe_masked_select"))
    a = np.arange(6, dtype=np.float32)
    b = 100 + np.arange(4, dtype=np.float32)
    t = np.zeros(10, np.float32)
    ptr = ctypes.POINTER(ctypes.c_float)
    lib.probe(a.ctypes.data_as(ptr), b.ctypes.data_as(ptr), t.ctypes.data_as(ptr))
    return not np.array_equal(t, np.concatenate([a, b]))


def test_concat_middle_axis_with_inner_extent_two(isa_target):
    """Fuzz seed 103 (first generator): Concat(axis=-3) of float32[1,3,2,1] and [1,2,2,1] came back
    with the first row of the second input as zeros, at every opt_level. tessera's kernel is right
    (`T[i1*2+i2] = i1 < 3 ? A[i1*2+i2] : B[i1*2+i2-6]`); GCC 12.2 at -O3 with AVX (-march=native)
    vectorizes the select of two masked loads in groups of 2 and drops the load permutation (the
    symptom of GCC PR tree-optimization/114375, fixed in 12.4 / 13.3). tessera/toolchain.py adds
    -fno-tree-loop-if-convert for every AVX target of such a compiler: the exact C of the kernel,
    built with the target's flags, must come out right too."""
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 1]),
           helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 2, 1])]
    node = helper.make_node("Concat", ["x", "z"], ["y"], axis=-3)
    g = helper.make_graph([node], "concat", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(1, 3, 2, 1),
             "z": (100 + np.arange(4, dtype=np.float32)).reshape(1, 2, 2, 1)}
    want, outs = _run_both(model, feeds, isa_target)
    assert not _c_compiler_drops_masked_loads(isa_target), \
        f"the C compiler with {isa_target!r}'s flags miscompiles a select of two masked loads (GCC PR 114375)"
    _assert_matches(want, outs)
