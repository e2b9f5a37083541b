"""pack_matmul_weights: constant matmul weights packed once, at compile time, in the panel layout
the x86 GEMM micro-kernels stream (TVM's dense_pack through AlterOpLayout).

A float32 `nn.matmul(a, b)` whose b is computed from constants, with a static M (a's rows) that a
micro-kernel tile divides or a symbolic M (nn.matmul pads its rows), becomes `nn.matmul(a,
nn.pack_matmul_weight(b, panel), b_panel=panel, b_cols=N)`; the packing node is over constants, so
the fold_constant this pass ends with evaluates it. Without the pass, the matmul packs B inside its
kernel on every call (a copy of the whole weight, which for transformer layers costs a sizeable
share of the kernel's time). Only for CPU targets with the AVX2/FMA (or AVX-512) micro-kernels; other graphs are returned as they are.
The results are the same values (the same products and sums in the same order).

An integer `qnn.dense` (uint8 data, constant int8 weight (K, N)) whose rows a tile of the target's int8
GEMM micro-kernel divides (x86.INT8_GEMM: VNNI vpdpbusd, else AVX2) gets its weight packed here as
numpy does it, (N / nr, ceil(K / 4), nr, 4) with zeros past K (b_panel = nr: vpdpbusd's quads of
four k), and the input zero point's share of each column folded into the bias (input_zero_point 0):
the kernel then multiplies the uint8 data as they are (ops/integer.py schedules it on the micro-kernel).
"""
from __future__ import annotations

import numpy as np

from ...errors import TesseraError
from ..ir import Graph
from ._rewrite import Rewriter, const_derived
from ...target import Target
from ...ops.nn.dense import pack_panel
from ...ops.integer import int8_gemm_isa
from ...tir.tensor_intrin import x86
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


_QDENSE = "qnn.dense"


def _int8_isa(target):
    try:
        return int8_gemm_isa(target)
    except TesseraError:
        return None


def _qdense_panel(node, consts, isa):
    """The panel width for a qnn.dense's constant weight (module docstring), or None."""
    if isa is None or node.op != _QDENSE or node.attrs.get("b_panel") or len(node.inputs) != 4:
        return None
    data, w, b, m = node.inputs
    if str(data.type.dtype) != "uint8" or str(w.type.dtype) != "int8" or w.type.ndim != 2 \
            or any(v not in consts for v in (w, b, m)):
        return None
    M, (K, N) = data.type.shape[-2] if data.type.ndim >= 2 else 1, w.type.shape
    if not all(isinstance(d, int) and d > 0 for d in (M, K, N)):
        return None
    for mr, nr in x86.INT8_GEMM[isa]:
        if M % mr == 0 and N % nr == 0:
            return nr
    return None


def _pack_qdense(rw, n, consts, nr):
    """n (qnn.dense) on its weight packed in nr-column panels, the zero point folded into the bias (n as
    it is where the folded bias leaves int32)."""
    data, w, b, m = n.inputs
    wv = np.asarray(consts[w]).astype(np.int64)
    zp = int(n.attrs["input_zero_point"])
    bias = np.asarray(consts[b]).astype(np.int64) - zp * wv.sum(0)
    if np.abs(bias).max(initial=0) >= 2**31:
        rw.emit(n)
        return
    bias = bias.astype(np.int32)
    K, N = wv.shape
    q = -(-K // 4)
    padded = np.zeros((q * 4, N), np.int64)
    padded[:K] = wv
    packed = padded.reshape(q, 4, N // nr, nr).transpose(2, 0, 3, 1).astype(np.int8)
    attrs = dict(n.attrs, input_zero_point=0, b_panel=nr)
    out = rw.make(_QDENSE, rw.get(data), rw.const(np.ascontiguousarray(packed), f"{w.name}_packed"),
                  rw.const(bias, f"{b.name}_folded"), rw.get(m), name=n.name, takes_over=n, **attrs)
    rw.replace(n.outputs[0], out)


def pack_matmul_weights(graph: Graph, ctx=None) -> Graph:
    """`graph` with its constant matmul weights pre-packed (see the module docstring)."""
    target = PassContext.of(ctx).target
    if not isinstance(graph, Graph):
        raise TesseraError(f"pack_matmul_weights takes a tessera.graph.Graph, got {type(graph).__name__}")
    if not _has_microkernels(target) or not any(n.op in (_MATMUL, _QDENSE) for n in graph.nodes):
        return graph
    consts = const_derived(graph)
    isa = _int8_isa(target)
    panels = {n: _panel_for(n, consts, target) if n.op == _MATMUL else _qdense_panel(n, graph.constants, isa)
              for n in graph.nodes}
    if not any(panels.values()):
        return graph
    rw = Rewriter(graph)
    for n in graph.nodes:
        panel = panels[n]
        if not panel:
            rw.emit(n)
            continue
        if n.op == _QDENSE:
            _pack_qdense(rw, n, graph.constants, panel)
            continue
        a, b = (rw.get(v) for v in n.inputs)
        packed = rw.make("nn.pack_matmul_weight", b, name=f"{n.name}_packed_b", panel=panel)
        out = rw.make(_MATMUL, a, packed, name=n.name, takes_over=n, b_panel=panel, b_cols=b.type.shape[-1])
        rw.replace(n.outputs[0], out)
    return fold_constant(rw.finish(), ctx)


__all__ = ["pack_matmul_weights"]
