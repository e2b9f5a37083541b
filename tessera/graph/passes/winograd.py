"""winograd: 3x3 stride-1 convolutions as Winograd F(m x m, 3 x 3) (TVM's conv2d_winograd through
AlterOpLayout), on layers where that is faster than the direct blocked convolution.

Runs after alter_layout. A float32 `nn.contrib_conv2d_NCHWc` with a 3x3 kernel computed from
constants, stride 1, dilation 1, groups 1 and static shapes becomes

    V = nn.winograd_input_transform(data)                  (alpha, alpha, P, C), reads NCHW{i}c
    U = nn.winograd_weight_transform(weight)               (alpha, alpha, C, O), over constants
    M = nn.matmul(V, U)                                    alpha^2 products (P x C) @ (C x O)
    Y = nn.winograd_output_transform(M)                    NCHW{o}c, the conv's output name

so no layout transform appears around it, the bias / ReLU / residual add that followed the
convolution fuse into the output transform (fuse_ops), pack_matmul_weights packs U in the GEMM
micro-kernel's panels and the fold_constant after it evaluates U and the packing once, at compile
time. P, the tile count N * ceil(OH / m) * ceil(OW / m), is rounded up to a multiple of the rows of a
micro-kernel tile (`gemm_rows`); the extra rows are zeros and their results are never read.

Which layers, and which m (`choose_tile_size`): measured by benchmarks/winograd.py on the 3x3
stride-1 layers of ResNet-18/50 (docs/internals.md, "Winograd convolution"). The pass runs only for
CPU targets with the x86 GEMM micro-kernels (AVX2/FMA or AVX-512); other graphs are returned as they
are. Disable it by name: `disabled_passes=["winograd"]`. Results differ from the direct convolution
by the transforms' rounding (F(2x2): about float32 epsilon times the sum of |terms|; F(4x4): about
ten times that).
"""
from __future__ import annotations

from ...errors import TesseraError
from ...ops.nn._cpu_schedule import tile_preference
from ...ops.nn.conv_nchwc import CONV
from ...ops.nn.winograd import INPUT, OUTPUT, TILE_SIZES, WEIGHT, tiles_of
from ...target import Target
from ...tir.tensor_intrin.x86 import AVX2, AVX512, FP32_GEMM
from ..ir import Graph
from ._rewrite import Rewriter, const_derived


def _isa(target):
    """("avx512" | "avx2", lanes) of a target with the GEMM micro-kernels, else None."""
    try:
        t = Target(target)
    except TesseraError:
        return None
    if not t.is_cpu:
        return None
    for isa, feats, lanes in (("avx512", AVX512, 16), ("avx2", AVX2, 8)):
        if all(t.has_feature(f) for f in feats):
            return isa, lanes
    return None


def gemm_rows(tiles: int, channels: int, target) -> int:
    """The GEMM row count P for `tiles` Winograd tiles and `channels` output channels: the tile count
    rounded up to a multiple of the rows of the target's preferred micro-kernel tile whose columns
    divide the channels (the first in preference order that wastes at most 1/8 of the rows, else
    the one that wastes the fewest)."""
    isa = _isa(target)
    if isa is None:
        return tiles
    name, lanes = isa
    fits = [(mr, nr) for mr, nr in sorted(FP32_GEMM[name], key=lambda t: tile_preference(t, lanes))
            if channels % nr == 0]
    if name == "avx512" and not fits:
        fits = [(mr, nr) for mr, nr in sorted(FP32_GEMM["avx2"], key=lambda t: tile_preference(t, 8))
                if channels % nr == 0]
    if not fits:
        return tiles
    padded = [-(-tiles // mr) * mr for mr, _ in fits]
    for p in padded:
        if (p - tiles) * 8 <= tiles:
            return p
    return min(padded)


def choose_tile_size(batch: int, in_channels: int, out_channels: int, height: int, width: int, target):
    """m of F(m x m, 3 x 3) for a 3x3 stride-1 convolution with this output size (height x width),
    or None for the direct convolution: the rule measured by benchmarks/winograd.py on ResNet-18/50's
    layers (layer time / direct, docs/internals.md "Winograd convolution"). F(4x4) where it makes at
    least 16 tiles (56x56, 28x28, 14x14: 0.26-0.44 on AVX-512 and on AVX2). A 7x7 map, 4 tiles of
    F(4x4) or 16 of F(2x2): on AVX-512 F(2x2) (0.58 against F(4x4)'s 0.68-0.73 at 1 thread; 2 threads
    about even), on AVX2 F(4x4) (0.44-0.55 against 0.82-1.09: there both GEMMs run at the same low rate
    and F(4x4) has half the multiplies), so the F(4x4) minimum is 16 tiles with 16-lane vectors and 4
    with 8; else F(2x2) where it makes at least 16 tiles; else direct (not measured: a map that small
    is a few tiles of work). Channels: at least 64 in and out (the measured range; with few channels
    the GEMM is short and the transforms dominate)."""
    isa = _isa(target)
    if isa is None or in_channels < 64 or out_channels < 64:
        return None
    f4_min = 16 if isa[1] >= 16 else 4
    if batch * tiles_of(height, 4) * tiles_of(width, 4) >= f4_min:
        return 4
    if batch * tiles_of(height, 2) * tiles_of(width, 2) >= 16:
        return 2
    return None


def eligible(node, consts) -> bool:
    """Whether a node is a convolution the rewrite takes (module docstring)."""
    if node.op != CONV or len(node.inputs) != 2:
        return False
    data, weight = node.inputs
    a = node.attrs
    if tuple(a["strides"]) != (1, 1) or tuple(a["dilation"]) != (1, 1) or int(a.get("groups", 1)) != 1:
        return False
    if a.get("out_dtype") not in ("", None, "float32"):
        return False
    if str(data.type.dtype) != "float32" or str(weight.type.dtype) != "float32" or weight not in consts:
        return False
    if not data.type.is_static or not weight.type.is_static or tuple(weight.type.shape[2:4]) != (3, 3):
        return False
    return True


def winograd(graph: Graph, target="c", tile_size=None) -> Graph:
    """`graph` with its eligible 3x3 convolutions in Winograd form (module docstring). tile_size: None
    decides per layer (`choose_tile_size`); 2 or 4 rewrites every eligible convolution with that m
    (for measurements and tests)."""
    if not isinstance(graph, Graph):
        raise TesseraError(f"winograd takes a tessera.graph.Graph, got {type(graph).__name__}")
    if tile_size is not None and tile_size not in TILE_SIZES:
        raise TesseraError(f"winograd: tile_size must be None (per layer) or one of {TILE_SIZES}, got {tile_size!r}")
    if _isa(target) is None or not any(n.op == CONV for n in graph.nodes):
        return graph
    consts = const_derived(graph)
    plans = {}
    for n in graph.nodes:
        if not eligible(n, consts):
            continue
        N = n.inputs[0].type.shape[0]
        _, Oc, OH, OW, ob = n.outputs[0].type.shape
        C = n.inputs[0].type.shape[1] * n.inputs[0].type.shape[4]
        m = tile_size if tile_size is not None else choose_tile_size(N, C, Oc * ob, OH, OW, target)
        if m is not None:
            plans[n] = m
    if not plans:
        return graph
    rw = Rewriter(graph)
    for n in graph.nodes:
        m = plans.get(n)
        if m is None:
            rw.emit(n)
            continue
        data, weight = (rw.get(v) for v in n.inputs)
        a = n.attrs
        N, Oc, OH, OW, ob = n.outputs[0].type.shape
        rows = gemm_rows(N * tiles_of(OH, m) * tiles_of(OW, m), Oc * ob, target)
        v = rw.make(INPUT, data, name=f"{n.name}_winograd_input", tile_size=m, padding=tuple(a["padding"]),
                    rows=rows, layout=a["data_layout"])
        u = rw.make(WEIGHT, weight, name=f"{n.name}_winograd_weight", tile_size=m, kernel_layout=a["kernel_layout"])
        prod = rw.make("nn.matmul", v, u, name=f"{n.name}_winograd_gemm")
        y = rw.make(OUTPUT, prod, name=n.name, takes_over=n, tile_size=m, batch=N, output_size=(OH, OW),
                    layout=a["out_layout"])
        rw.replace(n.outputs[0], y)
    return rw.finish()


__all__ = ["choose_tile_size", "eligible", "gemm_rows", "winograd"]
