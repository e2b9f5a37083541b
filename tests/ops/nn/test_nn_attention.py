"""nn.attention and nn.rotary_embedding against onnx's reference Attention / RotaryEmbedding."""
from functools import partial

import numpy as np
import pytest

import tessera
from nn_onnx_ref import reference_run
from op_check import infer, run_op as _run_op

run_op = partial(_run_op, schedule=True)  # every op runs with its default schedule
RNG = np.random.default_rng(23)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


def _attention(q, k, v, mask=None, past=None, nonpad=None, opset=23, num_outputs=1, **attrs):
    extras = [x for x in (mask, *(past or (None, None)), nonpad) if x is not None]
    ours = run_op("nn.attention", q, k, v, *extras, has_mask=mask is not None, has_past=past is not None,
                  has_nonpad=nonpad is not None, return_present=num_outputs >= 3, return_qk=num_outputs == 4 or (
                      num_outputs == 2), **attrs)
    onnx_attrs = {k: (int(v) if isinstance(v, bool) else v) for k, v in attrs.items()}
    inputs = [q, k, v, mask, *(past or (None, None))] + ([nonpad] if nonpad is not None else [])
    while inputs[-1] is None:
        inputs.pop()
    if num_outputs == 2:  # Y and qk_matmul_output: ONNX outputs 0 and 3
        ref = reference_run("Attention", inputs, onnx_attrs, num_outputs=4, opset=opset)
        ref = [ref[0], ref[3]]
    else:
        ref = reference_run("Attention", inputs, onnx_attrs, num_outputs=num_outputs, opset=opset)
    return ours, ref


def _close(ours, ref, tol=1e-5):
    assert len(ours) == len(ref)
    for o, r in zip(ours, ref):
        assert o.shape == r.shape
        np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), rtol=tol, atol=tol)


def test_attention_4d_bool_mask_and_causal():
    q, k, v = rand(2, 3, 4, 8), rand(2, 3, 6, 8), rand(2, 3, 6, 5)
    mask = RNG.random((2, 1, 4, 6)) > 0.3
    _close(*_attention(q, k, v, mask, is_causal=True))


def test_attention_3d_gqa_with_cache_returns_present_and_biased_scores():
    q, k, v = rand(2, 4, 6 * 8), rand(2, 3, 2 * 8), rand(2, 3, 2 * 8)
    past = (rand(2, 2, 5, 8), rand(2, 2, 5, 8))
    mask = rand(4, 8)
    _close(*_attention(q, k, v, mask, past, num_outputs=4, q_num_heads=6, kv_num_heads=2, qk_matmul_output_mode=2,
                       scale=0.2))


def test_attention_softcap_with_scores_output_and_float_mask_padding():
    q, k, v = rand(1, 2, 3, 4), rand(1, 2, 5, 4), rand(1, 2, 5, 4)
    mask = rand(3, 4)  # shorter than the 5 keys: the last key is masked
    _close(*_attention(q, k, v, mask, num_outputs=2, softcap=2.0, qk_matmul_output_mode=1))


def test_attention_nonpad_causal_and_fully_masked_rows_are_zero():
    q, k, v = rand(2, 2, 3, 4), rand(2, 2, 6, 4), rand(2, 2, 6, 4)
    nonpad = np.array([6, 2], np.int64)   # batch 1: query 0 sees no key (offset 2 - 3 = -1)
    ours, ref = _attention(q, k, v, nonpad=nonpad, opset=24, is_causal=True)
    _close(ours, ref)
    assert not np.isnan(ours[0]).any() and (ours[0][1, :, 0] == 0).all()


def test_attention_sliding_window_opset_25():
    q, k, v = rand(1, 2, 5, 4), rand(1, 2, 5, 4), rand(1, 2, 5, 4)
    _close(*_attention(q, k, v, opset=25, left_window_size=1, right_window_size=2))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_attention_half_precision_rounds_like_the_reference(dtype):
    import ml_dtypes

    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    q, k, v = (rand(2, 3, 4, 8).astype(dt), rand(2, 3, 6, 8).astype(dt), rand(2, 3, 6, 8).astype(dt))
    ours, ref = _attention(q, k, v, is_causal=True)
    np.testing.assert_array_equal(ours[0].astype(np.float32), ref[0].astype(np.float32))


def test_attention_symbolic_batch():
    k, v = rand(4, 2, 3, 8), rand(4, 2, 3, 8)
    for b in (1, 4):
        q = rand(b, 2, 3, 8)
        (y,) = run_op("nn.attention", q, k[:b].copy(), v[:b].copy(), is_causal=True,
                      sym={0: ("B", 2, 3, 8), 1: ("B", 2, 3, 8), 2: ("B", 2, 3, 8)})
        (ref,) = reference_run("Attention", [q, k[:b], v[:b]], dict(is_causal=1), opset=23)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("types,attrs,match", [
    ([((2, 3, 4, 8), "float32"), ((2, 2, 6, 8), "float32"), ((2, 2, 6, 8), "float32")], {}, "multiple"),
    ([((2, 3, 4, 8), "float32"), ((2, 3, 6, 7), "float32"), ((2, 3, 6, 8), "float32")], {}, "head size"),
    ([((2, 4, 24), "float32"), ((2, 6, 24), "float32"), ((2, 6, 24), "float32")], {}, "q_num_heads"),
    ([((2, 3, 4, 8), "float32"), ((2, 3, 6, 8), "float32"), ((2, 3, 6, 8), "float32"), ((4, 7), "float32")],
     {"has_mask": True}, "must not exceed"),
    ([((2, 3, 4, 8), "float32"), ((2, 3, 6, 8), "float32"), ((2, 3, 6, 8), "float32")], {"has_mask": True},
     "announce 1 extra"),
])
def test_attention_infer_refuses_bad_shapes(types, attrs, match):
    with pytest.raises(tessera.ShapeError, match=match):
        infer("nn.attention", *types, **attrs)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [0, 4])
def test_rotary_embedding_4d_with_position_ids(interleaved, rotary_dim):
    x = rand(2, 3, 5, 8)
    half = (rotary_dim or 8) // 2
    cos, sin = rand(20, half), rand(20, half)
    pos = RNG.integers(0, 20, (2, 5)).astype(np.int64)
    (y,) = run_op("nn.rotary_embedding", x, cos, sin, pos, interleaved=interleaved, rotary_embedding_dim=rotary_dim)
    (ref,) = reference_run("RotaryEmbedding", [x, cos, sin, pos],
                           dict(interleaved=int(interleaved), rotary_embedding_dim=rotary_dim), opset=23)
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


def test_rotary_embedding_3d_without_position_ids():
    x = rand(2, 5, 4 * 6)
    cos, sin = rand(2, 5, 3), rand(2, 5, 3)
    (y,) = run_op("nn.rotary_embedding", x, cos, sin, num_heads=4)
    (ref,) = reference_run("RotaryEmbedding", [x, cos, sin], dict(num_heads=4), opset=23)
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


def test_rotary_embedding_refuses_odd_or_mismatched_dims():
    with pytest.raises(tessera.ShapeError, match="even"):
        infer("nn.rotary_embedding", ((1, 2, 3, 8), "float32"), ((9, 3), "float32"), ((9, 3), "float32"),
              ((1, 3), "int64"), rotary_embedding_dim=3)
    with pytest.raises(tessera.ShapeError, match="cos_cache"):
        infer("nn.rotary_embedding", ((1, 2, 3, 8), "float32"), ((9, 3), "float32"), ((9, 3), "float32"),
              ((1, 3), "int64"))
