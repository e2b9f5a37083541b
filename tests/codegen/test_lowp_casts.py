"""The low-precision storage types in compiled C (runtime_c/tsr_lowp.h): every conversion to and from
float8 / float4 / int4 / int2 against ml_dtypes' conversion of the same values, bit for bit (round to
nearest even, ties, subnormals, overflow to inf or NaN, NaN, signed zeros), in scalar, vectorized and
parallel loops, and arithmetic on those values rounded back to the type."""
import os
import subprocess

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.errors import TesseraError
from tessera.ir.dtype import DataType, numpy_dtype

MINIFLOATS = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn"]
SUBBYTE_INTS = ["int4", "uint4", "int2", "uint2"]
LOWP = MINIFLOATS + SUBBYTE_INTS
WIDE_FLOATS = ["float32", "float16", "bfloat16", "float64"]


def _codes(dt):
    """Every bit pattern of dt, as an array of dt."""
    return np.arange(1 << DataType(dt).bits, dtype=np.uint8).view(numpy_dtype(dt))


def _float_probes(n_random=3000) -> np.ndarray:
    """float64 values that exercise a minifloat conversion: every value of every format, the midpoints
    between neighbours (ties) and values just beside them, beyond the largest value, subnormals, signed
    zeros, inf, NaN, and random magnitudes from 1e-9 to 1e6."""
    vals = []
    for dt in MINIFLOATS:
        v = np.unique(_codes(dt).astype(np.float64))
        v = v[np.isfinite(v)]
        mids = (v[1:] + v[:-1]) / 2
        vals += [v, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), v * 1.0001, v * 0.9999,
                 [v.max() * 1.05, v.max() * 1.2, v.max() * 2, -v.max() * 1.05]]
    rng = np.random.default_rng(0)
    mags = 10.0 ** rng.uniform(-9, 6, n_random) * rng.choice([-1, 1], n_random)
    vals += [mags, [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 3e38, 1e300]]
    return np.concatenate([np.asarray(x, np.float64) for x in vals])


def _build(src, dsts, n, schedule=None):
    """A kernel converting A (src[n]) to every dtype in dsts; returns a function numpy -> outputs."""
    A = te.placeholder((n,), name="A", dtype=src)
    outs = [te.compute((n,), lambda i, d=d: A[i].astype(d), name=f"to_{d}") for d in dsts]
    func = te.create_prim_func([A] + outs)
    if schedule is not None:
        sch = tir.Schedule(func)
        for d in dsts:
            schedule(sch, sch.get_block(f"to_{d}"))
        func = sch
    lib = tessera.build(func, target="c")

    def run(x):
        res = [np.empty(n, numpy_dtype(d)) for d in dsts]
        lib(x, *res)
        return res
    return run, lib


def _same_bits(got, want, what):
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype, what
    if g.dtype.itemsize == 1:   # the bytes, but any NaN matches any NaN (the sign of a NaN is not kept)
        bad = g.view(np.uint8) != w.view(np.uint8)
        if g.dtype.name.startswith("float"):
            bad &= ~(np.isnan(g.astype(np.float32)) & np.isnan(w.astype(np.float32)))
    else:
        gf, wf = g.astype(np.float64), w.astype(np.float64)
        bad = ~((gf == wf) & (np.signbit(gf) == np.signbit(wf)) | (np.isnan(gf) & np.isnan(wf)))
    if bad.any():
        i = np.flatnonzero(bad)[:5]
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} differ, e.g. at {i.tolist()}: "
                             f"got {g[i]!r}, ml_dtypes {w[i]!r}")


@pytest.mark.parametrize("src", WIDE_FLOATS)
def test_wide_floats_convert_to_every_lowp_type_as_ml_dtypes(src):
    x64 = _float_probes()
    x = x64.astype(numpy_dtype(src))
    if src == "float32":   # and random bit patterns: every exponent, NaN payloads, subnormals
        bits = np.random.default_rng(1).integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)
        x = np.concatenate([x, bits.view(np.float32)])
    run, _ = _build(src, LOWP, x.size)
    with np.errstate(invalid="ignore", over="ignore"):
        for d, got in zip(LOWP, run(x)):
            want = x.astype(numpy_dtype(d))
            if d in SUBBYTE_INTS:   # a float beyond int32 has no defined integer value (C, numpy)
                ok = np.isfinite(x.astype(np.float64)) & (np.abs(x.astype(np.float64)) < 2.0 ** 31)
                got, want = got[ok], want[ok]
            _same_bits(got, want, f"{src} -> {d}")


def test_float64_converts_to_float8_through_float32_as_ml_dtypes():
    """A float64 just above a tie between two float8 values rounds onto the tie in float32 first,
    then to even (down): ml_dtypes' (and ONNX's reference) result, not the nearest value."""
    tie = (1.0 + 1.125) / 2                                # between 1.0 and 1.125 in e4m3fn
    x = np.array([tie + 2.0 ** -40, tie - 2.0 ** -40, tie, tie + 2.0 ** -20], np.float64)
    run, _ = _build("float64", ["float8_e4m3fn"], x.size)
    (got,) = run(x)
    assert got.astype(np.float64).tolist() == [1.0, 1.0, 1.0, 1.125]
    _same_bits(got, x.astype(ml_dtypes.float8_e4m3fn), "float64 -> float8_e4m3fn")


@pytest.mark.parametrize("src", ["int32", "int8", "uint8", "int64", "bool"])
def test_integers_convert_to_every_lowp_type_as_ml_dtypes(src):
    if src == "bool":
        x = np.array([True, False, True], np.bool_)
    else:
        info = np.iinfo(src)
        x = np.unique(np.clip(np.concatenate([np.arange(-300, 301), [info.min, info.max, 448, 449, 464, 465,
                                                                     57344, 61440, 61441, 70000]]),
                              info.min, info.max)).astype(src)
    run, _ = _build(src, LOWP, x.size)
    for d, got in zip(LOWP, run(x)):
        _same_bits(got, x.astype(numpy_dtype(d)), f"{src} -> {d}")


@pytest.mark.parametrize("src", LOWP)
def test_every_value_of_a_lowp_type_converts_out_as_ml_dtypes(src):
    x = _codes(src)
    dsts = WIDE_FLOATS + ["int32", "int8", "uint8", "int64", "bool"] + [d for d in LOWP if d != src]
    run, _ = _build(src, dsts, x.size)
    with np.errstate(invalid="ignore", over="ignore"):
        xf = x.astype(np.float64)
        for d, got in zip(dsts, run(x)):
            try:
                want = x.astype(numpy_dtype(d))
            except TypeError:   # ml_dtypes has no int4 -> uint4 (and such) cast: through int64
                want = x.astype(np.int64).astype(numpy_dtype(d))
            if d.startswith(("int", "uint")) and d not in SUBBYTE_INTS:
                info = np.iinfo(d)   # float -> int outside the range is undefined (C and numpy)
                ok = np.isfinite(xf) & (xf >= info.min) & (xf <= info.max)
                got, want = got[ok], want[ok]
            elif d in SUBBYTE_INTS:
                ok = np.isfinite(xf)
                got, want = got[ok], want[ok]
            _same_bits(got, want, f"{src} -> {d}")


def _vectorize_and_parallel(sch, block):
    (i,) = sch.get_loops(block)
    io, ii = sch.split(i, factors=[None, 8])
    sch.parallel(io)
    sch.vectorize(ii)


def test_vectorized_parallel_loops_convert_lane_by_lane():
    x = _float_probes(500).astype(np.float32)
    x = x[: x.size // 8 * 8]
    run, lib = _build("float32", LOWP, x.size, schedule=_vectorize_and_parallel)
    with np.errstate(invalid="ignore", over="ignore"):
        for d, got in zip(LOWP, run(x)):
            want = x.astype(numpy_dtype(d))
            if d in SUBBYTE_INTS:
                ok = np.isfinite(x) & (np.abs(x) < 2.0 ** 31)
                got, want = got[ok], want[ok]
            _same_bits(got, want, f"vectorized float32 -> {d}")
    src = lib.get_source()
    assert "tsr_float_to_float8_e4m3fn(" in src and "tsr_wrap_uint4(" in src


@pytest.mark.parametrize("dt", ["float8_e4m3fn", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn"])
def test_arithmetic_on_minifloats_rounds_back_like_ml_dtypes(dt):
    """a * b + a in dt: each result computed in float and rounded to dt (ml_dtypes' arithmetic)."""
    npdt = numpy_dtype(dt)
    vals = _codes(dt)
    a_np = np.repeat(vals, vals.size)
    b_np = np.tile(vals, vals.size)
    n = a_np.size
    A = te.placeholder((n,), name="A", dtype=dt)
    B = te.placeholder((n,), name="B", dtype=dt)
    C = te.compute((n,), lambda i: A[i] * B[i] + A[i], name="C")
    lib = tessera.build(te.create_prim_func([A, B, C]), target="c")
    got = np.empty(n, npdt)
    lib(a_np, b_np, got)
    with np.errstate(all="ignore"):
        want = (a_np * b_np + a_np).astype(npdt)
    _same_bits(got, want, f"{dt} arithmetic")


@pytest.mark.parametrize("dt", SUBBYTE_INTS)
def test_arithmetic_on_subbyte_integers_wraps_to_their_bits(dt):
    npdt = numpy_dtype(dt)
    vals = _codes(dt)
    a_np, b_np = np.repeat(vals, vals.size), np.tile(vals, vals.size)
    n = a_np.size
    A = te.placeholder((n,), name="A", dtype=dt)
    B = te.placeholder((n,), name="B", dtype=dt)
    C = te.compute((n,), lambda i: A[i] * B[i] + A[i] - B[i], name="C")
    lib = tessera.build(te.create_prim_func([A, B, C]), target="c")
    got = np.empty(n, npdt)
    lib(a_np, b_np, got)
    wide = a_np.astype(np.int64) * b_np.astype(np.int64) + a_np.astype(np.int64) - b_np.astype(np.int64)
    _same_bits(got, wide.astype(npdt), f"{dt} arithmetic")


def test_a_kernel_checks_the_lowp_dtype_of_its_arguments():
    _, lib = _build("float8_e4m3fn", ["float32"], 4)
    with pytest.raises(TesseraError, match="float8_e4m3fn"):
        lib(np.zeros(4, ml_dtypes.float8_e5m2), np.empty(4, np.float32))
    with pytest.raises(TesseraError, match="float8_e4m3fn"):
        lib(np.zeros(4, np.uint8), np.empty(4, np.float32))
    _, lib = _build("int4", ["float32"], 4)
    with pytest.raises(TesseraError, match="int4"):
        lib(np.zeros(4, np.int8), np.empty(4, np.float32))


def test_the_generated_conversions_are_named_helpers():
    _, lib = _build("float8_e5m2", ["float32", "int4"], 8)
    src = lib.get_source()
    assert "tsr_float8_e5m2_to_float(A[" in src
    assert "tsr_minifloat_decode(" in src
    assert "tsr_minifloat_encode(" not in src       # nothing converts to a minifloat: not pasted
    assert "tsr_wrap_int4((int32_t)" in src


def test_backends_without_the_conversions_refuse_lowp_types_by_name():
    """The CUDA and OpenCL renderers share the C-style base but not tsr_lowp.h: a float8 / int4
    conversion is refused naming the type (the C renderer has them)."""
    from tessera.codegen.c import CodeGenC
    from tessera.codegen.c_base import CodeGenCBase, HelperRegistry
    from tessera.ir import expr as E

    x = E.Var("x", "float32")
    for dt in ("float8_e4m3fn", "int4"):
        base = CodeGenCBase(HelperRegistry())
        base.names.define(x)
        with pytest.raises(TesseraError, match=f"no conversions for {dt}"):
            base.cast_text(x, DataType(dt))
        gen = CodeGenC(HelperRegistry())
        gen.names.define(x)
        text, _ = gen.cast_text(x, DataType(dt))
        assert text.startswith(("tsr_round_float8_e4m3fn(", "tsr_wrap_int4((int32_t)"))
        assert any(name.startswith("tsr_") for name in gen.helpers.functions)


def test_reductions_over_lowp_tensors_use_their_limits():
    """max / min reductions start from te.min_value / max_value of the type (ml_dtypes' finfo / iinfo)."""
    assert (te.min_value("float8_e4m3fn").value, te.max_value("float8_e5m2").value) == (-448.0, 57344.0)
    assert (te.min_value("int4").value, te.max_value("uint2").value) == (-8, 3)
    rng = np.random.default_rng(1)
    A = te.placeholder((4, 16), name="A", dtype="float8_e4m3fn")
    Q = te.placeholder((4, 16), name="Q", dtype="int4")
    k, r = te.reduce_axis((0, 16), name="k"), te.reduce_axis((0, 16), name="r")
    B = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="B")
    C = te.compute((4,), lambda i: te.min(Q[i, r], axis=r), name="C")
    lib = tessera.build(te.create_prim_func([A, Q, B, C]), target="c")
    a = (rng.standard_normal((4, 16)) * 10).astype(ml_dtypes.float8_e4m3fn)
    q = rng.integers(-8, 8, (4, 16)).astype(np.float32).astype(ml_dtypes.int4)
    b, c = np.empty(4, ml_dtypes.float8_e4m3fn), np.empty(4, ml_dtypes.int4)
    lib(a, q, b, c)
    _same_bits(b, a.astype(np.float32).max(axis=1).astype(ml_dtypes.float8_e4m3fn), "max over float8")
    np.testing.assert_array_equal(c.astype(np.int64), q.astype(np.int64).min(axis=1))


def test_the_conversions_header_compiles_alone_and_every_section_pastes():
    """runtime_c/tsr_lowp.h is C on its own (the flags of tests/codegen/test_codegen_c_files.py), and each
    section with its dependencies compiles as a unit would paste it."""
    from tessera.codegen import c_files
    from tessera.toolchain import find_compiler

    cc = find_compiler()
    flags = ["-std=gnu11", "-fsyntax-only", "-Wall", "-Wextra", "-Wno-unused-function", "-Werror", "-x", "c"]
    path = os.path.join(c_files.DIRECTORY, "tsr_lowp.h")
    proc = subprocess.run(cc + flags + [path], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    secs = c_files.sections("tsr_lowp.h")
    assert {f"tsr_float_to_{d}" for d in MINIFLOATS} <= set(secs)
    unit = c_files.section("tsr_includes.h", "includes") + "\n" + "\n".join(
        c_files.used_sections("tsr_lowp.h", "tsr_round_float4_e2m1fn( tsr_wrap_int2("))
    proc = subprocess.run(cc + flags + ["-"], input=unit, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("src,dst", [("float8_e4m3fn", "uint8"), ("uint8", "float8_e5m2fnuz"),
                                     ("float8_e5m2", "float8_e4m3fn"), ("int8", "float8_e4m3fnuz"),
                                     ("int4", "uint4"), ("uint4", "float4_e2m1fn"), ("float4_e2m1fn", "int4"),
                                     ("int2", "uint2")])
def test_reinterpret_reads_the_bits_of_lowp_values(src, dst):
    """The reinterpret intrinsic (ONNX BitCast's): the element's bits in its format, read as dst."""
    from tessera.ir import expr as E

    x = _codes(src) if DataType(src).is_lowp() else np.arange(256, dtype=np.uint8).view(numpy_dtype(src))
    A = te.placeholder((x.size,), name="A", dtype=src)
    B = te.compute((x.size,), lambda i: E.Call(DataType(dst), "reinterpret", (A[i],)), name="B")
    lib = tessera.build(te.create_prim_func([A, B]), target="c")
    got = np.empty(x.size, numpy_dtype(dst))
    lib(x, got)
    mask = (1 << DataType(dst).bits) - 1
    if DataType(src).is_minifloat() or DataType(dst).is_minifloat():   # a NaN keeps no payload or sign
        nan = np.isnan(x.astype(np.float32)) if DataType(src).is_minifloat() else np.zeros(x.size, bool)
        nan |= np.isnan(got.astype(np.float32)) if DataType(dst).is_minifloat() else False
        x, got = x[~nan], got[~nan]
    np.testing.assert_array_equal(got.view(np.uint8) & mask, x.view(np.uint8) & mask)
