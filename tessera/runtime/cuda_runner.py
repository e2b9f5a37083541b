"""A graph executor's runs on an NVIDIA GPU (target "cuda"; docs/gpu.md).

The model's constants are uploaded once and every value stays on the device from kernel to kernel.
With static shapes (no host step), every intermediate lives in one device arena laid out by the
plan's memory plan, each kernel's launch arguments are made once, and the launches are captured
into one CUDA graph that each run replays: a run is the input copies, one graph launch and the
output copies. Otherwise (symbolic shapes, host steps) the graph executor's general path runs
with device buffers, a host step's inputs and outputs crossing to the host and back.

Inputs may be numpy arrays (copied in; the outputs come back as numpy arrays) or CUDA device
arrays (cupy, or a torch CUDA tensor through DLPack; the outputs are then cupy arrays, which
torch.from_dlpack takes without a copy).
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import DTypeError, TesseraError
from .cuda import _need_cupy, is_device_array
from .inputs import check_input_shape


class CUDARunner:
    """See the module docstring; one per GraphExecutor whose kernels are CUDA functions."""

    def __init__(self, exe):
        self.cp = cp = _need_cupy()
        self.exe = exe
        self.lock = threading.Lock()
        self.stream = cp.cuda.Stream(non_blocking=True)   # its own stream: the launches are captured there
        self._consts = {}        # id(host constant) -> (host array, device copy)
        self._const_ids = {id(c) for c in exe.constant_values if c is not None}
        self._static = None      # the static state (made on the first run), or False
        self.graph_error = None  # why the launches are not replayed as a CUDA graph (None: they are)

    # ------------------------------------------------------------------ conversions
    def to_device(self, x):
        """x on the device: a device array as it is, a host array copied (a constant once)."""
        if is_device_array(x):
            return x
        if hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray):
            return self.cp.from_dlpack(x)
        got = self._consts.get(id(x))
        if got is not None and got[0] is x:
            return got[1]
        d = self.cp.asarray(np.ascontiguousarray(x))
        if id(x) in self._const_ids:
            self._consts[id(x)] = (x, d)
        return d

    def to_host(self, x):
        return self.cp.asnumpy(x) if is_device_array(x) else x

    def empty(self, shape, dtype):
        return self.cp.empty(shape, dtype)

    def launch(self, st, ins, outs):
        """One kernel step on device arrays (the general path)."""
        for kern, grid, block, kargs, smem in st.fn.launches(self.cp, list(ins) + list(outs)):
            kern(grid, block, kargs, shared_mem=smem)

    # ------------------------------------------------------------------ runs
    def run(self, arrays) -> list:
        """Outputs of one run on checked inputs (numpy or device arrays); see the module docstring."""
        on_device = any(is_device_array(x) for x in arrays)
        with self.lock, self.stream:
            if on_device:   # inputs made on the default stream (cupy's, torch's) are complete first
                self.stream.wait_event(self.cp.cuda.Stream.null.record())
            if self._static is None:
                self._static = self._prepare() if self.exe.is_static else False
            if self._static:
                outs = self._run_static(arrays)
            else:
                outs = self.exe.execute([self.to_device(x) for x in arrays], device=self)
            if on_device:
                outs = [self.to_device(o) for o in outs]
            else:
                outs = [self.to_host(o) for o in outs]
            self.stream.synchronize()
        return outs

    def _prepare(self):
        """Buffers for every value, the launches of every step, and their CUDA graph."""
        cp, exe = self.cp, self.exe
        plan = exe.plan
        vals = [None] * len(plan.values)
        for s, c in enumerate(exe.constant_values):
            if c is not None:
                vals[s] = self.to_device(c)
        shapes = {s: tuple(plan.values[s].shape) for s in exe.input_slots}
        dtypes = {s: plan.values[s].np_dtype for s in range(len(plan.values))}
        for st in exe.steps:
            if st.spec.static_out_shapes is None:
                return False
            shapes.update(zip(st.outs, (tuple(x) for x in st.spec.static_out_shapes)))
        memory = plan.memory
        offsets = memory.offsets if memory is not None else {}
        arena = cp.empty(max(memory.arena_bytes if memory is not None else 0, 1), np.uint8)
        for s, shape in shapes.items():
            if vals[s] is not None:
                continue
            n = int(np.prod(shape, dtype=np.int64))
            if s in offsets and s not in exe.output_slots:
                off, nbytes = offsets[s]
                view = arena[off:off + n * np.dtype(dtypes[s]).itemsize]
                vals[s] = view.view(dtypes[s]).reshape(shape)
            else:
                vals[s] = cp.empty(shape, dtypes[s])
        launches = []
        for st in exe.steps:
            args = [vals[s] for s in st.ins] + [vals[s] for s in st.outs]
            launches += st.fn.launches(cp, args)
        state = {"vals": vals, "arena": arena, "launches": launches, "graph": None}
        try:
            self.stream.begin_capture()
            try:
                for kern, grid, block, kargs, smem in launches:
                    kern(grid, block, kargs, shared_mem=smem)
            finally:
                graph = self.stream.end_capture()
            state["graph"] = graph
        except Exception as e:  # noqa: BLE001 - no graph capture here: the launches run one by one
            self.graph_error = f"{type(e).__name__}: {e}"
        return state

    def _run_static(self, arrays) -> list:
        state, cp = self._static, self.cp
        vals = state["vals"]
        for s, x in zip(self.exe.input_slots, arrays):
            buf = vals[s]
            if is_device_array(x) or (hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray)):
                cp.copyto(buf, self.to_device(x))
            else:
                buf.set(np.ascontiguousarray(x), stream=self.stream)
        if state["graph"] is not None:
            state["graph"].launch(self.stream)
        else:
            for kern, grid, block, kargs, smem in state["launches"]:
                kern(grid, block, kargs, shared_mem=smem)
        return [vals[s].copy() for s in self.exe.output_slots]


def check_device_input(name: str, x, spec):
    """A CUDA device input (cupy, or a DLPack producer such as a torch CUDA tensor) checked
    against its spec: dtype, rank, static dimensions and C-contiguity."""
    if not is_device_array(x):
        x = _need_cupy().from_dlpack(x)
    if np.dtype(x.dtype) != spec.np_dtype:
        raise DTypeError(f"input {name!r}: dtype {x.dtype}, the graph expects {spec.dtype} ({spec})")
    check_input_shape(name, x, spec)
    if not x.flags.c_contiguous:
        raise TesseraError(f"input {name!r}: a device array must be C-contiguous (shape {tuple(x.shape)})")
    return x


__all__ = ["CUDARunner", "check_device_input"]
