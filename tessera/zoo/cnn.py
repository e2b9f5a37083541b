"""The convolutional zoo models: ResNet-18, ResNet-50 (v1.5) and MobileNetV2, as torchvision defines them.

The graphs are what torch.onnx.export (opset 17) writes for the eval-mode model without folding
BatchNormalization: Conv (no bias) -> BatchNormalization -> Relu / Clip(0, 6), Add for the residuals,
MaxPool, GlobalAveragePool, Flatten, Gemm. Parameter names are torchvision's state-dict keys.

Weights are seeded random, He-initialized; each BatchNormalization gets running statistics that match
the statistics its input really has on a normalized random image (see `_CnnWriter`), as a trained
network's do, so activations keep unit scale through the whole depth and the logits are O(1).
"""
from __future__ import annotations

import math

import numpy as np

from ._onnx_builder import OnnxGraphWriter
from ..errors import TesseraError

FLOAT = 1  # onnx.TensorProto.FLOAT


def _conv2d(x: np.ndarray, w: np.ndarray, stride: int, groups: int) -> np.ndarray:
    """x [B, C, H, W] convolved with w [O, C/groups, k, k], zero padding k // 2."""
    k = w.shape[-1]
    p = k // 2
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    if groups == 1:
        return np.tensordot(w, win, axes=([1, 2, 3], [1, 4, 5])).transpose(1, 0, 2, 3)
    if groups == x.shape[1] == w.shape[0]:
        return np.einsum("ckl,bchwkl->bchw", w[:, 0], win)
    raise ValueError("zoo: only dense and depthwise convolutions are used")


class _CnnWriter(OnnxGraphWriter):
    """OnnxGraphWriter plus conv / batch-norm / activation layers with a data-dependent initialization.

    Each layer also runs, in numpy, on a calibration batch (`act`, [B, C, H, W]), so that every
    BatchNormalization's running statistics are the statistics its input really has (as after
    training) and the classifier is scaled to its features: the activations stay at unit scale
    through the whole depth. (Weights are He-initialized; the data-dependent part is the BN
    statistics, as in LSUV-style initialization.) The calibration runs in float64, so the float32
    weights come out the same whichever BLAS computes it.
    """

    def __init__(self, name: str, rng: np.random.Generator):
        super().__init__(name)
        self.rng = rng

    def conv(self, x: str, act: np.ndarray, param: str, scope: str, c_out: int, kernel: int,
             stride: int = 1, groups: int = 1):
        c_in = act.shape[1]
        fan_in = (c_in // groups) * kernel * kernel
        w = (self.rng.standard_normal((c_out, c_in // groups, kernel, kernel), dtype=np.float32) *
             np.float32(math.sqrt(2.0 / fan_in)))
        y = self.node("Conv", [x, self.initializer(f"{param}.weight", w)], scope,
                      dilations=[1, 1], group=groups, kernel_shape=[kernel, kernel],
                      pads=[kernel // 2] * 4, strides=[stride, stride])
        return y, _conv2d(act, w.astype(np.float64), stride, groups)

    def batch_norm(self, x: str, act: np.ndarray, param: str, scope: str, gamma=(0.6, 1.2)):
        c = act.shape[1]
        rng = self.rng
        eps = 1e-5
        mean = act.mean(axis=(0, 2, 3), dtype=np.float64)
        var = act.var(axis=(0, 2, 3), dtype=np.float64)
        # running statistics near the input's own (a trained network's differ from a batch's a little)
        rmean = mean + 0.05 * np.sqrt(var) * rng.standard_normal(c)
        rvar = np.maximum(var * rng.uniform(0.9, 1.1, c), 1e-3)
        weight = rng.uniform(gamma[0], gamma[1], c)
        bias = 0.25 * rng.standard_normal(c)
        arrays = [a.astype(np.float32) for a in (weight, bias, rmean, rvar)]
        names = [self.initializer(f"{param}.{k}", a) for k, a in
                 zip(("weight", "bias", "running_mean", "running_var"), arrays)]
        y = self.node("BatchNormalization", [x] + names, scope, epsilon=eps, momentum=0.9)
        weight, bias, rmean, rvar = (a.astype(np.float64) for a in arrays)
        scale = weight / np.sqrt(rvar + eps)
        return y, (act - rmean[:, None, None]) * scale[:, None, None] + bias[:, None, None]

    def relu(self, x: str, act: np.ndarray, scope: str):
        return self.node("Relu", [x], scope), np.maximum(act, 0)

    def relu6(self, x: str, act: np.ndarray, scope: str):
        # torch exports nn.ReLU6 as Clip with min and max as inputs (opset >= 11)
        y = self.node("Clip", [x, self.const(0.0), self.const(6.0)], scope)
        return y, np.clip(act, 0, 6)

    def max_pool(self, x: str, act: np.ndarray, scope: str):
        """MaxPool 3x3, stride 2, padding 1 (the ResNet stem's)."""
        y = self.node("MaxPool", [x], scope, ceil_mode=0, dilations=[1, 1], kernel_shape=[3, 3],
                      pads=[1, 1, 1, 1], strides=[2, 2])
        xp = np.pad(act, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
        return y, win.max(axis=(4, 5))

    def add(self, a: str, b: str, act_a: np.ndarray, act_b: np.ndarray, scope: str):
        return self.node("Add", [a, b], scope), act_a + act_b

    def classifier(self, x: str, act: np.ndarray, param: str, scope: str, num_classes: int):
        """GlobalAveragePool -> Flatten -> Gemm, torchvision's head; `param` names the Linear."""
        c = act.shape[1]
        y = self.node("GlobalAveragePool", [x], "/avgpool" if param == "fc" else "/GlobalAveragePool")
        y = self.node("Flatten", [y], "", axis=1)
        rms = math.sqrt(float(np.mean(act.mean(axis=(2, 3), dtype=np.float64) ** 2)))  # pooled features' scale
        w = (self.rng.standard_normal((num_classes, c)) / (math.sqrt(c) * max(rms, 1e-3))).astype(np.float32)
        b = (0.01 * self.rng.standard_normal(num_classes)).astype(np.float32)
        return self.node("Gemm", [y, self.initializer(f"{param}.weight", w), self.initializer(f"{param}.bias", b)],
                         scope, alpha=1.0, beta=1.0, transB=1)


def _calibration_images(seed: int, image_size: int) -> np.ndarray:
    """The normalized images [B, 3, S, S] the BN statistics are taken from (zero mean, unit variance):
    as many as make about one 224 x 224 image's worth of pixels, so that small test-size models
    get statistics as reliable as the full-size ones."""
    n = min(32, max(1, round((224 / image_size) ** 2)))
    return np.random.default_rng([seed, 1]).standard_normal((n, 3, image_size, image_size))


# ---------------------------------------------------------------------------------------------
# ResNet
# ---------------------------------------------------------------------------------------------
def _shortcut_add(g: _CnnWriter, x, mom, y, m, name: str, scope: str, out_ch: int, stride: int, relu: str):
    """relu(y + the block's input x), x through a 1x1 convolution and batch norm ("downsample") where
    the block changes the resolution or the channel count."""
    identity, id_mom = x, mom
    if stride != 1 or mom.shape[1] != out_ch:
        identity, id_mom = g.conv(x, mom, f"{name}.downsample.0", f"{scope}/downsample/downsample.0", out_ch, 1,
                                  stride)
        identity, id_mom = g.batch_norm(identity, id_mom, f"{name}.downsample.1",
                                        f"{scope}/downsample/downsample.1")
    y, m = g.add(y, identity, m, id_mom, scope)
    return g.relu(y, m, f"{scope}/{relu}")


def _basic_block(g: _CnnWriter, x, mom, name: str, planes: int, stride: int):
    scope = f"/{name.split('.')[0]}/{name}"
    y, m = g.conv(x, mom, f"{name}.conv1", f"{scope}/conv1", planes, 3, stride)
    y, m = g.batch_norm(y, m, f"{name}.bn1", f"{scope}/bn1")
    y, m = g.relu(y, m, f"{scope}/relu")
    y, m = g.conv(y, m, f"{name}.conv2", f"{scope}/conv2", planes, 3)
    y, m = g.batch_norm(y, m, f"{name}.bn2", f"{scope}/bn2", gamma=(0.2, 0.6))
    return _shortcut_add(g, x, mom, y, m, name, scope, planes, stride, "relu_1")


def _bottleneck(g: _CnnWriter, x, mom, name: str, planes: int, stride: int):
    # ResNet v1.5 (torchvision): the stride sits on the 3x3 convolution
    scope = f"/{name.split('.')[0]}/{name}"
    out_ch = planes * 4
    y, m = g.conv(x, mom, f"{name}.conv1", f"{scope}/conv1", planes, 1)
    y, m = g.batch_norm(y, m, f"{name}.bn1", f"{scope}/bn1")
    y, m = g.relu(y, m, f"{scope}/relu")
    y, m = g.conv(y, m, f"{name}.conv2", f"{scope}/conv2", planes, 3, stride)
    y, m = g.batch_norm(y, m, f"{name}.bn2", f"{scope}/bn2")
    y, m = g.relu(y, m, f"{scope}/relu_1")
    y, m = g.conv(y, m, f"{name}.conv3", f"{scope}/conv3", out_ch, 1)
    y, m = g.batch_norm(y, m, f"{name}.bn3", f"{scope}/bn3", gamma=(0.2, 0.6))
    return _shortcut_add(g, x, mom, y, m, name, scope, out_ch, stride, "relu_2")


def _resnet(name: str, block, layers, batch, image_size: int, num_classes: int, seed: int):
    g = _CnnWriter(name, np.random.default_rng(seed))
    x = g.input("input", FLOAT, [batch, 3, image_size, image_size])
    y, m = g.conv(x, _calibration_images(seed, image_size), "conv1", "/conv1", 64, 7, 2)
    y, m = g.batch_norm(y, m, "bn1", "/bn1")
    y, m = g.relu(y, m, "/relu")
    y, m = g.max_pool(y, m, "/maxpool")
    for li, (planes, n) in enumerate(zip((64, 128, 256, 512), layers)):
        for bi in range(n):
            stride = 2 if li > 0 and bi == 0 else 1
            y, m = block(g, y, m, f"layer{li + 1}.{bi}", planes, stride)
    y = g.classifier(y, m, "fc", "/fc", num_classes)
    g.output(y, "output", FLOAT, [batch, num_classes])
    return g.model(f"{name}: torchvision architecture, seeded random weights (tessera.zoo)")


def resnet18(batch=1, seed=0, image_size=224, num_classes=1000):
    """ResNet-18 (basic blocks [2, 2, 2, 2]); input "input" [batch, 3, S, S] -> "output" [batch, classes]."""
    return _resnet("resnet18", _basic_block, (2, 2, 2, 2), batch, image_size, num_classes, seed)


def resnet50(batch=1, seed=0, image_size=224, num_classes=1000):
    """ResNet-50 v1.5 (bottlenecks [3, 4, 6, 3]); input "input" [batch, 3, S, S] -> "output"."""
    return _resnet("resnet50", _bottleneck, (3, 4, 6, 3), batch, image_size, num_classes, seed)


# ---------------------------------------------------------------------------------------------
# MobileNetV2
# ---------------------------------------------------------------------------------------------
def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


_MBV2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                  (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(batch=1, seed=0, image_size=224, num_classes=1000, width_mult=1.0):
    """MobileNetV2 (inverted residuals, depthwise convs, ReLU6 as Clip); "input" -> "output"."""
    if not width_mult > 0:
        raise TesseraError(f"zoo mobilenet_v2: width_mult must be > 0, got {width_mult}")
    g = _CnnWriter("mobilenet_v2", np.random.default_rng(seed))
    x = g.input("input", FLOAT, [batch, 3, image_size, image_size])
    c_in = _make_divisible(32 * width_mult)
    last = _make_divisible(1280 * max(1.0, width_mult))
    y, m = g.conv(x, _calibration_images(seed, image_size), "features.0.0", "/features/features.0/features.0.0", c_in, 3, 2)
    y, m = g.batch_norm(y, m, "features.0.1", "/features/features.0/features.0.1")
    y, m = g.relu6(y, m, "/features/features.0/features.0.2")
    idx = 1
    for t, c, n, s in _MBV2_SETTINGS:
        c_out = _make_divisible(c * width_mult)
        for i in range(n):
            stride = s if i == 0 else 1
            p = f"features.{idx}.conv"
            scope = f"/features/features.{idx}/conv"
            x_in, m_in = y, m
            hidden = int(round(c_in * t))
            j = 0
            if t != 1:
                y, m = g.conv(y, m, f"{p}.0.0", f"{scope}/conv.0/conv.0.0", hidden, 1)
                y, m = g.batch_norm(y, m, f"{p}.0.1", f"{scope}/conv.0/conv.0.1")
                y, m = g.relu6(y, m, f"{scope}/conv.0/conv.0.2")
                j = 1
            y, m = g.conv(y, m, f"{p}.{j}.0", f"{scope}/conv.{j}/conv.{j}.0", hidden, 3, stride, groups=hidden)
            y, m = g.batch_norm(y, m, f"{p}.{j}.1", f"{scope}/conv.{j}/conv.{j}.1")
            y, m = g.relu6(y, m, f"{scope}/conv.{j}/conv.{j}.2")
            y, m = g.conv(y, m, f"{p}.{j + 1}", f"{scope}/conv.{j + 1}", c_out, 1)
            residual = stride == 1 and c_in == c_out
            y, m = g.batch_norm(y, m, f"{p}.{j + 2}", f"{scope}/conv.{j + 2}",
                                gamma=(0.2, 0.6) if residual else (0.6, 1.2))
            if residual:
                y, m = g.add(x_in, y, m_in, m, f"/features/features.{idx}")
            c_in = c_out
            idx += 1
    y, m = g.conv(y, m, f"features.{idx}.0", f"/features/features.{idx}/features.{idx}.0", last, 1)
    y, m = g.batch_norm(y, m, f"features.{idx}.1", f"/features/features.{idx}/features.{idx}.1")
    y, m = g.relu6(y, m, f"/features/features.{idx}/features.{idx}.2")
    y = g.classifier(y, m, "classifier.1", "/classifier/classifier.1", num_classes)
    g.output(y, "output", FLOAT, [batch, num_classes])
    return g.model("mobilenet_v2: torchvision architecture, seeded random weights (tessera.zoo)")
