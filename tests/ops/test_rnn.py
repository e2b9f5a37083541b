"""Recurrent cells (one step against numpy, every activation, sequence-length masking) and
reverse_sequence (length clamping, refusals)."""
import numpy as np
import pytest
from op_check import infer, run_op

from tessera.errors import DTypeError, ShapeError, TesseraError

RNG = np.random.default_rng(52)


def _sig(x):
    return 1 / (1 + np.exp(-x))


NUMPY_ACTS = {
    "sigmoid": lambda x, a, b: _sig(x), "tanh": lambda x, a, b: np.tanh(x),
    "relu": lambda x, a, b: np.maximum(x, 0), "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: np.where(x < 0, a * x, x), "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x), "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "elu": lambda x, a, b: np.where(x < 0, a * (np.exp(x) - 1), x), "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "softplus": lambda x, a, b: np.log1p(np.exp(x)),
}


@pytest.mark.parametrize("act", sorted(NUMPY_ACTS))
def test_rnn_cell_every_activation_with_clip(act):
    xw = RNG.standard_normal((3, 2, 4)).astype(np.float32)
    h = RNG.standard_normal((2, 4)).astype(np.float32)
    r = RNG.standard_normal((4, 4)).astype(np.float32)
    step = np.array(1, np.int64)
    (got,) = run_op("rnn.rnn_cell", xw, step, h, r, activations=(act,), alphas=(0.7,), betas=(0.3,), clip=1.1)
    pre = np.clip(xw[1] + h @ r.T, -1.1, 1.1)
    np.testing.assert_allclose(got, NUMPY_ACTS[act](pre, 0.7, 0.3), rtol=1e-5, atol=1e-6)


def test_lstm_cell_masks_finished_sequences():
    b, hs = 3, 2
    xw = RNG.standard_normal((2, b, 4 * hs)).astype(np.float32)
    h, c = RNG.standard_normal((b, hs)).astype(np.float32), RNG.standard_normal((b, hs)).astype(np.float32)
    r = RNG.standard_normal((4 * hs, hs)).astype(np.float32)
    lens = np.array([2, 1, 0], np.int32)
    acts = dict(activations=("sigmoid", "tanh", "tanh"), alphas=(0.0,) * 3, betas=(0.0,) * 3)
    h1, c1, y = run_op("rnn.lstm_cell", xw, np.array(1, np.int64), h, c, r, lens, has_seq_lens=True, **acts)
    g = xw[1] + h @ r.T
    i, o, f, cc = (g[:, k * hs:(k + 1) * hs] for k in range(4))
    c_new = _sig(f) * c + _sig(i) * np.tanh(cc)
    h_new = _sig(o) * np.tanh(c_new)
    np.testing.assert_allclose(h1[0], h_new[0], rtol=1e-5)
    np.testing.assert_allclose(c1[0], c_new[0], rtol=1e-5)
    np.testing.assert_array_equal(h1[1:], h[1:])          # ended: the state is kept
    np.testing.assert_array_equal(c1[1:], c[1:])
    np.testing.assert_allclose(y[0], h_new[0], rtol=1e-5)
    np.testing.assert_array_equal(y[1:], 0)               # and the step's output is 0


def test_reverse_sequence_clamps_lengths():
    x = np.arange(4 * 3 * 2, dtype=np.float32).reshape(4, 3, 2)
    lens = np.array([9, -2, 3], np.int64)
    (got,) = run_op("reverse_sequence", x, lens, seq_axis=0, batch_axis=1)
    want = x.copy()
    want[:, 0] = x[::-1, 0]
    want[:3, 2] = x[2::-1, 2]
    np.testing.assert_array_equal(got, want)


def test_cell_and_reverse_sequence_refusals():
    f = "float32"
    acts = dict(activations=("tanh",), alphas=(0.0,), betas=(0.0,))
    with pytest.raises(ShapeError, match=r"xw .* does not fit h"):
        infer("rnn.rnn_cell", ((2, 3, 5), f), ((), "int64"), ((3, 4), f), ((4, 4), f), **acts)
    with pytest.raises(ShapeError, match="r must be"):
        infer("rnn.gru_cell", ((2, 3, 12), f), ((), "int64"), ((3, 4), f), ((4, 4), f),
              activations=("sigmoid", "tanh"), alphas=(0.0, 0.0), betas=(0.0, 0.0))
    with pytest.raises(TesseraError, match="activations must name 1"):
        infer("rnn.rnn_cell", ((2, 3, 4), f), ((), "int64"), ((3, 4), f), ((4, 4), f),
              activations=("gelu",), alphas=(0.0,), betas=(0.0,))
    with pytest.raises(DTypeError, match="step"):
        infer("rnn.rnn_cell", ((2, 3, 4), f), ((), f), ((3, 4), f), ((4, 4), f), **acts)
    with pytest.raises(ShapeError, match="both axis 1"):
        infer("reverse_sequence", ((2, 3), f), ((3,), "int64"), seq_axis=1, batch_axis=-1)
    with pytest.raises(ShapeError, match=r"seq_lengths must be \(batch,\)"):
        infer("reverse_sequence", ((2, 3), f), ((2,), "int64"))


def test_linear_attention_cell_refusals():
    f = "float32"
    q = ((2, 3, 8), f)
    step = ((), "int64")
    with pytest.raises(ShapeError, match="multiple of kv_num_heads"):
        infer("rnn.linear_attention_cell", q, q, q, step, ((2, 3, 8, 8), f), q_num_heads=3, kv_num_heads=2)
    with pytest.raises(ShapeError, match=r"state must be float32 \(B, 2, 4, 4\)"):
        infer("rnn.linear_attention_cell", q, q, q, step, ((2, 2, 4, 4), "float16"), q_num_heads=2, kv_num_heads=2)
    with pytest.raises(ShapeError, match="beta must be"):
        infer("rnn.linear_attention_cell", q, q, q, step, ((2, 2, 4, 4), f), ((2, 3, 3), f), q_num_heads=2,
              kv_num_heads=2, has_beta=True)
    t = infer("rnn.linear_attention_cell", q, q, q, step, ((2, 2, 4, 4), f), q_num_heads=2, kv_num_heads=2)
    assert [x.shape for x in t] == [(2, 2, 4, 4), (2, 1, 8)]
