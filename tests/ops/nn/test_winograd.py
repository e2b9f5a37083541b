"""Winograd F(2x2, 3x3) / F(3x3, 3x3) / F(4x4, 3x3) ops: each transform against numpy, and the three
transforms around a matmul against a float64 convolution (odd sizes, padding 0 and 1, blocked and plain
layouts)."""
import numpy as np
import pytest
from op_check import infer, run_op

from tessera.errors import ShapeError, TesseraError
from tessera.ops.nn.winograd import winograd_matrices

rng = np.random.default_rng(12)
EPS = float(np.finfo(np.float32).eps)


def rand(*shape):
    return rng.standard_normal(shape).astype("float32")


def to_blocked(x, b):
    N, C, H, W = x.shape
    return np.ascontiguousarray(x.reshape(N, C // b, b, H, W).transpose(0, 1, 3, 4, 2))


def from_blocked(x):
    N, Cc, H, W, b = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(N, Cc * b, H, W)


def tiles_ref(x, m, pad):
    """(P, C, alpha, alpha) input tiles of x (NCHW), row-major over (n, tile row, tile column)."""
    N, C, H, W = x.shape
    pt, pl, pb, pr = pad
    OH, OW = H + pt + pb - 2, W + pl + pr - 2
    TH, TW = -(-OH // m), -(-OW // m)
    xp = np.zeros((N, C, TH * m + 2, TW * m + 2))
    xp[:, :, pt:pt + H, pl:pl + W] = x
    return np.stack([xp[n, :, th * m:th * m + m + 2, tw * m:tw * m + m + 2]
                     for n in range(N) for th in range(TH) for tw in range(TW)]), (OH, OW, TH, TW)


def conv_f64(x, w, pad):
    """(float64 convolution, sum of |terms| per output): the reference and its error scale."""
    pt, pl, pb, pr = pad
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    OH, OW = xp.shape[2] - 2, xp.shape[3] - 2
    out = np.zeros((x.shape[0], w.shape[0], OH, OW))
    scale = np.zeros_like(out)
    for kh in range(3):
        for kw in range(3):
            patch = xp[:, :, kh:kh + OH, kw:kw + OW]
            wk = w[:, :, kh, kw].astype(np.float64)
            out += np.einsum("nchw,oc->nohw", patch, wk)
            scale += np.einsum("nchw,oc->nohw", np.abs(patch), np.abs(wk))
    return out, scale


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("blocked", [False, True])
def test_weight_transform_is_g_w_gt(m, blocked):
    w = rand(32, 16, 3, 3)
    G = winograd_matrices(m)["G"]
    want = np.einsum("ak,ockl,bl->abco", G, w.astype(np.float64), G)
    if blocked:   # OIHW8i16o, as alter_layout packs it
        wb = np.ascontiguousarray(w.reshape(2, 16, 2, 8, 3, 3).transpose(0, 2, 4, 5, 3, 1))
        (u,) = run_op("nn.winograd_weight_transform", wb, tile_size=m, kernel_layout="OIHW8i16o")
    else:
        (u,) = run_op("nn.winograd_weight_transform", w, tile_size=m)
    assert u.shape == (m + 2, m + 2, 16, 32)
    np.testing.assert_allclose(u, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("shape,pad,layout", [((1, 32, 9, 7), (1, 1, 1, 1), "NCHW16c"),
                                              ((2, 8, 10, 13), (0, 0, 0, 0), "NCHW"),
                                              ((1, 16, 6, 5), (1, 0, 2, 1), "NCHW8c")])
def test_input_transform_is_bt_d_b_with_zero_padding_rows(m, shape, pad, layout):
    x = rand(*shape)
    BT = winograd_matrices(m)["BT"]
    tiles, _ = tiles_ref(x.astype(np.float64), m, pad)
    want = np.einsum("ar,pcrs,bs->abpc", BT, tiles, BT)
    P = want.shape[2]
    data = x if layout == "NCHW" else to_blocked(x, int(layout[4:-1]))
    (v,) = run_op("nn.winograd_input_transform", data, tile_size=m, padding=pad, rows=P + 5, layout=layout)
    assert v.shape == (m + 2, m + 2, P + 5, shape[1])
    np.testing.assert_allclose(v[:, :, :P], want, rtol=1e-5, atol=1e-5)
    assert not v[:, :, P:].any()         # rows past the tile count are zeros


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("batch,size,layout", [(1, (9, 7), "NCHW16c"), (2, (4, 6), "NCHW"), (1, (5, 8), "NCHW8c")])
def test_output_transform_is_at_m_a_cut_to_the_output(m, batch, size, layout):
    OH, OW = size
    TH, TW = -(-OH // m), -(-OW // m)
    P = batch * TH * TW
    M = rand(m + 2, m + 2, P + 3, 32)
    AT = winograd_matrices(m)["AT"]
    Y = np.einsum("ia,abpo,jb->poij", AT, M.astype(np.float64), AT)
    full = np.zeros((batch, 32, TH * m, TW * m))
    p = 0
    for n in range(batch):
        for th in range(TH):
            for tw in range(TW):
                full[n, :, th * m:(th + 1) * m, tw * m:(tw + 1) * m] = Y[p]
                p += 1
    want = full[:, :, :OH, :OW]
    (y,) = run_op("nn.winograd_output_transform", M, tile_size=m, batch=batch, output_size=(OH, OW), layout=layout)
    got = y if layout == "NCHW" else from_blocked(y)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# Tolerance: the error of a Winograd convolution is bounded by eps32 x (sum of |x| |w| over the
# window) times a growth factor of the transforms (Barabasz et al. 2020): measured here at most
# ~1.1 for F(2x2), ~6 for F(3x3) and ~15 for F(4x4) (the direct float32 sum: ~0.15); the bounds leave
# 3-4x margin.
GROWTH = {2: 4.0, 3: 24.0, 4: 45.0}


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("C,O,H,W,pad", [(16, 32, 9, 7, 1), (64, 64, 14, 14, 1), (32, 16, 11, 8, 0), (8, 8, 3, 3, 0)])
def test_transforms_around_a_matmul_are_the_convolution(m, C, O, H, W, pad):
    x, w = rand(1, C, H, W), rand(O, C, 3, 3)
    pads = (pad,) * 4
    (v,) = run_op("nn.winograd_input_transform", x, tile_size=m, padding=pads)
    (u,) = run_op("nn.winograd_weight_transform", w, tile_size=m)
    (y,) = run_op("nn.winograd_output_transform", np.matmul(v, u), tile_size=m, batch=1,
                  output_size=(H + 2 * pad - 2, W + 2 * pad - 2))
    want, scale = conv_f64(x, w, pads)
    assert y.shape == want.shape
    assert np.max(np.abs(y - want) / (EPS * scale)) <= GROWTH[m]


def test_shapes_and_refusals():
    (t,) = infer("nn.winograd_input_transform", ((1, 4, 56, 56, 16), "float32"), tile_size=4, padding=(1, 1, 1, 1),
                 layout="NCHW16c")
    assert t.shape == (6, 6, 196, 64)
    (t,) = infer("nn.winograd_output_transform", ((4, 4, 18, 512), "float32"), tile_size=2, batch=1,
                 output_size=(7, 7), layout="NCHW16c")
    assert t.shape == (1, 32, 7, 7, 16)
    with pytest.raises(TesseraError, match="tile_size"):
        infer("nn.winograd_input_transform", ((1, 8, 8, 8), "float32"), tile_size=5)
    with pytest.raises(ShapeError, match="3x3"):
        infer("nn.winograd_weight_transform", ((8, 8, 5, 5), "float32"), tile_size=2)
    with pytest.raises(ShapeError, match="rows"):
        infer("nn.winograd_input_transform", ((1, 8, 8, 8), "float32"), tile_size=2, padding=1, rows=10)
    with pytest.raises(ShapeError, match="tile rows"):
        infer("nn.winograd_output_transform", ((4, 4, 15, 8), "float32"), tile_size=2, batch=1, output_size=(7, 7))
    with pytest.raises(ShapeError, match="blocks"):
        infer("nn.winograd_input_transform", ((1, 2, 8, 8, 8), "float32"), tile_size=2, layout="NCHW16c")
