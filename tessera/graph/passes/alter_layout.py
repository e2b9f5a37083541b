"""alter_layout: convolutions in blocked layouts NCHW[x]c sized for the target's vector width
(TVM's AlterOpLayout with the x86 conv2d_NCHWc strategy).

Rewrites, for a CPU target with L fp32 lanes (8 with AVX2, 16 with AVX-512, 4 otherwise):
- `nn.conv2d` (float32, NCHW, groups 1, weight computed from constants, O a multiple of 8 or L)
  -> `nn.contrib_conv2d_NCHWc` on data NCHW{i}c with the weight behind a `layout_transform`
  OIHW -> OIHW{i}i{o}o: a node over a constant, which fold_constant then evaluates, so the weights
  are packed once at compile time (o = L where it divides O, else 8; i = the block the input
  already has, else L, 8, or C itself for narrow inputs such as RGB);
- depthwise `nn.conv2d` (groups = C = O) -> `nn.contrib_depthwise_conv2d_NCHWc` (weight OIHW1i{x}o);
- the integer convolutions of quantized models (`qnn.conv2d`, uint8 data, constant int8 weights) ->
  `qnn.contrib_conv2d_NCHWc` / `qnn.contrib_depthwise_conv2d_NCHWc` (ops/nn/qconv_nchwc.py) in blocks of
  the target's int32 dot-product lanes (16 with AVX512-VNNI, else 8), the weights packed here (four input
  channels of an output channel side by side) and the input zero point's share of the sum folded into the
  bias; an input whose channels the block does not divide (RGB) is blocked by `qnn.pack_nchwc`, the
  extra channels the zero point (their weights zero);
- and carries the blocked layout through what follows: elementwise ops, broadcast ops (a
  per-channel operand such as a bias (C, 1, 1) gets the blocked shape (1, C/x, 1, 1, x), again a
  node over constants that folds; a full-size operand is blocked too, so a residual add stays
  blocked), `nn.max_pool2d` / `nn.avg_pool2d` and the global pools (their `layout` attribute).

Layout transforms of activations are inserted lazily, only where a value crosses between a
blocked and a plain consumer: on the way into the first blocked op of a region and on the way out
to the first op that needs NCHW (or a graph output). A value stays blocked from one convolution to
the next, so a chain of convolutions holds exactly two activation transforms. Everything computes
the same values as the NCHW graph (the convolution sums in another order).
"""
from __future__ import annotations

import numpy as np

from ...errors import TesseraError
from ..ir import Graph, Node, Value
from ._rewrite import Rewriter, const_derived
from ...target import Target
from ...ops.registry import get_op
from ...ops.registry import OpPattern
from .context import PassContext
from ...tir.tensor_intrin.x86_qconv import AMX_BLOCK, amx_for, block_lanes, isa_for

CONV = "nn.contrib_conv2d_NCHWc"
DEPTHWISE = "nn.contrib_depthwise_conv2d_NCHWc"
POOLS = ("nn.max_pool2d", "nn.avg_pool2d")
GLOBAL_POOLS = ("nn.global_avg_pool", "nn.global_max_pool", "qnn.global_avg_pool")
QCONV = "qnn.contrib_conv2d_NCHWc"
QDEPTHWISE = "qnn.contrib_depthwise_conv2d_NCHWc"
# broadcast ops whose semantics are not plain numpy broadcasting over the operands
_NOT_BROADCAST = ("nn.batch_norm", "nn.prelu", "qnn.requantize")


def _lanes(target) -> int | None:
    """fp32 lanes of the target's vectors; None for targets the pass leaves alone (not CPU C)."""
    t = Target(target)
    if not t.is_cpu:
        return None
    return max(4, int(t.vector_bits) // 32)


def _out_block(channels: int, lanes: int) -> int | None:
    """Output channels a block: a vector (L), else 8 (AVX-512 CPUs run 8-lane blocks too); None when
    neither divides (the convolution stays NCHW)."""
    for x in (lanes, 8):
        if channels % x == 0:
            return x
    return None


def _in_block(channels: int, lanes: int, have: int | None) -> int:
    """Input channels a block: the block the data already has, else L or 8, else C itself when it
    is narrow (RGB: NCHW3c), else the largest divisor of C up to L."""
    if have and channels % have == 0:
        return have
    for x in (lanes, 8):
        if channels % x == 0:
            return x
    if channels <= lanes:
        return channels
    return max(d for d in range(1, lanes + 1) if channels % d == 0)


class _Alter:
    def __init__(self, graph: Graph, lanes: int, target=None):
        self.g = graph
        self.lanes = lanes
        self.target = target
        self.qlanes = block_lanes(target) if target is not None else None
        self.rw = Rewriter(graph)
        self.consts = const_derived(graph)
        self.blocked: dict = {}       # old Value -> (new Value in NCHW{x}c, x)
        self.plain_memo: dict = {}    # old Value -> new NCHW Value made from its blocked form
        self.block_memo: dict = {}    # (old Value, x) -> new NCHW{x}c Value

    # ------------------------------------------------------------------ values in either layout
    def plain(self, v: Value) -> Value:
        """The NCHW version of old Value v in the new graph (a transform out of a blocked region)."""
        if v in self.blocked and v not in self.plain_memo:
            b, x = self.blocked[v]
            out = self.rw.make("layout_transform", b, name=f"{v.name}_nchw", src_layout=f"NCHW{x}c",
                               dst_layout="NCHW")
            self.plain_memo[v] = out
            self.rw.replace(v, out)
        if v in self.plain_memo:
            return self.plain_memo[v]
        return self.rw.get(v)

    def to_blocked(self, v: Value, x: int) -> Value:
        """The NCHW{x}c version of old Value v (rank 4, C divisible by x)."""
        have = self.blocked.get(v)
        if have is not None and have[1] == x:
            return have[0]
        key = (v, x)
        if key not in self.block_memo:
            if have is not None:
                out = self.rw.make("layout_transform", have[0], name=f"{v.name}_nchw{x}c",
                                   src_layout=f"NCHW{have[1]}c", dst_layout=f"NCHW{x}c")
            else:
                out = self.rw.make("layout_transform", self.plain(v), name=f"{v.name}_nchw{x}c",
                                   src_layout="NCHW", dst_layout=f"NCHW{x}c")
            self.block_memo[key] = out
        return self.block_memo[key]

    def block_of(self, v: Value):
        b = self.blocked.get(v)
        return None if b is None else b[1]

    # ------------------------------------------------------------------ emitting
    def keep(self, n: Node) -> None:
        """n as it was, on the NCHW versions of its inputs."""
        ins = [self.plain(v) for v in n.inputs]
        if all(a is b for a, b in zip(ins, n.inputs)):
            self.rw.nodes.append(n)
            return
        nn = Node(n.op, ins, n.attrs, n.name, [o.type for o in n.outputs], [o.name for o in n.outputs])
        self.rw.nodes.append(nn)
        for old, new in zip(n.outputs, nn.outputs):
            self.rw.replace(old, new)

    def emit_blocked(self, n: Node, op: str, ins, attrs, x: int) -> None:
        """n replaced by `op` on blocked inputs; its output is known only in NCHW{x}c from here."""
        opdef = get_op(op, n.name)
        attrs = opdef.normalize_attrs(attrs, n.name)
        types = opdef.infer_types([v.type for v in ins], attrs, n.name)
        node = Node(op, ins, attrs, n.name, types, [n.outputs[0].name])
        self.rw.nodes.append(node)
        self.blocked[n.outputs[0]] = (node.outputs[0], x)

    # ------------------------------------------------------------------ rules
    def conv(self, n: Node) -> bool:
        data, weight = n.inputs
        a = n.attrs
        t, wt = data.type, weight.type
        if t.ndim != 4 or str(t.dtype) != "float32" or str(wt.dtype) != "float32" or weight not in self.consts:
            return False
        if a.get("out_dtype") not in (None, "", "float32"):
            return False
        if not all(isinstance(d, int) for d in t.shape[1:]) or not wt.is_static:
            return False
        C, O, groups = t.shape[1], wt.shape[0], int(a.get("groups", 1))
        common = dict(strides=a["strides"], padding=a["padding"], dilation=a["dilation"])
        if groups == 1:
            ob = _out_block(O, self.lanes)
            if ob is None:
                return False
            ib = _in_block(C, self.lanes, self.block_of(data))
            w = self.rw.make("layout_transform", self.plain(weight), name=f"{weight.name}_OIHW{ib}i{ob}o",
                             src_layout="OIHW", dst_layout=f"OIHW{ib}i{ob}o")
            self.emit_blocked(n, CONV, [self.to_blocked(data, ib), w],
                              dict(common, data_layout=f"NCHW{ib}c", kernel_layout=f"OIHW{ib}i{ob}o",
                                   out_layout=f"NCHW{ob}c"), ob)
            return True
        if groups == C == O and wt.shape[1] == 1:
            have = self.block_of(data)
            x = have if have and C % have == 0 and have in (self.lanes, 8) else _out_block(C, self.lanes)
            if x is None:
                return False
            w = self.rw.make("layout_transform", self.plain(weight), name=f"{weight.name}_OIHW1i{x}o",
                             src_layout="OIHW", dst_layout=f"OIHW1i{x}o")
            self.emit_blocked(n, DEPTHWISE, [self.to_blocked(data, x), w],
                              dict(common, data_layout=f"NCHW{x}c", kernel_layout=f"OIHW1i{x}o",
                                   out_layout=f"NCHW{x}c"), x)
            return True
        return False

    def qconv(self, n: Node) -> bool:
        """qnn.conv2d -> its blocked int8 form (module docstring)."""
        data, weight, bias, mult = n.inputs
        a = n.attrs
        consts = self.g.constants
        if self.qlanes is None or str(data.dtype) != "uint8" or any(v not in consts for v in n.inputs[1:]):
            return False
        t = data.type
        if not all(isinstance(d, int) for d in t.shape[1:]):
            return False
        w = np.asarray(consts[weight]).astype(np.int64)
        b, m = np.asarray(consts[bias]).astype(np.int64), np.asarray(consts[mult])
        C, O, groups, zp = t.shape[1], w.shape[0], int(a["groups"]), int(a["input_zero_point"])
        have = self.block_of(data)
        common = dict(strides=a["strides"], padding=a["padding"], dilation=a["dilation"], pad_value=zp,
                      output_zero_point=a["output_zero_point"], out_dtype=a["out_dtype"], out_min=a["out_min"],
                      out_max=a["out_max"], precision=a["precision"])
        # the zero point's share of each output's sum: the op then multiplies the data as it is
        bias_folded = b - zp * w.reshape(O, -1).sum(1)
        if np.abs(bias_folded).max(initial=0) >= 2**31:     # (not int32: the NCHW op keeps the zero point)
            return False
        if groups == 1:
            ob = next((x for x in (self.qlanes, 8) if O % x == 0 and isa_for(self.target, x)), None)
            if ob is None:
                return False
            if ob == 16 and C % AMX_BLOCK == 0 and amx_for(self.target):
                ib = AMX_BLOCK      # an AMX A-tile row: one pixel's 64 channels (x86_qconv.amx_c_source)
            elif have and have % 4 == 0 and C % have == 0:
                ib = have
            else:
                ib = next((x for x in (self.qlanes, 8, 4) if C % x == 0), 4)
            cp = -(-C // ib) * ib
            wp = np.zeros((O, cp) + w.shape[2:], np.int8)
            wp[:, :C] = w
            KH, KW = w.shape[2:]
            packed = wp.reshape(O // ob, ob, cp // ib, ib // 4, 4, KH, KW).transpose(0, 2, 5, 6, 3, 1, 4)
            if C % ib:
                x = self.rw.make("qnn.pack_nchwc", self.plain(data), name=f"{data.name}_nchw{ib}c", block=ib, fill=zp)
            else:
                x = self.to_blocked(data, ib)
            ins = [x, self.rw.const(np.ascontiguousarray(packed), f"{weight.name}_packed")]
            op = QCONV
        elif groups == C == O and w.shape[1] == 1:
            ob = have if have in (16, 8) and C % have == 0 and isa_for(self.target, have) else \
                next((x for x in (self.qlanes, 8) if C % x == 0 and isa_for(self.target, x)), None)
            if ob is None:
                return False
            KH, KW = w.shape[2:]
            packed = w.reshape(C // ob, ob, KH, KW).transpose(0, 2, 3, 1).astype(np.int8)
            ins = [self.to_blocked(data, ob), self.rw.const(np.ascontiguousarray(packed), f"{weight.name}_packed")]
            op = QDEPTHWISE
        else:
            return False
        ins += [self.rw.const(bias_folded.astype(np.int32).reshape(O // ob, ob), f"{bias.name}_blocked"),
                self.rw.const(m.astype(np.float32).reshape(O // ob, ob), f"{mult.name}_blocked")]
        self.emit_blocked(n, op, ins, common, ob)
        return True

    def elementwise(self, n: Node) -> bool:
        """An op of pattern ELEMWISE/BROADCAST with a blocked input: the same op in NCHW{x}c."""
        if len(n.outputs) != 1 or n.op in _NOT_BROADCAST:
            return False
        pat = get_op(n.op, n.name).pattern
        if pat not in (OpPattern.ELEMWISE, OpPattern.BROADCAST):
            return False
        xs = [self.block_of(v) for v in n.inputs if self.block_of(v)]
        if not xs:
            return False
        x = xs[0]
        out = n.outputs[0].type
        if out.ndim != 4 or not isinstance(out.shape[1], int) or out.shape[1] % x:
            return False
        C = out.shape[1]
        if n.op == "qnn.lookup":     # the data blocked, the 256-entry table as it is
            data, table = n.inputs
            if self.block_of(data) is None:
                return False
            self.emit_blocked(n, n.op, [self.to_blocked(data, x), self.plain(table)], dict(n.attrs), x)
            return True
        ins = []
        for v in n.inputs:
            b = self.operand(v, x, C)
            if b is None:
                return False
            ins.append(b)
        self.emit_blocked(n, n.op, ins, dict(n.attrs), x)
        return True

    def operand(self, v: Value, x: int, C: int):
        """v as an operand of a blocked broadcast op with C channels (None when it cannot be)."""
        if self.block_of(v) is not None:
            return self.to_blocked(v, x)
        t = v.type
        if t.ndim == 0:
            return self.plain(v)
        if t.ndim > 4:
            return None
        shape = (1,) * (4 - t.ndim) + tuple(t.shape)
        p = self.plain(v)
        if shape[1] == 1:
            return self.rw.make("reshape", p, name=f"{v.name}_nchw{x}c", newshape=shape + (1,))
        if shape[1] != C:
            return None
        if t.ndim < 4:
            if not all(isinstance(d, int) for d in shape):
                return None
            p = self.rw.make("reshape", p, name=f"{v.name}_nchw", newshape=shape)
            key = (v, x)
            if key not in self.block_memo:
                self.block_memo[key] = self.rw.make("layout_transform", p, name=f"{v.name}_nchw{x}c",
                                                    src_layout="NCHW", dst_layout=f"NCHW{x}c")
            return self.block_memo[key]
        return self.to_blocked(v, x)

    def pool(self, n: Node) -> bool:
        x = self.block_of(n.inputs[0])
        if x is None or len(n.outputs) != 1:
            return False
        layout = n.attrs.get("layout")
        if n.op in POOLS and layout != "NCHW" or n.op in GLOBAL_POOLS and layout not in ("", "NCHW", None):
            return False
        if n.op in GLOBAL_POOLS and n.inputs[0].type.ndim != 4:
            return False
        self.emit_blocked(n, n.op, [self.blocked[n.inputs[0]][0]], dict(n.attrs, layout=f"NCHW{x}c"), x)
        return True

    # ------------------------------------------------------------------ the pass
    def run(self) -> Graph:
        for n in self.g.nodes:
            done = False
            if n.op == "nn.conv2d":
                done = self.conv(n)
            elif n.op == "qnn.conv2d":
                done = self.qconv(n)
            elif n.op in POOLS or n.op in GLOBAL_POOLS:
                done = self.pool(n)
            elif any(v in self.blocked for v in n.inputs):
                done = self.elementwise(n)
            if not done:
                self.keep(n)
        for v in self.g.outputs:
            self.plain(v)
        return self.rw.finish()


def alter_layout(graph: Graph, ctx=None) -> Graph:
    """`graph` with its convolutions in blocked layouts for `target` (see the module docstring); a
    graph for a non-CPU target is returned as it is."""
    target = PassContext.of(ctx).target
    if not isinstance(graph, Graph):
        raise TesseraError(f"alter_layout takes a tessera.graph.Graph, got {type(graph).__name__}")
    lanes = _lanes(target)
    if lanes is None or not any(n.op in ("nn.conv2d", "qnn.conv2d") for n in graph.nodes):
        return graph
    return _Alter(graph, lanes, target).run()


__all__ = ["alter_layout"]
