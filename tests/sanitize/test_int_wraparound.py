"""Signed integer arithmetic on tensor data wraps around (ONNX and numpy semantics) in generated C.

C leaves signed overflow undefined: UBSan aborted the add/subtract/multiply/negative/abs kernels at the
int32/int64 limits (found by tests/sanitize), and gcc -O3 may assume it never happens. The code
generator now computes data arithmetic in the unsigned type; index arithmetic stays signed."""
import numpy as np
import pytest

import tessera
from tessera import te

LIMITS = {"int32": np.array([2**31 - 1, -2**31, 2**30, -7, 0, 1, -2**31 + 1, 5] * 3, np.int32),
          "int64": np.array([2**63 - 1, -2**63, 2**62, -7, 0, 1, -2**63 + 1, 5] * 3, np.int64)}


def build(dtype, fn, n=24):
    A = te.placeholder((n,), dtype, "A")
    B = te.placeholder((n,), dtype, "B")
    C = te.compute((n,), lambda i: fn(A[i], B[i]), name="C")
    return tessera.build(te.create_prim_func([A, B, C]))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "neg", "abs"])
def test_overflowing_data_arithmetic_wraps_like_numpy(op, dtype):
    fte = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "neg": lambda a, b: -a, "abs": lambda a, b: te.abs(a)}[op]
    fnp = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "neg": lambda a, b: -a,
           "abs": lambda a, b: np.abs(a)}[op]
    a = LIMITS[dtype]
    b = np.roll(a, 3)
    c = np.zeros_like(a)
    lib = build(dtype, fte)
    lib(a, b, c)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(c, fnp(a, b))
    src = lib.get_source()
    assert f"(uint{dtype[3:]}_t)" in src or "tsr_abs" in src, src


def test_index_arithmetic_stays_signed():
    # loop-index arithmetic (no tensor data in it) keeps plain signed int: the loop optimizers need it
    A = te.placeholder((6, 9), "int32", "A")
    C = te.compute((6, 9), lambda i, j: A[i, j] * 2, name="C")
    src = tessera.build(te.create_prim_func([A, C])).get_source()
    assert "(uint32_t)A[i * 9 + j]" in src, src           # the data operand wraps
    assert "(uint32_t)i" not in src and "(uint32_t)(i" not in src, src   # the index does not
