"""The CUDA runtime: nvcc as the compiler driver (cubin for the target's architecture, cached on
disk, ptxas' register and spill report kept) and kernel launch through cupy where an NVIDIA GPU
is present (docs/gpu.md).

A CUDA artifact is a JSON file: the CUDA source, the per-function launch metadata of
codegen.gpu.render_gpu_module, the cubin's path and ptxas' report per kernel
({"registers", "spill_stores", "spill_loads", "smem"}). Loading one needs no GPU; calling it does
(cupy and a device), and says so otherwise.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from ..errors import BuildError, DTypeError, ShapeError, TesseraError
from ..ir.dtype import DataType, numpy_dtype
from . import cache
from .gpu import GPUModuleBase, timed_repeats
from .module import BenchmarkResult, check_timing
from .ndarray import NDArray

_PTXAS = re.compile(r"Compiling entry function '(\w+)'|Used (\d+) registers|(\d+) bytes spill stores, (\d+) bytes "
                    r"spill loads|(\d+) bytes smem")


def nvcc_path() -> str | None:
    """The nvcc on the PATH (or $CUDA_HOME/bin), None without one."""
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    cand = os.path.join(home, "bin", "nvcc") if home else None
    return cand if cand and os.path.exists(cand) else None


def parse_ptxas(text: str) -> dict:
    """kernel -> {"registers", "spill_stores", "spill_loads", "smem"} from `ptxas -v` output."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line) or re.search(r"Function properties for (\w+)", line)
        if m:
            cur = out.setdefault(m.group(1), {"registers": 0, "spill_stores": 0, "spill_loads": 0, "smem": 0})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur["spill_stores"], cur["spill_loads"] = int(m.group(1)), int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["registers"] = int(m.group(1))
        m = re.search(r"(\d+) bytes smem", line)
        if m:
            cur["smem"] = int(m.group(1))
    return out


def compile_cuda(source: str, arch: str, cu_path: str, cubin_path: str) -> dict:
    """nvcc -cubin for arch (e.g. sm_90): writes cu_path and cubin_path; returns ptxas' report."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise BuildError("building for target cuda needs nvcc (the CUDA toolkit) on the PATH", cu_path)
    with open(cu_path, "w") as f:
        f.write(source)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cubin_path), prefix=".tmp-", suffix=".cubin")
    os.close(fd)
    cmd = [nvcc, f"-arch={arch}", "-cubin", "-O3", "-Xptxas", "-v", "-o", tmp, cu_path]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"nvcc failed (exit code {proc.returncode}; command: {' '.join(cmd)})", cu_path,
                             proc.stderr + proc.stdout)
        os.replace(tmp, cubin_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return parse_ptxas(proc.stderr + proc.stdout)


def _cupy():
    try:
        import cupy  # optional: only where an NVIDIA GPU is present
    except ImportError:
        return None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:  # noqa: BLE001 - no driver, no device: both mean "no GPU here"
        return None
    return cupy


def _need_cupy():
    cp = _cupy()
    if cp is None:
        raise TesseraError("CUDA device arrays need an NVIDIA GPU and cupy; none here")
    return cp


def array(obj, dtype=None, device: str | None = None):
    """A cupy array on the GPU (device: its ordinal, default the current one) holding a copy of obj."""
    cp = _need_cupy()
    host = obj.numpy() if isinstance(obj, NDArray) else obj
    with cp.cuda.Device(int(device) if device else cp.cuda.runtime.getDevice()):
        return cp.array(host, dtype=None if dtype is None else numpy_dtype(DataType(dtype)))


def empty(shape, dtype="float32", device: str | None = None):
    cp = _need_cupy()
    with cp.cuda.Device(int(device) if device else cp.cuda.runtime.getDevice()):
        return cp.empty(shape, numpy_dtype(DataType(dtype)))


def from_dlpack(obj):
    """A CUDA tensor of any DLPack producer as a cupy array, without copying."""
    return _need_cupy().from_dlpack(obj)


def available() -> bool:
    """Whether CUDA kernels can run here (cupy and an NVIDIA GPU)."""
    return _cupy() is not None


def is_device_array(x) -> bool:
    """Whether x is a CUDA device array (cupy, or any object exposing the CUDA array interface)."""
    return hasattr(x, "__cuda_array_interface__")


class CUDAFunction:
    """One function of a CUDA module: its kernels launched in order (needs a GPU)."""

    device = "cuda"   # the graph executor keeps this function's values on the GPU (runtime/cuda_runner.py)

    def __init__(self, module, meta):
        self.module, self.meta, self.name, self.params = module, meta, meta["name"], meta["params"]

    def _args(self, cp, args):
        if len(args) != len(self.params):
            raise TesseraError(f"{self.name} takes {len(self.params)} arguments "
                               f"({', '.join(p['name'] for p in self.params)}), got {len(args)}")
        dev, copies = [], []
        for i, (p, x) in enumerate(zip(self.params, args)):
            npd = numpy_dtype(DataType(p["dtype"]))
            if p["kind"] == "scalar":
                dev.append(npd.type(x))
                continue
            arr = x if isinstance(x, cp.ndarray) else None
            host = None if arr is not None else (x.numpy() if isinstance(x, NDArray) else x)
            if arr is None and not isinstance(host, np.ndarray):
                raise TesseraError(f"{self.name}: argument {p['name']} must be a numpy array, an NDArray or a cupy "
                                   f"array, got {type(x).__name__}")
            if arr is not None and not arr.flags.c_contiguous:
                raise ShapeError(f"{self.name}: argument {p['name']} must be a C-contiguous cupy array")
            shape = tuple(p["shape"])
            got = (arr if arr is not None else host)
            if tuple(got.shape) != shape:
                raise ShapeError(f"{self.name}: argument {p['name']} has shape {tuple(got.shape)}, expected {shape}")
            if np.dtype(got.dtype) != npd:
                raise DTypeError(f"{self.name}: argument {p['name']} has dtype {got.dtype}, expected {p['dtype']}")
            if arr is None:
                arr = cp.asarray(np.ascontiguousarray(host))
                if i in self.meta["writes"]:
                    copies.append((host, arr))
            dev.append(arr)
        work = [cp.empty(w["count"], numpy_dtype(DataType(w["dtype"]))) for w in self.meta["workspaces"]]
        return dev, work, copies

    def launches(self, cp, dev, work=None) -> list:
        """The launches of one call on device arguments `dev` (one per parameter, checked by the
        caller): [(kernel, grid, block, args)], with the workspaces (allocated here unless given)."""
        if work is None:
            work = [cp.empty(w["count"], numpy_dtype(DataType(w["dtype"]))) for w in self.meta["workspaces"]]
        out = []
        for k in self.meta["kernels"]:
            kargs = tuple(dev[i] if kind == "param" else work[i] for kind, i in k["args"])
            out.append((self.module.kernel(k["name"], k.get("dynamic_shared_bytes", 0)), tuple(k["grid"]),
                        tuple(k["block"]), kargs, k.get("dynamic_shared_bytes", 0)))
        return out

    def _launch(self, dev, work):
        for kern, grid, block, kargs, smem in self.launches(None, dev, work):
            kern(grid, block, kargs, shared_mem=smem)

    def __call__(self, *args):
        cp = self.module.cupy()
        dev, work, copies = self._args(cp, args)
        self._launch(dev, work)
        for host, arr in copies:
            host[...] = cp.asnumpy(arr)

    def time(self, args, number=10, repeat=3, min_repeat_ms=0) -> BenchmarkResult:
        """Seconds per call, one figure per repeat, from CUDA events around `number` launches (more where
        a repeat would take less than min_repeat_ms)."""
        check_timing(number, repeat, min_repeat_ms)
        cp = self.module.cupy()
        dev, work, _ = self._args(cp, args)
        self._launch(dev, work)

        def measure(n):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            for _ in range(n):
                self._launch(dev, work)
            end.record()
            end.synchronize()
            return cp.cuda.get_elapsed_time(start, end) * 1e-3
        return timed_repeats(measure, number, repeat, min_repeat_ms)


class CUDAModule(GPUModuleBase):
    """A built CUDA artifact: source, cubin and ptxas report; callable where a GPU is present."""

    def __init__(self, path: str):
        cache.check_before_load(path)   # from the kernel cache: verified before it is read
        with open(path) as f:
            doc = json.load(f)
        if doc.get("kind") != "cuda":
            raise TesseraError(f"{path} is not a CUDA artifact of tessera")
        self.path, self.source, self.target = path, doc["source"], doc["target"]
        self.cubin, self.ptxas = doc["cubin"], doc["ptxas"]
        self.functions = {m["name"]: CUDAFunction(self, m) for m in doc["functions"]}
        self._raw = None

    def cupy(self):
        cp = _cupy()
        if cp is None:
            raise TesseraError(f"running CUDA kernels needs an NVIDIA GPU and cupy; none here (the module at "
                               f"{self.path} was built: its cubin is {self.cubin})")
        return cp

    def kernel(self, name, dynamic_shared: int = 0):
        """The loaded kernel `name`, allowed `dynamic_shared` bytes of dynamic shared memory (above
        48 KiB a kernel must ask for it)."""
        if self._raw is None:
            cache.check_before_load(self.cubin)
            self._raw = self.cupy().RawModule(path=self.cubin)
        kern = self._raw.get_function(name)
        if dynamic_shared > 48 * 1024 and kern.max_dynamic_shared_size_bytes < dynamic_shared:
            kern.max_dynamic_shared_size_bytes = dynamic_shared
        return kern


__all__ = ["CUDAModule", "CUDAFunction", "array", "available", "compile_cuda", "empty", "from_dlpack",
           "is_device_array", "nvcc_path", "parse_ptxas"]
