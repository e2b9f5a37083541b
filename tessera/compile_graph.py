"""tessera.compile: a graph (+ params) -> an executable that runs it with compiled kernels."""
from __future__ import annotations

from .errors import TesseraError
from .graph.aot import build_aot
from .graph.compiler import compile_graph, graph_executor, static_problem
from .graph.const_eval import bind_params
from .graph.ir import Graph
from .graph.passes import optimize, passes_for
from .target import Target


EXECUTORS = ("auto", "graph", "aot")


def compile(graph, params=None, target="c", opt_level: int = 3, disabled_passes=(),  # noqa: A001
            executor: str = "auto"):
    """Compile `graph` for `target`; returns an executor (`exe(x)`, `exe.run({...})`, `exe.profile()`).

    executor: "auto" (default): with static shapes (after the optimizations: bound by `params` or the
    frontend's shape_dict), the whole graph is one C entry point over a static memory plan, an
    AotExecutor (tessera.graph.aot: every kernel in one translation unit, no per-node Python, no
    kernel compiled on its own); with a symbolic dimension, the GraphExecutor. "graph" always the
    GraphExecutor (node by node from Python: symbolic shapes, debugging, each kernel its own library).
    "aot" the AotExecutor, refusing symbolic shapes.

    params: {graph input name: array} bound as constants (the weights `from_onnx` returns).
    opt_level: which graph passes run (tessera.graph.passes): 0 none, one kernel per node as given;
    1 fold_constant, simplify_inference, dead_code_elimination; 2 also eliminate_common_subexpr and
    fuse_ops; 3 (default, as TVM's builds use) also alter_layout and pack_matmul_weights (blocked
    convolutions, pre-packed matmul weights: ResNet-18 on 2 threads ran 2.4x ONNX Runtime's latency
    at level 2, 1.2x at 3). disabled_passes: pass names left
    out (TVM's PassContext(disabled_pass=...)), e.g. ["fuse_ops"] for the fusion ablation.
    `exe.graph` is the optimized graph that runs (`exe.graph.script()` prints it); the graph compiler
    (tessera.graph.compiler) made the kernels and the runtime Plan the executor runs (`exe.plan`).
    """
    if not isinstance(graph, Graph):
        raise TesseraError(f"tessera.compile takes a tessera.graph.Graph (from graph.Builder or "
                           f"tessera.frontend.from_onnx), got {type(graph).__name__}")
    if isinstance(opt_level, bool) or not isinstance(opt_level, int) or not 0 <= opt_level <= 3:
        raise TesseraError(f"tessera.compile: opt_level must be an int from 0 to 3, got {opt_level!r}")
    if not isinstance(executor, str) or executor not in EXECUTORS:
        raise TesseraError(f"tessera.compile: executor must be one of {', '.join(map(repr, EXECUTORS))} "
                           f"('auto': one C entry with static shapes, else the graph executor), got {executor!r}")
    passes_for(opt_level, disabled_passes)      # unknown pass names fail before any work
    target = Target(target)
    g = bind_params(graph, params)
    g = optimize(g, opt_level, target, disabled_passes)
    if executor == "auto":
        executor = "aot" if target.is_cpu and static_problem(g) is None else "graph"
    compiled = compile_graph(g, target, build_kernels=executor == "graph")
    if executor == "aot":
        return build_aot(compiled, opt_level=opt_level)
    return graph_executor(compiled, opt_level)
