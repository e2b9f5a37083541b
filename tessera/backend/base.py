"""The build layer's contract: a Backend turns PrimFuncs into a loaded artifact for one target kind.

    lower (the backend's linear pass list) -> render (source + structured metadata)
        -> compile (an artifact on disk, cached) -> load (a runtime Module)

`tessera.build`, the graph executor's kernels, the ahead-of-time module and constant folding all go
through `build` / `generate` below; a new target kind is one more registered Backend.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..errors import TesseraError
from ..ir import IRModule, PrimFunc
from ..runtime import cache
from ..target import Target


@dataclass(frozen=True)
class KernelInfo:
    """One generated function: its name; the symbols of its checked entry, its timer and its kernel
    body; its parameters (name, kind, dtype, shape) as the library's metadata lists them; the C
    types the kernel body takes (buffers and scalars, then the symbolic extents `shape_vars`) and
    whether it also takes (err, err_len)."""

    name: str
    entry: str
    timer: str
    kernel: str
    params: tuple
    kernel_params: tuple
    kernel_takes_err: bool
    shape_vars: tuple

    @staticmethod
    def from_dict(d: dict) -> "KernelInfo":
        return KernelInfo(d["name"], d["entry"], d["timer"], d["kernel"], tuple(d["params"]),
                          tuple(d["kernel_params"]), bool(d["kernel_takes_err"]), tuple(d["shape_vars"]))


@dataclass(frozen=True)
class Source:
    """Rendered code of one translation unit, what it holds, and the target it is for. `prepare`, when
    given, runs before the compiler does and only then (not on a cache hit): it writes the files the text
    embeds (the ahead-of-time library's weights blob). `pool`: see runtime/c_compiler.compile_source."""

    text: str
    functions: tuple
    target: Target
    name_hint: str = "kernel"
    prepare: Callable[[], object] | None = field(default=None, compare=False, repr=False)
    pool: bool = True     # C: parallel loops on tessera's thread pool (False: libgomp, for programs outside tessera)

    def function(self, name: str) -> KernelInfo:
        for f in self.functions:
            if f.name == name:
                return f
        raise TesseraError(f"the generated source has no function {name!r} "
                           f"(it has {', '.join(f.name for f in self.functions)})")


@dataclass
class Artifact:
    """A built translation unit: its Source, the compiled file, and the loaded runtime Module."""

    source: Source
    path: str
    module: object = field(repr=False, default=None)


class Backend:
    """One target kind's way from PrimFuncs to a running artifact. Subclasses set `kind` and give
    passes / render / compile / load; lower and build are the same for every kind."""

    kind: str = ""

    def passes(self, target: Target) -> list:
        """The lowering pipeline for target: [(name, pass)], each pass a PrimFunc -> PrimFunc."""
        raise NotImplementedError

    def render(self, lowered: list, target: Target, name_hint: str = "kernel") -> Source:
        """One translation unit for lowered PrimFuncs, with a KernelInfo per function."""
        raise NotImplementedError

    def compile(self, source: Source) -> str:
        """The compiled artifact's path (a BuildError carrying the compiler's message)."""
        raise NotImplementedError

    def load(self, path: str):
        """The runtime Module of a compiled artifact."""
        raise NotImplementedError

    def lower(self, func: PrimFunc, target: Target, dump=None) -> PrimFunc:
        """func through this backend's passes, in order; dump(pass name, func) after each."""
        for name, fn in self.passes(target):
            func = fn(func)
            if dump is not None:
                dump(name, func)
        return func

    def generate(self, funcs: list, target: Target, dump=None) -> Source:
        """lower + render: the source of one translation unit holding every function of funcs."""
        lowered = [self.lower(f, target, dump) for f in funcs]
        return self.render(lowered, target, lowered[0].name)

    def build(self, funcs: list, target: Target, dump=None) -> Artifact:
        """lower + render + compile + load."""
        return self.compile_and_load(self.generate(funcs, target, dump))

    def compile_and_load(self, source: Source) -> Artifact:
        """compile + load. An artifact from the cache that the loader refuses (verified against its
        integrity record, yet not loadable: as if the compiler had written a broken file) is discarded
        and built once more; a second refusal is the error."""
        path = self.compile(source)
        try:
            return Artifact(source, path, self.load(path))
        except TesseraError:
            if not cache.discard(path):
                raise
        path = self.compile(source)
        return Artifact(source, path, self.load(path))


_BACKENDS: dict = {}


def register_backend(backend: Backend) -> Backend:
    """Make `backend` the one that builds targets of its kind."""
    if not isinstance(backend, Backend) or not backend.kind:
        raise TesseraError(f"register_backend takes a Backend with a kind, got {backend!r}")
    _BACKENDS[backend.kind] = backend
    return backend


def get_backend(target) -> Backend:
    """The Backend of target's kind; an error naming the kinds that have one otherwise."""
    t = Target(target)
    b = _BACKENDS.get(t.kind)
    if b is None:
        raise TesseraError(f"target {str(t)!r}: kind {t.kind!r} has no backend yet; backends: "
                           f"{', '.join(sorted(_BACKENDS))}")
    return b


def functions_of(obj) -> list:
    """The PrimFuncs of a PrimFunc, an IRModule (named by its keys) or a tir.Schedule."""
    mod = getattr(obj, "mod", None)  # a tir.Schedule
    if mod is not None and not isinstance(obj, (PrimFunc, IRModule)):
        obj = mod
    if isinstance(obj, PrimFunc):
        return [obj]
    if isinstance(obj, IRModule):
        return [f.replace(name=name) if f.name != name else f for name, f in obj]
    raise TesseraError(f"expected a PrimFunc, an IRModule or a tir.Schedule, got {type(obj).__name__}; "
                       f"make one with te.create_prim_func([...])")


def generate(obj, target, name: str | None = None, dump=None) -> Source:
    """The Source of obj (PrimFunc, IRModule or Schedule) for target; a single function is named
    `name` when given."""
    target = Target(target)
    funcs = functions_of(obj)
    if name is not None:
        if len(funcs) != 1:
            raise TesseraError(f"name={name!r} applies to a single function, got {len(funcs)}")
        if funcs[0].name != name:
            funcs = [funcs[0].replace(name=name)]
    return get_backend(target).generate(funcs, target, dump)


def build(obj, target, name: str | None = None, dump=None) -> Artifact:
    """Lower, render, compile and load obj for target: the one way from programs to a module."""
    source = generate(obj, target, name, dump)
    return get_backend(source.target).compile_and_load(source)
