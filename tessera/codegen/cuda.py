"""The CUDA renderer: a kernel per thread-bound loop nest as CUDA C++ (docs/gpu.md).

`extern "C" __global__ void NAME(const float* __restrict__ A, ...)`, blockIdx / threadIdx as
CUDA spells them, `__shared__` arrays for "shared" buffers, local arrays (registers) for "local"
ones and `__syncthreads()` for tvm_storage_sync. float16 is stored as `__half` and computed as
float (the C-style base's numeric policy); bfloat16 is refused. A contiguous vector copy whose
addresses are provably aligned is one float4 / int4 (float2 / int2) access (shared and local arrays
are 16-byte aligned); other vector code goes lane by lane.
"""
from __future__ import annotations

import re

from ..errors import TesseraError
from ..ir import expr as E
from ..ir.dtype import DataType
from .c_base import P_ASSIGN, P_PRIMARY, P_UNARY, STORAGE_C, VALUE_C
from .gpu import GPUCodeGen, render_gpu_module

PREAMBLE = "\n".join([
    "#include <stdint.h>",
    "#include <math.h>",
    "#include <cuda_fp16.h>",
    "#ifndef INFINITY",
    "#define INFINITY __int_as_float(0x7f800000)",
    "#endif",
    "#ifndef NAN",
    "#define NAN __int_as_float(0x7fffffff)",
    "#endif",
])

_VALUE = {DataType(k): v for k, v in VALUE_C.items() if k != "bfloat16"}
_STORAGE = {DataType(k): v for k, v in STORAGE_C.items() if k != "bfloat16"}
_STORAGE[DataType("float16")] = "__half"


_VECTOR_COPY = {("float32", 4): "float4", ("float32", 2): "float2", ("int32", 4): "int4", ("int32", 2): "int2"}


def _unit_ramp(e) -> bool:
    return type(e) is E.Ramp and type(e.stride) is E.IntImm and e.stride.value == 1


def _divisible(e, n: int) -> bool:
    """Whether the integer expression e is provably a multiple of n (sums and products of terms)."""
    t = type(e)
    if t is E.IntImm:
        return e.value % n == 0
    if t is E.Add or t is E.Sub:
        return _divisible(e.a, n) and _divisible(e.b, n)
    if t is E.Mul:
        return _divisible(e.a, n) or _divisible(e.b, n)
    return False


class CodeGenCUDA(GPUCodeGen):
    kernel_prefix = 'extern "C" __global__ '
    buffer_prefix = ""
    restrict = "__restrict__"
    smem_prefix = "__shared__ "
    barrier = "__syncthreads()"
    warp_shuffle_xor = "__shfl_xor_sync(0xffffffffu, {value}, {mask})"
    thread_index = {t: t for t in ("blockIdx.x", "blockIdx.y", "blockIdx.z",
                                   "threadIdx.x", "threadIdx.y", "threadIdx.z")}
    func_qualifier = "static __device__ __forceinline__"
    array_attribute = " __attribute__((aligned(16)))"   # shared/local arrays: float4 copies may touch them
    backend_name = "CUDA"
    type_map = _VALUE
    storage_map = _STORAGE
    preamble = PREAMBLE

    def kernel_head(self, name: str, params: list) -> str:
        """`__launch_bounds__(threads)`: ptxas may then give each thread up to 65536 / threads
        registers, and a launch never fails for want of them."""
        bounds = f"__launch_bounds__({self.block_threads}) " if self.block_threads else ""
        return f"{self.kernel_prefix}void {bounds}{name}({', '.join(params) or 'void'}) {{"

    # -- vectors: float4 / int4 (and 2-lane) copies where both addresses are provably aligned --
    def vector_store(self, s, name) -> bool:
        idx, value = s.indices[0], s.value
        vt = _VECTOR_COPY.get((str(value.dtype.element_of()), value.dtype.lanes))
        if vt is None or not _unit_ramp(idx) or type(value) is not E.BufferLoad or len(value.indices) != 1 \
                or not _unit_ramp(value.indices[0]) or value.buffer.dtype != value.dtype.element_of() \
                or s.buffer.dtype != value.dtype.element_of():
            return False
        lanes = value.dtype.lanes
        src_base = value.indices[0].base
        if not (_divisible(idx.base, lanes) and _divisible(src_base, lanes)):
            return False    # a misaligned vector access faults on the GPU: lane by lane instead
        src = self.buffer_name(value.buffer, 1)
        self.emit(f"*({vt}*)({name} + {self.text(idx.base)}) = *(const {vt}*)({src} + {self.text(src_base)});")
        return True

    def check_intrin(self, name: str, needs: list):
        """A CUDA intrinsic names the oldest architecture it runs on (sm_70); the target's -arch
        (sm_90 by default) must be at least that, or exactly it for an arch-specific one (sm_90a:
        wgmma); CPU features are refused."""
        arch = (self.target.attrs.get("arch") if self.target is not None else None) or "sm_90"
        have = int(re.match(r"sm_(\d+)", arch).group(1))
        for f in needs:
            m = re.fullmatch(r"sm_(\d+)(a?)", f)
            if m is None:
                raise TesseraError(f"tensor intrinsic {name!r} in {self.func_name} needs the CPU feature {f}; "
                                   f"it is not a CUDA intrinsic")
            if m.group(2) and arch != f:     # an arch-specific feature set (sm_90a) is in no other architecture
                raise TesseraError(f"tensor intrinsic {name!r} in {self.func_name} needs the arch-specific target "
                                   f"{f} (cuda -arch={f}); the target builds for {arch}")
            if int(m.group(1)) > have:
                raise TesseraError(f"tensor intrinsic {name!r} in {self.func_name} needs {f} or newer; the target "
                                   f"builds for {arch}")

    def round_helper(self, dt) -> str:
        if dt == "float16":
            return self.helpers.require("tsr_round_float16", (
                f"{self.func_qualifier} float tsr_round_float16(float x) {{\n"
                f"  return __half2float(__float2half_rn(x));\n}}"))
        return super().round_helper(dt)

    def scalar_BufferLoad(self, e):
        if e.buffer.dtype == "float16":
            name = self.buffer_name(e.buffer, len(e.indices))
            return f"__half2float({name}[{self.text(e.indices[0])}])", P_PRIMARY
        return super().scalar_BufferLoad(e)

    def store_value(self, buf_dtype, value) -> str:
        if buf_dtype == "float16":
            if type(value) is E.Cast and value.value.dtype in (DataType("float32"), buf_dtype):
                value = value.value
            return f"__float2half_rn({self.text(value, P_ASSIGN)})"
        return super().store_value(buf_dtype, value)

    def cast_text(self, value, dst):
        if dst == "float16" and value.dtype != dst:
            return f"{self.round_helper(dst)}((float){self.text(value, P_UNARY)})", P_PRIMARY
        return super().cast_text(value, dst)


def render(funcs, target) -> tuple:
    """(CUDA source, per-function launch metadata) of lowered, split functions."""
    return render_gpu_module(funcs, target, CodeGenCUDA)


__all__ = ["CodeGenCUDA", "render", "PREAMBLE"]
