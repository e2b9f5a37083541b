"""Data types: a dtype is a string such as "float32" or "float32x8" (8 vector lanes).

`DataType` is a `str` subclass so that `expr.dtype == "float32"` reads naturally; the parsed
parts (code, bits, lanes) come from an interned table, so asking for them is a dict lookup.

The low-precision storage types (TVM's and ml_dtypes' names) are dtypes too: the minifloats
float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz and float4_e2m1fn (each its own code),
and the sub-byte integers int4, uint4, int2, uint2. A value of one is computed as a float / an 8-bit
integer holding a representable value (as float16 and bfloat16 compute as float32); in memory each
element takes one byte (ml_dtypes' layout, the low bits of the byte for the sub-byte types), and
`tessera.nd.pack_subbyte` / `unpack_subbyte` convert to and from ONNX's packed layout.
"""
from __future__ import annotations

import re

import numpy as np

from ..errors import DTypeError

# minifloat code -> bits (the code is the whole name: the format is more than a bit count)
MINIFLOATS = {"float8_e4m3fn": 8, "float8_e4m3fnuz": 8, "float8_e5m2": 8, "float8_e5m2fnuz": 8,
              "float4_e2m1fn": 4}
_CODES = ("int", "uint", "float", "bfloat", "bool", "handle") + tuple(MINIFLOATS)
_VALID_BITS = {"int": (2, 4, 8, 16, 32, 64), "uint": (1, 2, 4, 8, 16, 32, 64), "float": (16, 32, 64),
               "bfloat": (16,), "bool": (1,), "handle": (64,)}
_FLOAT_CODES = frozenset(("float", "bfloat") + tuple(MINIFLOATS))
_PATTERN = re.compile(r"^(int|uint|float|bfloat|bool|handle)(\d*)(?:x(\d+))?$")
_MINI_PATTERN = re.compile(r"^(float8_e4m3fnuz|float8_e4m3fn|float8_e5m2fnuz|float8_e5m2|float4_e2m1fn)"
                           r"(?:x(\d+))?$")
_INFO: dict[str, tuple[str, int, int]] = {}
_CACHE: dict[str, "DataType"] = {}


class DataType(str):
    """A parsed, interned dtype string: code ("int", "uint", "float", "bfloat", "bool"), bits, lanes."""

    __slots__ = ()

    def __new__(cls, value):
        if type(value) is DataType:
            return value
        cached = _CACHE.get(value)
        if cached is not None:
            return cached
        if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
            return DataType(_from_numpy(np.dtype(value)))
        if not isinstance(value, str):
            raise DTypeError(f"a dtype must be a string such as 'float32', got {value!r}")
        m = _PATTERN.match(value)
        mini = None if m else _MINI_PATTERN.match(value)
        if mini:
            code, lanes = mini.group(1), mini.group(2)
            bits = MINIFLOATS[code]
        elif m:
            code, bits, lanes = m.group(1), m.group(2), m.group(3)
            bits = int(bits) if bits else (1 if code == "bool" else 64 if code == "handle" else 0)
            if bits not in _VALID_BITS[code]:
                raise DTypeError(f"unknown dtype {value!r}: {code} comes in {_VALID_BITS[code]} bits")
        else:
            raise DTypeError(f"unknown dtype {value!r}; expected e.g. 'float32', 'int8', 'bool', "
                             f"'bfloat16', 'float8_e4m3fn', 'int4', or a vector type such as 'float32x8'")
        lanes = int(lanes) if lanes else 1
        if lanes < 1:
            raise DTypeError(f"dtype {value!r} has {lanes} lanes")
        canon = _scalar_name(code, bits) + (f"x{lanes}" if lanes > 1 else "")
        obj = str.__new__(cls, canon)
        _INFO[canon] = (code, bits, lanes)
        _CACHE[canon] = obj
        _CACHE[value] = obj
        return obj

    # parsed parts -------------------------------------------------------------------------
    @property
    def code(self) -> str:
        return _INFO[self][0]

    @property
    def bits(self) -> int:
        return _INFO[self][1]

    @property
    def lanes(self) -> int:
        return _INFO[self][2]

    @property
    def bytes(self) -> int:
        """Bytes of one element in memory (a sub-byte element takes a whole byte)."""
        return max(1, self.bits // 8) * self.lanes

    def is_float(self) -> bool:
        return _INFO[self][0] in _FLOAT_CODES

    def is_minifloat(self) -> bool:
        """A float8 / float4 storage format (computed as float32, stored in one byte)."""
        return _INFO[self][0] in MINIFLOATS

    def is_subbyte(self) -> bool:
        """Fewer than 8 bits an element: int4, uint4, int2, uint2, float4_e2m1fn (ONNX packs them)."""
        code, bits, _ = _INFO[self]
        return bits < 8 and code != "bool" and (code, bits) != ("uint", 1)

    def is_lowp(self) -> bool:
        """One of the low-precision storage types: a minifloat or a sub-byte integer."""
        return self.is_minifloat() or self.is_subbyte()

    def is_int(self) -> bool:
        return _INFO[self][0] == "int"

    def is_uint(self) -> bool:
        return _INFO[self][0] == "uint"

    def is_integer(self) -> bool:
        """Signed or unsigned integer (not bool)."""
        return _INFO[self][0] in ("int", "uint")

    def is_bool(self) -> bool:
        return _INFO[self][0] == "bool"

    def is_handle(self) -> bool:
        return _INFO[self][0] == "handle"

    def is_vector(self) -> bool:
        return _INFO[self][2] > 1

    def element_of(self) -> "DataType":
        code, bits, _ = _INFO[self]
        return DataType(_scalar_name(code, bits))

    def with_lanes(self, lanes: int) -> "DataType":
        base = self.element_of()
        return base if lanes == 1 else DataType(f"{base}x{lanes}")

    def numpy(self) -> np.dtype:
        """The numpy dtype of one element (bfloat16 comes from ml_dtypes)."""
        if self.lanes != 1:
            raise DTypeError(f"vector dtype {self} has no numpy equivalent")
        return numpy_dtype(self)

    def __repr__(self):
        return f"DataType({str(self)!r})"


def _scalar_name(code: str, bits: int) -> str:
    return code if code in ("bool", "handle") or code in MINIFLOATS else f"{code}{bits}"


# the dtypes numpy has only through ml_dtypes (the names are the same on both sides)
ML_DTYPES = ("bfloat16", "int4", "uint4", "int2", "uint2") + tuple(MINIFLOATS)


def _from_numpy(dt: np.dtype) -> str:
    if dt == np.bool_:
        return "bool"
    if dt.name in ML_DTYPES and dt.kind == "V":
        return dt.name
    if dt.kind in "iuf":
        return dt.name
    raise DTypeError(f"numpy dtype {dt} has no tessera equivalent")


def numpy_dtype(dtype) -> np.dtype:
    """numpy dtype for a tessera scalar dtype (bfloat16 and the low-precision types from ml_dtypes)."""
    dtype = DataType(dtype)
    if dtype in ML_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, str(dtype)))
    if dtype == "bool":
        return np.dtype(np.bool_)
    if dtype.is_handle():
        raise DTypeError("handle has no numpy equivalent")
    return np.dtype(str(dtype))


def dtype_of_numpy(dt) -> DataType:
    return DataType(_from_numpy(np.dtype(dt)))


# common constants -----------------------------------------------------------------------------
bool_ = DataType("bool")
int32 = DataType("int32")
int64 = DataType("int64")
float32 = DataType("float32")
float64 = DataType("float64")
handle = DataType("handle")
