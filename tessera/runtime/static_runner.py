"""A static plan's runs with every kernel argument prepared once (TVM's graph executor does the same).

Intermediates live in one 64-byte aligned arena laid out by the plan's memory plan (a tensor
reuses the bytes of one that is dead by then, so the working set stays small and warm in cache),
and per step the kernel's argument array points at ABI structs made once; a run only points the
graph inputs' and outputs' structs at this run's arrays and calls the kernels' entries. On
MobileNetV2 this is ~1 ms of a 12 ms run against fresh numpy buffers and per-call packing.
One run at a time (`lock`); a second thread meanwhile takes the general path.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from .module import ERR_LEN, FAST_NUMPY, CTensor, pointer_at
from .ndarray import dtype_info
from .plan import node_error


class StaticRunner:
    """See the module docstring."""

    __slots__ = ("lock", "exe", "arena", "keep", "calls", "in_structs", "out_plan", "err", "_live")

    @classmethod
    def for_executor(cls, exe):
        """The runner of `exe` (a GraphExecutor), or False when its plan cannot have one (a symbolic
        shape, no memory plan, a kernel with scalar parameters or symbolic output extents)."""
        plan = exe.plan
        if plan.memory is None or not plan.is_static:
            return False
        for st in exe.steps:
            # a kernel that is not a C function (a GPU module's) runs through the general path
            if not all(getattr(st.fn, "_is_tensor", (False,))) or st.spec.static_out_shapes is None:
                return False
        return cls(exe, ERR_LEN)

    def __init__(self, exe, err_len):
        plan = exe.plan
        memory = plan.memory
        self.lock = threading.Lock()
        self.exe = exe
        raw = np.empty(memory.arena_bytes + 64, np.uint8)
        start = -raw.ctypes.data % 64
        self.arena = raw[start:start + memory.arena_bytes]
        self.keep = [raw]
        self.err = ctypes.create_string_buffer(err_len)
        shapes = {s: tuple(plan.values[s].shape) for s in exe.input_slots}
        for st in exe.steps:
            shapes.update(zip(st.outs, (tuple(x) for x in st.spec.static_out_shapes)))
        self._lay_out(shapes, self.arena.ctypes.data, {s: off for s, (off, _) in memory.offsets.items()})

    def _lay_out(self, shapes: dict, base: int, offsets: dict) -> None:
        """The ABI structs of every value (constants at their arrays, graph inputs and outputs set per
        run, intermediates at base + offsets[slot]) and every step's argument array, made once.
        shapes: slot -> shape of the inputs and of every step's outputs."""
        exe = self.exe
        structs: dict = {}      # value slot -> CTensor
        live_io: dict = {}      # value slot -> CTensor whose data is set per run (inputs, outputs)

        def struct(shape, np_dt, data):
            info = dtype_info(np.dtype(np_dt))
            shape_c = (ctypes.c_int64 * max(len(shape), 1))(*shape)
            t = CTensor(data, ctypes.addressof(shape_c), None, len(shape), info[1], info[2], 1)
            self.keep.append(shape_c)
            return t

        for s, arr in enumerate(exe.constant_values):
            if arr is not None:
                arr = arr if arr.flags.c_contiguous else arr.copy(order="C")   # (keeps a 0-d array 0-d)
                self.keep.append(arr)
                structs[s] = struct(arr.shape, arr.dtype, arr.ctypes.data)
        for s in exe.input_slots:
            structs[s] = live_io[s] = struct(shapes[s], exe.plan.values[s].np_dtype, None)
        outputs = set(exe.output_slots)
        self.out_plan = []      # per graph output: (slot, shape, dtype), produced by a node
        for st in exe.steps:
            for s, dt in zip(st.outs, st.out_np):
                if s in structs:
                    continue
                if s in outputs:
                    structs[s] = live_io[s] = struct(shapes[s], dt, None)
                    self.out_plan.append((s, shapes[s], dt))
                else:
                    structs[s] = struct(shapes[s], dt, base + offsets[s])
        self.keep.append(structs)
        self.in_structs = [(live_io[s], s) for s in exe.input_slots]
        calls = []
        for st in exe.steps:
            fn = st.fn
            args = (ctypes.c_void_p * max(fn._n, 1))(*[ctypes.addressof(structs[s])
                                                          for s in list(st.ins) + list(st.outs)])
            self.keep.append(args)
            calls.append((fn._entry, args, fn._kinds, fn._n, st))
        self.calls = calls
        self._live = live_io

    def run(self, arrays) -> list:
        exe = self.exe
        live = self._live
        vals = {}
        for (t, s), x in zip(self.in_structs, arrays):
            t.data = _data_ptr(x)
            vals[s] = x
        for s, shape, dt in self.out_plan:
            o = np.empty(shape, dt)
            live[s].data = _data_ptr(o)
            vals[s] = o
        err, n_err = self.err, len(self.err)
        for entry, args, kinds, n, st in self.calls:
            rc = entry(args, kinds, n, err, n_err)
            if rc:
                raise node_error(st, st.fn._status_error(rc, err))
        template = exe.constant_values
        return exe.collect_outputs(lambda s: vals[s] if s in vals else template[s])


def _data_ptr(x: np.ndarray) -> int:
    return pointer_at(id(x) + 16).value if FAST_NUMPY else x.ctypes.data


__all__ = ["StaticRunner"]
