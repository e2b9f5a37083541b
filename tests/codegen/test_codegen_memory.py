"""Allocation (stack, heap, symbolic, per parallel iteration), asserts and early returns, statements,
and an AddressSanitizer run of generated code."""
import shutil
import subprocess

import numpy as np
import pytest

from tessera import abi
from tessera.codegen import generate
from tessera.codegen.c import STACK_BYTES
from tessera.ir import (Allocate, AssertStmt, AttrStmt, Buffer, BufferStore, Evaluate, FloatImm, For,
                        IfThenElse, IntImm, LetStmt, PrimFunc, StringImm, Var, const, seq)


def _reverse_through_temp(lowered, n, kind="serial", per_row=16, dtype="float32"):
    """C[r, j] = 2 * A[r, per_row-1-j] through a temporary T allocated per row."""
    rows = n // per_row
    A, C = Buffer((n,), dtype, "A"), Buffer((n,), dtype, "C")
    r, j, k = Var("r"), Var("j"), Var("k")

    def body(a, c):
        T = Buffer((per_row,), dtype, "T")
        fill = For(j, 0, per_row, "serial", BufferStore(T, a[r * per_row + j] * const(2.0, dtype), [j]))
        use = For(k, 0, per_row, "serial", BufferStore(c, T[per_row - 1 - k], [r * per_row + k]))
        return For(r, 0, rows, kind, Allocate(T, seq(fill, use)))
    return lowered([A, C], body)


@pytest.mark.parametrize("kind", ["serial", "parallel"])
@pytest.mark.parametrize("per_row", [16, STACK_BYTES // 4, STACK_BYTES // 4 + 16])
def test_allocate_stack_up_to_the_limit_then_heap(build, lowered, kind, per_row):
    n = per_row * 4
    src = generate(_reverse_through_temp(lowered, n, kind, per_row))
    if per_row * 4 <= STACK_BYTES:
        assert f"float T[{per_row}] __attribute__((aligned(64)));" in src and "tsr_alloc" not in src
    else:
        assert f"float* T = (float*)tsr_alloc({per_row * 4});" in src and "free(T);" in src
    lib = build(src)
    a = np.random.rand(n).astype(np.float32)
    c = np.zeros(n, np.float32)
    lib.run(a, c)
    np.testing.assert_array_equal(c, (a.reshape(4, per_row)[:, ::-1] * 2).reshape(-1))


def test_allocate_symbolic_size(build, lowered):
    n = Var("n")
    A, C = Buffer((n,), "float32", "A"), Buffer((n,), "float32", "C")
    i, j = Var("i"), Var("j")

    def body(a, c):
        T = Buffer((n,), "float32", "T")
        return Allocate(T, seq(For(i, 0, n, "serial", BufferStore(T, a[i] + 1.0, [i])),
                               For(j, 0, n, "serial", BufferStore(c, T[n - 1 - j], [j]))))
    src = generate(lowered([A, C], body))
    # on the stack when n fits in STACK_BYTES, else on the heap
    assert ("float* T = (size_t)n * sizeof(float) <= sizeof(T_stack) ? T_stack : "
            "(float*)tsr_alloc((size_t)n * sizeof(float));") in src
    assert "free(T == T_stack ? NULL : T);" in src
    lib = build(src)
    for size in (0, 1, 1000, STACK_BYTES // 4, STACK_BYTES // 4 + 1, 50000):
        a = np.random.rand(size).astype(np.float32)
        c = np.zeros(size, np.float32)
        lib.run(a, c)
        np.testing.assert_array_equal(c, a[::-1] + 1)


def test_allocation_failure_reports(build, lowered):
    n = Var("n", "int64")
    C = Buffer((4,), "float32", "C")
    i = Var("i")

    def body(c, nn):
        T = Buffer((n,), "float32", "T")
        return Allocate(T, seq(BufferStore(T, FloatImm("float32", 1.0), [IntImm("int64", 0)]),
                               For(i, 0, 4, "serial", BufferStore(c, T[IntImm("int64", 0)], [i]))))
    lib = build(generate(lowered([C, n], body)))
    c = np.zeros(4, np.float32)
    lib.run(c, 10)
    np.testing.assert_array_equal(c, 1.0)
    status, msg = lib.call(c, 1 << 52)
    assert status == abi.STATUS_RUNTIME
    assert msg == f"out of memory: buffer T of main needs {4 << 52} bytes"


def _asserting(lowered, kind):
    """C[i] = 2 * A[i] through a heap buffer, asserting n > 1 and A[i] >= 0 (inside the loop).
    Serial: one buffer around the loop; parallel: one buffer per iteration."""
    n = Var("n")
    A, C = Buffer((n,), "float32", "A"), Buffer((n,), "float32", "C")
    i = Var("i")
    zero = IntImm("int32", 0)

    def body(a, c):
        big = Buffer((STACK_BYTES // 4 + 16,), "float32", "scratch")   # over the stack limit: heap
        check = AssertStmt(a[i] >= 0.0, "A must be non-negative",
                           seq(BufferStore(big, a[i], [zero]), BufferStore(c, big[zero] * 2.0, [i])))
        if kind == "parallel":
            loop = For(i, 0, n, "parallel", Allocate(big, check))
        else:
            loop = Allocate(big, For(i, 0, n, "serial", check))
        return AssertStmt(n > 1, "n must be at least 2", loop)
    return lowered([A, C], body)


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_assert_returns_runtime_error(build, lowered, kind):
    src = generate(_asserting(lowered, kind))
    lib = build(src)
    a = np.arange(8, dtype=np.float32)
    c = np.zeros(8, np.float32)
    lib.run(a, c)
    np.testing.assert_array_equal(c, a * 2)
    status, msg = lib.call(np.zeros(1, np.float32), np.zeros(1, np.float32))
    assert status == abi.STATUS_RUNTIME and msg == "n must be at least 2"
    a[5] = -1
    status, msg = lib.call(a, c)
    assert status == abi.STATUS_RUNTIME and msg == "A must be non-negative"
    if kind == "parallel":
        assert "#pragma omp critical(tsr_failure)" in src and "return tsr_status;" in src
    else:
        # the early return frees the live heap buffer first
        assert "free(scratch);\n      snprintf(err, err_len, \"%s\", \"A must be non-negative\");" in src


def test_checks_inside_a_vectorized_loop_drop_omp_simd(lowered):
    A = Buffer((8,), "float32", "A")
    i = Var("i")
    f = lowered([A], lambda a: For(i, 0, 8, "vectorized", AssertStmt(a[i] > 0.0, "positive",
                                                                     BufferStore(a, a[i] * 2.0, [i]))))
    src = generate(f)
    assert "#pragma omp simd" not in src and "// vectorized (no omp simd" in src
    f = lowered([A], lambda a: For(i, 0, 8, "vectorized", BufferStore(a, a[i] * 2.0, [i])))
    assert "  #pragma omp simd\n  for (int32_t i = 0; i < 8; ++i) {" in generate(f)
    f = lowered([A], lambda a: For(i, 0, 100, "unrolled", BufferStore(a, a[i % 8] * 2.0, [i % 8])))
    assert "#pragma GCC unroll 8\n" in generate(f)
    f = lowered([A], lambda a: For(i, 0, 8, "unrolled", BufferStore(a, a[i] * 2.0, [i])))
    assert "#pragma GCC unroll 8\n" in generate(f)


def test_statements(build, lowered):
    n = Var("n")
    A, C = Buffer((n,), "int32", "A"), Buffer((n,), "int32", "C")
    i = Var("i")
    x, y = Var("x"), Var("y")

    def body(a, c):
        branch = IfThenElse(x < 0, BufferStore(c, -x, [i]),
                            IfThenElse(x == 0, BufferStore(c, const(100), [i]),
                                       LetStmt(y, x * x, BufferStore(c, y + 1, [i]))))
        loop = For(i, 0, n, "serial", LetStmt(x, a[i] - 3, branch))
        return AttrStmt(None, "pragma_GCC", StringImm("ivdep"),
                        AttrStmt(None, "note", StringImm("a comment"), seq(loop, Evaluate(IntImm("int32", 0)))))
    src = generate(lowered([A, C], body))
    assert "  #pragma GCC ivdep\n  // note: a comment\n" in src
    # (data arithmetic in int32 goes through uint32_t: it wraps around instead of being undefined)
    assert "const int32_t x = (int32_t)((uint32_t)A[i] - (uint32_t)3);" in src and "} else if (x == 0) {" in src
    lib = build(src)
    a = np.arange(8, dtype=np.int32)
    c = np.zeros(8, np.int32)
    lib.run(a, c)
    v = a - 3
    np.testing.assert_array_equal(c, np.where(v < 0, -v, np.where(v == 0, 100, v * v + 1)))


def _asan_available():
    if shutil.which("gcc") is None:
        return False
    lib = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return lib not in ("", "libasan.so")


_DRIVER = r"""
#include <stdio.h>
int main(void) {
  enum { N = %(n)d };
  float a[N], c[N];
  for (int i = 0; i < N; ++i) { a[i] = (float)i; c[i] = 0; }
  int64_t shape[1] = {N};
  tessera_tensor_t ta = {a, shape, NULL, 1, 2, 32, 1}, tc = {c, shape, NULL, 1, 2, 32, 1};
  void* args[2] = {&ta, &tc};
  int32_t kinds[2] = {0, 0};
  char err[256] = "";
  int32_t status = tessera_call_main(args, kinds, 2, err, sizeof(err));
  printf("status %%d %%s\n", (int)status, err);
  for (int i = 0; i < N; ++i) printf("%%g ", c[i]);
  printf("\n");
  a[3] = -1;
  status = tessera_call_main(args, kinds, 2, err, sizeof(err));
  printf("status %%d %%s\n", (int)status, err);
  return 0;
}
"""


@pytest.mark.skipif(not _asan_available(), reason="the AddressSanitizer runtime is not installed")
@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_address_sanitizer_run(tmp_path, lowered, kind):
    """Generated code with heap buffers, early returns and parallel failures is clean under ASan
    (no out-of-bounds access, no leak); a deliberately broken kernel is caught, so the check works."""
    src = generate(_asserting(lowered, kind))
    c = tmp_path / "k.c"
    c.write_text(src + _DRIVER % {"n": 8})
    exe = tmp_path / "k"
    cmd = ["gcc", "-O1", "-g", "-march=native", "-fopenmp", "-std=gnu11", "-fsanitize=address",
           "-fno-omit-frame-pointer", str(c), "-o", str(exe), "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env = {"ASAN_OPTIONS": "detect_leaks=1", "OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].strip() == "status 0"
    assert [float(x) for x in lines[1].split()] == [2.0 * i for i in range(8)]
    assert lines[2] == "status 5 A must be non-negative"
    # the same setup catches an out-of-bounds store
    A, C = Buffer((8,), "float32", "A"), Buffer((8,), "float32", "C")
    i = Var("i")
    bad = generate(lowered([A, C], lambda a, cc: For(i, 0, 9, "serial", BufferStore(cc, FloatImm("float32", 1.0), [i]))))
    c.write_text(bad + _DRIVER % {"n": 8})
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0 and "AddressSanitizer" in r.stderr
