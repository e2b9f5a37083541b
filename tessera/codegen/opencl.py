"""The OpenCL renderer: a kernel per thread-bound loop nest as OpenCL C (docs/gpu.md).

`__kernel void NAME(__global const float* restrict A, ...)`, `get_group_id(d)` / `get_local_id(d)`
for blockIdx / threadIdx, `__local` arrays for "shared" buffers (declared at kernel scope: the
split puts them there), private arrays for "local" ones, `barrier(CLK_LOCAL_MEM_FENCE)` for
tvm_storage_sync. OpenCL C has no <stdint.h> and names its float math without the `f` suffix: the
preamble gives the C names the C-style base prints (int32_t, expf, INT32_MIN, ...). Vector code
with a contiguous index loads and stores whole vectors (`vload4` / `vstore4`); the rest goes lane
by lane as in the base.
"""
from __future__ import annotations

from ..ir import expr as E
from ..ir.dtype import DataType
from .c_base import STORAGE_C, VALUE_C
from .gpu import GPUCodeGen, render_gpu_module

_MATH_F = ("exp exp2 expm1 log log2 log10 log1p sqrt cbrt sin cos tan asin acos atan sinh cosh tanh asinh "
           "acosh atanh erf floor ceil trunc rint fabs pow fmod atan2 hypot copysign fma fmin fmax round").split()

PREAMBLE = "\n".join([
    "/* OpenCL C spellings of the C names the generated code uses */",
    "typedef char int8_t;", "typedef short int16_t;", "typedef int int32_t;", "typedef long int64_t;",
    "typedef uchar uint8_t;", "typedef ushort uint16_t;", "typedef uint uint32_t;", "typedef ulong uint64_t;",
    "#define INT32_MIN (-2147483647 - 1)", "#define INT64_MIN (-9223372036854775807L - 1)",
    "#define copysignf copysign",
] + [f"#define {f}f {f}" for f in _MATH_F if f != "copysign"])

_NO_HALF = {k: v for k, v in VALUE_C.items() if k not in ("float16", "bfloat16")}
_STORAGE = {k: v for k, v in STORAGE_C.items() if k not in ("float16", "bfloat16")}
_STORAGE["bool"] = "uchar"    # OpenCL kernel arguments cannot point to bool
_VLOAD_LANES = (2, 3, 4, 8, 16)


class CodeGenOpenCL(GPUCodeGen):
    kernel_prefix = "__kernel "
    buffer_prefix = "__global "
    restrict = "restrict"
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE)"
    thread_index = {"blockIdx.x": "get_group_id(0)", "blockIdx.y": "get_group_id(1)",
                    "blockIdx.z": "get_group_id(2)", "threadIdx.x": "get_local_id(0)",
                    "threadIdx.y": "get_local_id(1)", "threadIdx.z": "get_local_id(2)"}
    func_qualifier = "inline"
    backend_name = "OpenCL"
    type_map = {DataType(k): v for k, v in _NO_HALF.items()}
    storage_map = {DataType(k): v for k, v in _STORAGE.items()}
    preamble = PREAMBLE

    # -- vectors: float4 loads and stores where the index is a contiguous ramp ---------------
    def _vec_ok(self, dtype, index) -> bool:
        return (dtype.lanes in _VLOAD_LANES and dtype.element_of() in (DataType("float32"), DataType("int32"))
                and type(index) is E.Ramp and type(index.stride) is E.IntImm and index.stride.value == 1)

    def vector_type(self, dtype):
        return f"{self.value_type(dtype.element_of())}{dtype.lanes}"

    def _native_load(self, e) -> bool:
        return type(e) is E.BufferLoad and len(e.indices) == 1 and self._vec_ok(e.dtype, e.indices[0]) \
            and e.buffer.dtype == e.dtype.element_of()

    def _vload(self, e) -> str:
        name = self.buffer_name(e.buffer, 1)
        return f"vload{e.dtype.lanes}(0, {name} + {self.text(e.indices[0].base)})"

    def vector_store(self, s, name) -> bool:
        idx, value = s.indices[0], s.value
        if not self._vec_ok(value.dtype, idx) or s.buffer.dtype != value.dtype.element_of():
            return False
        if not self._native_load(value):
            return False
        v = self._vload(value)
        self.emit(f"vstore{value.dtype.lanes}({v}, 0, {name} + {self.text(idx.base)});")
        return True


def render(funcs, target) -> tuple:
    """(OpenCL C source, per-function launch metadata) of lowered, split functions."""
    return render_gpu_module(funcs, target, CodeGenOpenCL)


__all__ = ["CodeGenOpenCL", "render", "PREAMBLE"]
