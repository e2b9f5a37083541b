"""ONNX RNN / GRU / LSTM / ReverseSequence converters against onnxruntime: variable sequence_lens in
every direction, activation lists with alpha/beta, clip, input_forget, linear_before_reset,
peepholes, initial states, layout=1 and a symbolic batch."""
import numpy as np
import pytest
from onnx_family_check import check, one_node

from tessera.errors import UnsupportedOpError
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(51)


def _weights(kind, dirs, hidden, inp, dtype=np.float32):
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    w = (RNG.standard_normal((dirs, g * hidden, inp)) * 0.5).astype(dtype)
    r = (RNG.standard_normal((dirs, g * hidden, hidden)) * 0.5).astype(dtype)
    b = (RNG.standard_normal((dirs, 2 * g * hidden)) * 0.3).astype(dtype)
    return w, r, b


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["reverse", "bidirectional"])
def test_variable_sequence_lengths_and_initial_state(kind, direction):
    steps, batch, inp, hidden = 4, 3, 2, 3
    dirs = 2 if direction == "bidirectional" else 1
    x = RNG.standard_normal((steps, batch, inp)).astype(np.float32)
    w, r, b = _weights(kind, dirs, hidden, inp)
    feeds = {"x": x, "w": w, "r": r, "b": b, "lens": np.array([4, 1, 3], np.int32),
             "h0": RNG.standard_normal((dirs, batch, hidden)).astype(np.float32)}
    outs = ("y", "y_h")
    if kind == "LSTM":
        feeds["c0"] = RNG.standard_normal((dirs, batch, hidden)).astype(np.float32)
        outs = ("y", "y_h", "y_c")
    m = one_node(kind, feeds, dict(hidden_size=hidden, direction=direction), opset=14, outputs=outs)
    check(m, feeds, rtol=1e-5, atol=1e-5)


def test_lstm_activations_clip_input_forget_peepholes():
    steps, batch, inp, hidden = 3, 2, 3, 2
    x = RNG.standard_normal((steps, batch, inp)).astype(np.float32)
    w, r, b = _weights("LSTM", 1, hidden, inp)
    p = RNG.standard_normal((1, 3 * hidden)).astype(np.float32)
    feeds = {"x": x, "w": w, "r": r, "b": b, "": None, "h0": np.zeros((1, batch, hidden), np.float32),
             "c0": np.ones((1, batch, hidden), np.float32), "p": p}
    attrs = dict(hidden_size=hidden, activations=["HardSigmoid", "LeakyRelu", "Softsign"],
                 activation_alpha=[0.3, 0.2], activation_beta=[0.4], clip=1.5, input_forget=1)
    m = one_node("LSTM", feeds, attrs, opset=14, outputs=("y", "y_h", "y_c"))
    check(m, {k: v for k, v in feeds.items() if k}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset_activations_symbolic_batch(lbr):
    steps, batch, inp, hidden = 2, 3, 4, 3
    x = RNG.standard_normal((steps, batch, inp)).astype(np.float32)
    w, r, b = _weights("GRU", 1, hidden, inp)
    feeds = {"x": x, "w": w, "r": r, "b": b}
    m = one_node("GRU", feeds, dict(hidden_size=hidden, linear_before_reset=lbr,
                                    activations=["Sigmoid", "ScaledTanh"], activation_alpha=[1.2],
                                    activation_beta=[0.7]),
                 opset=14, outputs=("y", "y_h"), shapes={"x": (steps, "N", inp)})
    g = check(m, feeds, rtol=1e-5, atol=1e-5)
    assert g.outputs[0].type.shape == (steps, 1, "N", hidden)


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_layout_batch_first_matches_the_reference(kind):
    # (onnxruntime refuses layout=1; onnx's reference implements it)
    from onnx.reference import ReferenceEvaluator

    x = RNG.standard_normal((3, 2, 4)).astype(np.float32)
    w, r, b = _weights(kind, 1, 3, 4)
    feeds = {"x": x, "w": w, "r": r, "b": b}
    outs = ("y", "y_h", "y_c") if kind == "LSTM" else ("y", "y_h")
    m = one_node(kind, feeds, dict(hidden_size=3, layout=1, linear_before_reset=int(kind == "GRU")), opset=14,
                 outputs=outs)
    if kind == "LSTM":
        m.graph.node[0].attribute.pop()    # LSTM has no linear_before_reset
    check(m, feeds, want=ReferenceEvaluator(m).run(None, feeds), rtol=1e-5, atol=1e-5)


def test_rnn_relu_without_bias_and_y_only():
    x = RNG.standard_normal((3, 2, 2)).astype(np.float32)
    w, r, _ = _weights("RNN", 1, 4, 2)
    feeds = {"x": x, "w": w, "r": r}
    check(one_node("RNN", feeds, dict(hidden_size=4, activations=["Relu"]), opset=7, outputs=("y",)), feeds,
          rtol=1e-5, atol=1e-5)


def test_recurrent_refusals():
    x = np.zeros((3, 1, 2), np.float32)
    w, r, _ = _weights("RNN", 1, 4, 2)
    m = one_node("RNN", {"x": x, "w": w, "r": r}, dict(hidden_size=4), opset=14, outputs=("y",),
                 shapes={"x": ("T", 1, 2)})
    with pytest.raises(UnsupportedOpError, match="must be static: the layer is unrolled"):
        from_onnx(m)
    m = one_node("RNN", {"x": x, "w": w, "r": r}, dict(hidden_size=4, activations=["Gelu"]), opset=14,
                 outputs=("y",))
    with pytest.raises(UnsupportedOpError, match="activation 'gelu'"):
        from_onnx(m)


@pytest.mark.parametrize("time_axis", [0, 1])
def test_reverse_sequence_both_layouts(time_axis):
    x = RNG.standard_normal((4, 4, 3)).astype(np.float32)
    lens = np.array([1, 4, 0, 2], np.int64)
    feeds = {"x": x, "lens": lens}
    check(one_node("ReverseSequence", feeds, dict(time_axis=time_axis, batch_axis=1 - time_axis), opset=10), feeds)


@pytest.mark.parametrize("rule", ["gated_delta", "delta", "gated", "linear"])
def test_linear_attention_gqa_with_past_state_matches_the_reference(rule):
    from onnx.reference import ReferenceEvaluator

    b, t, hq, hk, dk, dv = 2, 3, 4, 2, 3, 2
    feeds = {"q": RNG.standard_normal((b, t, hq * dk)).astype(np.float32),
             "k": RNG.standard_normal((b, t, hk * dk)).astype(np.float32) * 0.5,
             "v": RNG.standard_normal((b, t, hk * dv)).astype(np.float32),
             "past": RNG.standard_normal((b, hk, dk, dv)).astype(np.float32)}
    names = ["q", "k", "v", "past"]
    if rule in ("gated", "gated_delta"):
        feeds["decay"] = -RNG.uniform(0, 1, (b, t, hk * dk if rule == "gated" else hk)).astype(np.float32)
        names.append("decay")
    else:
        names.append("")
    if rule in ("delta", "gated_delta"):
        feeds["beta"] = RNG.uniform(0, 1, (b, t, 1)).astype(np.float32)
        names.append("beta")
    m = one_node("LinearAttention", feeds, dict(q_num_heads=hq, kv_num_heads=hk, update_rule=rule, scale=0.7),
                 opset=27, outputs=("y", "state"), shapes={"q": ("B", t, hq * dk), "k": ("B", t, hk * dk),
                                                          "v": ("B", t, hk * dv), "past": ("B", hk, dk, dv)})
    m.graph.node[0].input[:] = names
    check(m, feeds, want=ReferenceEvaluator(m).run(None, feeds), rtol=1e-5, atol=1e-5)


def test_linear_attention_refuses_a_rule_without_its_input():
    q = np.zeros((1, 2, 4), np.float32)
    m = one_node("LinearAttention", {"q": q, "k": q, "v": q}, dict(q_num_heads=1, kv_num_heads=1), opset=27,
                 outputs=("y",))
    with pytest.raises(UnsupportedOpError, match="needs the decay input"):
        from_onnx(m)
