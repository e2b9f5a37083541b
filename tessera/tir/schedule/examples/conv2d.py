"""A hand-written direct conv2d schedule for x86 CPUs around the GEMM micro-kernel
(benchmarks/conv2d.py measures it against PyTorch).

    func = conv2d_program(1, 64, 56, 56, 64, 3, 3, pad=1, ocb=16)
    sch = schedule_conv2d(func, owb=4, ocb=16)
    lib = tessera.build(sch, target="c -num-threads=2")

The program takes and returns NCHW tensors (as PyTorch's) and computes in NHWC inside: `data_pad`
(zero-padded NHWC copy of the input), `weight_pack` (OIHW weights as [oc / ocb][kh][kw][ic][ocb],
each ocb-wide slice of output channels contiguous per input channel), `conv` (NHWC output) and
`output` (back to NCHW). For a fixed output row, kernel tap (kh, kw) and tile of owb output
columns x ocb output channels, conv is exactly a GEMM tile
`O[ow, oc] += data_pad[oh + kh, ow + kw, ic] * weight_pack[kh, kw, ic, oc]` over ic: rows of A
are input pixels 64 floats apart, B is the packed weight slice, C the output pixels. The schedule
tiles ow by owb and oc by ocb, orders `n, oh, oc_0, ow_0, kh, kw | ow_1, oc_1, ic`, runs oh in
parallel and tensorizes the tile with the owb x ocb micro-kernel (4 x 16 on AVX2: 8 accumulators,
2 loads of weights and 4 broadcasts of input pixels per input channel; 14 x 8 is the other tile
that divides 56 columns, 14 accumulators but one broadcast per FMA, measured slower).
"""
from __future__ import annotations

from .... import te
from ....errors import ScheduleError
from ....ir import const
from ..schedule import Schedule
from ...tensor_intrin import x86


def conv2d_program(N: int, C: int, H: int, W: int, OC: int, KH: int, KW: int, pad: int = 0,
                   ocb: int = 16, dtype: str = "float32"):
    """NCHW conv2d (stride 1) computed through NHWC stages; see the module docstring."""
    if OC % ocb:
        raise ScheduleError(f"conv2d_program: ocb={ocb} must divide the {OC} output channels")
    OH, OW = H + 2 * pad - KH + 1, W + 2 * pad - KW + 1
    data = te.placeholder((N, C, H, W), name="data", dtype=dtype)
    weight = te.placeholder((OC, C, KH, KW), name="weight", dtype=dtype)
    Hp, Wp = H + 2 * pad, W + 2 * pad
    dp = te.compute((N, Hp, Wp, C), lambda n, h, w, c: te.if_then_else(
        te.all(h >= pad, h < H + pad, w >= pad, w < W + pad),
        data[n, c, te.max(te.min(h - pad, H - 1), 0), te.max(te.min(w - pad, W - 1), 0)],
        const(0.0, dtype)), name="data_pad")
    wp = te.compute((OC // ocb, KH, KW, C, ocb), lambda o, kh, kw, c, oi: weight[o * ocb + oi, c, kh, kw],
                    name="weight_pack")
    kh = te.reduce_axis((0, KH), name="kh")
    kw = te.reduce_axis((0, KW), name="kw")
    ic = te.reduce_axis((0, C), name="ic")
    conv = te.compute((N, OH, OW, OC), lambda n, oh, ow, oc: te.sum(
        dp[n, oh + kh, ow + kw, ic] * wp[oc // ocb, kh, kw, ic, oc % ocb], axis=[kh, kw, ic]), name="conv")
    out = te.compute((N, OC, OH, OW), lambda n, c, h, w: conv[n, h, w, c], name="output")
    return te.create_prim_func([data, weight, out])


def schedule_conv2d(func_or_sch, *, owb: int = 4, ocb: int = 16, intrin: str | None = None,
                    target="c") -> Schedule:
    """The schedule of the module docstring on conv2d_program's function (or a Schedule of it)."""
    sch = func_or_sch if isinstance(func_or_sch, Schedule) else Schedule(func_or_sch)
    if intrin is None:
        intrin = x86.gemm_intrin_for(target, "float32", tiles=[(owb, ocb)])
    conv = sch.get_block("conv")
    n, oh, ow, oc, kh, kw, ic = sch.get_loops(conv)
    ow0, ow1 = sch.split(ow, [None, owb])
    oc0, oc1 = sch.split(oc, [None, ocb])
    sch.reorder(n, oh, oc0, ow0, kh, kw, ow1, oc1, ic)
    sch.parallel(oh)
    sch.tensorize(ow1, intrin)
    # layout stages: parallel over rows, vectorized along the contiguous axis
    dn, dh, dw, dc = sch.get_loops(sch.get_block("data_pad"))
    sch.parallel(dh)
    wo = sch.get_loops(sch.get_block("weight_pack"))
    sch.parallel(wo[0])
    sch.vectorize(wo[-1])
    on, oc_, oh_, ow_ = sch.get_loops(sch.get_block("output"))
    sch.reorder(oh_, oc_)                  # one NHWC row (14 KB) is transposed while in L1
    sch.parallel(oh_)
    sch.vectorize(ow_)
    return sch


__all__ = ["conv2d_program", "schedule_conv2d"]
