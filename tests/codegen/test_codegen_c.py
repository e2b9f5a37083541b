"""C codegen end to end: hand-lowered kernels compiled with gcc, called through the ABI, vs numpy."""
import json
import re

import numpy as np
import pytest

from tessera import abi
from tessera.codegen import generate, generate_module
from tessera.errors import TesseraError
from tessera.ir import (Broadcast, Buffer, BufferStore, FloatImm, For, IntImm, PrimFunc, Ramp, SizeVar,
                        Var, seq)


def _vec_add(lowered, n=64, lanes=8):
    A, B, C = (Buffer((n,), "float32", x) for x in "ABC")
    i = Var("i")

    def body(a, b, c):
        idx = Ramp(i * lanes, 1, lanes)
        return For(i, 0, n // lanes, "serial",
                   BufferStore(c, a[idx] + b[idx] * Broadcast(FloatImm("float32", 2.0), lanes), [idx]))
    return lowered([A, B, C], body)


def _matmul(lowered, M=16, N=32, K=24, kind_i="parallel"):
    A = Buffer((M, K), "float32", "A")
    B = Buffer((K, N), "float32", "B")
    C = Buffer((M, N), "float32", "C")
    i, jo, k = Var("i"), Var("j"), Var("k")

    def body(a, b, c):
        cidx = Ramp(i * N + jo * 8, 1, 8)
        init = BufferStore(c, Broadcast(FloatImm("float32", 0.0), 8), [cidx])
        upd = BufferStore(c, c[cidx] + Broadcast(a[i * K + k], 8) * b[Ramp(k * N + jo * 8, 1, 8)], [cidx])
        return For(i, 0, M, kind_i, For(jo, 0, N // 8, "serial", seq(init, For(k, 0, K, "serial", upd))))
    return lowered([A, B, C], body)


def test_vector_elementwise(build, lowered):
    lib = build(generate(_vec_add(lowered)))
    a, b = np.random.rand(64).astype("float32"), np.random.rand(64).astype("float32")
    c = np.zeros(64, "float32")
    lib.run(a, b, c)
    np.testing.assert_allclose(c, a + b * 2, rtol=1e-6)
    assert "float32x8" in lib.source and "tsr_vload_float32x8(&A[i * 8])" in lib.source


def test_matmul_parallel(build, lowered):
    lib = build(generate(_matmul(lowered)))
    a, b = np.random.rand(16, 24).astype("float32"), np.random.rand(24, 32).astype("float32")
    c = np.zeros((16, 32), "float32")
    lib.run(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    src = lib.source
    assert "#pragma omp parallel for\n" in src
    assert re.search(r"#pragma omp parallel for\n\s+for \(int32_t i = 0; i < 16; \+\+i\) \{", src)
    assert "for (int32_t k = 0; k < 24; ++k) {" in src


def test_num_threads_from_target(lowered):
    class T:
        num_threads = 3
        vector_bits = 256

        def has_feature(self, name):
            return False

        def __str__(self):
            return "c -num-threads=3"

    src = generate(_matmul(lowered), T())
    assert "#pragma omp parallel for num_threads(3)" in src
    meta = _metadata_of(src)
    assert meta["target"] == "c -num-threads=3"


def test_target_text(lowered):
    pytest.importorskip("tessera.target")
    src = generate(_matmul(lowered), "c -num-threads=3")
    assert "#pragma omp parallel for num_threads(3)" in src
    assert _metadata_of(src)["target"] == "c -num-threads=3"


def _metadata_of(src):
    m = re.search(r"const char tessera_metadata\[\] =\n(.*?);\n", src, re.S)
    text = "".join(json.loads(chunk) for chunk in re.findall(r'"(?:[^"\\]|\\.)*"', m.group(1)))
    return json.loads(text)


def test_readable_kernel(lowered):
    src = generate(_matmul(lowered))
    kernel = src[src.index("static int32_t main_kernel"):src.index("/* main: the kernel's arguments")]
    assert "static int32_t main_kernel(const float* restrict A, const float* restrict B, float* restrict C)" in kernel
    lines = kernel.splitlines()
    # one statement a line, indented by nesting
    loop_k = next(l for l in lines if "for (int32_t k" in l)
    loop_j = next(l for l in lines if "for (int32_t j" in l)
    assert len(loop_k) - len(loop_k.lstrip()) == len(loop_j) - len(loop_j.lstrip()) + 2
    assert all(l.count(";") <= 1 or "for (" in l for l in lines)


def test_symbolic_extent_and_errors(build, lowered):
    n = Var("n")
    A, C = Buffer((n,), "float32", "A"), Buffer((n,), "float32", "C")
    i = Var("i")
    f = lowered([A, C], lambda a, c: For(i, 0, n, "serial", BufferStore(c, a[i] * 2.0 + 1.0, [i])))
    lib = build(generate(f))
    assert "static int32_t main_kernel(const float* restrict A, float* restrict C, int32_t n)" in lib.source
    for size in (1, 7, 100):
        a = np.random.rand(size).astype("float32")
        c = np.zeros(size, "float32")
        lib.run(a, c)
        np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
    a = np.zeros(10, "float32")
    status, msg = lib.call(a, np.zeros(9, "float32"))
    assert status == abi.STATUS_SHAPE
    assert msg == "argument 1 (C): dimension 0 has extent 9 but n = 10 from argument 0 (A)"
    status, msg = lib.call(a)
    assert status == abi.STATUS_ARG_COUNT and msg == "expected 2 arguments (A, C), got 1"
    status, msg = lib.call(a, np.zeros(10, "int32"))
    assert status == abi.STATUS_DTYPE and msg == "argument 1 (C): expected float32, got int32"
    status, msg = lib.call(a, np.zeros((10, 1), "float32"))
    assert status == abi.STATUS_SHAPE and msg == "argument 1 (C): expected 1 dimensions, got 2"
    status, msg = lib.call(a, 3)
    assert status == abi.STATUS_DTYPE and msg == "argument 1 (C): expected a tensor, got an int scalar"
    # a strided view is refused, not miscomputed
    status, msg = lib.call(np.zeros(20, "float32")[::2], np.zeros(10, "float32"))
    assert status == abi.STATUS_STRIDE
    assert msg == "argument 0 (A): not compact row-major: dimension 0 has stride 2, expected 1"


def test_constant_extent_error(build, lowered):
    lib = build(generate(_matmul(lowered)))
    a, b = np.zeros((16, 23), "float32"), np.zeros((24, 32), "float32")
    status, msg = lib.call(a, b, np.zeros((16, 32), "float32"))
    assert status == abi.STATUS_SHAPE
    assert msg == "argument 0 (A): dimension 1 has extent 23, expected 24"


def test_scalar_params(build, lowered):
    n = Var("n")
    alpha = Var("alpha", "float32")
    A, C = Buffer((n,), "float32", "A"), Buffer((n,), "float32", "C")
    i = Var("i")
    f = lowered([A, C, alpha, n],
                lambda a, c, al, nn: For(i, 0, n, "serial", BufferStore(c, a[i] * alpha, [i])))
    lib = build(generate(f))
    a = np.random.rand(5).astype("float32")
    c = np.zeros(5, "float32")
    lib.run(a, c, 0.5, 5)
    np.testing.assert_allclose(c, a * np.float32(0.5))
    lib.run(a, c, 3, 5)  # an int is accepted for a float scalar
    np.testing.assert_allclose(c, a * 3)
    status, msg = lib.call(a, c, 0.5, 4)
    assert status == abi.STATUS_SHAPE
    assert msg == "argument 0 (A): dimension 0 has extent 5 but n = 4 from argument 3 (n)"
    status, msg = lib.call(a, c, 0.5, 2.5)
    assert status == abi.STATUS_DTYPE and "argument 3 (n): expected an int scalar (int32)" in msg
    status, msg = lib.call(a, c, 0.5, 1 << 40)
    assert status == abi.STATUS_DTYPE and msg == "argument 3 (n): value 1099511627776 does not fit int32"
    assert lib.metadata["functions"][0]["params"][2] == {"name": "alpha", "kind": "scalar", "dtype": "float32"}


def test_shape_expression_and_explicit_strides(build, lowered):
    n = SizeVar("n")
    s0 = Var("s0")
    A = Buffer((n, 2), "float32", "A", strides=(s0, 1))
    C = Buffer((n * 2,), "float32", "C")
    i, j = Var("i"), Var("j")
    Af = Buffer((n * s0,), "float32", "A")
    Cf = Buffer((n * 2,), "float32", "C")
    body = For(i, 0, n, "serial", For(j, 0, 2, "serial",
                                      BufferStore(Cf, Af[i * s0 + j], [i * 2 + j])))
    f = PrimFunc([A, C], body, attrs={"flat_params": (Af, Cf)})
    lib = build(generate(f))
    base = np.arange(30, dtype="float32").reshape(5, 6)
    a = base[:, 1:3]  # rows of stride 6
    c = np.zeros(10, "float32")
    lib.run(a, c)
    np.testing.assert_array_equal(c, a.reshape(-1))
    status, msg = lib.call(a, np.zeros(8, "float32"))
    assert status == abi.STATUS_SHAPE
    assert msg == "argument 1 (C): dimension 0 has extent 8, expected n * 2 = 10"
    meta = lib.metadata["functions"][0]["params"]
    assert meta[0]["shape"] == ["n", 2] and meta[0]["strides"] == ["s0", 1]
    assert meta[1]["shape"] == ["n * 2"]


def test_metadata_and_timer(build, lowered):
    lib = build(generate(_vec_add(lowered)))
    meta = lib.metadata
    assert meta["version"] == 1 and meta["target"] == "c"
    (fn,) = meta["functions"]
    assert fn["name"] == "main" and fn["entry"] == "tessera_call_main" and fn["timer"] == "tessera_time_main"
    assert fn["params"][0] == {"name": "A", "kind": "tensor", "dtype": "float32", "shape": [64], "strides": None}
    a, b, c = (np.ones(64, "float32") for _ in range(3))
    status, msg, results = lib.time(a, b, c, number=5, repeat=3)
    assert status == 0, msg
    assert len(results) == 3 and all(r > 0 for r in results)
    np.testing.assert_allclose(c, 3.0)
    # min_repeat_ms grows `number` until one repeat lasts that long
    status, msg, results = lib.time(a, b, c, number=1, repeat=1, min_repeat_ms=20)
    assert status == 0 and results[0] > 0
    status, msg, _ = lib.time(a, b, c, number=0, repeat=1)
    assert status == abi.STATUS_RUNTIME and "number and repeat must be >= 1" in msg
    status, msg, _ = lib.time(a, b, number=1, repeat=1)
    assert status == abi.STATUS_ARG_COUNT


def test_module_of_several_functions(build, lowered):
    f1 = _vec_add(lowered).replace(name="add")
    f2 = _matmul(lowered).replace(name="matmul")
    lib = build(generate_module([f1, f2]))
    names = [f["name"] for f in lib.metadata["functions"]]
    assert names == ["add", "matmul"]
    a, b = np.random.rand(16, 24).astype("float32"), np.random.rand(24, 32).astype("float32")
    c = np.zeros((16, 32), "float32")
    lib.run(a, b, c, name="matmul")
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    x = np.ones(64, "float32")
    y = np.zeros(64, "float32")
    lib.run(x, x, y, name="add")
    np.testing.assert_allclose(y, 3.0)
    # helpers shared by both functions are emitted once
    assert lib.source.count("tsr_vload_float32x8(const float* p)") == 1
    with pytest.raises(TesseraError, match="same C name"):
        generate_module([f1, f1])


def test_deterministic(lowered):
    assert generate(_matmul(lowered)) == generate(_matmul(lowered))
    f = _vec_add(lowered)
    assert generate(f) == generate(f)


def test_refuses_bad_input(lowered):
    with pytest.raises(TesseraError, match="PrimFunc"):
        generate_module([42])
    A = Buffer((4, 4), "float32", "A")
    i = Var("i")
    # an unlowered (2-D) access
    f = PrimFunc([A], For(i, 0, 4, "serial", BufferStore(A, FloatImm("float32", 0.0), [i, i])))
    with pytest.raises(TesseraError, match="2 indices.*lower"):
        generate(f)
    # a loop bound to a GPU thread
    from tessera.ir import IterVar
    tx = IterVar(None, Var("tx"), "thread", "threadIdx.x")
    f = PrimFunc([A], For(i, 0, 4, "thread_binding", BufferStore(A, FloatImm("float32", 0.0), [i, i]),
                          thread_binding=tx))
    with pytest.raises(TesseraError, match="loop i is bound to threadIdx.x; build for a GPU target"):
        generate(f)
    # a variable used where it is not defined
    j = Var("j")
    B = Buffer((4,), "float32", "B")
    with pytest.raises(TesseraError, match="variable 'j'"):
        generate(PrimFunc([B], BufferStore(B, FloatImm("float32", 0.0), [j])))
    # a shape variable that cannot be bound
    m = Var("m")
    D = Buffer((m * 2,), "float32", "D")
    with pytest.raises(TesseraError, match="m is not the extent"):
        generate(PrimFunc([D], BufferStore(D, FloatImm("float32", 0.0), [IntImm("int32", 0)])))


def _clang():
    import shutil

    for name in ["clang"] + [f"clang-{v}" for v in range(20, 13, -1)]:
        if shutil.which(name):
            return name
    return None


@pytest.mark.skipif(_clang() is None, reason="clang is not installed")
def test_compiles_with_clang_without_warnings(tmp_path, lowered):
    import subprocess

    from tessera.ir import Cast, Select, const, max_expr
    from tessera.ir.expr import Call

    clang = _clang()
    probe = tmp_path / "probe.c"
    probe.write_text("_Float16 h;\n")
    has_f16 = subprocess.run([clang, "-c", str(probe), "-o", str(tmp_path / "probe.o")],
                             capture_output=True).returncode == 0

    def ew(fn, ins, out, lanes):
        bufs = [Buffer((64,), dt, f"In{k}") for k, dt in enumerate(ins)] + [Buffer((64,), out, "Out")]
        i = Var("i")

        def body(*flat):
            idx = i if lanes == 1 else Ramp(i * lanes, 1, lanes)
            return For(i, 0, 64 // lanes, "parallel",
                       BufferStore(flat[-1], fn(*[b[idx] for b in flat[:-1]]), [idx]))
        return generate(lowered(bufs, body))

    sources = [generate(_matmul(lowered)), generate(_vec_add(lowered))]
    for lanes in (1, 8):
        sources.append(ew(lambda a, b: Call(a.dtype, "exp", [a]) * b + max_expr(a, b), ["bfloat16"] * 2,
                          "bfloat16", lanes))
        sources.append(ew(lambda x, y, q: Select((x < y) & ~q, x, y) + Cast(x.dtype, q),
                          ["float32", "float32", "bool"], "float32", lanes))
        sources.append(ew(lambda x, y: (x + y) // const(3, "int8") + (x * y) % y, ["int8", "int8"], "int8", lanes))
        if has_f16:  # clang supports _Float16 on x86-64 from version 15
            sources.append(ew(lambda a, b: Call(a.dtype, "tanh", [a]) * b, ["float16"] * 2, "float16", lanes))
    for k, src in enumerate(sources):
        c = tmp_path / f"k{k}.c"
        c.write_text(src)
        r = subprocess.run([clang, "-O3", "-march=native", "-fopenmp", "-fPIC", "-std=gnu11", "-Wall", "-Wextra",
                            "-Wno-unused-parameter", "-c", str(c), "-o", str(tmp_path / f"k{k}.o")],
                           capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr
