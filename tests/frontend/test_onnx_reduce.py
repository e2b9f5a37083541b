"""ONNX converters of the reductions: axes as an attribute (old opsets) or an input (new ones),
noop_with_empty_axes, the composed ReduceL1/L2/LogSum/SumSquare, ArgMax/ArgMin, CumSum."""
import numpy as np
import pytest
from onnx_family_check import check, one_node

RNG = np.random.default_rng(4)


def rand(*shape, dtype=np.float32):
    return RNG.uniform(0.5, 2, size=shape).astype(dtype)


def i64(*v):
    return np.array(v, np.int64)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"])
def test_reduce_axes_as_attribute_and_as_input(op):
    x = rand(2, 3, 4)
    check(one_node(op, {"x": x}, dict(axes=[0, -1], keepdims=0), opset=11), {"x": x}, rtol=1e-5)
    new = 13 if op == "ReduceSum" else 18
    check(one_node(op, {"x": x}, inits={"a": i64(1)}, opset=new), {"x": x}, rtol=1e-5)
    check(one_node(op, {"x": x}, dict(keepdims=0), opset=new), {"x": x}, rtol=1e-5)
    check(one_node(op, {"x": x}, dict(noop_with_empty_axes=1), opset=new), {"x": x}, rtol=1e-5)


def test_integer_reductions_and_symbolic_batch():
    x = RNG.integers(-5, 5, (4, 3)).astype(np.int64)
    check(one_node("ReduceSum", {"x": x}, inits={"a": i64(0)}, opset=13), {"x": x})
    check(one_node("ReduceMax", {"x": x}, dict(axes=[1]), opset=13), {"x": x})
    f = rand(5, 3)
    g = check(one_node("ReduceMean", {"x": f}, dict(axes=[1], keepdims=1), opset=13, shapes={"x": ("N", 3)}), {"x": f})
    assert g.outputs[0].type.shape == ("N", 1)


def test_argmax_argmin_and_cumsum():
    x = RNG.integers(0, 3, (3, 5)).astype(np.float32)
    for op in ("ArgMax", "ArgMin"):
        check(one_node(op, {"x": x}, dict(axis=1, keepdims=0, select_last_index=1), opset=13), {"x": x})
        check(one_node(op, {"x": x}, opset=11), {"x": x})
    for attrs in ({}, dict(exclusive=1), dict(reverse=1), dict(exclusive=1, reverse=1)):
        check(one_node("CumSum", {"x": x}, attrs, inits={"a": np.array(1, np.int32)}, opset=14), {"x": x})
