"""Run an ONNX graph with PyTorch's eager ops, node by node: the PyTorch column of benchmarks/e2e.py.

Why not a converter package: onnx2torch needs torchvision, which does not install beside the local
torch build, and the zoo's graphs are the exact op sequences torchvision's / Hugging Face's eager
modules execute (Conv -> F.conv2d, BatchNormalization -> F.batch_norm, MatMul -> torch.matmul, ...),
so mapping each node to the same aten call gives eager PyTorch's latency for the same model and the
same weights. Covers the ops the zoo uses; anything else raises NotImplementedError naming the op.
"""
from __future__ import annotations

import numpy as np


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


# inputs of these ops that are shapes, axes or bounds: read on the host (kept on the CPU on a GPU)
HOST_INPUTS = {"Reshape": (1,), "Slice": (1, 2, 3, 4), "Unsqueeze": (1,), "Split": (1,), "Range": (0, 1, 2)}


class TorchOnnxRunner:
    """`TorchOnnxRunner(model)(feeds)` -> list of numpy outputs, computed with torch ops under inference_mode.

    device="cuda": eager PyTorch on the GPU: the floating-point weights live there, integer constants
    (shapes, axes) stay on the host as an eager module keeps them, and a host tensor an op computes with
    on the device is moved there once; feeds may be device tensors, and `keep=True` returns the outputs
    as torch tensors where they are (no copy back)."""

    def __init__(self, model, device=None):
        import torch
        from onnx import numpy_helper

        self.torch = torch
        self.device = None if device is None else torch.device(device)
        self.consts = {}
        for t in model.graph.initializer:
            x = torch.from_numpy(numpy_helper.to_array(t).copy())
            self.consts[t.name] = x.to(self.device) if self.device is not None and x.is_floating_point() else x
        self._moved = {}     # constant name -> its copy on the device
        init = set(self.consts)
        self.input_names = [i.name for i in model.graph.input if i.name not in init]
        self.output_names = [o.name for o in model.graph.output]
        self.plan = []
        for node in model.graph.node:
            make = getattr(self, f"_op_{node.op_type}", None)
            if make is None:
                raise NotImplementedError(f"the PyTorch runner has no mapping for ONNX op {node.op_type} "
                                          f"(node {node.name!r})")
            self.plan.append((make(_attrs(node), node), list(node.input), list(node.output),
                              HOST_INPUTS.get(node.op_type, ())))

    def _on_device(self, args, names, host):
        """args with every host tensor an op computes with moved to the device (constants once)."""
        dev = self.device
        if not any(isinstance(a, self.torch.Tensor) and a.device.type != "cpu" for a in args):
            return args
        out = list(args)
        for k, a in enumerate(args):
            if k in host or not isinstance(a, self.torch.Tensor) or a.device.type != "cpu" or a.dim() == 0:
                continue
            if names[k] in self.consts:
                if names[k] not in self._moved:
                    self._moved[names[k]] = a.to(dev)
                out[k] = self._moved[names[k]]
            else:
                out[k] = a.to(dev)
        return out

    def __call__(self, feeds: dict, keep: bool = False) -> list:
        torch = self.torch
        with torch.inference_mode():
            env = dict(self.consts)
            for k in self.input_names:
                x = feeds[k]
                env[k] = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))
            for fn, ins, outs, host in self.plan:
                args = [env[i] if i else None for i in ins]
                if self.device is not None:
                    args = self._on_device(args, ins, host)
                res = fn(*args)
                if len(outs) == 1:
                    env[outs[0]] = res
                else:
                    for o, r in zip(outs, res):
                        env[o] = r
            if keep:
                return [env[o] for o in self.output_names]
            return [env[o].cpu().numpy() for o in self.output_names]

    # -- the ops (each returns fn(*inputs)) ---------------------------------------------------
    def _op_Conv(self, a, node):
        F = self.torch.nn.functional
        pads = a.get("pads", [0, 0, 0, 0])
        n = len(pads) // 2
        if pads[:n] != pads[n:] or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise NotImplementedError(f"Conv {node.name!r}: asymmetric or auto padding")
        kw = dict(stride=a.get("strides", 1), padding=pads[:n], dilation=a.get("dilations", 1), groups=a.get("group", 1))
        return lambda x, w, b=None: F.conv2d(x, w, b, **kw)

    def _op_BatchNormalization(self, a, node):
        F = self.torch.nn.functional
        eps = a.get("epsilon", 1e-5)
        return lambda x, s, b, m, v: F.batch_norm(x, m, v, s, b, training=False, eps=eps)

    def _op_Relu(self, a, node):
        return self.torch.relu

    def _op_Clip(self, a, node):
        def clip(x, lo=None, hi=None):
            return self.torch.clamp(x, None if lo is None else float(lo), None if hi is None else float(hi))
        return clip

    def _op_MaxPool(self, a, node):
        F = self.torch.nn.functional
        pads = a.get("pads", [0, 0, 0, 0])
        n = len(pads) // 2
        kw = dict(kernel_size=a["kernel_shape"], stride=a.get("strides", 1), padding=pads[:n],
                  dilation=a.get("dilations", 1), ceil_mode=bool(a.get("ceil_mode", 0)))
        return lambda x: F.max_pool2d(x, **kw)

    def _op_GlobalAveragePool(self, a, node):
        return lambda x: self.torch.nn.functional.adaptive_avg_pool2d(x, 1)

    def _op_Flatten(self, a, node):
        axis = a.get("axis", 1)
        return lambda x: x.reshape(int(np.prod(x.shape[:axis])), -1)

    def _op_Gemm(self, a, node):
        F = self.torch.nn.functional
        alpha, beta, ta, tb = a.get("alpha", 1.0), a.get("beta", 1.0), a.get("transA", 0), a.get("transB", 0)
        if (alpha, beta, ta, tb) == (1.0, 1.0, 0, 1):
            return lambda x, w, c=None: F.linear(x, w, c)

        def gemm(x, w, c=None):
            y = alpha * ((x.T if ta else x) @ (w.T if tb else w))
            return y if c is None else y + beta * c
        return gemm

    def _op_MatMul(self, a, node):
        return self.torch.matmul

    def _op_Add(self, a, node):
        return self.torch.add

    def _op_Sub(self, a, node):
        return self.torch.sub

    def _op_Mul(self, a, node):
        return self.torch.mul

    def _op_Div(self, a, node):
        return self.torch.div

    def _op_Pow(self, a, node):
        return self.torch.pow

    def _op_Erf(self, a, node):
        return self.torch.erf

    def _op_Tanh(self, a, node):
        return self.torch.tanh

    def _op_Identity(self, a, node):
        return lambda x: x

    def _op_Softmax(self, a, node):
        axis = a.get("axis", -1)
        return lambda x: self.torch.softmax(x, axis)

    def _op_LayerNormalization(self, a, node):
        F = self.torch.nn.functional
        axis, eps = a.get("axis", -1), a.get("epsilon", 1e-5)
        return lambda x, w, b=None: F.layer_norm(x, x.shape[axis:], w, b, eps)

    def _op_Gather(self, a, node):
        F = self.torch.nn.functional
        axis = a.get("axis", 0)

        def gather(x, idx):
            if axis == 0 and x.dim() == 2 and idx.dim() >= 1 and x.is_floating_point():
                return F.embedding(idx, x)
            return x[(slice(None),) * (axis % x.dim()) + (idx,)]
        return gather

    def _op_Reshape(self, a, node):
        def reshape(x, shape):
            s = [int(v) for v in shape.tolist()]
            return x.reshape([x.shape[i] if v == 0 else v for i, v in enumerate(s)])
        return reshape

    def _op_Transpose(self, a, node):
        perm = a.get("perm")
        return lambda x: x.permute(perm if perm is not None else list(range(x.dim()))[::-1])

    def _op_Where(self, a, node):
        return self.torch.where

    def _op_Split(self, a, node):
        axis = a.get("axis", 0)
        n = len(node.output)

        def split(x, sizes=None):
            if sizes is None:
                return self.torch.chunk(x, n, axis)
            return self.torch.split(x, [int(v) for v in sizes.tolist()], axis)
        return split

    def _op_Slice(self, a, node):
        def slice_(x, starts, ends, axes=None, steps=None):
            starts, ends = starts.tolist(), ends.tolist()
            axes = list(range(len(starts))) if axes is None else axes.tolist()
            steps = [1] * len(starts) if steps is None else steps.tolist()
            if any(s <= 0 for s in steps):
                raise NotImplementedError(f"Slice {node.name!r}: non-positive steps")
            idx = [slice(None)] * x.dim()
            for s, e, ax, st in zip(starts, ends, axes, steps):
                idx[ax] = slice(s, e, st)
            return x[tuple(idx)]
        return slice_

    def _op_Shape(self, a, node):
        return lambda x: self.torch.tensor(list(x.shape), dtype=self.torch.int64)

    def _op_Concat(self, a, node):
        axis = a["axis"]
        return lambda *xs: self.torch.cat(xs, axis)

    def _op_Unsqueeze(self, a, node):
        def unsqueeze(x, axes):
            rank = x.dim() + len(axes)
            for ax in sorted(int(v) % rank for v in axes.tolist()):
                x = x.unsqueeze(ax)
            return x
        return unsqueeze

    def _op_Cast(self, a, node):
        from onnx import helper

        dt = getattr(self.torch, np.dtype(helper.tensor_dtype_to_np_dtype(a["to"])).name)
        return lambda x: x.to(dt)

    def _op_Range(self, a, node):
        return lambda start, limit, delta: self.torch.arange(start.item(), limit.item(), delta.item(),
                                                              dtype=start.dtype)
