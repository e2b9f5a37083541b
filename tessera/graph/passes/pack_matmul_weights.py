"""pack_matmul_weights: constant matmul weights packed once, at compile time, in the panel layout
the x86 GEMM micro-kernels stream (TVM's dense_pack through AlterOpLayout).

A float32 `nn.matmul(a, b)` whose b is computed from constants, with a static M (a's rows) that a
micro-kernel tile divides or a symbolic M (nn.matmul pads its rows), becomes `nn.matmul(a,
nn.pack_matmul_weight(b, panel), b_panel=panel, b_cols=N)`; the packing node is over constants, so
the fold_constant this pass ends with evaluates it. Without the pass, the matmul packs B inside its
kernel on every call (a copy of the whole weight, which for transformer layers costs a sizeable
share of the kernel's time). Only for CPU targets with the AVX2/FMA (or AVX-512) micro-kernels; other graphs are returned as they are.
The results are the same values (the same products and sums in the same order).
"""
from __future__ import annotations

from ...errors import TesseraError
from ..ir import Graph
from ._rewrite import Rewriter, const_derived
from ...target import Target
from ...ops.nn.dense import pack_panel
from .fold_constant import fold_constant
from .context import PassContext

_MATMUL = "nn.matmul"


def _has_microkernels(target) -> bool:
    try:
        t = Target(target)
    except TesseraError:
        return False
    return (t.has_feature("avx2") and t.has_feature("fma")) or t.has_feature("avx512f")


def _panel_for(node, consts, target):
    """The panel width for node's B, or None when the node does not qualify."""
    if node.op != _MATMUL or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    at = node.attrs
    if at.get("b_panel") or at.get("transpose_a") or at.get("transpose_b") or at.get("out_dtype") not in ("", None, "float32"):
        return None
    if b not in consts or str(a.type.dtype) != "float32" or str(b.type.dtype) != "float32":
        return None
    if a.type.ndim < 2 or b.type.ndim < 2:
        return None
    M, K, N = a.type.shape[-2], b.type.shape[-2], b.type.shape[-1]
    if not all(isinstance(d, int) and d > 0 for d in (K, N)):
        return None
    if not (isinstance(M, str) or (isinstance(M, int) and M > 0)):
        return None
    return pack_panel(M if isinstance(M, int) else None, N, target)  # symbolic M: rows padded (nn.matmul)


def pack_matmul_weights(graph: Graph, ctx=None) -> Graph:
    """`graph` with its constant matmul weights pre-packed (see the module docstring)."""
    target = PassContext.of(ctx).target
    if not isinstance(graph, Graph):
        raise TesseraError(f"pack_matmul_weights takes a tessera.graph.Graph, got {type(graph).__name__}")
    if not _has_microkernels(target) or not any(n.op == _MATMUL for n in graph.nodes):
        return graph
    consts = const_derived(graph)
    panels = {n: _panel_for(n, consts, target) for n in graph.nodes}
    if not any(panels.values()):
        return graph
    rw = Rewriter(graph)
    for n in graph.nodes:
        panel = panels[n]
        if not panel:
            rw.emit(n)
            continue
        a, b = (rw.get(v) for v in n.inputs)
        packed = rw.make("nn.pack_matmul_weight", b, name=f"{n.name}_packed_b", panel=panel)
        out = rw.make(_MATMUL, a, packed, name=n.name, takes_over=n, b_panel=panel, b_cols=b.type.shape[-1])
        rw.replace(n.outputs[0], out)
    return fold_constant(rw.finish(), ctx)


__all__ = ["pack_matmul_weights"]
