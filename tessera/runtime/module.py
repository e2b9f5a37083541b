"""Module: a compiled shared library loaded with ctypes, callable like a Python function.

The library follows the ABI of tessera/abi.py: per function `NAME` an entry
`tessera_call_NAME` (checks its arguments, runs the kernel) and a timer `tessera_time_NAME`, plus
the `tessera_metadata` JSON naming the functions and their parameters, and `tessera_source`.

The call path is kept short: per function the ctypes entry point, the argument-pointer array
and the error buffer are made once; an NDArray contributes its cached ABI struct, a numpy array
a fresh struct that points at numpy's own data and shape (no copies), a scalar a boxed
int64/double. Calls from several threads at once are safe: a call that finds the shared argument
array busy builds its own.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import shutil
import statistics
import tempfile
import threading

import numpy as np

from .. import abi
from ..errors import DTypeError, ShapeError, TesseraError
from ..ir.dtype import DataType
from ..target import check_cpu_features
from ..toolchain import asan_runtime
from . import cache
from . import openmp, pool
from .ndarray import NDArray, DTYPE_INFO, dtype_info, from_dlpack

ERR_LEN = 1024
# the error class for each nonzero status a compiled function returns (Module and AotExecutor)
STATUS_ERRORS = {abi.STATUS_ARG_COUNT: TesseraError, abi.STATUS_DTYPE: DTypeError,
                 abi.STATUS_SHAPE: ShapeError, abi.STATUS_STRIDE: ShapeError,
                 abi.STATUS_RUNTIME: TesseraError, abi.STATUS_OVERLAP: TesseraError}


class CTensor(ctypes.Structure):
    """tessera_tensor_t with untyped pointers, so a struct is built from plain ints in one call."""

    _fields_ = [("data", ctypes.c_void_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


if ctypes.sizeof(CTensor) != ctypes.sizeof(abi.TesseraTensor):  # pragma: no cover - layout guard
    raise ImportError("tessera runtime: CTensor no longer mirrors abi.TesseraTensor")

# the pointer-sized word at an address (numpy's array struct fields; the executors' fast paths)
pointer_at = ctypes.c_void_p.from_address
_addressof = ctypes.addressof


def _numpy_fields_usable() -> bool:
    """Whether numpy's PyArrayObject keeps `data` at +16 and `dimensions` (int64) at +32.

    That layout is numpy's public C ABI (PyArrayObject_fields); reading it directly costs ~0.1 µs
    where `arr.ctypes.data` costs over 1 µs. Checked once here; the slow way is the fallback.
    """
    if np.dtype(np.intp).itemsize != 8 or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    try:
        for a in (np.zeros((3, 5), np.float32), np.zeros((4, 6, 2))[1:, ::2], np.zeros(7, np.int8)):
            if pointer_at(id(a) + 16).value != a.ctypes.data:
                return False
            dims = (ctypes.c_int64 * a.ndim).from_address(pointer_at(id(a) + 32).value)
            if tuple(dims) != a.shape:
                return False
    except Exception:  # pragma: no cover - exotic interpreters
        return False
    return True


# whether pointer_at may read numpy arrays' data/shape directly (checked once; executors share it)
FAST_NUMPY = _numpy_fields_usable()


class BenchmarkResult:
    """Times measured inside the module: `.results` holds seconds per call, one entry per repeat."""

    __slots__ = ("results",)

    def __init__(self, results):
        self.results = tuple(float(r) for r in results)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results)

    def __repr__(self):
        ms = [v * 1e3 for v in (self.mean, self.median, self.max, self.min, self.std)]
        return ("Execution time summary:\n mean (ms)   median (ms)    max (ms)     min (ms)     std (ms)\n"
                + "".join(f"{v:>12.6f} " for v in ms))


class Function:
    """One compiled function of a Module; call it with NDArrays, numpy arrays and scalars."""

    __slots__ = ("module", "name", "params", "_n", "_entry", "_timer", "_kinds", "_slots", "_err",
                 "_lock", "_is_tensor", "_direct", "_written", "_convert", "__weakref__")

    def __init__(self, module, lib, info: dict):
        where = f"module {module.path}: function {info.get('name')!r}"
        self.module, self.name = module, info["name"]
        self.params = tuple(info["params"])
        self._n = len(self.params)
        self._entry = _symbol(lib, info.get("entry") or f"tessera_call_{self.name}", where)
        timer = info.get("timer") or f"tessera_time_{self.name}"
        self._timer = _symbol(lib, timer, where) if _has_symbol(lib, timer) else None
        kinds, convert, is_tensor = [], [], []
        for p in self.params:
            pname = p.get("name", "?")
            if p.get("kind") == "tensor":
                kinds.append(abi.KIND_TENSOR)
                convert.append(self._tensor_arg)
                is_tensor.append(True)
                continue
            if p.get("kind") != "scalar":
                raise TesseraError(f"{where}: parameter {pname!r} has unknown kind {p.get('kind')!r}")
            try:
                dt = DataType(p.get("dtype"))
            except TesseraError as e:
                raise TesseraError(f"{where}: parameter {pname!r}: {e}") from None
            if dt.is_float() and dt.lanes == 1:
                kinds.append(abi.KIND_FLOAT)
                convert.append(self._float_arg)
            elif (dt.is_integer() or dt.is_bool()) and dt.lanes == 1:
                kinds.append(abi.KIND_INT)
                convert.append(self._int_arg)
            else:
                raise TesseraError(f"{where}: scalar parameter {pname!r} has unsupported dtype {dt}")
            is_tensor.append(False)
        # the tensor parameters the function writes (metadata "writes"; a library from before it: none
        # known): their arguments must be writeable, and the entry refuses one that overlaps another
        writes = info.get("writes", [])
        if not isinstance(writes, list) or not all(type(i) is int and 0 <= i < self._n and is_tensor[i]
                                                   for i in writes):
            raise TesseraError(f"{where}: 'writes' must list tensor parameters by index, got {writes!r}")
        self._written = tuple(i in writes for i in range(self._n))
        n = max(self._n, 1)
        self._kinds = (ctypes.c_int32 * n)(*kinds)
        self._slots = (ctypes.c_void_p * n)()
        self._err = ctypes.create_string_buffer(ERR_LEN)
        self._lock = threading.Lock()
        self._is_tensor = tuple(is_tensor)
        # per parameter, how an NDArray argument passes: 0 converted (a scalar parameter), 1 its ABI
        # struct as it is, 2 the same once its memory is found writeable (the function writes it)
        self._direct = tuple(2 if w else 1 if t else 0 for t, w in zip(is_tensor, self._written))
        self._convert = tuple(convert)

    # ------------------------------------------------------------------ calling
    def __call__(self, *args):
        if len(args) != self._n:
            raise self._count_error(len(args))
        if not self._lock.acquire(False):      # another thread is inside: use private buffers
            return self._call_private(args)
        try:
            slots, keep, i = self._slots, [], 0
            for x in args:
                d = self._direct[i]
                if type(x) is NDArray and d:
                    if d == 2 and not x._arr.flags.writeable:
                        raise self._read_only_error(i, x)
                    slots[i] = x._addr
                else:
                    slots[i] = self._convert[i](i, x, keep)
                i += 1
            rc = self._entry(slots, self._kinds, self._n, self._err, ERR_LEN)
            if rc:
                raise self._status_error(rc, self._err)
        finally:
            self._lock.release()

    def _call_private(self, args):
        slots, keep = self._pack(args)
        err = ctypes.create_string_buffer(ERR_LEN)
        rc = self._entry(slots, self._kinds, self._n, err, ERR_LEN)
        if rc:
            raise self._status_error(rc, err)

    def _pack(self, args):
        """A fresh argument array for `args` and the objects that must live until the call returns."""
        if len(args) != self._n:
            raise self._count_error(len(args))
        slots, keep = (ctypes.c_void_p * max(self._n, 1))(), []
        for i, x in enumerate(args):
            slots[i] = self._convert[i](i, x, keep)
        return slots, keep

    def time(self, args, number=10, repeat=3, min_repeat_ms=0) -> BenchmarkResult:
        """Run the module's C timer loop on `args`: `repeat` rounds of at least `number` calls."""
        check_timing(number, repeat, min_repeat_ms)
        if self._timer is None:
            raise TesseraError(f"function {self.name!r} of {self.module.path} has no timer export")
        slots, keep = self._pack(args)
        results = (ctypes.c_double * repeat)()
        err = ctypes.create_string_buffer(ERR_LEN)
        rc = self._timer(slots, self._kinds, self._n, int(number), int(repeat), int(min_repeat_ms),
                         results, err, ERR_LEN)
        if rc:
            raise self._status_error(rc, err)
        return BenchmarkResult(results)

    # ------------------------------------------------------------------ argument conversion
    def _tensor_arg(self, i, x, keep):
        if isinstance(x, np.ndarray):
            info = DTYPE_INFO.get(x.dtype)
            if info is None:
                try:
                    info = dtype_info(x.dtype)
                except TesseraError as e:
                    raise DTypeError(f"{self.name}: argument {self._pname(i)}: {e}") from None
            nd = x.ndim
            if FAST_NUMPY:
                xid = id(x)
                data, shape = pointer_at(xid + 16).value, pointer_at(xid + 32).value
            else:
                shape_c = (ctypes.c_int64 * max(nd, 1))(*x.shape)
                keep.append(shape_c)
                data, shape = x.ctypes.data, _addressof(shape_c)
            flags = x.flags
            if not flags.writeable and self._written[i]:
                raise self._read_only_error(i, x)
            strides = None
            if not flags.c_contiguous:
                item = x.itemsize
                if any(s % item for s in x.strides):
                    raise ShapeError(f"{self.name}: argument {self._pname(i)}: strides {x.strides} (bytes) "
                                     f"are not a multiple of the element size {item}")
                strides_c = (ctypes.c_int64 * nd)(*(s // item for s in x.strides))
                keep.append(strides_c)
                strides = _addressof(strides_c)
            t = CTensor(data, shape, strides, nd, info[1], info[2], 1)
            keep.append(t)
            return _addressof(t)
        if not isinstance(x, NDArray) and hasattr(x, "__dlpack__"):
            x = from_dlpack(x)
            keep.append(x)
        if isinstance(x, NDArray):
            if self._written[i] and not x._arr.flags.writeable:
                raise self._read_only_error(i, x)
            return x._addr
        raise TesseraError(f"{self.name}: argument {self._pname(i)} is a tensor parameter; got "
                           f"{type(x).__name__} (pass a tessera NDArray, a numpy array or a DLPack tensor)")

    def _read_only_error(self, i, x) -> TesseraError:
        """A tensor argument the function writes whose memory is read-only: a write would fault, or
        change a bytes object or a file mapped read-only."""
        return TesseraError(f"{self.name}: argument {self._pname(i)} is written by the function, but the "
                            f"{type(x).__name__} passed is read-only (a read-only array, memory map or bytes "
                            f"buffer); pass a writeable array")

    def _scalar_value(self, i, x):
        if isinstance(x, np.ndarray) and x.ndim == 0:
            x = x[()]
        if isinstance(x, (int, float, np.integer, np.floating, np.bool_)):
            return x
        raise TesseraError(f"{self.name}: argument {self._pname(i)} is a scalar parameter "
                           f"({self.params[i].get('dtype')}); got {type(x).__name__}")

    def _int_arg(self, i, x, keep):
        x = self._scalar_value(i, x)
        if isinstance(x, (float, np.floating)):
            raise DTypeError(f"{self.name}: argument {self._pname(i)} is {self.params[i]['dtype']}; "
                             f"got the float {x!r}")
        lo, hi = _int_range(self.params[i]["dtype"])
        v = int(x)
        if not lo <= v <= hi:
            raise TesseraError(f"{self.name}: argument {self._pname(i)}: {v} does not fit "
                               f"{self.params[i]['dtype']}")
        box = ctypes.c_int64(v)
        keep.append(box)
        return _addressof(box)

    def _float_arg(self, i, x, keep):
        box = ctypes.c_double(float(self._scalar_value(i, x)))
        keep.append(box)
        return _addressof(box)

    # ------------------------------------------------------------------ errors
    def _pname(self, i) -> str:
        return repr(self.params[i].get("name", f"#{i}"))

    def _count_error(self, got) -> TesseraError:
        names = ", ".join(str(p.get("name")) for p in self.params)
        return TesseraError(f"{self.name} expects {self._n} arguments ({names}), got {got}")

    def _status_error(self, rc, err) -> TesseraError:
        text = err.value.decode("utf-8", "replace") or "(no message)"
        cls = STATUS_ERRORS.get(rc)
        if cls is None:
            return TesseraError(f"{self.name}: unknown status {rc}: {text}")
        return cls(f"{self.name}: {text}")

    def __repr__(self):
        sig = ", ".join(f"{p.get('name')}: {p.get('dtype')}" + (str(p.get("shape")) if p.get("kind") == "tensor" else "")
                        for p in self.params)
        return f"<tessera.Function {self.name}({sig})>"


class Module:
    """A compiled tessera library: `mod(*args)` runs "main" (or the only function)."""

    def __init__(self, path):
        path = os.path.abspath(os.fspath(path))
        if not os.path.isfile(path):
            raise TesseraError(f"module file {path} does not exist")
        self.path = path
        lib = _dlopen(path)
        text = read_cstring(lib, "tessera_metadata")
        if text is None:
            raise TesseraError(f"{path} is not a tessera module (it has no tessera_metadata)")
        try:
            meta = json.loads(text)
            funcs = meta["functions"]
            if not isinstance(funcs, list) or not all(isinstance(f, dict) and isinstance(f.get("name"), str)
                                                      and isinstance(f.get("params"), list) for f in funcs):
                raise ValueError("'functions' must be a list of {name, params} objects")
        except (ValueError, KeyError, TypeError) as e:
            raise TesseraError(f"{path}: unreadable tessera_metadata: {e}") from None
        if meta.get("version") != 1:
            raise TesseraError(f"{path}: metadata version {meta.get('version')!r}; this runtime reads version 1")
        _check_cpu(meta, path)
        self._lib = lib
        self.metadata = meta
        self._functions = {f["name"]: Function(self, lib, f) for f in funcs}
        main = self._functions.get("main")
        if main is None and len(self._functions) == 1:
            main = next(iter(self._functions.values()))
        self._main = main

    @property
    def entry_name(self):
        """Name of the function `mod(...)` calls, or None when there is no main and several functions."""
        return self._main.name if self._main else None

    @property
    def function_names(self) -> list:
        return list(self._functions)

    def __call__(self, *args):
        main = self._main
        if main is None:
            raise TesseraError(f"module {self.path} has no function 'main' and several others "
                               f"({', '.join(self._functions)}); use mod['name'](...)")
        return main(*args)

    def get_function(self, name: str) -> Function:
        f = self._functions.get(name)
        if f is None:
            if name == "main" and self._main is not None:
                return self._main
            raise TesseraError(f"module {self.path} has no function {name!r}; it has: "
                               f"{', '.join(self._functions) or 'none'}")
        return f

    __getitem__ = get_function

    def __contains__(self, name):
        return name in self._functions

    def get_source(self, fmt: str = "c") -> str:
        """The C source the library was built from (embedded in the library itself)."""
        if fmt not in ("c", ""):
            raise TesseraError(f"get_source: only the C source is kept, not {fmt!r}")
        text = read_cstring(self._lib, "tessera_source")
        if text is None:
            beside = os.path.splitext(self.path)[0] + ".c"
            if os.path.isfile(beside):
                with open(beside, encoding="utf-8") as f:
                    return f.read()
            raise TesseraError(f"module {self.path} carries no source (no tessera_source, no .c beside it)")
        return text

    def time_evaluator(self, func_name: str = "main", number: int = 10, repeat: int = 3,
                       min_repeat_ms: int = 0):
        """A callable f(*args) -> BenchmarkResult that times `func_name` inside the module (C timer)."""
        func = self.get_function(func_name)
        check_timing(number, repeat, min_repeat_ms)

        def evaluator(*args) -> BenchmarkResult:
            return func.time(args, number, repeat, min_repeat_ms)

        return evaluator

    def export_library(self, path) -> str:
        """Write the self-contained library to `path` (source and metadata travel inside it). Its
        parallel loops call tessera's thread pool, which tessera.runtime.load_module loads first; a
        model for other programs is exported with its executor's export_library (libgomp)."""
        path = os.path.abspath(os.fspath(path))
        if path == self.path:
            return path
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            raise TesseraError(f"export_library: folder {folder} does not exist")
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".so")
        os.close(fd)
        try:
            shutil.copyfile(self.path, tmp)
            os.chmod(tmp, 0o755)
            os.replace(tmp, path)
        except OSError as e:
            _unlink(tmp)
            raise TesseraError(f"export_library: cannot write {path}: {e}") from None
        return path

    def __repr__(self):
        return f"<tessera.Module {os.path.basename(self.path)} functions={list(self._functions)}>"


def _check_cpu(meta: dict, path: str) -> None:
    """Refuse a library whose code needs CPU features this machine lacks (metadata "cpu_features",
    from its target; a library from before the record: not checked) before any of it runs."""
    needed = meta.get("cpu_features", [])
    if not isinstance(needed, list) or not all(isinstance(f, str) for f in needed):
        raise TesseraError(f"{path}: unreadable tessera_metadata: 'cpu_features' must be a list of names, got "
                           f"{needed!r}")
    check_cpu_features(needed, path, str(meta.get("target", "")))


def check_timing(number, repeat, min_repeat_ms):
    """Reject bad time_evaluator arguments (TesseraError); Module's and AotExecutor's timers share it."""
    for label, v, low in (("number", number, 1), ("repeat", repeat, 1), ("min_repeat_ms", min_repeat_ms, 0)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not low <= v < 2**31:
            raise TesseraError(f"time_evaluator: {label} must be an int >= {low}, got {v!r}")


_RANGES: dict = {}


def _int_range(dtype: str) -> tuple:
    """Smallest and largest value of an integer (or bool) scalar dtype."""
    r = _RANGES.get(dtype)
    if r is None:
        dt = DataType(dtype)
        r = (0, 1) if dt.is_bool() else (int(np.iinfo(dt.numpy()).min), int(np.iinfo(dt.numpy()).max))
        _RANGES[dtype] = r
    return r


# ---------------------------------------------------------------------- loading helpers
_LOADED: dict = {}   # path -> (dev, inode, size, mtime) of the file dlopen saw under that name
_LOAD_LOCK = threading.Lock()


def _dlopen(path: str) -> ctypes.CDLL:
    """dlopen `path`; a file replaced since an earlier load goes through a private copy. A library of
    the kernel cache is checked first (its owner, mode and integrity record: runtime/cache.py), so
    that nothing of a damaged or planted one runs (its constructors run at dlopen).

    The dynamic loader returns the already-loaded library for a name it has seen, even when the
    file under that name has changed, so a re-exported module would silently run the old code.
    """
    cache.check_before_load(path)
    needs = _needs(path)
    _check_sanitizer(path, needs)
    if "libgomp" in needs:
        openmp.configure()            # libgomp's wait policy is read when it loads: set before it loads
    if "pool" in needs:
        pool.load(needs["pool"])      # the thread pool the library calls (its symbols resolve at dlopen)
    st = os.stat(path)
    sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _LOAD_LOCK:
        prev = _LOADED.setdefault(path, sig)
        try:
            if prev == sig:
                return ctypes.CDLL(path)
            fd, tmp = tempfile.mkstemp(prefix="tessera-", suffix=".so")
            os.close(fd)
            try:
                shutil.copyfile(path, tmp)
                return ctypes.CDLL(tmp)
            finally:
                _unlink(tmp)
        except OSError as e:
            raise TesseraError(f"cannot load {path} as a shared library: {e}") from None


def _needs(path: str) -> dict:
    """What the library at `path` needs before it loads, from its bytes: "asan" (an ASan build: its
    dynamic strings name libasan.so), "libgomp" (it links gcc's OpenMP, whose wait runtime/openmp.py
    sets first) and "pool" (the path of tessera's thread pool library, which a library calling the pool
    names after pool.POOL_MARK). Each is one memchr-speed search: an AOT library may hold 100 MB of
    weights."""
    found: dict = {}
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m.find(b"libasan.so") >= 0:
                found["asan"] = True
            if m.find(b"libgomp.so") >= 0:
                found["libgomp"] = True
            at = m.find(pool.POOL_MARK)
            if at >= 0:
                start = at + len(pool.POOL_MARK)
                end = m.find(b"\0", start, start + 4097)
                if end > start:
                    found["pool"] = os.fsdecode(m[start:end])
    except (OSError, ValueError):
        pass
    return found


def _check_sanitizer(path: str, needs: dict):
    """Refuse (instead of letting the process abort) an ASan module when ASan is not preloaded."""
    if "asan" in needs and not hasattr(ctypes.CDLL(None), "__asan_init"):
        try:
            lib = asan_runtime()
        except TesseraError:
            lib = "<path of libasan.so>"
        raise TesseraError(f"{path} was built with -sanitize=address; AddressSanitizer must be loaded "
                           f"first: run Python as LD_PRELOAD={lib} ASAN_OPTIONS=detect_leaks=0 python ...")


def _has_symbol(lib, name) -> bool:
    try:
        getattr(lib, name)
        return True
    except AttributeError:
        return False


def _symbol(lib, name, where):
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise TesseraError(f"{where}: the library does not export {name}") from None
    fn.restype = ctypes.c_int32
    return fn


def read_cstring(lib, name):
    """The NUL-terminated C string exported as `name` by `lib`, or None; libraries' metadata readers use it."""
    try:
        sym = ctypes.c_char.in_dll(lib, name)
    except ValueError:
        return None
    return ctypes.string_at(ctypes.addressof(sym)).decode("utf-8", "replace")


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass
