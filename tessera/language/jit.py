"""`@tessera.jit`: a kernel written on blocks, compiled per distinct set of constexprs, launched as
`kernel[grid](args..., BLOCK=128)`.

A launch binds the arguments: arrays (numpy, tessera NDArrays, CPU torch tensors through DLPack,
OpenCL DeviceArrays, CUDA device arrays such as cupy's) become pointer parameters, Python ints and
floats runtime scalars (an int equal to 1 is specialized to the constant, as Triton does, so a
unit stride makes accesses contiguous),
`tl.constexpr` parameters and `None` are bound into the trace. The specialization key is those
signatures and values, the target and num_warps; each key is traced, optimized, lowered and built
once per process (the backend's kernel cache keeps the compiled library on disk across processes).
The grid is a tuple or a function of the arguments by name (`lambda meta: (cdiv(n, meta["BLOCK"]),)`);
arguments.py views the arrays and checks the grid.

On the C target the grid is a runtime argument of one compiled function. A GPU kernel's launch shape
is fixed when it is built: the grid there is rounded up to a power of two per axis (a bucket) and
each work-group walks the programs of its column grid-stride, so a kernel is built once per bucket
(and per argument shape: GPU modules take static shapes).

`TESSERA_INTERPRET=1` (or `interpret=True` on a launch) runs the kernel on numpy instead
(interpreter.py), program by program, without a compiler.
"""
from __future__ import annotations

import inspect as _inspect
import numbers
import os
import threading
from dataclasses import dataclass

import numpy as np

from ..backend import build, get_backend
from ..errors import TesseraError
from ..runtime.ndarray import NDArray
from ..target import Target
from . import arguments, core, interpreter, ir, passes
from .core import constexpr
from .frontend import rewrite
from .lower import lower_cpu
from .lower_gpu import lower_gpu
from .trace import trace

LAUNCH_OPTIONS = ("num_warps", "num_stages", "target", "interpret", "num_ctas", "enable_fp_fusion", "maxnreg",
                  "debug")


def _is_constexpr(annotation) -> bool:
    if annotation is constexpr or (isinstance(annotation, type) and issubclass(annotation, constexpr)):
        return True
    return isinstance(annotation, str) and annotation.split(".")[-1] == "constexpr"


@dataclass(frozen=True)
class Inspection:
    """What `kernel.inspect(...)` returns: the tile IR as traced and after the passes, the loop
    program (the lowered tir.PrimFunc's text) and the generated source."""

    traced: str
    tile_ir: str
    primfunc: object
    loop_program: str
    source: str
    axis_info: dict

    def __str__(self):
        return "\n\n".join([self.tile_ir, self.loop_program, self.source])


class _Compiled:
    __slots__ = ("module", "func", "primfunc", "target", "params", "gpu_grid", "traced")

    def __init__(self, module, func, primfunc, target, params, gpu_grid, traced):
        self.module, self.func, self.primfunc, self.target = module, func, primfunc, target
        self.params, self.gpu_grid, self.traced = params, gpu_grid, traced


class JITFunction:
    """A @tessera.jit kernel (see the module docstring)."""

    def __init__(self, fn, *, target=None, do_not_specialize=(), interpret=None, debug=None):
        if not callable(fn):
            raise TesseraError(f"@jit applies to a function, got {fn!r}")
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.signature = _inspect.signature(fn)
        self.arg_names = list(self.signature.parameters)
        self.constexpr_names = {n for n, p in self.signature.parameters.items() if _is_constexpr(p.annotation)}
        self.do_not_specialize = set(do_not_specialize)
        self.default_target = target
        self.interpret = interpret
        self._make = None
        self._lock = threading.Lock()
        self.cache: dict = {}

    def __repr__(self):
        return f"JITFunction({self.fn.__module__}:{self.fn.__qualname__})"

    # the rewritten Python function ---------------------------------------------------------
    def rewritten(self):
        if self._make is None:
            self._make = rewrite(self.fn)
        return self._make

    def __call__(self, *args, **kwargs):
        """Calling a @jit function from inside a kernel inlines it (a helper); outside, launch with kernel[grid]."""
        b = getattr(core._state, "builder", None)
        if b is None:
            raise TesseraError(f"{self.__name__} is a @tessera.jit kernel: launch it as {self.__name__}[grid](...)")
        return self.rewritten()(b.for_loop)(*args, **kwargs)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    # binding ------------------------------------------------------------------------------
    def bind(self, args, kwargs):
        """(bound arguments by name, launch options) of a call."""
        opts = {k: kwargs.pop(k) for k in list(kwargs) if k in LAUNCH_OPTIONS and k not in self.arg_names}
        try:
            ba = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TesseraError(f"kernel {self.__name__}: {e} (parameters: {', '.join(self.arg_names)})") from None
        ba.apply_defaults()
        return dict(ba.arguments), opts

    def specialize(self, bound: dict, target: Target, gpu: bool):
        """(the trace's params: [(name, (kind, what))], constexprs, runtime values in param order,
        the key's part of the arguments)."""
        params, consts, values, key = [], {}, [], []
        for name in self.arg_names:
            v = bound[name]
            if name in self.constexpr_names:
                v = v.value if isinstance(v, constexpr) else v
                consts[name] = v
                key.append((name, "c", arguments.hashable(v, name, self.__name__)))
                continue
            if v is None or isinstance(v, constexpr):
                v = v.value if isinstance(v, constexpr) else v
                consts[name] = v
                key.append((name, "c", arguments.hashable(v, name, self.__name__)))
                continue
            if isinstance(v, (bool, np.bool_)):
                params.append((name, ("const", bool(v))))
                key.append((name, "b", bool(v)))
                continue
            if isinstance(v, numbers.Integral):
                iv = int(v)
                if iv == 1 and name not in self.do_not_specialize:
                    params.append((name, ("const", 1)))
                    key.append((name, "one"))
                    continue
                if isinstance(v, np.integer):
                    dt = ir.dtype_of(np.dtype(type(v)).name)
                else:
                    dt = ir.int32 if -2**31 <= iv < 2**31 else ir.int64
                    if not -2**63 <= iv < 2**63:
                        raise TesseraError(f"kernel {self.__name__}: argument {name}={iv} does not fit in int64")
                params.append((name, ("scalar", dt)))
                values.append(iv)
                key.append((name, "s", dt.ir))
                continue
            if isinstance(v, numbers.Real):
                # a Python float (np.float64 is one) is fp32, as in Triton; other numpy floats keep their type
                dt = ir.dtype_of(np.dtype(type(v)).name) if isinstance(v, np.floating) and not isinstance(v, float) \
                    else ir.float32
                params.append((name, ("scalar", dt)))
                values.append(float(v))
                key.append((name, "s", dt.ir))
                continue
            arr = arguments.as_array(v, name, self.__name__, target)
            dt = ir.dtype_of(str(arr.dtype if not hasattr(arr, "np_dtype") else arr.dtype))
            params.append((name, ("ptr", dt)))
            values.append(arr)
            key.append((name, "p", dt.ir) + ((arguments.size(arr),) if gpu else ()))
        return params, consts, values, tuple(key)

    # compile and launch -----------------------------------------------------------------
    def target_of(self, opts, values) -> Target:
        t = opts.get("target") or self.default_target
        if t is None:
            for v in values:
                if hasattr(v, "__cuda_array_interface__"):
                    t = "cuda"
                    break
                if not isinstance(v, (np.ndarray, NDArray)) and getattr(v, "device", None) == "opencl":
                    t = "opencl"
                    break
            else:
                t = os.environ.get("TESSERA_TILE_TARGET", "c")
        return Target(t)

    def lower(self, bound, opts, grid=None, static=False):
        """(key, target, values, the traced and the optimized tile function, the PrimFunc, the GPU
        launch bucket) of a launch: trace, passes and lowering, nothing compiled."""
        target = self.target_of(opts, bound.values())
        gpu = target.kind in ("opencl", "cuda")
        params, consts, values, key = self.specialize(bound, target, gpu)
        num_warps = int(opts.get("num_warps") or 4)
        bucket = arguments.grid_bucket(grid) if gpu else None
        full_key = (str(target), key, num_warps, bucket)
        traced = trace(self.rewritten(), self.__name__, params, consts)
        func = passes.optimize(traced)
        runtime = list(zip([p for p in params if p[1][0] != "const"], values))
        bind = None
        if static:
            bind = {"args": {n: v for (n, (k, _)), v in runtime if k == "scalar"},
                    "numel": {n: arguments.size(v) for (n, (k, _)), v in runtime if k == "ptr"}, "grid": tuple(grid)}
        if gpu:
            shapes = {n: arguments.shape_of(v) for (n, (k, _)), v in runtime if k == "ptr"}
            primfunc = lower_gpu(func, target, bucket, num_warps, shapes, bind)
        else:
            primfunc = lower_cpu(func, target, bind)
        return full_key, target, params, values, traced, func, primfunc, bucket

    def _full_key(self, bound, opts, grid):
        target = self.target_of(opts, bound.values())
        gpu = target.kind in ("opencl", "cuda")
        _, _, values, key = self.specialize(bound, target, gpu)
        bucket = arguments.grid_bucket(grid) if gpu else None
        return (str(target), key, int(opts.get("num_warps") or 4), bucket), values

    def compile(self, bound, opts, grid=None):
        full_key, values = self._full_key(bound, opts, grid)
        with self._lock:
            hit = self.cache.get(full_key)
        if hit is not None:
            return hit, values
        full_key, target, params, values, traced, func, primfunc, bucket = self.lower(bound, opts, grid)
        art = build(primfunc, target)
        compiled = _Compiled(art.module, func, primfunc, target, params, bucket, traced)
        with self._lock:
            self.cache[full_key] = compiled
        return compiled, values

    def lowered(self, *args, grid=(1,), static=False, **kwargs):
        """The tir.PrimFunc a launch with these arguments compiles (not built); static: with this
        launch's runtime scalars, sizes and grid bound as constants (static extents)."""
        bound, opts = self.bind(args, kwargs)
        return self.lower(bound, opts, arguments.launch_grid(grid, bound, self.__name__), static)[6]

    def run(self, *args, grid, **kwargs):
        bound, opts = self.bind(args, kwargs)
        g = arguments.launch_grid(grid, bound, self.__name__)
        interp = opts.get("interpret", self.interpret)
        if interp is None:
            interp = os.environ.get("TESSERA_INTERPRET", "0") not in ("", "0")
        if interp:
            return interpreter.interpret(self, bound, g)
        if 0 in g:
            return None
        compiled, values = self.compile(bound, opts, g)
        call = [arguments.flat(v) if not isinstance(v, numbers.Number) else v for v in values]
        compiled.module(*call, *g)
        return None

    def time(self, *args, grid, number=10, repeat=3, min_repeat_ms=0, **kwargs):
        """A BenchmarkResult (seconds per launch) of the compiled kernel on these arguments, timed
        inside the compiled module (its C timer loop; device events on GPU targets)."""
        bound, opts = self.bind(args, kwargs)
        g = arguments.launch_grid(grid, bound, self.__name__)
        compiled, values = self.compile(bound, opts, g)
        call = [arguments.flat(v) if not isinstance(v, numbers.Number) else v for v in values]
        fn = compiled.module.time_evaluator(compiled.func.name, number=number, repeat=repeat,
                                            min_repeat_ms=min_repeat_ms)
        return fn(*call, *g)

    def inspect(self, *args, grid=(1,), **kwargs) -> Inspection:
        """The tile IR (traced and optimized), the loop program and the source of the kernel
        specialized for these arguments (arrays may be numpy arrays of the right dtype)."""
        bound, opts = self.bind(args, kwargs)
        g = arguments.launch_grid(grid, bound, self.__name__)
        compiled, _ = self.compile(bound, opts, g)
        lowered = get_backend(compiled.target).lower(compiled.primfunc, compiled.target)
        info = passes.axis_info(compiled.func)
        return Inspection(ir.script(compiled.traced), ir.script(compiled.func), compiled.primfunc,
                          lowered.script(), compiled.module.get_source(), info)


def jit(fn=None, *, target=None, do_not_specialize=(), interpret=None, debug=None, **_):
    """Decorate a kernel: `@tessera.jit` or `@tessera.jit(target="c -num-threads=2")`."""
    if fn is None:
        return lambda f: JITFunction(f, target=target, do_not_specialize=do_not_specialize, interpret=interpret)
    return JITFunction(fn, target=target, do_not_specialize=do_not_specialize, interpret=interpret)


__all__ = ["JITFunction", "jit", "Inspection"]
