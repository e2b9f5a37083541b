"""The ahead-of-time executor of a compiled graph: its library (executor/library.py) loaded, one C
call a run over the static memory plan."""
from __future__ import annotations

from ..runtime.aot_executor import AotExecutor
from ..runtime.executor import target_path, write_library
from ..runtime.module import Module
from ..runtime.plan import Plan
from .compiled import compiled_of
from .library import DEFAULT_PREFIX, build_library


def build_aot(exe, prefix: str = DEFAULT_PREFIX, strategy: str = "greedy", opt_level=None):
    """The AotExecutor of a compiled graph (static shapes; a CompiledGraph or the executor
    tessera.compile returns): `exe(x)`, `exe.run({...})`, one C call per run."""
    compiled = compiled_of(exe)
    lib = build_library(compiled, prefix, aot=True, strategy=strategy)
    constants = dict(compiled.plan.constants)      # document ids are the plan's slots
    out = AotExecutor(Module(lib.path), lib.doc, Plan.from_document(lib.doc, constants, lib.path))
    out.graph = compiled.graph
    out.compiled = compiled
    out.memory_plan = lib.memory_plan
    out.opt_level = opt_level if opt_level is not None else getattr(exe, "opt_level", None)
    out.kernels = list(compiled.kernels.values())     # the graph Kernels (programs, sources) in first-use order

    def exporter(aot, path, new_prefix):
        """The library built again for programs outside tessera: on libgomp, not this process's pool."""
        path = target_path(path)
        lib = build_library(compiled, new_prefix or aot.prefix, aot=True, strategy=strategy, pool=False)
        write_library(lib.path, lib.header, path)
        return path

    out.exporter = exporter
    return out


__all__ = ["build_aot"]
