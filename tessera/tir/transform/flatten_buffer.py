"""flatten_buffer: turn every multi-dimensional buffer access into a 1-D one.

Index (i0, ..., in) of a buffer becomes elem_offset + sum(i_d * stride_d), with row-major strides
from the shape or the buffer's explicit `strides`. Each Buffer gets one flat Buffer (same name,
dtype, scope; shape (size,)); parameters keep their multi-dim Buffer in `params` and the flat one is
recorded, aligned with params, in `func.attrs["flat_params"]`.
"""
from __future__ import annotations

from ...errors import TesseraError
from ...ir import (Allocate, Broadcast, Buffer, BufferLoad, BufferStore, DataType, IntImm, Mutator,
                   PrimFunc, Ramp, cast)

_INT32_MAX = 2 ** 31 - 1


def flatten_buffer(func: PrimFunc) -> PrimFunc:
    """`func` with 1-D buffer accesses; see the module docstring for the parameter convention."""
    f = _Flattener()
    old = func.attrs.get("flat_params")
    if old is not None:  # already flattened once: keep the flat buffers the body uses
        for p, flat in zip(func.params, old):
            if flat is not None:
                f.flat[p] = flat
    flat_params = tuple(f.flat_buffer(p) if isinstance(p, Buffer) else None for p in func.params)
    body = f.visit(func.body)
    if body is not func.body:
        func = func.with_body(body)
    if old is None or any(a is not b for a, b in zip(old, flat_params)):
        func = func.with_attr("flat_params", flat_params)
    return func


def _is_compact_1d(buf: Buffer) -> bool:
    if buf.ndim != 1 or not (isinstance(buf.elem_offset, IntImm) and buf.elem_offset.value == 0):
        return False
    return not buf.strides or (isinstance(buf.strides[0], IntImm) and buf.strides[0].value == 1)


class _Flattener(Mutator):
    def __init__(self):
        super().__init__()
        self.flat = {}     # Buffer -> its flat Buffer
        self.strides = {}  # Buffer -> (strides, index dtype)

    def flat_buffer(self, buf: Buffer) -> Buffer:
        """The one flat Buffer of `buf` (itself when it already is compact 1-D)."""
        flat = self.flat.get(buf)
        if flat is not None:
            return flat
        if _is_compact_1d(buf):
            flat = buf
        else:
            # sizes and strides as Python ints where constant, so big ones do not overflow int32
            shape = [_value(x) for x in buf.shape]
            strides = [_value(x) for x in buf.strides] if buf.strides else _row_major(shape)
            if buf.strides:  # the span the strided layout reaches
                size = 1
                for n, st in zip(shape, strides):
                    size = _add(size, _mul(_add(n, -1), st))
                if any(isinstance(n, int) and n == 0 for n in shape):
                    size = 0
            else:
                size = 1
                for n in shape:
                    size = _mul(size, n)
            size = _add(size, _value(buf.elem_offset))
            wide = any(isinstance(x, int) and x > _INT32_MAX for x in (size, *strides)) or \
                any(x.dtype == "int64" for x in (*buf.shape, *buf.strides, buf.elem_offset))
            idx_dtype = "int64" if wide else "int32"
            flat = Buffer((_expr(size, idx_dtype),), buf.dtype, buf.name, scope=buf.scope,
                          data_alignment=buf.data_alignment)
            self.strides[buf] = (tuple(_expr(st, idx_dtype) for st in strides), idx_dtype)
        self.flat[buf] = flat
        return flat

    def index(self, buf: Buffer, indices):
        """The flat index of `indices` into `buf`; a Ramp in one dimension stays a Ramp."""
        strides, idx_dtype = self.strides[buf]
        scalar = None if (isinstance(buf.elem_offset, IntImm) and buf.elem_offset.value == 0) \
            else cast(buf.elem_offset, idx_dtype)
        vectors = []
        for i, st in zip(indices, strides):
            if isinstance(i, Broadcast):
                i = i.value
            if i.dtype.element_of() != idx_dtype:
                i = Ramp(cast(i.base, idx_dtype), cast(i.stride, idx_dtype), i.lanes) \
                    if isinstance(i, Ramp) else cast(i, DataType(idx_dtype).with_lanes(i.dtype.lanes))
            unit = isinstance(st, IntImm) and st.value == 1
            if i.dtype.lanes == 1:
                term = i if unit else i * st
                scalar = term if scalar is None else scalar + term
            elif isinstance(i, Ramp):
                vectors.append(i if unit else Ramp(i.base * st, i.stride * st, i.lanes))
            else:
                vectors.append(i if unit else i * st)
        if not vectors:
            return scalar if scalar is not None else IntImm(idx_dtype, 0)
        if len(vectors) == 1 and isinstance(vectors[0], Ramp):
            r = vectors[0]
            return r if scalar is None else Ramp(scalar + r.base, r.stride, r.lanes)
        out = vectors[0]
        for v in vectors[1:]:
            out = out + v
        return out if scalar is None else out + scalar

    def visit_BufferLoad(self, n):
        indices = [self.visit(i) for i in n.indices]
        flat = self.flat_buffer(n.buffer)
        if flat is n.buffer:
            if all(a is b for a, b in zip(indices, n.indices)):
                return n
            return BufferLoad(flat, indices)
        return BufferLoad(flat, (self.index(n.buffer, indices),))

    def visit_BufferStore(self, n):
        value = self.visit(n.value)
        indices = [self.visit(i) for i in n.indices]
        flat = self.flat_buffer(n.buffer)
        if flat is n.buffer:
            if value is n.value and all(a is b for a, b in zip(indices, n.indices)):
                return n
            return BufferStore(flat, value, indices)
        return BufferStore(flat, value, (self.index(n.buffer, indices),))

    def visit_Allocate(self, n):
        body = self.visit(n.body)
        flat = self.flat_buffer(n.buffer)
        if flat is n.buffer and body is n.body:
            return n
        return Allocate(flat, body)

    def visit_Block(self, n):
        raise TesseraError(f"flatten_buffer: block {n.name_hint!r} is still in the function; "
                           f"run lower_blocks first")


def _value(e):
    """An IntImm as a Python int (other expressions as they are)."""
    return e.value if isinstance(e, IntImm) else e


def _mul(a, b):
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    return a * b


def _add(a, b):
    if isinstance(a, int) and a == 0:
        return b
    if isinstance(b, int) and b == 0:
        return a
    return a + b


def _expr(x, dtype):
    return IntImm(dtype, x) if isinstance(x, int) else cast(x, dtype)


def _row_major(shape):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc = _mul(acc, n)
    return strides[::-1]
