"""Shared helpers for the codegen tests: compile generated C with gcc and call it through the ABI."""
import ctypes
import json
import shutil
import subprocess

import numpy as np
import pytest

from tessera import abi
from tessera.ir.dtype import dtype_of_numpy

GCC_FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11"]
WARNING_FLAGS = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror"]


class Compiled:
    """A generated translation unit compiled into a shared library, called like the runtime will."""

    def __init__(self, path, source):
        self.path, self.source = path, source
        self.lib = ctypes.CDLL(str(path))
        first = ctypes.c_char.in_dll(self.lib, "tessera_metadata")
        self.metadata = json.loads(ctypes.string_at(ctypes.addressof(first)).decode())

    def _pack(self, args):
        keep, ptrs, kinds = [], [], []
        for a in args:
            if isinstance(a, np.ndarray):
                dt = dtype_of_numpy(a.dtype)
                shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
                strides = None
                if not a.flags.c_contiguous:
                    strides = (ctypes.c_int64 * a.ndim)(*[s // a.itemsize for s in a.strides])
                t = abi.TesseraTensor(a.ctypes.data, shape, strides, a.ndim, abi.DTYPE_CODE[dt.code],
                                      8 if dt == "bool" else dt.bits, 1)
                keep += [a, shape, strides, t]
                ptrs.append(ctypes.cast(ctypes.pointer(t), ctypes.c_void_p))
                kinds.append(abi.KIND_TENSOR)
            elif isinstance(a, tuple) and a[0] == "tensor":  # a hand-made tensor struct
                t = a[1]
                keep.append(t)
                ptrs.append(ctypes.cast(ctypes.pointer(t), ctypes.c_void_p))
                kinds.append(abi.KIND_TENSOR)
            elif isinstance(a, (bool, int, np.integer)):
                v = ctypes.c_int64(int(a))
                keep.append(v)
                ptrs.append(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p))
                kinds.append(abi.KIND_INT)
            else:
                v = ctypes.c_double(float(a))
                keep.append(v)
                ptrs.append(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p))
                kinds.append(abi.KIND_FLOAT)
        n = len(args)
        return keep, (ctypes.c_void_p * max(n, 1))(*ptrs), (ctypes.c_int32 * max(n, 1))(*kinds), n

    def call(self, *args, name="main"):
        """(status, error message) of tessera_call_NAME(args)."""
        keep, ptrs, kinds, n = self._pack(args)
        err = ctypes.create_string_buffer(512)
        fn = getattr(self.lib, f"tessera_call_{name}")
        fn.restype = ctypes.c_int32
        status = fn(ptrs, kinds, ctypes.c_int32(n), err, ctypes.c_int32(512))
        return status, err.value.decode()

    def run(self, *args, name="main"):
        status, msg = self.call(*args, name=name)
        assert status == 0, msg
        return args

    def time(self, *args, number=3, repeat=2, min_repeat_ms=0, name="main"):
        keep, ptrs, kinds, n = self._pack(args)
        err = ctypes.create_string_buffer(512)
        results = (ctypes.c_double * repeat)()
        fn = getattr(self.lib, f"tessera_time_{name}")
        fn.restype = ctypes.c_int32
        status = fn(ptrs, kinds, ctypes.c_int32(n), ctypes.c_int32(number), ctypes.c_int32(repeat),
                    ctypes.c_int32(min_repeat_ms), results, err, ctypes.c_int32(512))
        return status, err.value.decode(), list(results)


@pytest.fixture
def build(tmp_path):
    """build(source) -> Compiled: gcc with the runtime's flags plus -Wall -Wextra -Werror."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    count = [0]

    def _build(source, extra=(), warnings=True):
        count[0] += 1
        c = tmp_path / f"k{count[0]}.c"
        so = tmp_path / f"k{count[0]}.so"
        c.write_text(source)
        cmd = ["gcc", *GCC_FLAGS, *(WARNING_FLAGS if warnings else []), *extra, str(c), "-o", str(so), "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr.strip(), f"gcc failed:\n{r.stderr}\n--- source ---\n{source}"
        return Compiled(so, source)

    return _build


def make_lowered(params, make_body, name="main", attrs=None):
    """A lowered PrimFunc by hand: make_body(*flat) gets one flat 1-D Buffer per Buffer param
    (the Var params pass through) and returns the body."""
    from tessera.ir import Buffer, PrimFunc

    flat = []
    for p in params:
        if isinstance(p, Buffer):
            size = 1
            for d in p.shape:
                size = size * d
            flat.append(Buffer((size,), p.dtype, p.name))
        else:
            flat.append(None)
    body = make_body(*[f if f is not None else p for f, p in zip(flat, params)])
    return PrimFunc(params, body, attrs={"flat_params": tuple(flat), **(attrs or {})}, name=name)


@pytest.fixture
def lowered():
    """The make_lowered function (fixtures are how tests in this folder share helpers)."""
    return make_lowered


@pytest.fixture
def elementwise(build, lowered):
    """elementwise(fn, in_dtypes, out_dtype, n, lanes) -> run(*arrays) -> output array.

    Builds Out[i] = fn(In0[i], In1[i], ...) as a loop; lanes > 1 makes it vector code (Ramp
    indices, so fn sees vector loads and the IR broadcasts constants)."""
    from tessera.codegen import generate
    from tessera.ir import Buffer, BufferStore, For, Ramp, Var
    from tessera.ir.dtype import numpy_dtype

    def make(fn, in_dtypes, out_dtype, n=64, lanes=1, source=None):
        bufs = [Buffer((n,), dt, f"In{k}") for k, dt in enumerate(in_dtypes)]
        bufs.append(Buffer((n,), out_dtype, "Out"))
        i = Var("i")

        def body(*flat):
            ins, out = flat[:-1], flat[-1]
            idx = i if lanes == 1 else Ramp(i * lanes, 1, lanes)
            return For(i, 0, n // lanes, "serial", BufferStore(out, fn(*[b[idx] for b in ins]), [idx]))

        src = generate(lowered(bufs, body))
        if source is not None:
            source.append(src)
        lib = build(src)

        def run(*arrays):
            out = np.zeros(n, numpy_dtype(out_dtype))
            lib.run(*arrays, out)
            return out
        return run

    return make
