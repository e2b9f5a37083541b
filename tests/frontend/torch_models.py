"""Plain PyTorch modules for the PyTorch frontend's tests and benchmarks/torch_compile.py (no
torchvision, no downloads: random weights). Sizes are arguments: the tests use small ones, the
benchmark the published architectures (ResNet-18/50, MobileNetV2, BERT-base, GPT-2 small)."""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def randomize(model: nn.Module, seed: int = 0) -> nn.Module:
    """model in eval mode with seeded random weights and non-trivial batch-norm statistics."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()


# ---------------------------------------------------------------------------------------------
# CNNs
# ---------------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, c, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.down = None
        if stride != 1 or cin != c:
            self.down = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, c, stride=1):
        super().__init__()
        out = c * 4
        self.conv1 = nn.Conv2d(cin, c, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.conv3 = nn.Conv2d(c, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.down = None
        if stride != 1 or cin != out:
            self.down = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """ResNet (He et al.): ResNet(BasicBlock, (2, 2, 2, 2)) is ResNet-18, (Bottleneck, (3, 4, 6, 3))
    ResNet-50; `width` scales the channels (64 in the paper)."""

    def __init__(self, block=BasicBlock, layers=(2, 2, 2, 2), width=64, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], width
        for i, n in enumerate(layers):
            c = width * 2 ** i
            for j in range(n):
                blocks.append(block(cin, c, 2 if j == 0 and i > 0 else 1))
                cin = c * block.expansion
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al.); width_mult scales the channels, `settings` the stages
    (t, c, n, s)."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))

    def __init__(self, width_mult=1.0, settings=SETTINGS, classes=1000, last=1280):
        super().__init__()

        def ch(c):
            return max(8, int(c * width_mult + 4) // 8 * 8)

        cin = ch(32)
        layers = [nn.Conv2d(3, cin, 3, 2, 1, bias=False), nn.BatchNorm2d(cin), nn.ReLU6()]
        for t, c, n, s in settings:
            for i in range(n):
                layers.append(InvertedResidual(cin, ch(c), s if i == 0 else 1, t))
                cin = ch(c)
        last = ch(last) if width_mult > 1 else last
        layers += [nn.Conv2d(cin, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c, squeezed):
        super().__init__()
        self.reduce = nn.Conv2d(c, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class MBConv(nn.Module):
    def __init__(self, cin, cout, stride, expand, kernel=3):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.SiLU()]
        layers += [nn.Conv2d(hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=False),
                   nn.BatchNorm2d(hidden), nn.SiLU(), SqueezeExcite(hidden, max(1, cin // 4)),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class EfficientNet(nn.Module):
    """An EfficientNet-style network (Tan & Le): MBConv blocks with squeeze-and-excitation and SiLU."""

    def __init__(self, stages=((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5)), width=32, classes=10):
        super().__init__()
        layers = [nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.SiLU()]
        cin = width
        for t, c, n, s, k in stages:
            for i in range(n):
                layers.append(MBConv(cin, c, s if i == 0 else 1, t, k))
                cin = c
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# ---------------------------------------------------------------------------------------------
# transformers
# ---------------------------------------------------------------------------------------------
class BertLayer(nn.Module):
    """A BERT encoder layer (post-LN, GELU), attention written out: softmax(QK^T / sqrt(d) + mask) V,
    the mask additive over the keys (B, 1, 1, T)."""

    def __init__(self, hidden=64, heads=4, ffn=128):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def split(self, x):
        b, t, c = x.shape
        return x.view(b, t, self.heads, c // self.heads).transpose(1, 2)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(c // self.heads) + mask
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = self.ln1(x + self.out(ctx))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Bert(nn.Module):
    """A BERT encoder: embeddings (word, position, type), `layers` BertLayers; ids (B, T) and an
    attention mask (B, T) of ones and zeros."""

    def __init__(self, vocab=1000, hidden=64, layers=2, heads=4, ffn=128, max_len=128):
        super().__init__()
        self.words = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(max_len, hidden)
        self.types = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, ids, attention_mask):
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device)
        x = self.ln(self.words(ids) + self.positions(pos) + self.types(torch.zeros_like(ids)))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return x


class GPT2Block(nn.Module):
    """A GPT-2 block (pre-LN, tanh GELU); causal attention through a lower-triangular mask buffer."""

    def __init__(self, hidden=64, heads=4, max_len=128):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.fc, self.fc_out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2: token and position embeddings, `layers` GPT2Blocks, final LayerNorm, tied LM head."""

    def __init__(self, vocab=1000, hidden=64, layers=2, heads=4, max_len=128):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(max_len, hidden)
        self.blocks = nn.ModuleList(GPT2Block(hidden, heads, max_len) for _ in range(layers))
        self.ln = nn.LayerNorm(hidden)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.wte.weight.t()


class ViTBlock(nn.Module):
    """A ViT: patch embedding (a strided convolution), class token, position embedding, one pre-LN
    block with F.scaled_dot_product_attention, the class token's head."""

    def __init__(self, image=32, patch=8, hidden=64, heads=4, classes=10):
        super().__init__()
        self.heads = heads
        n = (image // patch) ** 2
        self.patch = nn.Conv2d(3, hidden, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, hidden) * 0.02)
        self.ln1, self.ln2, self.ln = nn.LayerNorm(hidden), nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
        self.head = nn.Linear(hidden, classes)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)
        b, t, c = x.shape
        x = torch.cat([self.cls.expand(b, -1, -1), x], dim=1) + self.pos
        q, k, v = self.qkv(self.ln1(x)).view(b, t + 1, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t + 1, c)
        x = x + self.proj(y)
        x = x + self.mlp(self.ln2(x))
        return self.head(self.ln(x)[:, 0])


# ---------------------------------------------------------------------------------------------
# MLPs
# ---------------------------------------------------------------------------------------------
ACTIVATIONS = {
    "relu": nn.ReLU, "relu6": nn.ReLU6, "gelu": nn.GELU, "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "silu": nn.SiLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "leaky_relu": lambda: nn.LeakyReLU(0.1),
    "elu": nn.ELU, "selu": nn.SELU, "celu": lambda: nn.CELU(0.5), "softplus": nn.Softplus,
    "softplus_beta": lambda: nn.Softplus(beta=2.0, threshold=5.0), "softsign": nn.Softsign, "mish": nn.Mish,
    "hardswish": nn.Hardswish, "hardsigmoid": nn.Hardsigmoid, "hardtanh": lambda: nn.Hardtanh(-0.5, 0.5),
    "logsigmoid": nn.LogSigmoid, "prelu": nn.PReLU, "tanhshrink": nn.Tanhshrink, "softshrink": nn.Softshrink,
    "hardshrink": nn.Hardshrink,
}


class MLP(nn.Module):
    """Linear -> activation -> Linear -> activation -> Linear."""

    def __init__(self, activation: str, sizes=(32, 64, 48, 10)):
        super().__init__()
        act = ACTIVATIONS[activation]
        layers = []
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(act())
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class AllActivations(nn.Module):
    """One MLP layer per activation, their outputs concatenated: every activation in one program."""

    def __init__(self, features=16):
        super().__init__()
        self.names = sorted(ACTIVATIONS)
        self.fc = nn.ModuleDict({n: nn.Linear(features, features) for n in self.names})
        self.act = nn.ModuleDict({n: ACTIVATIONS[n]() for n in self.names})

    def forward(self, x):
        return torch.cat([self.act[n](self.fc[n](x) * 3.0) for n in self.names], dim=-1)
