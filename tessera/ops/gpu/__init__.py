"""Default GPU schedules (docs/gpu.md): what a program needs before a GPU backend can build it."""
from .auto_bind import auto_bind
from .default import schedule_gpu_default, threads_per_block
from .gemm import schedule_gemm_gpu
from .tensorcore import schedule_gemm_tensorcore, schedule_gemm_wgmma

__all__ = ["auto_bind", "schedule_gemm_gpu", "schedule_gemm_tensorcore", "schedule_gemm_wgmma", "schedule_gpu_default", "threads_per_block"]
