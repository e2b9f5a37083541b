"""`tessera.nd`: make and wrap tensors for compiled modules (mirrors `tvm.nd`): NDArrays in host memory,
and with `device=` the GPU runtimes' device arrays (an OpenCL DeviceArray, a cupy array for CUDA)."""
from __future__ import annotations

from ..errors import TesseraError
from . import cuda, opencl
from . import ndarray as host
from .ndarray import KDL_CUDA, NDArray, dlpack_device, from_numpy, pack_subbyte, unpack_subbyte


def _device_runtime(device):
    """(runtime module, device name) of a device string: "opencl", "opencl:<name part>", "cuda"."""
    if not isinstance(device, str):
        raise TesseraError(f"device must be 'cpu', 'opencl', 'opencl:<device name>' or 'cuda', got {device!r}")
    kind, _, name = device.partition(":")
    if kind == "opencl":
        return opencl, name or None
    if kind == "cuda":
        return cuda, name or None
    raise TesseraError(f"unknown device {device!r}: expected 'cpu', 'opencl', 'opencl:<device name>' or 'cuda'")


def array(obj, dtype=None, device=None):
    """Copy `obj` (numpy array, NDArray, nested list, scalar, DLPack tensor) into a new aligned NDArray;
    with device="opencl" (or "opencl:<device name>") into an OpenCL DeviceArray, with "cuda" into a
    CUDA array (cupy), which GPU modules take without copying."""
    if device is not None and device != "cpu":
        rt, name = _device_runtime(device)
        return rt.array(obj, dtype, name)
    return host.array(obj, dtype)


def empty(shape, dtype="float32", device=None):
    """An uninitialized array: an aligned NDArray, or on `device` (see `array`)."""
    if device is not None and device != "cpu":
        rt, name = _device_runtime(device)
        return rt.empty(host.normalize_shape(shape), dtype, name)
    return host.empty(shape, dtype)


def from_dlpack(obj):
    """Import a tensor from any DLPack producer (torch, jax, numpy, ...) without copying: CPU memory
    as an NDArray, CUDA memory as a cupy array (which CUDA modules take)."""
    dev = dlpack_device(obj) if hasattr(obj, "__dlpack__") else None
    if dev is not None and int(dev[0]) == KDL_CUDA:
        if not cuda.available():
            raise TesseraError(f"from_dlpack: tensor lives on DLPack device {dev} (CUDA); importing it needs "
                               f"cupy and an NVIDIA GPU, and this machine has none")
        return cuda.from_dlpack(obj)
    return host.from_dlpack(obj)


__all__ = ["NDArray", "array", "empty", "from_dlpack", "from_numpy", "pack_subbyte", "unpack_subbyte"]
