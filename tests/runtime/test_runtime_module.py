"""Module: calling hand-written ABI kernels (abi_kernels.c), error mapping, timing, export and load."""
import ctypes
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tessera.codegen.c_entry import C_HEADER
from tessera.errors import DTypeError, ShapeError, TesseraError
from tessera.runtime import Module, load_module, nd
from tessera.runtime.c_compiler import compile_source
from tessera.toolchain import asan_runtime

HERE = Path(__file__).parent
REPO = HERE.parent.parent


def fixture_source() -> str:
    return (HERE / "abi_kernels.c").read_text().replace("/*TESSERA_ABI_HEADER*/", C_HEADER)


ONLY_SOURCE = "#include <stdint.h>\n" + C_HEADER + r"""
int32_t tessera_call_double_it(void** args, const int32_t* kinds, int32_t num_args, char* err, int32_t err_len) {
  if (num_args != 1) { snprintf(err, err_len, "double_it expects 1 argument"); return 1; }
  const tessera_tensor_t* t = (const tessera_tensor_t*)args[0];
  if (kinds[0] != 0 || t->code != 2 || t->bits != 64 || t->ndim != 1) { snprintf(err, err_len, "argument X: want float64[n]"); return 2; }
  double* x = (double*)t->data;
  for (int64_t i = 0; i < t->shape[0]; ++i) x[i] *= 2;
  return 0;
}
const char tessera_metadata[] = "{\"version\": 1, \"functions\": [{\"name\": \"double_it\", \"params\": "
  "[{\"name\": \"X\", \"kind\": \"tensor\", \"dtype\": \"float64\", \"shape\": [\"n\"], \"strides\": null}]}]}";
""".replace("#include <stdint.h>\n", "#include <stdint.h>\n#include <stdio.h>\n")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        d = tmp_path_factory.mktemp("tessera-cache")
        mp.setenv("TESSERA_CACHE_DIR", str(d))
        yield d


@pytest.fixture(scope="module")
def mod(cache_dir):
    return Module(compile_source(fixture_source(), name_hint="abi_kernels"))


@pytest.fixture(scope="module")
def only_mod(cache_dir):
    return Module(compile_source(ONLY_SOURCE))


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).random(shape).astype(dtype)


def test_call_with_ndarrays_numpy_and_a_mix(mod):
    a, b = rand(37, seed=1), rand(37, seed=2)
    c = nd.empty((37,), "float32")
    mod(nd.array(a), nd.array(b), c)
    np.testing.assert_array_equal(c.numpy(), a + b)
    out = np.zeros(37, np.float32)
    mod(a, b, out)                                   # numpy arrays: zero-copy, written in place
    np.testing.assert_array_equal(out, a + b)
    out2 = np.zeros(37, np.float32)
    mod(nd.array(a), b, out2)
    np.testing.assert_array_equal(out2, a + b)
    unaligned = np.zeros(38, np.float32)[1:]         # 4-byte aligned view, still compact
    mod.get_function("main")(a, b, unaligned)
    np.testing.assert_array_equal(unaligned, a + b)
    empty = np.zeros(0, np.float32)
    mod(empty, empty, empty)


def test_two_dimensional_and_dlpack_arguments(mod):
    x = rand(9, 4)
    y = np.zeros(9, np.float32)
    mod["rowsum"](x, y)
    np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-6)
    y2 = nd.empty(9, "float32")
    mod["rowsum"](nd.array(x), y2)
    np.testing.assert_allclose(y2.numpy(), x.sum(axis=1), rtol=1e-6)

    class Producer:                                  # any CPU DLPack producer is taken zero-copy
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    y3 = np.zeros(9, np.float32)
    mod["rowsum"](Producer(x), Producer(y3))
    np.testing.assert_allclose(y3, x.sum(axis=1), rtol=1e-6)


def test_scalar_arguments(mod):
    x, y = rand(5, seed=3), rand(5, seed=4)
    for alpha in (2, 2.5, np.float32(-1.5), np.int64(3), np.array(0.25)):
        out = y.copy()
        mod["axpy"](x, out, alpha)
        np.testing.assert_allclose(out, np.float32(alpha) * x + y, rtol=1e-6)
    o = np.zeros(6, np.int64)
    for value in (7, np.int32(-9), 2**62):
        mod["fill"](o, value)
        assert (o == value).all()
    a = np.zeros(4, np.float32)
    mod["guarded"](a, np.int64(2))
    np.testing.assert_array_equal(a, [0, 0, 1, 0])


def test_python_side_argument_errors(mod):
    a = np.zeros(4, np.float32)
    with pytest.raises(TesseraError, match=r"main expects 3 arguments \(A, B, C\), got 2"):
        mod(a, a)
    with pytest.raises(TesseraError, match=r"axpy expects 3 arguments \(X, Y, alpha\), got 4"):
        mod["axpy"](a, a, 1.0, 2.0)
    with pytest.raises(TesseraError, match="argument 'B' is a tensor parameter; got list"):
        mod(a, [0.0] * 4, a)
    with pytest.raises(TesseraError, match="argument 'alpha' is a scalar parameter"):
        mod["axpy"](a, a, nd.array(a))
    with pytest.raises(TesseraError, match="argument 'alpha' is a scalar parameter"):
        mod["axpy"](a, a, "2")
    with pytest.raises(DTypeError, match="argument 'value' is int64; got the float 1.5"):
        mod["fill"](np.zeros(3, np.int64), 1.5)
    with pytest.raises(TesseraError, match="does not fit int32"):
        mod["guarded"](a, 2**40)
    with pytest.raises(DTypeError, match="argument 'A'.*complex"):
        mod(np.zeros(4, np.complex64), a, a)
    with pytest.raises(DTypeError, match="byte order"):
        mod(np.zeros(4, ">f4"), a, a)
    with pytest.raises(TesseraError, match="has no function 'nope'; it has: main, axpy"):
        mod["nope"]


def test_c_statuses_map_to_exception_types(mod):
    a = np.zeros(8, np.float32)
    with pytest.raises(ShapeError, match=r"^main: argument C.shape\[0\]: expected 8 \(n\), got 3$"):
        mod(a, a, np.zeros(3, np.float32))
    with pytest.raises(ShapeError, match="main: argument A: expected rank 1, got 2"):
        mod(np.zeros((2, 4), np.float32), a, a)
    with pytest.raises(DTypeError, match="main: argument B: expected dtype code 2 bits 32, got code 2 bits 64"):
        mod(a, np.zeros(8), a)
    with pytest.raises(DTypeError, match="main: argument A: .* got code 4 bits 16"):
        mod(nd.empty(8, "bfloat16"), a, a)
    # non-compact numpy views arrive with strides in elements, and the kernel refuses them
    with pytest.raises(ShapeError, match="main: argument C: must be compact.* stride 2 \\(want 1\\)"):
        mod(a, a, np.zeros(16, np.float32)[::2])
    with pytest.raises(ShapeError, match="rowsum: argument X: .*dimension 0 has stride 8 \\(want 4\\)"):
        mod["rowsum"](np.zeros((3, 8), np.float32)[:, :4], np.zeros(3, np.float32))
    with pytest.raises(TesseraError, match=r"guarded: assertion failed: 0 <= k < n \(k = 9\)") as info:
        mod["guarded"](a, 9)
    assert type(info.value) is TesseraError
    # a compact array with a non-standard stride on a unit dimension is still compact
    y = np.zeros((3, 1), np.float32)[:, 0]
    mod["rowsum"](np.ones((3, 4), np.float32), y)
    np.testing.assert_array_equal(y, [4, 4, 4])


def test_only_function_is_the_default(only_mod):
    x = np.arange(4, dtype=np.float64)
    only_mod(x)
    np.testing.assert_array_equal(x, [0, 2, 4, 6])
    assert only_mod.entry_name == "double_it" and only_mod["main"] is only_mod["double_it"]
    with pytest.raises(DTypeError, match="double_it: argument X: want float64"):
        only_mod(np.zeros(3, np.float32))
    with pytest.raises(TesseraError, match="no timer"):
        only_mod.time_evaluator()(x)


def test_time_evaluator_runs_the_kernel_in_c(mod):
    counter = np.zeros(1, np.int64)
    res = mod.time_evaluator("count", number=7, repeat=3)(counter)
    assert counter[0] == 1 + 7 * 3                   # one warm-up call, then repeat x number
    assert len(res.results) == 3 and all(t > 0 for t in res.results)
    assert res.min <= res.median <= res.max and res.min <= res.mean <= res.max
    assert res.mean == pytest.approx(np.mean(res.results)) and res.std == pytest.approx(np.std(res.results))
    assert "mean (ms)" in repr(res)
    counter[0] = 0
    res = mod.time_evaluator("count", number=1, repeat=2, min_repeat_ms=5)(counter)
    assert len(res.results) == 2 and counter[0] > 1 + 2    # rounds grew to last 5 ms
    a = nd.array(rand(1000))
    res = mod.time_evaluator(number=20, repeat=5)(a, a, nd.empty(1000, "float32"))
    assert len(res.results) == 5 and res.min > 0


def test_time_evaluator_errors(mod):
    a = np.zeros(4, np.float32)
    with pytest.raises(TesseraError, match="number must be an int >= 1"):
        mod.time_evaluator(number=0)
    with pytest.raises(TesseraError, match="repeat"):
        mod.time_evaluator(repeat=2.5)
    with pytest.raises(TesseraError, match="min_repeat_ms"):
        mod.time_evaluator(min_repeat_ms=-1)
    with pytest.raises(ShapeError, match="main: argument C.shape"):
        mod.time_evaluator()(a, a, np.zeros(2, np.float32))
    with pytest.raises(TesseraError, match="expects 3 arguments"):
        mod.time_evaluator()(a)


def test_export_load_round_trip(mod, only_mod, tmp_path):
    path = tmp_path / "kernels.so"
    assert mod.export_library(path) == str(path)
    loaded = load_module(path)
    assert loaded.function_names == ["main", "axpy", "fill", "rowsum", "guarded", "count"]
    assert loaded.metadata == mod.metadata and loaded.metadata["functions"][3]["params"][0]["shape"] == ["m", 4]
    assert loaded.get_source() == fixture_source()
    a, b = rand(10, seed=5), rand(10, seed=6)
    c = np.zeros(10, np.float32)
    loaded(a, b, c)
    np.testing.assert_array_equal(c, a + b)
    # the file under the same name replaced by another module: loading it gives the new one
    only_mod.export_library(path)
    again = load_module(path)
    assert again.function_names == ["double_it"] and "double_it" in again.get_source()


def test_get_source_without_the_c_file(cache_dir, tmp_path):
    src = fixture_source() + "\n/* a variant only this test builds */\n"
    so = compile_source(src)
    os.remove(so[:-3] + ".c")
    copy = tmp_path / "copy.so"
    Module(so).export_library(copy)
    assert load_module(copy).get_source() == src


def test_load_errors(cache_dir, tmp_path):
    with pytest.raises(TesseraError, match="does not exist"):
        load_module(tmp_path / "missing.so")
    plain = compile_source("int plain(void) { return 1; }\n")
    with pytest.raises(TesseraError, match="not a tessera module"):
        load_module(plain)
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an ELF file")
    with pytest.raises(TesseraError, match="cannot load"):
        load_module(junk)
    bad_meta = compile_source('const char tessera_metadata[] = "{\\"version\\": 1}";\n')
    with pytest.raises(TesseraError, match="unreadable tessera_metadata"):
        load_module(bad_meta)
    future = compile_source('const char tessera_metadata[] = "{\\"version\\": 9, \\"functions\\": []}";\n')
    with pytest.raises(TesseraError, match="version 9"):
        load_module(future)
    missing_entry = compile_source('const char tessera_metadata[] = "{\\"version\\": 1, \\"functions\\": '
                                   '[{\\"name\\": \\"f\\", \\"params\\": []}]}";\n')
    with pytest.raises(TesseraError, match="does not export tessera_call_f"):
        load_module(missing_entry)


def test_several_functions_without_main(cache_dir):
    src = fixture_source().replace('\\"name\\": \\"main\\"', '\\"name\\": \\"add\\", \\"entry\\": \\"tessera_call_main\\"', 1)
    m = Module(compile_source(src))
    with pytest.raises(TesseraError, match="no function 'main' and several others"):
        m(np.zeros(1, np.float32))
    a = np.ones(3, np.float32)
    c = np.zeros(3, np.float32)
    m["add"](a, a, c)
    np.testing.assert_array_equal(c, [2, 2, 2])


def test_concurrent_calls_from_threads(mod):
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(300):
                n = int(rng.integers(1, 64))
                a, b = rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)
                c = nd.empty(n, "float32")
                mod(nd.array(a), b, c)
                if not np.array_equal(c.numpy(), a + b):
                    errors.append("wrong result")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


ASAN_SCRIPT = r"""
import sys, numpy as np
from tessera.runtime import Module
from tessera.runtime.c_compiler import compile_source
from tessera.codegen.c_entry import C_HEADER
src = open(sys.argv[1]).read().replace("/*TESSERA_ABI_HEADER*/", C_HEADER)
m = Module(compile_source(src, "c -sanitize=address"))
a = np.ones(5, np.float32); c = np.zeros(5, np.float32)
m(a, a, c); assert (c == 2).all(); print("CALL OK", flush=True)
bad = "#include <stdint.h>\n" + C_HEADER + r'''
int32_t tessera_call_main(void** args, const int32_t* kinds, int32_t num_args, char* err, int32_t err_len) {
  volatile int64_t i = num_args + 4; int32_t buf[4] = {0}; buf[i] = 1; return buf[0];
}
const char tessera_metadata[] = "{\"version\": 1, \"functions\": [{\"name\": \"main\", \"params\": []}]}";
'''
Module(compile_source(bad, "c -sanitize=address"))()
"""


def test_address_sanitizer_modules(mod, cache_dir, tmp_path):
    if not hasattr(ctypes.CDLL(None), "__asan_init"):
        asan_so = compile_source(fixture_source(), "c -sanitize=address")
        with pytest.raises(TesseraError, match="LD_PRELOAD="):
            Module(asan_so)                          # refused instead of aborting the process
    try:
        runtime = asan_runtime()
    except TesseraError:
        pytest.skip("the C compiler has no AddressSanitizer runtime")
    script = tmp_path / "asan_check.py"
    script.write_text(ASAN_SCRIPT)
    env = dict(os.environ, LD_PRELOAD=runtime, ASAN_OPTIONS="detect_leaks=0",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(script), str(HERE / "abi_kernels.c")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert "CALL OK" in proc.stdout, proc.stderr[-2000:]
    assert proc.returncode != 0 and "stack-buffer-overflow" in proc.stderr
