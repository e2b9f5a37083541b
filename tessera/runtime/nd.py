"""`tessera.nd`: make and wrap tensors for compiled modules (mirrors `tvm.nd`)."""
from .ndarray import NDArray, array, empty, from_dlpack, from_numpy, pack_subbyte, unpack_subbyte

__all__ = ["NDArray", "array", "empty", "from_dlpack", "from_numpy", "pack_subbyte", "unpack_subbyte"]
