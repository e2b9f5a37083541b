"""Graph passes: each a function `pass(graph, ctx) -> Graph` (ctx: a PassContext carrying the target,
or a target, or None for the host), and the pass manager that runs them by opt_level.

    from tessera.graph import passes
    g2 = passes.optimize(graph, opt_level=3)                  # what tessera.compile runs
    g3 = passes.optimize(graph, opt_level=3, disabled_passes=["fuse_ops"])   # an ablation
    passes.fuse_ops(passes.fold_constant(graph, "c"))         # or one pass at a time

The pipeline (TVM's names; a pass runs when opt_level >= its level and it is not disabled):

| level | pass                      | what it does                                                    |
| ----- | ------------------------- | --------------------------------------------------------------- |
| 1     | fake_quantization_to_integer | QDQ groups and QOperator nodes as integer ops (int8 between layers) |
| 1     | fold_constant             | evaluates constant-only subgraphs (and shape queries of static shapes) |
| 1     | simplify_inference        | drops no-ops, batch norm -> scale/shift, folds scale/shift into conv/dense weights |
| 1     | fold_constant             | evaluates the folded weights simplify_inference set up         |
| 2     | eliminate_common_subexpr  | merges equal computations and equal constants                  |
| 2     | lookup_table              | an elementwise chain from one 8-bit tensor to an 8-bit one: a 256-entry table lookup |
| 3     | alter_layout              | blocked conv layouts                                            |
| 3     | winograd                  | 3x3 stride-1 convolutions as Winograd transforms + batched GEMM where faster |
| 3     | pack_matmul_weights       | constant matmul weights packed once in micro-kernel panels (x86) |
| 1     | dead_code_elimination     | drops what no output needs                                      |
| 2     | fuse_ops                  | groups ops into fused kernels                                   |
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ...errors import TesseraError
from ..const_eval import bind_params
from ..ir import Graph
from .alter_layout import alter_layout
from .context import PassContext
from .dead_code_elimination import dead_code_elimination
from .eliminate_common_subexpr import eliminate_common_subexpr
from .fake_quantization_to_integer import fake_quantization_to_integer
from .fold_constant import fold_constant
from .fuse_ops import fuse_ops, fusion_groups
from .lookup_table import lookup_table
from .pack_matmul_weights import pack_matmul_weights
from .simplify_inference import simplify_inference
from .winograd import winograd


@dataclass(frozen=True)
class PassInfo:
    """One pass of the pipeline: its name (what disabled_passes names), the lowest opt_level that
    runs it, and the function, called as fn(graph, ctx)."""

    name: str
    opt_level: int
    fn: Callable


PIPELINE = (
    PassInfo("fake_quantization_to_integer", 1, fake_quantization_to_integer),
    PassInfo("fold_constant", 1, fold_constant),
    PassInfo("simplify_inference", 1, simplify_inference),
    PassInfo("fold_constant", 1, fold_constant),
    PassInfo("eliminate_common_subexpr", 2, eliminate_common_subexpr),
    PassInfo("lookup_table", 2, lookup_table),
    PassInfo("alter_layout", 3, alter_layout),
    PassInfo("winograd", 3, winograd),
    PassInfo("pack_matmul_weights", 3, pack_matmul_weights),
    PassInfo("fold_constant", 3, fold_constant),
    PassInfo("dead_code_elimination", 1, dead_code_elimination),
    PassInfo("fuse_ops", 2, fuse_ops),
)


def pass_names() -> list:
    """The names `disabled_passes` accepts."""
    out = []
    for p in PIPELINE:
        if p.name not in out:
            out.append(p.name)
    return out


def passes_for(opt_level: int, disabled_passes: Iterable[str] = ()) -> list:
    """The PassInfos that run at this opt_level without the disabled ones, in order."""
    if isinstance(opt_level, bool) or not isinstance(opt_level, int) or not 0 <= opt_level <= 3:
        raise TesseraError(f"opt_level must be an int from 0 to 3, got {opt_level!r}")
    if isinstance(disabled_passes, str):
        disabled_passes = [disabled_passes]
    disabled = set(disabled_passes or ())
    unknown = sorted(disabled - set(pass_names()))
    if unknown:
        raise TesseraError(f"disabled_passes names unknown passes {unknown}; the passes are {pass_names()}")
    out = []
    for p in PIPELINE:
        if p.opt_level > opt_level or p.name in disabled:
            continue
        if p.name == "fold_constant" and p.opt_level == 3 and not any(q.name == "alter_layout" for q in out):
            continue             # the second fold only serves alter_layout's pre-packed weights
        out.append(p)
    return out


def optimize(graph: Graph, opt_level: int = 3, target="c", disabled_passes: Iterable[str] = ()) -> Graph:
    """Run the pipeline's passes for `opt_level` (minus `disabled_passes`) on `graph` for `target`: what
    tessera.compile and the tuner's task extraction both run (the records' keys depend on it)."""
    if not isinstance(graph, Graph):
        raise TesseraError(f"optimize takes a tessera.graph.Graph, got {type(graph).__name__}")
    passes = passes_for(opt_level, disabled_passes)
    ctx = PassContext(PassContext.of(target).target, opt_level)
    for p in passes:
        graph = run_pass(p.fn, graph, ctx, p.name)
    return graph


def optimized_graph(graph: Graph, params=None, target="c", opt_level: int = 3,
                    disabled_passes: Iterable[str] = ()) -> Graph:
    """The graph tessera.compile builds and the tuner extracts its tasks from: params bound (const_eval.
    bind_params), then `optimize`: one pipeline, so that records keyed by the kernels it makes apply."""
    if not isinstance(graph, Graph):
        raise TesseraError(f"optimized_graph takes a tessera.graph.Graph, got {type(graph).__name__}")
    return optimize(bind_params(graph, params), opt_level, target, disabled_passes)


def run_pass(fn, graph: Graph, ctx, name: str) -> Graph:
    """Call one pass as fn(graph, ctx) and check it returned a Graph with the same public names."""
    out = fn(graph, PassContext.of(ctx))
    if not isinstance(out, Graph):
        raise TesseraError(f"graph pass {name} returned {type(out).__name__}, not a Graph")
    if out.interface != graph.interface:
        raise TesseraError(f"graph pass {name} changed the public names of graph {graph.name!r}: inputs "
                           f"{list(graph.input_names)} -> {list(out.input_names)}, outputs "
                           f"{list(graph.output_names)} -> {list(out.output_names)}")
    return out


__all__ = ["optimize", "optimized_graph", "passes_for", "pass_names", "PassContext", "PassInfo", "PIPELINE", "run_pass",
           "alter_layout", "fake_quantization_to_integer", "fold_constant", "simplify_inference", "eliminate_common_subexpr",
           "dead_code_elimination", "fuse_ops", "fusion_groups", "lookup_table", "pack_matmul_weights", "winograd"]
