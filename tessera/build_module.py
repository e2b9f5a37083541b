"""tessera.build: a PrimFunc (or IRModule, or Schedule) -> a compiled, callable runtime Module,
through the target kind's Backend (tessera/backend)."""
from __future__ import annotations

from .backend import functions_of, get_backend
from .backend import build as backend_build
from .ir import IRModule
from .target import Target


def lower(obj, target=None):
    """The lowered PrimFunc(s) of obj, as build would generate them (for inspection)."""
    target = Target(target or "c")
    backend = get_backend(target)
    funcs = [backend.lower(f, target) for f in functions_of(obj)]
    return funcs[0] if len(funcs) == 1 else IRModule({f.name: f for f in funcs})


def build(obj, target="c", name=None):
    """Lower, generate code for and compile obj; returns a runtime.Module (call it like a function).

    target: a Target or its string, e.g. "c -mcpu=native -num-threads=2".
    """
    return backend_build(obj, Target(target), name).module
