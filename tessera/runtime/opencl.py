"""The OpenCL runtime: device arrays and kernel launch through pyopencl (docs/gpu.md).

An OpenCL artifact is a JSON file holding the OpenCL C source and, per function, its parameters,
workspaces and kernels (launch grid, work-group size, shared bytes, arguments), as
codegen.gpu.render_gpu_module returns them. `OpenCLModule(path)` builds the program for the
device (any OpenCL device, CPU ones included: PoCL runs the tests), checks every kernel against
the device's limits (threads per work-group, local memory) and is called like a C Module, with
numpy arrays, NDArrays or `DeviceArray`s: host arrays are copied in, the kernels run in order,
written parameters are copied back. Timing uses OpenCL profiling events (device time of the
kernels of one call), not a clock around Python.
"""
from __future__ import annotations

import json
import threading

import numpy as np

from ..errors import BuildError, DTypeError, ShapeError, TesseraError
from ..ir.dtype import DataType, numpy_dtype
from ..target import Target
from . import cache
from .gpu import GPUModuleBase, timed_repeats
from .module import BenchmarkResult, check_timing
from .ndarray import NDArray

try:  # optional dependency (the "opencl" extra)
    import pyopencl as cl
except ImportError:  # pragma: no cover - depends on the environment
    cl = None

_STATE = {}
_LOCK = threading.Lock()


def available() -> bool:
    """Whether pyopencl is installed and some OpenCL platform has a device."""
    if cl is None:
        return False
    try:
        return any(p.get_devices() for p in cl.get_platforms())
    except cl.Error:
        return False


_USABLE = []


def usable() -> tuple:
    """(True, "") when a trivial kernel builds and runs on the default OpenCL device, else (False,
    why): PoCL cannot compile on CPUs its LLVM does not know ("unknown target CPU 'generic'")."""
    if not _USABLE:
        if not available():
            _USABLE.append((False, "pyopencl or an OpenCL device is missing"))
        else:
            try:
                ctx, queue, _ = context()
                prog = cl.Program(ctx, "__kernel void tsr_probe(__global int* a) { a[0] = 7; }").build()
                out = np.zeros(1, np.int32)
                buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4)
                prog.tsr_probe(queue, (1,), None, buf)
                cl.enqueue_copy(queue, out, buf)
                ok = int(out[0]) == 7
                _USABLE.append((ok, "" if ok else "the probe kernel gave a wrong result"))
            except cl.Error as e:
                lines = [x for x in str(e).splitlines() if "error" in x.lower()]
                _USABLE.append((False, "the OpenCL device cannot build kernels: " + (lines[-1] if lines else str(e))))
    return _USABLE[0]


def _builds(dev) -> bool:
    """Whether a trivial kernel compiles for dev."""
    try:
        cl.Program(cl.Context([dev]), "__kernel void tsr_probe(__global int* a) { a[0] = 7; }").build()
        return True
    except cl.Error:
        return False


def _need_cl():
    if cl is None:
        raise TesseraError("the OpenCL runtime needs pyopencl and an OpenCL platform "
                           "(pip install 'tessera[opencl]': pyopencl and pocl-binary-distribution)")


def context(device: str | None = None):
    """(context, queue, device) of the OpenCL device whose name contains `device` (the first
    device of the first platform with one when None), made once per process."""
    _need_cl()
    key = device or ""
    with _LOCK:
        hit = _STATE.get(key)
        if hit is not None:
            return hit
        try:
            devices = [d for p in cl.get_platforms() for d in p.get_devices()]
        except cl.Error as e:
            raise TesseraError(f"no OpenCL platform is usable ({e})") from e
        if device:
            devices = [d for d in devices if device.lower() in d.name.lower()]
        if not devices:
            raise TesseraError("no OpenCL device" + (f" whose name contains {device!r}" if device else "")
                               + " was found")
        # the first device that can build a kernel: a machine may have two PoCLs (pip's and the
        # distribution's), and one whose LLVM does not know the CPU builds nothing
        dev = next((d for d in devices if _builds(d)), devices[0])
        ctx = cl.Context([dev])
        queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        _STATE[key] = (ctx, queue, dev)
        return _STATE[key]


class DeviceArray:
    """A tensor in OpenCL device memory: shape, dtype and a cl.Buffer (`tessera.nd.array(x, device="opencl")`)."""

    __slots__ = ("shape", "dtype", "np_dtype", "buffer", "queue", "__weakref__")

    def __init__(self, shape, dtype, device: str | None = None):
        ctx, queue, _ = context(device)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = DataType(dtype)
        self.np_dtype = numpy_dtype(self.dtype)
        self.queue = queue
        nbytes = max(1, int(np.prod(self.shape, dtype=np.int64)) * self.np_dtype.itemsize)
        self.buffer = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def device(self) -> str:
        return "opencl"

    def copyfrom(self, source) -> "DeviceArray":
        """Copy a host array (numpy, NDArray, list) of the same shape in."""
        src = np.ascontiguousarray(np.asarray(source.numpy() if isinstance(source, NDArray) else source,
                                              dtype=self.np_dtype))
        if src.shape != self.shape:
            raise ShapeError(f"copyfrom: source shape {src.shape} differs from the device array's {self.shape}")
        if src.size:
            cl.enqueue_copy(self.queue, self.buffer, src)
        return self

    def numpy(self) -> np.ndarray:
        """A host copy of the data."""
        out = np.empty(self.shape, self.np_dtype)
        if out.size:
            cl.enqueue_copy(self.queue, out, self.buffer)
        return out

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __dlpack__(self, *args, **kwargs):
        raise TesseraError("an OpenCL DeviceArray cannot be exported through DLPack (DLPack consumers do not "
                           "read OpenCL buffers); take a host copy with .numpy()")

    def __repr__(self):
        return f"<tessera.DeviceArray opencl shape={self.shape}, {self.dtype}>"


def array(obj, dtype=None, device: str | None = None) -> DeviceArray:
    """A DeviceArray holding a copy of obj (numpy array, NDArray, nested list)."""
    src = np.asarray(obj.numpy() if isinstance(obj, (NDArray, DeviceArray)) else obj,
                     dtype=None if dtype is None else numpy_dtype(DataType(dtype)))
    out = DeviceArray(src.shape, str(DataType(src.dtype.name)) if dtype is None else dtype, device)
    return out.copyfrom(src)


def empty(shape, dtype="float32", device: str | None = None) -> DeviceArray:
    return DeviceArray(shape, dtype, device)


def write_artifact(path: str, source: str, functions: list, target: str):
    """The JSON artifact of an OpenCL build (written by the backend's compile step)."""
    doc = {"version": 1, "kind": "opencl", "target": target, "source": source, "functions": functions}
    with open(path, "w") as f:
        json.dump(doc, f)


_PROGRAMS: dict = {}


def build_program(source: str, device: str | None = None, path: str = "<opencl source>"):
    """The pyopencl Program of source, built for the device once per process (a BuildError with
    the build log)."""
    ctx, _, _ = context(device)
    key = (device or "", source)
    prog = _PROGRAMS.get(key)
    if prog is None:
        try:
            prog = cl.Program(ctx, source).build(options=["-cl-std=CL1.2"])
        except cl.RuntimeError as e:
            raise BuildError("the OpenCL compiler rejected the generated kernels", path, str(e)) from e
        with _LOCK:
            prog = _PROGRAMS.setdefault(key, prog)
    return prog


class OpenCLFunction:
    """One function of an OpenCL module: its kernels launched in order over device buffers."""

    def __init__(self, module, meta: dict):
        self.module, self.meta, self.name = module, meta, meta["name"]
        self.params = meta["params"]
        prog, dev = module.program, module.device
        self.kernels = []
        for k in meta["kernels"]:
            kern = cl.Kernel(prog, k["name"])
            _check_limits(self.name, k, kern, dev)
            size = (k["grid"][0] * k["block"][0], k["grid"][1] * k["block"][1], k["grid"][2] * k["block"][2])
            self.kernels.append((kern, k, size, tuple(k["block"])))
        self.np_dtypes = [numpy_dtype(DataType(p["dtype"])) for p in self.params]

    def _device_args(self, args):
        if len(args) != len(self.params):
            raise TesseraError(f"{self.name} takes {len(self.params)} arguments "
                               f"({', '.join(p['name'] for p in self.params)}), got {len(args)}")
        ctx, queue = self.module.ctx, self.module.queue
        bufs, copies = [], []
        written = set(self.meta["writes"])
        for i, (p, x) in enumerate(zip(self.params, args)):
            npd = self.np_dtypes[i]
            if p["kind"] == "scalar":
                bufs.append(npd.type(x))
                continue
            shape = tuple(p["shape"])
            if isinstance(x, DeviceArray):
                if x.shape != shape:
                    raise ShapeError(f"{self.name}: argument {p['name']} has shape {x.shape}, expected {shape}")
                if x.np_dtype != npd:
                    raise DTypeError(f"{self.name}: argument {p['name']} has dtype {x.dtype}, expected {p['dtype']}")
                bufs.append(x.buffer)
                continue
            host = x.numpy() if isinstance(x, NDArray) else x
            if not isinstance(host, np.ndarray):
                raise TesseraError(f"{self.name}: argument {p['name']} must be a numpy array, an NDArray or a "
                                   f"DeviceArray, got {type(x).__name__}")
            if host.shape != shape:
                raise ShapeError(f"{self.name}: argument {p['name']} has shape {host.shape}, expected {shape}")
            if host.dtype != npd:
                raise DTypeError(f"{self.name}: argument {p['name']} has dtype {host.dtype}, expected {p['dtype']}")
            nbytes = max(1, host.nbytes)
            if host.size and i not in written:
                buf = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                                hostbuf=np.ascontiguousarray(host))
            else:
                buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
                if host.size:
                    cl.enqueue_copy(queue, buf, np.ascontiguousarray(host))
            bufs.append(buf)
            if i in written:
                copies.append((host, buf))
        work = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE,
                          max(1, w["count"] * numpy_dtype(DataType(w["dtype"])).itemsize))
                for w in self.meta["workspaces"]]
        return bufs, work, copies

    def _launch(self, bufs, work):
        queue, events = self.module.queue, []
        for kern, k, size, local in self.kernels:
            kargs = [bufs[i] if kind == "param" else work[i] for kind, i in k["args"]]
            try:
                kern.set_args(*kargs)
                events.append(cl.enqueue_nd_range_kernel(queue, kern, size, local))
            except cl.Error as e:
                raise TesseraError(f"{self.name}: launching kernel {k['name']} (grid {tuple(k['grid'])}, "
                                   f"work-group {tuple(k['block'])}) failed: {e}") from e
        return events

    def __call__(self, *args):
        bufs, work, copies = self._device_args(args)
        self._launch(bufs, work)
        for host, buf in copies:
            if host.size:
                if host.flags.c_contiguous:
                    cl.enqueue_copy(self.module.queue, host, buf)
                else:
                    tmp = np.empty_like(host, order="C")
                    cl.enqueue_copy(self.module.queue, tmp, buf)
                    host[...] = tmp
        self.module.queue.finish()

    def time(self, args, number=10, repeat=3, min_repeat_ms=0) -> BenchmarkResult:
        """Seconds per call, one figure per repeat: device time from the first kernel's start to
        the last one's end (OpenCL profiling events), averaged over `number` calls (more where a
        repeat would take less than min_repeat_ms)."""
        check_timing(number, repeat, min_repeat_ms)
        bufs, work, _ = self._device_args(args)
        self._launch(bufs, work)
        self.module.queue.finish()

        def measure(n):
            total = 0
            for _ in range(n):
                ev = self._launch(bufs, work)
                ev[-1].wait()
                total += ev[-1].profile.end - ev[0].profile.start
            return total * 1e-9
        return timed_repeats(measure, number, repeat, min_repeat_ms)


def _check_limits(fname, k, kern, dev):
    threads = k["block"][0] * k["block"][1] * k["block"][2]
    limit = dev.max_work_group_size
    try:
        limit = min(limit, kern.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, dev))
    except cl.Error:
        pass
    if threads > limit:
        raise TesseraError(f"{fname}: kernel {k['name']} has {threads} threads per work-group "
                           f"(threadIdx extents {tuple(k['block'])}); the OpenCL device {dev.name.strip()!r} allows at "
                           f"most {limit}: split the thread-bound loops smaller")
    for d, (n, m) in enumerate(zip(k["block"], dev.max_work_item_sizes)):
        if n > m:
            raise TesseraError(f"{fname}: kernel {k['name']} binds {n} threads to threadIdx.{'xyz'[d]}; the OpenCL "
                               f"device {dev.name.strip()!r} allows at most {m} in that dimension")
    if k["shared_bytes"] > dev.local_mem_size:
        raise TesseraError(f"{fname}: kernel {k['name']} declares {k['shared_bytes']} bytes of shared (__local) "
                           f"memory; the OpenCL device {dev.name.strip()!r} has {dev.local_mem_size}: use smaller "
                           f"shared tiles")


class OpenCLModule(GPUModuleBase):
    """A built OpenCL artifact: call it like a C Module (numpy arrays, NDArrays, DeviceArrays)."""

    def __init__(self, path: str):
        _need_cl()
        cache.check_before_load(path)   # from the kernel cache: verified before its kernels are built and run
        with open(path) as f:
            doc = json.load(f)
        if doc.get("kind") != "opencl":
            raise TesseraError(f"{path} is not an OpenCL artifact of tessera")
        self.path = path
        self.source = doc["source"]
        self.target = doc["target"]
        device = Target(self.target).attrs.get("device")
        self.ctx, self.queue, self.device = context(device)
        self.program = build_program(self.source, device, path)
        self.functions = {m["name"]: OpenCLFunction(self, m) for m in doc["functions"]}

    def __repr__(self):
        return f"<tessera.OpenCLModule {', '.join(self.functions)} on {self.device.name.strip()!r}>"


__all__ = ["DeviceArray", "OpenCLModule", "OpenCLFunction", "array", "available", "build_program", "context",
           "empty", "usable", "write_artifact"]
