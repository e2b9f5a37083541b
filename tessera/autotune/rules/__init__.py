"""Design-space rules (MetaSchedule's ScheduleRules), one a file, applied by
space.generate_design_space over the blocks of a PrimFunc, consumers first.

`default_rules(ctx)` is the CPU list, in the order each block meets them: AutoInline, AddRFactor,
UseTensorIntrin, MultiLevelTiling, ParallelizeVectorizeUnroll (the root block), RandomComputeLocation;
for a GPU target (ctx.is_gpu) it is `gpu_rules(ctx)`: AutoInline (into producers too, branches
allowed, as MetaSchedule's CUDA list), CrossThreadReduction (long reductions shared by a block's
threads), TensorCoreGEMM (float16 GEMMs onto CUDA's tensor cores, a space per tile shape), MultiLevelTilingGPU ("SSSRRSRS", cooperative fetching), AutoBind, AutoUnroll (the root
block).
"""
from .add_rfactor import AddRFactor
from .auto_inline import AutoInline
from .base import ScheduleRule, SpaceContext
from .gpu_bind import AutoBind, AutoUnroll, CrossThreadReduction
from .multi_level_tiling import MultiLevelTiling
from .multi_level_tiling_gpu import MultiLevelTilingGPU
from .parallel_vectorize_unroll import ParallelizeVectorizeUnroll
from .random_compute_location import RandomComputeLocation
from .tensor_core import TensorCoreGEMM
from .use_tensor_intrin import UseTensorIntrin


def gpu_rules(ctx: SpaceContext) -> list:
    """The GPU rules (module docstring)."""
    return [AutoInline(ctx, into_producer=True, disallow_if_then_else=False), CrossThreadReduction(ctx),
            TensorCoreGEMM(ctx), MultiLevelTilingGPU(ctx), AutoBind(ctx), AutoUnroll(ctx)]


def default_rules(ctx: SpaceContext, tensor_intrinsics: bool = True) -> list:
    """The target's rules: the CPU list (tensor_intrinsics=False leaves out UseTensorIntrin), or
    gpu_rules for a GPU target."""
    if ctx.is_gpu:
        return gpu_rules(ctx)
    rules = [AutoInline(ctx), AddRFactor(ctx)]
    if tensor_intrinsics:
        rules.append(UseTensorIntrin(ctx))
    rules += [MultiLevelTiling(ctx), ParallelizeVectorizeUnroll(ctx), RandomComputeLocation(ctx)]
    return rules


__all__ = [
    "AddRFactor",
    "AutoBind",
    "AutoInline",
    "AutoUnroll",
    "CrossThreadReduction",
    "MultiLevelTiling",
    "MultiLevelTilingGPU",
    "ParallelizeVectorizeUnroll",
    "RandomComputeLocation",
    "ScheduleRule",
    "SpaceContext",
    "TensorCoreGEMM",
    "UseTensorIntrin",
    "default_rules",
    "gpu_rules",
]
