"""The vector float32 math helpers (tessera/codegen/vector_math.py): error in ulp against float64
numpy over every binade and lane count, the special values, and their use by codegen."""
import ctypes
import math

import numpy as np
import pytest

from tessera.codegen import generate
from tessera.codegen.vector_math import MAX_ULP, helper_name, helper_sources
from tessera.ir import Buffer, BufferStore, For, Ramp, Var
from tessera.ir.expr import Call

OPS = ("exp", "log", "tanh", "sigmoid", "erf")
# the runtime's gcc flags (as in this folder's conftest) and warnings as errors
GCC_FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11"]
WARNING_FLAGS = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror"]
LANES = (4, 8, 16)
N = 1 << 18


def _driver(lanes):
    """One C unit: every helper for float32x<lanes>, and `apply_<op>(x, y, n)` over arrays."""
    v, i = f"float32x{lanes}", f"int32x{lanes}"
    out = ["#include <string.h>", "#include <stdint.h>",
           f"typedef float {v} __attribute__((vector_size({4 * lanes})));",
           f"typedef int32_t {i} __attribute__((vector_size({4 * lanes})));",
           f"static inline {v} sel({i} m, {v} a, {v} b) {{ return ({v})((({i})a & m) | (({i})b & ~m)); }}"]
    seen = set()
    for op in OPS:
        for name, code in helper_sources(op, v, i, "sel"):
            if name not in seen:
                seen.add(name)
                out.append(code)
        out.append(f"void apply_{op}(const float* x, float* y, int64_t n) {{\n"
                   f"  for (int64_t k = 0; k < n; k += {lanes}) {{\n"
                   f"    {v} a;\n    memcpy(&a, x + k, sizeof(a));\n"
                   f"    a = {helper_name(op, v)}(a);\n    memcpy(y + k, &a, sizeof(a));\n  }}\n}}")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def drivers(tmp_path_factory):
    """lanes -> the compiled driver (gcc with the runtime's flags, warnings as errors)."""
    import shutil
    import subprocess

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    d = tmp_path_factory.mktemp("vector_math")
    libs = {}
    for lanes in LANES:
        c, so = d / f"vm{lanes}.c", d / f"vm{lanes}.so"
        c.write_text(_driver(lanes))
        # 16 lanes on a host without AVX-512: gcc splits the vectors (and notes the ABI of such
        # arguments, which only these static functions use)
        extra = ["-Wno-psabi"] if lanes * 32 > 256 else []
        r = subprocess.run(["gcc", *GCC_FLAGS, *WARNING_FLAGS, *extra, str(c), "-o", str(so)],
                           capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr
        libs[lanes] = ctypes.CDLL(str(so))
    return libs


def _apply(lib, op, x):
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    fn = getattr(lib, f"apply_{op}")
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn(x.ctypes.data, y.ctypes.data, x.size)
    return y


def _reference(op, x):
    """float64 results (the exact value to far below a float32 ulp)."""
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if op == "exp":
            return np.exp(x64)
        if op == "log":
            return np.log(x64)
        if op == "tanh":
            return np.tanh(x64)
        if op == "sigmoid":
            return np.where(x64 >= 0, 1 / (1 + np.exp(-x64)), np.exp(x64) / (1 + np.exp(x64)))
        return np.array([math.erf(v) if np.isfinite(v) else np.sign(v) if np.isinf(v) else np.nan for v in x64])


def _ulp_error(got, want64):
    """|got - exact| in units of the float32 spacing at the exact value (denormal spacing at least)."""
    with np.errstate(all="ignore"):
        want = want64.astype(np.float32)
        spacing = np.maximum(np.spacing(np.abs(want)).astype(np.float64), 2.0 ** -149)
        err = np.abs(got.astype(np.float64) - want64) / spacing
    same = (np.isnan(got) & np.isnan(want64)) | (np.isinf(got) & np.isinf(want) & (np.sign(got) == np.sign(want)))
    err[same] = 0
    err[np.isnan(err)] = np.inf
    return err


def _arguments(op, rng):
    """Every binade: random bit patterns of every finite float (both signs), dense uniform samples
    where each function bends, and the special values."""
    bits = rng.integers(0, 0x7F800000, N, dtype=np.int64).astype(np.uint32).view(np.float32)
    sign = np.where(rng.random(N) < 0.5, -1, 1).astype(np.float32)
    wide = bits * (1 if op == "log" else sign)
    dense = {"exp": (-110, 95), "log": (0, 4), "tanh": (-10, 10), "sigmoid": (-110, 110), "erf": (-5, 5)}[op]
    lo, hi = dense
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, 88.72283, 88.72284,
                        -87.33654, -103.97208, -103.97209, 0.625, -0.625, 0.921875, 3.92, 9.0, 1.0, -1.0],
                       np.float32)
    x = np.concatenate([wide, rng.uniform(lo, hi, N).astype(np.float32), special])
    return x[: x.size // 16 * 16] if x.size % 16 == 0 else np.concatenate([x, np.zeros(16 - x.size % 16, np.float32)])


@pytest.mark.parametrize("op", OPS)
def test_vector_math_error_within_documented_ulp_for_every_lane_count(drivers, op):
    rng = np.random.default_rng(7)
    x = _arguments(op, rng)
    if op == "erf":  # math.erf per element: a smaller sample
        x = np.concatenate([x[:: 16], x[-32:]])
        x = x[: x.size // 16 * 16]
    want = _reference(op, x)
    for lanes in LANES:
        got = _apply(drivers[lanes], op, x)
        err = _ulp_error(got, want)
        k = int(np.argmax(err))
        assert err[k] <= MAX_ULP[op], (f"{op} x{lanes}: {err[k]:.3f} ulp at x={x[k]!r}: got {got[k]!r}, "
                                       f"exact {want[k]!r}")


@pytest.mark.parametrize("op", OPS)
def test_vector_math_special_values(drivers, op):
    inf, nan = np.inf, np.nan
    cases = {
        "exp": [(inf, inf), (-inf, 0.0), (nan, nan), (0.0, 1.0), (-0.0, 1.0), (89.0, inf), (88.7, np.exp(np.float32(88.7))),
                (-104.0, 0.0), (-100.0, np.float32(np.exp(-100.0))), (1e-45, 1.0)],
        "log": [(inf, inf), (-inf, nan), (nan, nan), (0.0, -inf), (-0.0, -inf), (-1.0, nan), (1.0, 0.0),
                (1e-45, np.log(np.float32(1e-45))), (3.4028235e38, np.float32(np.log(3.4028235e38)))],
        "tanh": [(inf, 1.0), (-inf, -1.0), (nan, nan), (0.0, 0.0), (-0.0, -0.0), (1e-45, 1e-45), (20.0, 1.0),
                 (-20.0, -1.0)],
        "sigmoid": [(inf, 1.0), (-inf, 0.0), (nan, nan), (0.0, 0.5), (100.0, 1.0),
                    (-100.0, np.float32(np.exp(-100.0))), (-200.0, 0.0)],
        "erf": [(inf, 1.0), (-inf, -1.0), (nan, nan), (0.0, 0.0), (-0.0, -0.0), (1e-45, 1e-45), (5.0, 1.0),
                (-5.0, -1.0)],
    }[op]
    x = np.array([c[0] for c in cases] * 16, np.float32)[: 16 * ((len(cases) * 16) // 16)]
    want = np.array([c[1] for c in cases] * 16, np.float32)[: x.size]
    for lanes in LANES:
        got = _apply(drivers[lanes], op, x)
        np.testing.assert_array_equal(np.signbit(got[np.isfinite(want) & (want == 0)]),
                                      np.signbit(want[np.isfinite(want) & (want == 0)]), err_msg=f"{op} x{lanes} signs")
        np.testing.assert_allclose(got, want, rtol=3e-7, atol=0, err_msg=f"{op} x{lanes}")


@pytest.mark.parametrize("dtype,lanes", [("float32", 8), ("float16", 8), ("float32", 4)])
def test_codegen_uses_vector_math_for_vector_calls(elementwise, dtype, lanes):
    source = []
    run = elementwise(lambda a: Call(a.dtype, "exp", [a]) + Call(a.dtype, "tanh", [a])
                      + Call(a.dtype, "sigmoid", [a]) + Call(a.dtype, "erf", [a]), [dtype], dtype,
                      n=256, lanes=lanes, source=source)
    assert f"tsr_vexp_float32x{lanes}(" in source[0] and f"tsr_verf_float32x{lanes}(" in source[0]
    assert "expf(" not in source[0].split("main_kernel")[1]  # no lane-by-lane libm call in the kernel
    rng = np.random.default_rng(3)
    x = rng.uniform(-6, 6, 256).astype(dtype)
    x64 = x.astype(np.float64)
    want = (np.exp(x64) + np.tanh(x64) + 1 / (1 + np.exp(-x64))
            + np.array([math.erf(v) for v in x64]))
    tol = 1e-5 if dtype == "float32" else 4e-3
    np.testing.assert_allclose(run(x).astype(np.float64), want, rtol=tol, atol=tol)


def test_codegen_log_of_vector_matches_numpy(elementwise):
    source = []
    run = elementwise(lambda a: Call(a.dtype, "log", [a]), ["float32"], "float32", n=128, lanes=8, source=source)
    assert "tsr_vlog_float32x8(" in source[0]
    x = np.concatenate([np.geomspace(1e-40, 1e30, 120), [0, -1, np.inf, np.nan, 1, 2, 0.5, 1e-45]]).astype(np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(run(x), np.log(x), rtol=2e-7)


def test_codegen_float64_vectors_stay_on_libm(elementwise):
    source = []
    run = elementwise(lambda a: Call(a.dtype, "exp", [a]), ["float64"], "float64", n=64, lanes=4, source=source)
    assert "tsr_vexp" not in source[0]
    x = np.linspace(-3, 3, 64)
    np.testing.assert_allclose(run(x), np.exp(x), rtol=1e-15)


@pytest.mark.parametrize("exponent", [2.0, 3.0, 1.0, 4.0, -1.0, 0.5, 2.5])
def test_vector_pow_by_one_exponent(elementwise, exponent):
    """x ** y with one y for every lane: small integer y by multiplication (within 1 ulp of powf,
    the same inf/nan/signed-zero results), any other y through powf lane by lane."""
    from tessera.ir import Broadcast, FloatImm

    source = []
    run = elementwise(lambda a: Call(a.dtype, "pow", [a, Broadcast(FloatImm("float32", exponent), 8)]),
                      ["float32"], "float32", n=64, lanes=8, source=source)
    assert "tsr_vpow_float32x8(" in source[0]
    x = np.concatenate([np.linspace(-5, 5, 56), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, 3e12, -7.0]])
    x = x.astype(np.float32)
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), exponent)
        got = run(x)
        want32 = want.astype(np.float32)
    finite = np.isfinite(want32)
    np.testing.assert_allclose(got[finite], want32[finite], rtol=2.4e-7, atol=1.5e-45)
    # (numpy's float64 power and C's powf disagree on (-inf) ** 0.5: compare where they agree)
    same = ~(np.isneginf(x) & (exponent != int(exponent)))
    np.testing.assert_array_equal(np.isnan(got)[same], np.isnan(want32)[same])
    inf = np.isinf(want) & same
    np.testing.assert_array_equal(got[inf], want32[inf])
    zeros = (want32 == 0) & (exponent == int(exponent))   # numpy takes ** 0.5 as sqrt: sqrt(-0) = -0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want32[zeros]))
