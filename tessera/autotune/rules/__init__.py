"""Design-space rules (MetaSchedule's ScheduleRules), one a file, applied by
space.generate_design_space over the blocks of a PrimFunc, consumers first.

`default_rules(ctx)` is the CPU list, in the order each block meets them: AutoInline, AddRFactor,
UseTensorIntrin, MultiLevelTiling, ParallelizeVectorizeUnroll (the root block), RandomComputeLocation.
"""
from .add_rfactor import AddRFactor
from .auto_inline import AutoInline
from .base import ScheduleRule, SpaceContext
from .multi_level_tiling import MultiLevelTiling
from .parallel_vectorize_unroll import ParallelizeVectorizeUnroll
from .random_compute_location import RandomComputeLocation
from .use_tensor_intrin import UseTensorIntrin


def default_rules(ctx: SpaceContext, tensor_intrinsics: bool = True) -> list:
    """The CPU rules (tensor_intrinsics=False leaves out UseTensorIntrin)."""
    rules = [AutoInline(ctx), AddRFactor(ctx)]
    if tensor_intrinsics:
        rules.append(UseTensorIntrin(ctx))
    rules += [MultiLevelTiling(ctx), ParallelizeVectorizeUnroll(ctx), RandomComputeLocation(ctx)]
    return rules


__all__ = [
    "AddRFactor",
    "AutoInline",
    "MultiLevelTiling",
    "ParallelizeVectorizeUnroll",
    "RandomComputeLocation",
    "ScheduleRule",
    "SpaceContext",
    "UseTensorIntrin",
    "default_rules",
]
