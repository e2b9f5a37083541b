"""ONNX converters of the signal ops: DFT and STFT (a matmul by a constant DFT matrix built here for
the static signal length), HannWindow / HammingWindow / BlackmanWindow and MelWeightMatrix
(constants: their inputs are sizes, so they are computed here, with the ONNX reference's formulas
and dtypes).

A complex tensor is ONNX's real pair (..., n, 2); a real signal is (..., n, 1). The transform runs
along `axis` (moved next to the pair axis when it is elsewhere): the (n, c) pairs of each signal
are flattened to n*c values, multiplied by the (n*c, m*2) real matrix of the DFT (truncating or
zero-padding to dft_length, onesided, inverse with 1/n, inverse onesided as numpy's irfft) and
unflattened to (m, 2). The product is summed in float64 (an inverse transform's near-zero
results are cancellations a float32 sum would not resolve).
"""
from __future__ import annotations

import numpy as np

from ...ir.dtype import numpy_dtype
from ...ops._common import normalize_axis
from . import converter


def _scalar(ctx, i, what):
    a = np.asarray(ctx.const_input(i))
    if a.size != 1:
        ctx.unsupported(f"{what} must hold one value, it has shape {a.shape}")
    return a.reshape(-1)[0].item()


def dft_matrix(n_in: int, channels: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The real (n_in * channels, m * c_out) matrix of ONNX DFT along one axis (float64).

    Rows: input sample j, part (re, im) — only re for a real input (channels 1). Columns: output bin
    k, part (re, im); an inverse onesided transform (numpy's irfft) has a real output (c_out 1).
    """
    j = np.arange(n_in)[:, None].astype(np.float64)
    if inverse and onesided:
        # irfft: bins 0..length//2 of a Hermitian spectrum; the others (and the imaginary parts of
        # the DC and Nyquist bins) are implied, as numpy reads them
        k = j                                            # input bin index
        t = np.arange(length)[None, :].astype(np.float64)
        ang = 2 * np.pi * ((k * t) % length) / length
        weight = np.where((k == 0) | ((length % 2 == 0) & (k == length // 2)), 1.0, 2.0)
        weight = np.where(k <= length // 2, weight, 0.0) / length
        re = weight * np.cos(ang)
        im = -weight * np.sin(ang)
        im = np.where((k == 0) | ((length % 2 == 0) & (k == length // 2)), 0.0, im)
        rows = [re] if channels == 1 else [re, im]
        return _clean(np.stack(rows, axis=1).reshape(n_in * channels, length))
    m = length // 2 + 1 if onesided else length
    k = np.arange(m)[None, :].astype(np.float64)
    ang = 2 * np.pi * ((j * k) % length) / length
    inside = (j < length).astype(np.float64)          # samples past dft_length are dropped
    cos, sin = np.cos(ang) * inside, np.sin(ang) * inside
    sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
    # x_j = a + ib times cos + i*sign*sin: re = a cos - b sign sin, im = a sign sin + b cos
    from_re = np.stack([cos, sign * sin], axis=-1)             # (n_in, m, 2)
    from_im = np.stack([-sign * sin, cos], axis=-1)
    rows = [from_re] if channels == 1 else [from_re, from_im]
    mat = np.stack(rows, axis=1) * scale                       # (n_in, channels, m, 2)
    return _clean(mat.reshape(n_in * channels, m * 2))


def _clean(mat):
    mat = mat.copy()
    mat[np.abs(mat) < 1e-15] = 0.0     # exact zeros where sin/cos vanish (a pure real or imaginary result)
    return mat


def _dft(ctx, x, axis, length, inverse, onesided):
    """DFT of x (..., n, c) along `axis` (not the last) as described in the module docstring."""
    nd = x.type.ndim
    c = x.type.shape[-1]
    if c not in (1, 2):
        ctx.unsupported(f"the last axis of input {x.type} must be 1 (real) or 2 (complex)")
    if axis == nd - 1:
        ctx.unsupported(f"axis {axis} is the real/imaginary axis of input {x.type}")
    n = x.type.shape[axis]
    if not isinstance(n, int):
        ctx.unsupported(f"the signal length {n!r} (axis {axis} of {x.type}) must be static: the DFT matrix is "
                        f"built for it")
    if length is None:
        length = 2 * (n - 1) if inverse and onesided else n
    if length < 1:
        ctx.unsupported(f"dft_length {length} must be positive")
    perm = None
    if axis != nd - 2:
        perm = [a for a in range(nd - 1) if a != axis] + [axis, nd - 1]
        x = ctx.op("transpose", x, axes=tuple(perm))
    lead = [d if isinstance(d, int) else 0 for d in x.type.shape[:-2]]
    mat = dft_matrix(n, c, length, inverse, onesided)
    flat = ctx.op("reshape", x, newshape=tuple(lead) + (n * c,))
    dtype = str(x.type.dtype)
    if dtype != "float64":      # float64 sums: the transform's cancellations stay below float32's ulp
        flat = ctx.op("cast", flat, dtype="float64")
    y = ctx.op("nn.matmul", flat, ctx.const(mat, "dft_matrix"))
    if dtype != "float64":
        y = ctx.op("cast", y, dtype=dtype)
    c_out = 1 if inverse and onesided else 2
    y = ctx.op("reshape", y, newshape=tuple(lead) + (mat.shape[1] // c_out, c_out))
    if perm is not None:
        y = ctx.op("transpose", y, axes=tuple(int(i) for i in np.argsort(perm)))
    return y


@converter("DFT", since=17)
def _dft_17(ctx):
    x = ctx.input(0)
    length = int(_scalar(ctx, 1, "dft_length")) if ctx.has_input(1) else None
    if ctx.opset >= 20:
        axis = int(_scalar(ctx, 2, "axis")) if ctx.has_input(2) else -2
    else:
        axis = int(ctx.attr("axis", 1))
    axis = normalize_axis("DFT", axis, x.type.ndim)
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    return _dft(ctx, x, axis, length, inverse, onesided)


@converter("STFT", since=17)
def _stft(ctx):
    x = ctx.input(0)
    if x.type.ndim != 3:
        ctx.unsupported(f"signal {x.type} must be (batch, length, 1 or 2)")
    step = int(_scalar(ctx, 1, "frame_step"))
    window = ctx.input(2, optional=True)
    if window is not None and (window.type.ndim != 1 or not isinstance(window.type.shape[0], int)):
        ctx.unsupported(f"window {window.type} must be a vector of static length")
    if ctx.has_input(3):
        frame = int(_scalar(ctx, 3, "frame_length"))
        if window is not None and window.type.shape[0] != frame:
            ctx.unsupported(f"frame_length {frame} differs from the window's length {window.type.shape[0]}")
    else:
        frame = window.type.shape[0] if window is not None else x.type.shape[1]
    length = x.type.shape[1]
    if not isinstance(length, int):
        ctx.unsupported(f"the signal length of {x.type} must be static")
    if step < 1 or frame < 1 or frame > length:
        ctx.unsupported(f"frame_step {step} and frame_length {frame} do not frame a signal of length {length}")
    frames = 1 + (length - frame) // step
    idx = (np.arange(frames)[:, None] * step + np.arange(frame)[None, :]).astype(np.int64)
    y = ctx.op("take", x, ctx.const(idx, "frame_index"), axis=1)             # (B, frames, frame, c)
    onesided = bool(ctx.attr("onesided", 1))
    if window is not None:
        if ctx.is_const(2):
            w = np.asarray(ctx.const_input(2)).reshape(frame, 1)
            y = ctx.op("multiply", y, ctx.const(w.astype(numpy_dtype(x.type.dtype)), "window"))
        else:
            y = ctx.op("multiply", y, ctx.op("reshape", window, newshape=(frame, 1)))
    return _dft(ctx, y, 2, frame, False, onesided)


# ---------------------------------------------------------------------------------------------
# windows and the mel filter bank: constants
# ---------------------------------------------------------------------------------------------
def _window(kind):
    def convert(ctx):
        size = int(_scalar(ctx, 0, "size"))
        if size < 0:
            ctx.unsupported(f"size {size} is negative")
        dtype = numpy_dtype(ctx.dtype(int(ctx.attr("output_datatype", 1))))
        periodic = int(ctx.attr("periodic", 1))
        n_1 = size if periodic == 1 else size - 1
        with np.errstate(all="ignore"):
            if kind == "blackman":
                ni = np.arange(size)
                y = np.cos((ni * (np.pi * 2)) / n_1) * (-0.5)
                y += np.cos((ni * (np.pi * 4)) / n_1) * 0.08
                y += 0.42
            else:
                ni = np.arange(size, dtype=dtype)
                if kind == "hann":
                    y = np.sin(ni * np.pi / n_1) ** 2
                else:
                    alpha = 25.0 / 46.0
                    y = alpha - np.cos(ni * np.pi * 2 / n_1) * (1 - alpha)
        return ctx.const(np.asarray(y).astype(dtype), f"{kind}_window")

    return convert


converter("HannWindow", since=17)(_window("hann"))
converter("HammingWindow", since=17)(_window("hamming"))
converter("BlackmanWindow", since=17)(_window("blackman"))


def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
    """ONNX MelWeightMatrix (num_spectrogram_bins, num_mel_bins) in float64: triangular filters on
    the mel scale 2595 log10(1 + f / 700), at the integer bins the ONNX reference rounds them to."""
    bins = dft_length // 2 + 1
    fb = np.arange(0, num_mel_bins + 2)
    low = 2595 * np.log1p(lower_edge_hertz / 700) / np.log(10)
    high = 2595 * np.log1p(upper_edge_hertz / 700) / np.log(10)
    step = (high - low) / fb.shape[0]
    fb = fb * step + low
    fb = 700 * np.expm1(fb / 2595 * np.log(10))
    fb = (((dft_length + 1) * fb) // sample_rate).astype(int)
    if fb.max(initial=0) >= bins or fb.min(initial=0) < 0:
        raise ValueError(f"the filter edges fall on bins {fb.min()}..{fb.max()}, outside the {bins} bins of the "
                         f"spectrum (upper_edge_hertz above the Nyquist frequency?)")
    out = np.zeros((bins, num_mel_bins))
    for i in range(num_mel_bins):
        lo, mid, hi = fb[i], fb[i + 1], fb[i + 2]
        if mid - lo == 0:
            out[mid, i] = 1
        else:
            for j in range(lo, mid + 1):
                out[j, i] = float(j - lo) / float(mid - lo)
        if hi - mid > 0:
            for j in range(mid, hi):
                out[j, i] = float(hi - j) / float(hi - mid)
    return out


@converter("MelWeightMatrix", since=17)
def _mel_weight_matrix(ctx):
    num_mel = int(_scalar(ctx, 0, "num_mel_bins"))
    dft_length = int(_scalar(ctx, 1, "dft_length"))
    rate = _scalar(ctx, 2, "sample_rate")
    lower, upper = float(_scalar(ctx, 3, "lower_edge_hertz")), float(_scalar(ctx, 4, "upper_edge_hertz"))
    if num_mel < 1 or dft_length < 1 or rate <= 0 or not 0 <= lower < upper:
        ctx.unsupported(f"num_mel_bins {num_mel}, dft_length {dft_length}, sample_rate {rate}, edges "
                        f"[{lower}, {upper}] do not define a filter bank")
    ctx.check_constant_size([dft_length // 2 + 1, num_mel], np.float64)
    try:
        m = mel_weight_matrix(num_mel, dft_length, rate, lower, upper)
    except ValueError as e:
        ctx.unsupported(str(e))
    dtype = numpy_dtype(ctx.dtype(int(ctx.attr("output_datatype", 1))))
    return ctx.const(m.astype(dtype), "mel_weight_matrix")
