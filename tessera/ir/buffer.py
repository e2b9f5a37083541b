"""Buffer: a named multi-dimensional array in memory (shape, dtype, strides, storage scope)."""
from __future__ import annotations

from ..errors import ShapeError, TesseraError
from .dtype import DataType
from .expr import BufferLoad, PrimExpr, Range, convert
from .node import Node, set_field

SCOPES = ("global", "local", "shared", "warp", "local.accel", "wgt", "inp", "acc")


class Buffer(Node):
    """A multi-dimensional array. Empty `strides` means compact row-major.

    A buffer is compared by identity in expressions (two buffers named "A" are different);
    `structural_equal` maps buffers the way it maps variables.
    """

    __slots__ = ("name", "shape", "dtype", "strides", "elem_offset", "scope", "data_alignment")
    _fields = ("name", "shape", "dtype", "strides", "elem_offset", "scope", "data_alignment")
    _ignore_fields = ("name",)

    def __init__(self, shape, dtype="float32", name="buf", strides=(), elem_offset=0,
                 scope="global", data_alignment=64):
        if isinstance(shape, (int, PrimExpr)):
            shape = (shape,)
        shape = tuple(convert(s) for s in shape)
        for s in shape:
            if not s.dtype.is_integer() or s.dtype.lanes != 1:
                raise ShapeError(f"buffer {name!r}: extent {s.script()} is not a scalar integer")
            if hasattr(s, "value") and s.value < 0:
                raise ShapeError(f"buffer {name!r}: negative extent {s.value}")
        strides = tuple(convert(s) for s in strides)
        if strides and len(strides) != len(shape):
            raise ShapeError(f"buffer {name!r}: {len(strides)} strides for {len(shape)} dimensions")
        if not isinstance(scope, str) or not scope:
            raise TesseraError(f"buffer {name!r}: invalid storage scope {scope!r}")
        set_field(self, "name", str(name))
        set_field(self, "shape", shape)
        set_field(self, "dtype", DataType(dtype))
        set_field(self, "strides", strides)
        set_field(self, "elem_offset", convert(elem_offset))
        set_field(self, "scope", scope)
        set_field(self, "data_alignment", int(data_alignment))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> BufferLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, indices)

    def vload(self, indices) -> BufferLoad:
        return BufferLoad(self, tuple(indices))

    def full_region(self) -> "BufferRegion":
        return BufferRegion(self, tuple(Range.from_min_extent(0, s) for s in self.shape))

    def __repr__(self):
        return f"Buffer({self.name}, {[s.script() if hasattr(s, 'script') else s for s in self.shape]}, {self.dtype})"


class BufferRegion(Node):
    """A rectangular region of a buffer: one Range per dimension (block read/write sets)."""

    __slots__ = ("buffer", "region")
    _fields = ("buffer", "region")

    def __init__(self, buffer: Buffer, region):
        region = tuple(r if isinstance(r, Range) else Range.from_min_extent(r, 1) for r in region)
        if len(region) != buffer.ndim:
            raise ShapeError(f"region of {buffer.name!r} has {len(region)} ranges for {buffer.ndim} dims")
        set_field(self, "buffer", buffer)
        set_field(self, "region", region)


def decl_buffer(shape, dtype="float32", name="buf", **kw) -> Buffer:
    return Buffer(shape, dtype, name, **kw)
