"""Vector code: contiguous/strided/indexed loads and stores, masks, selects, lets, and the lane-by-lane
fallback (odd lane counts, vectors wider than a register, if_then_else, extern calls)."""
import numpy as np
import pytest

from tessera.codegen import generate
from tessera.ir import (Broadcast, Buffer, BufferStore, Cast, For, FloorMod, IntImm, Let, LetStmt, Ramp,
                        Select, Var, const)
from tessera.ir.expr import Call
from tessera.target import Target

RNG = np.random.default_rng(2)


def _run(build, src, *arrays):
    build(src).run(*arrays)
    return arrays


def _kernel(lowered, make, n=64, dtypes=("float32", "float32")):
    names = {1: "A", 2: "AC", 3: "ABC"}[len(dtypes)]
    bufs = [Buffer((n,), dt, name) for name, dt in zip(names, dtypes)]
    return generate(lowered(bufs, make))


def test_strided_gather_and_scatter(build, lowered):
    i = Var("i")
    src = _kernel(lowered, lambda a, c: For(i, 0, 8, "serial",
                                            BufferStore(c, a[Ramp(i, 8, 8)], [Ramp(i * 8, 1, 8)])))
    assert "tsr_vgather_float32x8(A, i, 8)" in src
    a = RNG.random(64).astype(np.float32)
    c = np.zeros(64, np.float32)
    _run(build, src, a, c)
    np.testing.assert_array_equal(c, a.reshape(8, 8).T.reshape(-1))
    src = _kernel(lowered, lambda a, c: For(i, 0, 8, "serial",
                                            BufferStore(c, a[Ramp(i * 8, 1, 8)], [Ramp(i, 8, 8)])))
    assert "tsr_vscatter_float32x8(C, i, 8, " in src
    _run(build, src, a, c)
    np.testing.assert_array_equal(c, a.reshape(8, 8).T.reshape(-1))


def test_indexed_gather_scatter_and_broadcast_index(build, lowered):
    i = Var("i")
    lane = Ramp(i * 8, 1, 8)
    idx = FloorMod(lane * 3, Broadcast(IntImm("int32", 64), 8))
    src = _kernel(lowered, lambda a, b, c: For(i, 0, 8, "serial", BufferStore(
        c, a[idx] + b[Broadcast(i, 8)], [lane])), dtypes=("float32",) * 3)
    assert "tsr_vgather_float32x8_by_int32x8(A, " in src and "% 64" in src  # i >= 0: plain %
    a, b = RNG.random(64).astype(np.float32), RNG.random(64).astype(np.float32)
    c = np.zeros(64, np.float32)
    _run(build, src, a, b, c)
    k = np.arange(64)
    np.testing.assert_array_equal(c, a[(k * 3) % 64] + b[k // 8])
    src = _kernel(lowered, lambda a, c: For(i, 0, 8, "serial", BufferStore(c, a[lane], [idx])))
    assert "tsr_vscatter_float32x8_by_int32x8(C, " in src
    c[:] = 0
    _run(build, src, a, c)
    want = np.zeros(64, np.float32)
    want[(k * 3) % 64] = a
    np.testing.assert_array_equal(c, want)


def test_ramp_values_select_and_casts(build, lowered):
    i = Var("i")
    lane = Ramp(i * 8, 1, 8)

    def body(a, b, c):
        iota = Cast("float32x8", lane)
        return For(i, 0, 8, "serial", BufferStore(
            c, Select(a[lane] > b[lane], a[lane], iota * const(0.5)) + Cast("float32x8", Ramp(i, 2, 8) < 10), [lane]))
    src = _kernel(lowered, body, dtypes=("float32",) * 3)
    assert "i * 8 + (int32x8){0, 1, 2, 3, 4, 5, 6, 7}" in src and "tsr_select_float32x8(" in src
    a, b = RNG.random(64).astype(np.float32), RNG.random(64).astype(np.float32)
    c = np.zeros(64, np.float32)
    _run(build, src, a, b, c)
    k = np.arange(64)
    want = np.where(a > b, a, k.astype(np.float32) * 0.5) + ((k // 8 + 2 * (k % 8)) < 10)
    np.testing.assert_array_equal(c, want.astype(np.float32))
    # a scalar condition choosing between two vectors
    src = _kernel(lowered, lambda a, b, c: For(i, 0, 8, "serial", BufferStore(
        c, Select(i < 3, a[lane], b[lane] * 2.0), [lane])), dtypes=("float32",) * 3)
    assert "(i < 3 ? tsr_vload_float32x8(&A[i * 8]) : " in src
    _run(build, src, a, b, c)
    np.testing.assert_array_equal(c, np.where(k < 24, a, b * 2))


def test_narrow_and_wide_element_mixes(build, lowered):
    i = Var("i")
    lane = Ramp(i * 8, 1, 8)
    src = _kernel(lowered, lambda a, c: For(i, 0, 8, "serial", BufferStore(
        c, Cast("float16x8", a[lane] + Broadcast(Cast("uint8", i), 8)), [lane])), dtypes=("uint8", "float16"))
    assert "(uint8_t)(uint8_t)i" in src or "(uint8_t)((uint8_t)i)" in src or "+ (uint8_t)" in src
    a = RNG.integers(0, 256, 64).astype(np.uint8)
    c = np.zeros(64, np.float16)
    _run(build, src, a, c)
    np.testing.assert_array_equal(c, (a + (np.arange(64) // 8).astype(np.uint8)).astype(np.float16))
    src = _kernel(lowered, lambda a, c: For(i, 0, 16, "serial", BufferStore(
        c, Cast("float16x4", a[Ramp(i * 4, 1, 4)]), [Ramp(i * 4, 1, 4)])), dtypes=("float64", "float16"))
    d = (RNG.standard_normal(64) * 100).astype(np.float64)
    d[0] = 1.0 + 2 ** -11 + 2 ** -40  # double -> half rounds once, directly
    c = np.zeros(64, np.float16)
    _run(build, src, d, c)
    np.testing.assert_array_equal(c, d.astype(np.float16))


@pytest.mark.parametrize("lanes", [4, 3])
def test_overlapping_store_reads_before_writing(build, lowered, lanes):
    a = np.arange(8, dtype=np.float32)
    src = _kernel(lowered, lambda x: BufferStore(x, x[Ramp(IntImm("int32", 0), 1, lanes)] + 1.0,
                                                 [Ramp(IntImm("int32", 1), 1, lanes)]), n=8, dtypes=("float32",))
    if lanes == 3:
        assert "lanes one by one" in src and "tmp[lane]" in src
    _run(build, src, a)
    want = np.arange(8, dtype=np.float32)
    want[1:1 + lanes] = np.arange(lanes) + 1
    np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize("lanes", [8, 3])
def test_vector_lets(build, lowered, lanes):
    i = Var("i")
    n = 48
    lane = Ramp(i * lanes, 1, lanes)
    x = Var("x", f"float32x{lanes}")
    m = Var("m", f"boolx{lanes}")
    y = Var("y", f"float32x{lanes}")

    def body(a, c):
        inner = BufferStore(c, Select(m, x, Let(y, x + const(1.0), y * y)), [lane])
        return For(i, 0, n // lanes, "serial", LetStmt(x, a[lane] * 2.0, LetStmt(m, a[lane] > 0.5, inner)))
    src = _kernel(lowered, body, n=n)
    if lanes == 8:
        assert "const float32x8 x = tsr_vload_float32x8(&A[i * 8]) * 2.0f;" in src
        assert "const int32x8 m = tsr_vload_float32x8(&A[i * 8]) > 0.5f;" in src
    else:
        assert "float x[3];" in src and "x[lane] = A[i * 3 + lane] * 2.0f;" in src
    a = RNG.random(n).astype(np.float32)
    c = np.zeros(n, np.float32)
    _run(build, src, a, c)
    np.testing.assert_array_equal(c, np.where(a > 0.5, a * 2, (a * 2 + 1) * (a * 2 + 1)))


def test_wider_than_a_register_goes_lane_by_lane(build, lowered):
    Narrow = Target("c -mcpu=x86-64")          # SSE2: 128-bit registers, on every x86-64 host
    assert Narrow.vector_bits == 128
    A, C = Buffer((64,), "float32", "A"), Buffer((64,), "float32", "C")
    i = Var("i")
    f = lowered([A, C], lambda a, c: For(i, 0, 8, "serial", BufferStore(
        c, a[Ramp(i * 8, 1, 8)] * 2.0, [Ramp(i * 8, 1, 8)])))
    src = generate(f, Narrow)
    assert "float32x8" not in src and "lanes one by one" in src
    assert "float32x8" in generate(f)
    a = RNG.random(64).astype(np.float32)
    c = np.zeros(64, np.float32)
    _run(build, src, a, c)
    np.testing.assert_array_equal(c, a * 2)


def test_vector_if_then_else_and_extern_go_lane_by_lane(build, lowered):
    n = Var("n")
    A, C = Buffer((n,), "float32", "A"), Buffer((16,), "float32", "C")
    i = Var("i")
    lane = Ramp(i * 8, 1, 8)
    f = lowered([A, C], lambda a, c: For(i, 0, 2, "serial", BufferStore(
        c, Call("float32x8", "if_then_else", [lane < Broadcast(n, 8), a[lane], Broadcast(const(-1.0), 8)]), [lane])))
    src = generate(f)
    assert "(i * 8 + lane < n ? A[i * 8 + lane] : -1.0f)" in src
    a = RNG.random(5).astype(np.float32)
    c = np.zeros(16, np.float32)
    _run(build, src, a, c)
    np.testing.assert_array_equal(c, np.r_[a, -np.ones(11, np.float32)])
    B = Buffer((16,), "float32", "B")
    f = lowered([B], lambda b: For(i, 0, 2, "serial", BufferStore(b, Call("float32x8", "twice", [b[lane]]), [lane])))
    src = generate(f)
    # B is read and written: every lane reads before any lane writes
    assert "extern float twice(float);" in src and "tmp[lane] = twice(B[i * 8 + lane]);" in src
    assert "B[i * 8 + lane] = tmp[lane];" in src
    impl = "float twice(float x) { return 2 * x; }\n"
    b = np.arange(16, dtype=np.float32)
    _run(build, src.replace("/* extern functions", impl + "/* extern functions"), b)
    np.testing.assert_array_equal(b, 2 * np.arange(16, dtype=np.float32))


def test_symbolic_stride_and_int64_ramps(build, lowered):
    s = Var("s")
    A, C = Buffer((64,), "float32", "A"), Buffer((64,), "float32", "C")
    i = Var("i", "int64")
    f = lowered([A, C, s], lambda a, c, ss: For(i, 0, 2, "serial", BufferStore(
        c, a[Ramp(i * 4, 1, 4)] + Cast("float32x4", Ramp(i, IntImm("int64", 3), 4)),
        [Ramp(Cast("int64", s) * i, Cast("int64", s), 4)])))
    src = generate(f)
    assert "tsr_vscatter_float32x4(C, (int64_t)s * i, (int64_t)s, " in src
    a = RNG.random(64).astype(np.float32)
    c = np.zeros(64, np.float32)
    build(src).run(a, c, 5)
    want = np.zeros(64, np.float32)
    for ii in range(2):
        for k in range(4):
            want[5 * ii + 5 * k] = a[ii * 4 + k] + (ii + 3 * k)
    np.testing.assert_array_equal(c, want)


def test_mask_let_read_lane_by_lane(build, lowered):
    """A native bool vector (a mask of 0/-1 lanes) read one lane at a time is still 0/1."""
    i = Var("i")
    lane = Ramp(i * 8, 1, 8)
    m = Var("m", "boolx8")

    def body(a, c):
        value = Call("int32x8", "if_then_else", [m, Cast("int32x8", m) * 10, Cast("int32x8", m) - 5])
        return For(i, 0, 8, "serial", LetStmt(m, a[lane] > 0.5, BufferStore(c, value, [lane])))
    src = _kernel(lowered, body, dtypes=("float32", "int32"))
    assert "const int32x8 m = " in src and "lanes one by one" in src
    a = RNG.random(64).astype(np.float32)
    c = np.zeros(64, np.int32)
    _run(build, src, a, c)
    np.testing.assert_array_equal(c, np.where(a > 0.5, 10, -5))


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
def test_vector_width_follows_the_target(isa_target, dtype):
    """A vectorized loop lowers to vectors as wide as the target's registers (AVX2: 256 bits,
    AVX-512: 512) and runs right when built with that target's flags."""
    import tessera
    from tessera import te, tir

    n = 96
    A = te.placeholder((4, n), dtype=dtype, name="A")
    one = te.const(1, dtype)
    B = te.compute((4, n), lambda i, j: A[i, j] * A[i, j] + one, name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.vectorize(j)
    target = tessera.Target(isa_target)
    lanes = target.vector_bits // int(dtype[-2:])
    lib = tessera.build(sch, target=target)
    assert f"{dtype}x{lanes}" in lib.get_source() and f"{dtype}x{lanes * 2}" not in lib.get_source()
    a = (np.arange(4 * n) % 7 - 3).reshape(4, n).astype(dtype)
    b = np.zeros_like(a)
    lib(a, b)
    np.testing.assert_array_equal(b, a * a + np.asarray(1, dtype))


@pytest.mark.parametrize("dtype,lanes", [("float32", 4), ("float32", 8), ("float32", 16), ("float64", 2),
                                         ("float64", 4), ("float64", 8)])
def test_min_max_with_a_constant_keep_nan_and_match_numpy(elementwise, dtype, lanes):
    """A clip's bounds (constants, either side of min/max) take the one-instruction path (tsr_maxc/tsr_minc):
    NaN, infinities and signed zeros come out as numpy's minimum/maximum give them."""
    from tessera.ir import Max, Min

    def clip(x):
        lo, hi = Broadcast(const(0.0, dtype), lanes), Broadcast(const(6.0, dtype), lanes)
        return Min(hi, Max(x, lo))          # upper bound on the left, lower on the right
    src = []
    run = elementwise(clip, [dtype], dtype, n=64, lanes=lanes, source=src)
    if lanes * np.dtype(dtype).itemsize <= 32:     # (wider vectors go lane by lane without a target)
        assert f"tsr_maxc_{dtype}x{lanes}" in src[0] and f"tsr_minc_{dtype}x{lanes}" in src[0]
    x = np.array([np.nan, -0.0, 0.0, -1.0, 3.5, 7.0, np.inf, -np.inf] * 8, dtype=dtype)
    np.testing.assert_array_equal(run(x), np.minimum(np.maximum(x, 0), 6))
