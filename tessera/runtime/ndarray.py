"""NDArray: a CPU tensor in 64-byte aligned storage that compiled kernels take without copying.

The storage is a numpy array (over-allocated and sliced to the alignment), so `.numpy()`, DLPack
and the buffer protocol are all zero-copy views. Each NDArray builds its ABI struct
(`tessera_tensor_t`) once, so passing it to a kernel costs one pointer store.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..abi import DTYPE_CODE, TesseraTensor
from ..errors import DTypeError, ShapeError, TesseraError
from ..ir.dtype import DataType, dtype_of_numpy, numpy_dtype

ALIGNMENT = 64
KDL_CPU = 1
KDL_CUDA = 2

# numpy dtype -> (tessera dtype, ABI code, ABI bits). Booleans are stored in a byte (DLPack's
# convention: code 6, bits 8).
DTYPE_INFO: dict = {}


def dtype_info(np_dtype: np.dtype):
    """(tessera dtype, ABI code, ABI bits) of a numpy dtype; DTypeError if tessera has no equivalent."""
    info = DTYPE_INFO.get(np_dtype)
    if info is None:
        if not np_dtype.isnative:
            raise DTypeError(f"numpy dtype {np_dtype} is not in native byte order")
        dt = dtype_of_numpy(np_dtype)
        # bool and the sub-byte types take a byte each; the ABI names bool 8 bits, int4 4 (DLPack)
        info = (dt, DTYPE_CODE[dt.code], 8 if dt == "bool" else dt.bits)
        DTYPE_INFO[np_dtype] = info
    return info


class NDArray:
    """A tensor in CPU memory: dtype, shape and a data pointer aligned for compiled kernels."""

    __slots__ = ("_arr", "_dtype", "_tensor", "_shape_c", "_addr", "__weakref__")

    def __init__(self, arr: np.ndarray):
        # Internal: wraps a C-contiguous numpy array (use array/empty/from_numpy to make one).
        dt, code, bits = dtype_info(arr.dtype)
        shape_c = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
        tensor = TesseraTensor(arr.ctypes.data, shape_c, None, arr.ndim, code, bits, 1)
        self._arr, self._dtype, self._shape_c, self._tensor = arr, dt, shape_c, tensor
        self._addr = ctypes.addressof(tensor)

    # ------------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple:
        return self._arr.shape

    @property
    def dtype(self) -> DataType:
        """The tessera dtype string ("float32", "bfloat16", ...)."""
        return self._dtype

    @property
    def ndim(self) -> int:
        return self._arr.ndim

    @property
    def size(self) -> int:
        return self._arr.size

    @property
    def nbytes(self) -> int:
        return self._arr.nbytes

    @property
    def data_ptr(self) -> int:
        """Address of element 0."""
        return self._tensor.data or 0

    def numpy(self) -> np.ndarray:
        """A zero-copy numpy view of the data (writes through)."""
        return self._arr.view()

    # ------------------------------------------------------------------ copies
    def copyfrom(self, source) -> "NDArray":
        """Copy `source` (numpy array, NDArray or nested list) in, converting to this dtype."""
        src = source._arr if isinstance(source, NDArray) else source
        src = np.asarray(src, dtype=self._arr.dtype)
        if src.shape != self._arr.shape:
            raise ShapeError(f"copyfrom: source shape {src.shape} differs from the array's {self._arr.shape}")
        np.copyto(self._arr, src)
        return self

    def copyto(self, target):
        """Copy into `target` (an NDArray or numpy array of the same shape and dtype); returns it."""
        dst = target._arr if isinstance(target, NDArray) else target
        if not isinstance(dst, np.ndarray):
            raise TesseraError(f"copyto: target must be an NDArray or a numpy array, got {type(target).__name__}")
        if dst.shape != self._arr.shape:
            raise ShapeError(f"copyto: target shape {dst.shape} differs from the array's {self._arr.shape}")
        if dst.dtype != self._arr.dtype:
            raise DTypeError(f"copyto: target dtype {dst.dtype} differs from the array's {self._dtype}")
        np.copyto(dst, self._arr)
        return target

    def copy(self) -> "NDArray":
        """A new aligned NDArray holding a copy of the data."""
        return array(self._arr)

    # ------------------------------------------------------------------ interchange
    def __array__(self, dtype=None, copy=None):
        if dtype is None or np.dtype(dtype) == self._arr.dtype:
            return self._arr.copy() if copy else self._arr.view()
        if copy is False:
            raise ValueError(f"converting {self._dtype} to {np.dtype(dtype)} needs a copy")
        return self._arr.astype(dtype)

    def __dlpack__(self, *args, **kwargs):
        try:
            return self._arr.__dlpack__(*args, **kwargs)
        except (BufferError, TypeError) as e:
            raise DTypeError(f"an NDArray of dtype {self._dtype} cannot be exported through DLPack "
                             f"(numpy refused: {e})") from e

    def __dlpack_device__(self):
        return (KDL_CPU, 0)

    def __len__(self):
        if not self._arr.ndim:
            raise TypeError("len() of a 0-d NDArray")
        return self._arr.shape[0]

    def __repr__(self):
        return f"<tessera.NDArray shape={self._arr.shape}, {self._dtype}>\n{self._arr!r}"

    def __reduce__(self):
        return (array, (self._arr,))


# ---------------------------------------------------------------------- constructors
def normalize_shape(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise ShapeError(f"a shape is an int or a tuple of ints, got {shape!r}") from None
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
            raise ShapeError(f"shape {shape!r}: every extent must be a non-negative int, got {d!r}")
    return tuple(int(d) for d in dims)


def _aligned_empty(shape: tuple, np_dtype: np.dtype) -> np.ndarray:
    nbytes = int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    # np.ndarray(buffer=, offset=) keeps the aligned address even for zero-size arrays
    return np.ndarray(shape, np_dtype, buffer=raw, offset=-raw.ctypes.data % ALIGNMENT)


def _np_dtype(dtype) -> np.dtype:
    dt = DataType(dtype)
    if dt.lanes != 1 or dt.is_handle():
        raise DTypeError(f"an NDArray holds scalar elements; {dt} is not one")
    return numpy_dtype(dt)


def empty(shape, dtype="float32") -> NDArray:
    """An uninitialized aligned NDArray (tessera.nd.empty also makes device arrays)."""
    return NDArray(_aligned_empty(normalize_shape(shape), _np_dtype(dtype)))


def array(obj, dtype=None) -> NDArray:
    """Copy `obj` (numpy array, NDArray, nested list, scalar, DLPack tensor in CPU memory) into a new
    aligned NDArray (tessera.nd.array also makes device arrays)."""
    if isinstance(obj, NDArray):
        obj = obj._arr
    elif not isinstance(obj, np.ndarray) and hasattr(obj, "__dlpack__"):
        obj = from_dlpack(obj)._arr
    src = np.asarray(obj, dtype=None if dtype is None else _np_dtype(dtype))
    dtype_info(src.dtype)  # refuse dtypes tessera has no name for before copying
    out = _aligned_empty(src.shape, src.dtype)
    np.copyto(out, src)
    return NDArray(out)


def from_numpy(arr: np.ndarray) -> NDArray:
    """Wrap a C-contiguous numpy array without copying (its memory is shared)."""
    if not isinstance(arr, np.ndarray):
        raise TesseraError(f"from_numpy expects a numpy array, got {type(arr).__name__}")
    if not arr.flags.c_contiguous:
        raise ShapeError(f"from_numpy needs a C-contiguous array (got strides {arr.strides} for shape "
                         f"{arr.shape}); use tessera.nd.array(arr) to copy it")
    return NDArray(arr)


def pack_subbyte(arr) -> np.ndarray:
    """An int4/uint4/int2/uint2/float4_e2m1fn array in ONNX's packed layout: the elements in C order,
    8 // bits to a byte from the low bits up, the last byte's spare bits zero (what a TensorProto's
    raw_data holds). Tensors in memory take a byte an element (ml_dtypes' layout)."""
    a = np.ascontiguousarray(arr)
    bits = _subbyte_bits(a.dtype, "pack_subbyte")
    per = 8 // bits
    codes = a.reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
    codes = np.concatenate([codes, np.zeros(-codes.size % per, np.uint8)]).reshape(-1, per)
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    return np.bitwise_or.reduce(codes << shifts, axis=1).astype(np.uint8)


def unpack_subbyte(data, shape, dtype) -> np.ndarray:
    """The array of `dtype` (int4, uint4, int2, uint2, float4_e2m1fn) and `shape` whose ONNX packed
    layout is the bytes `data` (the inverse of pack_subbyte; spare bits are ignored)."""
    npdt = _np_dtype(dtype)
    bits = _subbyte_bits(npdt, "unpack_subbyte")
    shape = normalize_shape(shape)
    n = int(np.prod(shape, dtype=np.int64))
    raw = np.frombuffer(memoryview(np.ascontiguousarray(data)).cast("B"), np.uint8)
    need = -(-n * bits // 8)
    if raw.size < need:
        raise ShapeError(f"unpack_subbyte: {n} {DataType(dtype)} elements need {need} packed bytes, got {raw.size}")
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    codes = (raw[:need, None] >> shifts) & np.uint8((1 << bits) - 1)
    return np.ascontiguousarray(codes.reshape(-1)[:n]).view(npdt).reshape(shape)


def _subbyte_bits(np_dtype, where: str) -> int:
    dt = dtype_of_numpy(np_dtype)
    if not dt.is_subbyte():
        raise DTypeError(f"{where}: {dt} is not a sub-byte type (int4, uint4, int2, uint2, float4_e2m1fn)")
    return dt.bits


def dlpack_device(obj) -> tuple:
    """The (device type, id) a DLPack producer's tensor lives on: (1, 0), the CPU, without one."""
    return tuple(obj.__dlpack_device__()) if hasattr(obj, "__dlpack_device__") else (KDL_CPU, 0)


def from_dlpack(obj) -> NDArray:
    """Import a tensor in CPU memory from any DLPack producer (torch, jax, numpy, ...) without copying
    (tessera.nd.from_dlpack also imports CUDA memory)."""
    if isinstance(obj, NDArray):
        return obj
    if not hasattr(obj, "__dlpack__"):
        raise TesseraError(f"from_dlpack expects an object with __dlpack__, got {type(obj).__name__}")
    dev = dlpack_device(obj)
    if int(dev[0]) != KDL_CPU:
        where = " (CUDA: tessera.nd.from_dlpack imports it as a cupy array)" if int(dev[0]) == KDL_CUDA else ""
        raise TesseraError(f"from_dlpack: tensor lives on DLPack device {dev}{where}; a CPU module takes CPU "
                           f"memory (device type 1)")
    try:
        arr = np.from_dlpack(obj)
    except (BufferError, TypeError, RuntimeError) as e:
        raise TesseraError(f"from_dlpack: numpy could not import the {type(obj).__name__} ({e})") from e
    return from_numpy(arr)
