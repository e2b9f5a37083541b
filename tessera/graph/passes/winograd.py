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

Which layers, and which m (`choose_tile_size`): the cheapest form by a cost estimate (`layer_costs`:
multiplies, with a floor on the GEMM's rows when the graph's weights outgrow the cache and stream from
memory every call, `weights_cold`), measured by benchmarks/winograd.py on the 3x3 stride-1 layers of
ResNet-18/50 alone and inside the models (docs/internals.md, "Winograd convolution"). The pass runs only for
CPU targets with the x86 GEMM micro-kernels (AVX2/FMA or AVX-512); other graphs are returned as they
are. Disable it by name: `disabled_passes=["winograd"]`. Results differ from the direct convolution
by the transforms' rounding (F(2x2): about float32 epsilon times the sum of |terms|; F(3x3): about
five times that; F(4x4): about ten times that).
"""
from __future__ import annotations

import numbers

from ...errors import TesseraError
from ...ops.nn._cpu_schedule import tile_preference
from ...ops.nn.conv_nchwc import CONV
from ...ops.nn.winograd import INPUT, OUTPUT, TILE_SIZES, WEIGHT, tiles_of
from ...target import Target
from ...tir.tensor_intrin.x86 import AVX2, AVX512, FP32_GEMM
from ..ir import Graph
from ._rewrite import Rewriter, const_derived
from .context import PassContext


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


def _tile_size(m):
    """m as an int where it is one of TILE_SIZES (a numpy integer too), else None: what the transform
    ops take (an int, not 2.0 or True)."""
    if isinstance(m, bool) or not isinstance(m, numbers.Integral) or int(m) not in TILE_SIZES:
        return None
    return int(m)


def gemm_rows(tiles: int, channels: int, target) -> int:
    """The GEMM row count P for `tiles` Winograd tiles and `channels` output channels: the tile count
    rounded up to the rows of the target's preferred micro-kernel tile whose columns divide the
    channels where that pads at most 1/16 of the rows, else to the fewest rows a fitting tile divides
    (ties to the preferred tile). Padded rows are multiplies whose results nobody reads: inside
    ResNet-50 (AVX-512) 16 tiles as 16 rows of the 4x64 tile instead of 18 of the 6x64 one took 0.89x
    the GEMM time (F(2x2) at 7x7), 49 tiles as 52 rows instead of 54 about 0.97x; but 196 tiles as 196
    rows of 4x16 instead of 198 of 6x16 took 1.13x on AVX2, where the narrower tile loads more per
    multiply (docs/internals.md, "Winograd convolution")."""
    isa = _isa(target)
    if isa is None:
        return tiles
    name, lanes = isa
    fits = [mr for mr, nr in sorted(FP32_GEMM[name], key=lambda t: tile_preference(t, lanes)) if channels % nr == 0]
    if name == "avx512" and not fits:
        fits = [mr for mr, nr in sorted(FP32_GEMM["avx2"], key=lambda t: tile_preference(t, 8)) if channels % nr == 0]
    if not fits:
        return tiles
    preferred = -(-tiles // fits[0]) * fits[0]
    if (preferred - tiles) * 16 <= tiles:
        return preferred
    return min(-(-tiles // mr) * mr for mr in fits)


# The GEMM of a Winograd layer multiplies each transformed weight by its P rows only. When the weights
# come from memory (a batch-1 model whose weights outgrow the last-level cache streams all of them every
# call), a GEMM with few rows waits for them: in ResNet-50 on AVX-512 (Zen 5, 1 and 2 threads) F(4x4) at
# 14x14 (16 rows) ran at the cost of ~24 rows, as fast as F(2x2) with 52, where with its weights in cache
# F(4x4) took 0.86x F(2x2)'s time. COLD_ROWS is that floor, COLD_WEIGHT_BYTES the graph's constant bytes
# above which the weights count as streamed (32 MB: the L3 of a Zen 3-5 CCD; 30-60 MB on server Xeons).
COLD_ROWS = 24
COLD_WEIGHT_BYTES = 32 << 20


def streams_weights(nbytes: int) -> bool:
    """Whether a model reading `nbytes` of weights a call streams them from memory (more than
    COLD_WEIGHT_BYTES): the one rule for this pass and for the tuner's timing (autotune.tune)."""
    return nbytes > COLD_WEIGHT_BYTES


def weights_cold(graph: Graph) -> bool:
    """Whether a batch-1 call of `graph` streams its weights from memory: its constants total more than
    COLD_WEIGHT_BYTES (ResNet-18 ~45 MB, ResNet-50 ~100 MB do; a block or a layer does not)."""
    return streams_weights(sum(arr.nbytes for arr in graph.constants.values()))   # numpy arrays (Graph)


def layer_costs(batch: int, out_channels: int, height: int, width: int, target, cold_weights: bool = False) -> dict:
    """The rule's cost estimate of each way to run a 3x3 stride-1 convolution with this output size:
    {None: direct, 2: F(2x2), 4: F(4x4)} -> multiply-adds per (input, output) channel pair, in units
    of one GEMM row at one tile position (direct: 9 taps x pixels; F(m): alpha^2 positions x the
    GEMM's rows, at least COLD_ROWS when the weights are cold; the output channels decide the GEMM's
    micro-kernel tile, so its rows). Only the forms with the tiles the rule asks of them appear
    (`choose_tile_size`, which also applies the channel minimum)."""
    isa = _isa(target)
    costs = {None: 9 * batch * height * width}
    if isa is None:
        return costs
    floor = COLD_ROWS if cold_weights else 0
    for m, least in ((4, 16 if isa[1] >= 16 else 4), (2, 16)):
        tiles = batch * tiles_of(height, m) * tiles_of(width, m)
        if tiles >= least:
            costs[m] = (m + 2) ** 2 * max(gemm_rows(tiles, out_channels, target), floor)
    return costs


def choose_tile_size(batch: int, in_channels: int, out_channels: int, height: int, width: int, target,
                     cold_weights: bool = False):
    """m of F(m x m, 3 x 3) for a 3x3 stride-1 convolution with this output size (height x width),
    or None for the direct convolution. The cheapest form by `layer_costs` (measured by
    benchmarks/winograd.py on ResNet-18/50's layers, alone and inside the models; docs/internals.md
    "Winograd convolution"), each F(m) only where it makes at least 16 tiles (F(4x4) on 8-lane
    vectors: 4, where the AVX2 GEMMs of both run at the same low rate and F(4x4) has half the
    multiplies), only with >= 64 channels in and out (with few the transforms dominate). With its
    weights in cache (a layer alone): F(4x4) at 56x56, 28x28, 14x14 (0.29-0.45x the direct time),
    F(2x2) at 7x7 on AVX-512 (0.80x). With cold weights (cold_weights: the pass asks `weights_cold` of the graph) on
    AVX-512 the few-row GEMMs cost COLD_ROWS rows: 14x14 takes F(2x2), 7x7 F(2x2) still (0.78x the
    direct time inside ResNet-50 at 1 thread). AVX2 code keeps its measured rule, cold_weights unused
    (inside ResNet-18 F(4x4) stays ahead: 0.36-0.59x the direct time, 0.46x at 7x7). F(3x3) is not
    among the rule's forms: at 14x14 inside ResNet-18/50 it measured 0.97-0.98x F(2x2)'s time (1 and 2
    threads), where the estimate says 0.84x, with ~5x F(2x2)'s rounding growth."""
    isa = _isa(target)
    if isa is None or in_channels < 64 or out_channels < 64:
        return None
    costs = layer_costs(batch, out_channels, height, width, target, cold_weights=cold_weights and isa[1] >= 16)
    wino = [m for m in (4, 2) if m in costs]
    if not wino:
        return None
    best = min(wino, key=lambda m: costs[m])   # ties: F(4x4), the fewer multiplies
    if isa[1] < 16:
        return best
    return best if costs[best] < costs[None] else None


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


def winograd(graph: Graph, ctx=None, *, tile_size=None, choose=None) -> Graph:
    """`graph` with its eligible 3x3 convolutions in Winograd form (module docstring). tile_size: None
    decides per layer (`choose_tile_size`); 2, 3 or 4 rewrites every eligible convolution with that m.
    choose: instead of the rule, a function (batch, in_channels, out_channels, height, width) -> 2, 3,
    4 or None (direct) per eligible convolution. Both are for measurements and tests."""
    target = PassContext.of(ctx).target
    if not isinstance(graph, Graph):
        raise TesseraError(f"winograd takes a tessera.graph.Graph, got {type(graph).__name__}")
    if tile_size is not None and _tile_size(tile_size) is None:
        raise TesseraError(f"winograd: tile_size must be None (per layer) or one of {TILE_SIZES}, got {tile_size!r}")
    if choose is not None and (tile_size is not None or not callable(choose)):
        raise TesseraError(f"winograd: choose must be a callable and tile_size None with it, got choose={choose!r}, "
                           f"tile_size={tile_size!r}")
    if _isa(target) is None or not any(n.op == CONV for n in graph.nodes):
        return graph
    consts = const_derived(graph)
    cold = weights_cold(graph)
    plans = {}
    for n in graph.nodes:
        if not eligible(n, consts):
            continue
        N = n.inputs[0].type.shape[0]
        _, Oc, OH, OW, ob = n.outputs[0].type.shape
        C = n.inputs[0].type.shape[1] * n.inputs[0].type.shape[4]
        if tile_size is not None:
            m = _tile_size(tile_size)
        elif choose is not None:
            picked = choose(N, C, Oc * ob, OH, OW)
            m = None if picked is None else _tile_size(picked)
            if picked is not None and m is None:
                raise TesseraError(f"winograd: choose returned {picked!r} for {n.name!r}; expected None or one of "
                                   f"{TILE_SIZES}")
        else:
            m = choose_tile_size(N, C, Oc * ob, OH, OW, target, cold)
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


__all__ = ["COLD_ROWS", "COLD_WEIGHT_BYTES", "choose_tile_size", "eligible", "gemm_rows", "layer_costs",
           "streams_weights", "weights_cold", "winograd"]
