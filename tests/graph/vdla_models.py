"""A small fp32 CNN for the quantization and partition tests: 16-channel input, conv + bias + relu,
a residual block, max pooling, a strided 1x1 conv, global average pooling and a classifier."""
import numpy as np

from tessera.graph.builder import Builder


def small_cnn(seed=0, size=8, classes=10, cin=16):
    rng = np.random.default_rng(seed)
    b = Builder("small_cnn")
    x = b.input("input", (1, cin, size, size))

    def conv(v, cin, cout, k, stride=1, pad=None, relu=True):
        pad = k // 2 if pad is None else pad
        w = b.const((rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32), "w")
        y = b.op("nn.conv2d", v, w, strides=(stride, stride), padding=(pad,) * 4)
        y = b.op("add", y, b.const((rng.standard_normal((cout, 1, 1)) * 0.1).astype(np.float32), "bias"))
        return b.op("nn.relu", y) if relu else y

    y = conv(x, cin, 32, 3)
    r = conv(conv(y, 32, 32, 3), 32, 32, 3, relu=False)
    y = b.op("nn.relu", b.op("add", r, y))
    y = b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2))
    y = conv(y, 32, 64, 1, stride=2, pad=0)
    y = b.op("reshape", b.op("nn.global_avg_pool", y), newshape=(1, 64))
    y = b.op("nn.matmul", y, b.const((rng.standard_normal((64, classes)) * 0.2).astype(np.float32), "fc"))
    b.output(y)
    return b.finish()


def inputs(n, seed=1, size=8, cin=16):
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal((1, cin, size, size)).astype(np.float32)} for _ in range(n)]
