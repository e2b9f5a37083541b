"""The calling convention between generated C and the Python runtime (one place, both sides; the
runtime loads a library with it and without the code generator).

Each compiled PrimFunc `NAME` exports
  int32_t tessera_call_NAME(void** args, const int32_t* kinds, int32_t num_args,
                            char* err, int32_t err_len);
  int32_t tessera_time_NAME(void** args, const int32_t* kinds, int32_t num_args,
                            int32_t number, int32_t repeat, int32_t min_repeat_ms,
                            double* results, char* err, int32_t err_len);
and the module exports `const char tessera_metadata[]` (JSON, see docs/internals.md).
args[i] points to a tessera_tensor_t (kind KIND_TENSOR), an int64_t (KIND_INT) or a double
(KIND_FLOAT). The return code is one of the STATUS_* values; on failure `err` holds a message
naming the argument.
"""
import ctypes

from .errors import TesseraError

KIND_TENSOR, KIND_INT, KIND_FLOAT = 0, 1, 2

STATUS_OK = 0
STATUS_ARG_COUNT = 1   # wrong number of arguments -> TesseraError
STATUS_DTYPE = 2       # wrong dtype / kind -> DTypeError
STATUS_SHAPE = 3       # wrong rank, extent, inconsistent symbolic binding -> ShapeError
STATUS_STRIDE = 4      # non-compact where compact is required, misaligned -> ShapeError
STATUS_RUNTIME = 5     # allocation failure or an assertion in the kernel -> TesseraError
STATUS_OVERLAP = 6     # a written argument's memory overlaps another argument's -> TesseraError

# dtype codes (DLPack's numbering, its float8/float4 codes included); a sub-byte element (int4,
# float4_e2m1fn, ...) is passed with its own bit count but takes one byte of memory (see ir.dtype)
DTYPE_CODE = {"int": 0, "uint": 1, "float": 2, "bfloat": 4, "bool": 6, "float8_e4m3fn": 10,
              "float8_e4m3fnuz": 11, "float8_e5m2": 12, "float8_e5m2fnuz": 13, "float4_e2m1fn": 17}



class TesseraTensor(ctypes.Structure):
    """ctypes mirror of tessera_tensor_t."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
    ]


# a C string literal: how a library carries text (its metadata, its source, messages)
_C_ESCAPE = {i: f"\\{i:03o}" for i in range(256) if not 32 <= i < 127}
_C_ESCAPE.update({ord('"'): '\\"', ord("\\"): "\\\\", ord("?"): "\\?", ord("\n"): "\\n"})


def c_string(text: str, width: int | None = None, lines: bool = False, sep: str = "\n") -> str:
    """A C string literal of `text` (its UTF-8 bytes; non-ASCII and control bytes as octal escapes,
    '?' escaped so no trigraph forms). width: break it into adjacent literals of at most `width`
    bytes of text each; lines: a new literal after each newline. Pieces are joined by `sep` (a
    newline; add the indent of the pieces to it)."""
    raw = str(text).encode("utf-8").decode("latin-1")
    if width is None and not lines:
        return '"' + raw.translate(_C_ESCAPE) + '"'
    pieces = [raw]
    if lines:
        parts = raw.split("\n")
        pieces = [x + "\n" for x in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    if width is not None:
        if width < 1:
            raise TesseraError(f"c_string: width must be >= 1, got {width}")
        pieces = [x[i:i + width] for x in pieces for i in range(0, len(x), width)]
    return sep.join('"' + x.translate(_C_ESCAPE) + '"' for x in pieces or [""])
