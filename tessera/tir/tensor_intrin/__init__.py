"""Tensor intrinsics: TensorIntrin (desc + impl + C source, registered by name) and the x86 ones.

    from tessera.tir import TensorIntrin
    TensorIntrin.list()                       # registered names
    TensorIntrin.get("x86_avx2_fma_gemm_6x16_f32")
    sch.tensorize(loop, "x86_avx2_fma_gemm_6x16_f32")
    x86.gemm_intrin_for("c", "float32")       # the best micro-kernel this machine has

x86_conv (the blocked convolution's row micro-kernels, C from the template x86_conv.c) registers its
family when imported, by the operator library's blocked convolution.
"""
from .intrin import TensorIntrin
from . import x86  # noqa: E402,F401  (registers the x86 intrinsics)
from . import cuda  # noqa: E402,F401  (registers the CUDA tensor-core intrinsics)
from . import cuda_gemm  # noqa: E402,F401  (the block-level tensor-core GEMM family)
from . import cuda_wgmma  # noqa: E402,F401  (the same on Hopper's warpgroup MMA, sm_90a)

__all__ = ["TensorIntrin", "cuda", "cuda_gemm", "cuda_wgmma", "x86"]
