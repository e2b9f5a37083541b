"""ONNX converters of the broadcast family: variadic Sum/Mean/Max/Min, Mod's two modes, BitShift,
Where and PRelu broadcasting, integer Div; against onnxruntime."""
import numpy as np
from onnx_family_check import check, one_node

RNG = np.random.default_rng(2)


def rand(*shape, dtype=np.float32):
    return RNG.uniform(-3, 3, size=shape).astype(dtype)


def test_variadic_sum_mean_max_min_broadcast():
    a, b, c = rand(2, 1, 4), rand(3, 1), rand(4)
    feeds = {"a": a, "b": b, "c": c}
    for op in ("Sum", "Mean", "Max", "Min"):
        check(one_node(op, feeds, opset=13), feeds)
        check(one_node(op, {"a": a}, opset=13), {"a": a})


def test_integer_division_and_mod_modes():
    a = np.array([7, -7, 7, -7, 0, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, -4], np.int32)
    feeds = {"a": a, "b": b}
    check(one_node("Div", feeds), feeds)
    check(one_node("Mod", feeds, dict(fmod=0)), feeds)
    check(one_node("Mod", feeds, dict(fmod=1)), feeds)
    fa, fb = rand(6), rand(6) + 4
    check(one_node("Mod", {"a": fa, "b": fb}, dict(fmod=1)), {"a": fa, "b": fb})


def test_bitshift_where_prelu_pow():
    x = np.array([1, 8, 255, 64], np.uint8)
    s = np.array([1, 2, 3, 7], np.uint8)
    for d in ("LEFT", "RIGHT"):
        check(one_node("BitShift", {"x": x, "s": s}, dict(direction=d)), {"x": x, "s": s})
    cond = RNG.random((2, 3, 1)) > 0.5
    a, b = rand(3, 4), rand(1, 4)
    check(one_node("Where", {"c": cond, "a": a, "b": b}), {"c": cond, "a": a, "b": b})
    data, slope = rand(2, 3, 4, 4), rand(3, 1, 1)
    check(one_node("PRelu", {"x": data}, inits={"slope": slope}), {"x": data})
    base, ex = np.abs(rand(5)) + 0.1, np.array([2, 3, 1, 0, 2], np.int64)
    check(one_node("Pow", {"b": base, "e": ex}), {"b": base, "e": ex})


def test_comparisons_and_logic_with_symbolic_dims():
    a, b = rand(4, 3), rand(3)
    for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
        check(one_node(op, {"a": a, "b": b}, opset=16, shapes={"a": ("N", 3)}), {"a": a, "b": b})
    p, q = RNG.random((4, 3)) > 0.5, RNG.random((3,)) > 0.5
    for op in ("And", "Or", "Xor"):
        check(one_node(op, {"p": p, "q": q}), {"p": p, "q": q})
