"""The type of a tensor value: a scalar dtype and a shape whose dimensions are ints or symbolic names.

It sits in the core IR (below the graph and the operator library) because both use it: the graph
types every Value with it, and each operator's type relation and compute take TensorTypes. The
graph IR re-exports it (`tessera.graph.ir.TensorType`).
"""
from __future__ import annotations

import re

import numpy as np

from ..errors import DTypeError, ShapeError
from .dtype import DataType, dtype_of_numpy

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_set = object.__setattr__


class TensorType:
    """dtype + shape of a tensor; a dimension is an int >= 0 or a symbolic name (a str)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype="float32"):
        dims = []
        for d in shape:
            if isinstance(d, (bool, np.bool_)):
                raise ShapeError(f"tensor type: dimension {d!r} is a bool, not an extent")
            if isinstance(d, (int, np.integer)):
                if d < 0:
                    raise ShapeError(f"tensor type: negative dimension {int(d)} in shape {tuple(shape)}")
                dims.append(int(d))
            elif isinstance(d, str) and _NAME.match(d):
                dims.append(d)
            else:
                raise ShapeError(f"tensor type: dimension {d!r} is neither an int nor a symbolic name")
        dt = DataType(dtype)
        if dt.lanes != 1 or dt.is_handle():
            raise DTypeError(f"tensor type: dtype must be a scalar number type, got {dt}")
        _set(self, "shape", tuple(dims))
        _set(self, "dtype", dt)

    def __setattr__(self, key, value):
        raise AttributeError("TensorType is immutable")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(d for d in self.shape if isinstance(d, str))

    def numel(self) -> int:
        """Number of elements; a ShapeError for a symbolic shape."""
        if not self.is_static:
            raise ShapeError(f"{self}: the element count of a symbolic shape is not known")
        n = 1
        for d in self.shape:
            n *= d
        return n

    def nbytes(self) -> int:
        return self.numel() * max(1, DataType(self.dtype).bits // 8)

    def with_shape(self, shape) -> "TensorType":
        return TensorType(shape, self.dtype)

    def with_dtype(self, dtype) -> "TensorType":
        return TensorType(self.shape, dtype)

    def __eq__(self, other):
        return isinstance(other, TensorType) and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self):
        return hash((self.shape, str(self.dtype)))

    def __str__(self):
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"

    __repr__ = __str__

    @staticmethod
    def of(array) -> "TensorType":
        """The type of a numpy array (or anything with .shape and .dtype)."""
        return TensorType(tuple(int(d) for d in array.shape), dtype_of_numpy(np.dtype(array.dtype)))
