"""The decoding step as a compiled tessera module: decode_step.c (package data) behind a PrimFunc that
calls it, built by the target's C backend like any kernel (its entry checks every argument; the
library is cached on disk by source and flags, and compiled for the target's CPU level).

DecodeEngine owns the packed weights: every float tensor of the step in one 64-byte aligned float32
arena, the matrices of an int8 engine in an int8 arena with a float scale per row (symmetric:
scale = max |row| / 127), and the table (`cfg`, int64) that tells the C where each lies, the sizes
and the work buffer's layout. The field names below are the C's indices (#defines written in front
of the C source), so this file is the one place that defines the layout.
"""
from __future__ import annotations

import os

import numpy as np

from ..build_module import build
from ..errors import TesseraError
from ..ir import AttrStmt, Buffer, Call, Evaluate, PrimFunc, StringImm, Var
from ..ir.expr import BufferLoad
from ..runtime.ndarray import from_numpy
from ..target import Target
from .weights import DecoderWeights

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decode_step.c")
_ALIGN = 16            # floats (64 bytes)

ARCH = {"gpt2": 0, "llama": 1}
# a matrix takes four entries: float rows (W), int8 rows (Q), per-row scales (S), bias (B); -1 for none
CFG = ("ARCH", "LAYERS", "HIDDEN", "HEADS", "KV_HEADS", "HEAD_DIM", "FFN", "VOCAB", "MAX_LEN", "BATCH", "THREADS",
       "EMB", "POS_EMB", "ROPE", "NORM_G", "NORM_B", "HEAD", "HEAD_Q", "HEAD_S", "HEAD_B",
       "W_X", "W_H", "W_QKV", "W_ATT", "W_UP", "W_ACT", "W_SCORES", "LAYER0")
LAYER = ("N1G", "N1B", "QKV", "QKV_Q", "QKV_S", "QKV_B", "O", "O_Q", "O_S", "O_B", "N2G", "N2B",
         "UP", "UP_Q", "UP_S", "UP_B", "DOWN", "DOWN_Q", "DOWN_S", "DOWN_B")
FPAR = ("EPS",)
C_INDEX = {f"CFG_{n}": i for i, n in enumerate(CFG)}
L_INDEX = {f"L_{n}": i for i, n in enumerate(LAYER)}
WEIGHTS = ("float32", "int8")


def _header() -> str:
    lines = [f"#define {k} {v}" for k, v in {**C_INDEX, **L_INDEX}.items()]
    lines += [f"#define L_STRIDE {len(LAYER)}", f"#define FP_EPS {FPAR.index('EPS')}",
              f"#define ARCH_GPT2 {ARCH['gpt2']}", f"#define ARCH_LLAMA {ARCH['llama']}"]
    return "\n".join(lines) + "\n"


def step_source() -> str:
    """The C of the decoding step with its layout defines."""
    with open(_SOURCE, encoding="utf-8") as f:
        return _header() + f.read()


def _step_function() -> PrimFunc:
    """A PrimFunc whose body calls dec_step with its parameters' addresses (pos by value). The caches,
    tokens, row starts and logits share their batch extent, so the entry checks they agree."""
    def var(name):
        return Var(name, "int64")

    layers, batch, kv, max_len, dh, vocab = (var(n) for n in ("layers", "batch", "kv_heads", "max_len", "head_dim",
                                                             "vocab"))
    bufs = [Buffer((var("cfg_numel"),), "int64", "cfg"), Buffer((var("fpar_numel"),), "float32", "fpar"),
            Buffer((var("wf_numel"),), "float32", "wf"), Buffer((var("wq_numel"),), "int8", "wq"),
            Buffer((layers, batch, kv, max_len, dh), "float32", "cache_k"),
            Buffer((layers, batch, kv, max_len, dh), "float32", "cache_v"),
            Buffer((batch,), "int64", "tokens"), Buffer((batch,), "int64", "start")]
    work, logits = Buffer((var("work_numel"),), "float32", "work"), Buffer((batch, vocab), "float32", "logits")
    pos = var("pos")

    def addr(b):
        return Call("handle", "address_of", [BufferLoad(b, [0] * len(b.shape))])

    call = Evaluate(Call("handle", "dec_step", [addr(b) for b in bufs] + [pos, addr(work), addr(logits)]))
    body = AttrStmt(StringImm("dec_step"), "pragma_import_c", StringImm(step_source()), call)
    params = bufs + [pos, work, logits]
    written = tuple(params.index(b) for b in (bufs[4], bufs[5], work, logits))
    return PrimFunc(params, body, attrs={"written_params": written}, name="decode_step")


_MODULES: dict = {}


def step_module(target: Target):
    """The built decoding-step module for `target` (one per target in this process)."""
    key = str(target)
    mod = _MODULES.get(key)
    if mod is None:
        mod = _MODULES[key] = build(_step_function(), target=target)
    return mod


class _Arena:
    """Tensors laid end to end, each at a 64-byte aligned offset (in elements)."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        self.parts, self.size = [], 0

    def add(self, a) -> int:
        if a is None:
            return -1
        off = -(-self.size // _ALIGN) * _ALIGN
        self.parts.append((off, np.ascontiguousarray(a, dtype=self.dtype).reshape(-1)))
        self.size = off + self.parts[-1][1].size
        return off

    def pack(self) -> np.ndarray:
        out = np.zeros(max(1, -(-self.size // _ALIGN) * _ALIGN), self.dtype)
        for off, a in self.parts:
            out[off:off + a.size] = a
        self.parts = []
        return out


def quantize_rows(w: np.ndarray):
    """Symmetric int8 per row: (q int8 [n, k], scale float32 [n]) with w ~ q * scale[:, None]."""
    amax = np.max(np.abs(w), axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


class DecodeEngine:
    """The packed weights and the compiled step: `prepare(batch, max_len)` sizes the work buffer for a
    generation, `step(...)` runs one position of every batch row."""

    def __init__(self, weights: DecoderWeights, target=None, weight_dtype: str = "float32"):
        if weight_dtype not in WEIGHTS:
            raise TesseraError(f"decode engine: weights must be one of {', '.join(WEIGHTS)}, got {weight_dtype!r}")
        target = Target.host() if target is None else Target(target)
        if target.kind != "c":
            raise TesseraError(f"decode engine: the decoding step runs on CPU targets (kind 'c'), not {str(target)!r}")
        c = weights.config
        self.config, self.target, self.weight_dtype = c, target, weight_dtype
        self.quantized = weight_dtype == "int8"
        fa, qa = _Arena(np.float32), _Arena(np.int8)
        cfg = np.full(len(CFG) + len(LAYER) * c.n_layers, -1, np.int64)
        put = {n: i for i, n in enumerate(CFG)}

        def matrix(at: int, w, bias):
            if self.quantized:
                q, s = quantize_rows(w)
                cfg[at:at + 4] = (-1, qa.add(q), fa.add(s), fa.add(bias))
            else:
                cfg[at:at + 4] = (fa.add(w), -1, -1, fa.add(bias))

        cfg[put["ARCH"]] = ARCH[c.arch]
        for name, v in (("LAYERS", c.n_layers), ("HIDDEN", c.hidden), ("HEADS", c.heads), ("KV_HEADS", c.kv_heads),
                        ("HEAD_DIM", c.head_dim), ("FFN", c.ffn), ("VOCAB", c.vocab),
                        ("THREADS", max(1, target.num_threads)), ("LAYER0", len(CFG))):
            cfg[put[name]] = v
        emb = fa.add(weights.embed)
        cfg[put["EMB"]] = emb
        cfg[put["POS_EMB"]] = fa.add(weights.pos_embed)
        cfg[put["ROPE"]] = fa.add(weights.inv_freq)
        for i, lw in enumerate(weights.layers):
            base = len(CFG) + i * len(LAYER)
            at = {n: base + j for j, n in enumerate(LAYER)}
            cfg[at["N1G"]], cfg[at["N1B"]] = fa.add(lw.norm1), fa.add(lw.norm1_bias)
            matrix(at["QKV"], lw.qkv, lw.qkv_bias)
            matrix(at["O"], lw.out, lw.out_bias)
            cfg[at["N2G"]], cfg[at["N2B"]] = fa.add(lw.norm2), fa.add(lw.norm2_bias)
            matrix(at["UP"], lw.up, lw.up_bias)
            matrix(at["DOWN"], lw.down, lw.down_bias)
        cfg[put["NORM_G"]], cfg[put["NORM_B"]] = fa.add(weights.norm), fa.add(weights.norm_bias)
        if weights.head is weights.embed and not self.quantized:
            cfg[put["HEAD"]:put["HEAD"] + 4] = (emb, -1, -1, -1)       # tied: the embedding table itself
        else:
            matrix(put["HEAD"], weights.head, None)
        self.cfg = cfg
        self.fpar = np.array([c.eps], np.float32)
        self.wf, self.wq = fa.pack(), qa.pack()
        self.module = step_module(target)
        self._fn = self.module["decode_step"]
        # the engine's own arguments wrapped once (sharing memory): a step passes their tensor
        # descriptors as they are instead of converting four numpy arrays a call
        self._fixed = tuple(from_numpy(a) for a in (self.cfg, self.fpar, self.wf, self.wq))
        self.batch = self.max_len = 0
        self.work = self._work = None

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights a step reads (the packed arenas less the embedding tables' unread rows)."""
        c = self.config
        rows = c.vocab * c.hidden * 4 + (c.max_positions * c.hidden * 4 if self.cfg[CFG.index("POS_EMB")] >= 0 else 0)
        tied = self.cfg[CFG.index("HEAD")] == self.cfg[CFG.index("EMB")]
        return int(self.wf.nbytes + self.wq.nbytes - rows + (c.vocab * c.hidden * 4 if tied else 0))

    def prepare(self, batch: int, max_len: int) -> None:
        """Size the work buffer for `batch` rows and a cache of `max_len` positions."""
        c = self.config
        put = {n: i for i, n in enumerate(CFG)}
        threads = int(self.cfg[put["THREADS"]])
        sizes = (("W_X", c.hidden), ("W_H", c.hidden * threads), ("W_QKV", (c.heads + 2 * c.kv_heads) * c.head_dim),
                 ("W_ATT", c.heads * c.head_dim), ("W_UP", (2 if c.arch == "llama" else 1) * c.ffn),
                 ("W_ACT", c.ffn), ("W_SCORES", c.heads * max_len))
        off = 0
        for name, per_row in sizes:
            self.cfg[put[name]] = off
            off += -(-batch * per_row // _ALIGN) * _ALIGN
        self.cfg[put["BATCH"]], self.cfg[put["MAX_LEN"]] = batch, max_len
        if self.work is None or self.work.size < off:
            self.work = np.zeros(off, np.float32)
            self._work = from_numpy(self.work)
        self.batch, self.max_len = batch, max_len

    def step(self, cache_k, cache_v, tokens, start, pos: int, logits) -> None:
        """One position (`pos`, a cache slot) of every row: tokens [batch] in, logits [batch, vocab] out,
        this position's keys and values written into cache_k / cache_v [layers, batch, kv_heads,
        max_len, head_dim] at slot pos; row b attends to slots start[b] .. pos. The arrays may be numpy
        arrays or tessera NDArrays (which pass without conversion)."""
        self._fn(*self._fixed, cache_k, cache_v, tokens, start, pos, self._work, logits)
