"""tessera.build: a PrimFunc (or IRModule, or Schedule) -> a compiled, callable runtime Module."""
from __future__ import annotations

from .errors import TesseraError
from .ir import IRModule, PrimFunc


def _functions(obj) -> list[PrimFunc]:
    mod = getattr(obj, "mod", None)  # a tir.Schedule
    if mod is not None and not isinstance(obj, (PrimFunc, IRModule)):
        obj = mod
    if isinstance(obj, PrimFunc):
        return [obj]
    if isinstance(obj, IRModule):
        return [f.replace(name=name) if f.name != name else f for name, f in obj]
    raise TesseraError(f"tessera.build takes a PrimFunc, an IRModule or a tir.Schedule, got "
                       f"{type(obj).__name__}; make one with te.create_prim_func([...])")


def lower(obj, target=None):
    """The lowered PrimFunc(s) of obj, as build would generate them (for inspection)."""
    from .target import Target
    from .tir.transform import lower as lower_func

    target = Target(target or "c")
    funcs = [lower_func(f, target) for f in _functions(obj)]
    return funcs[0] if len(funcs) == 1 else IRModule({f.name: f for f in funcs})


def build(obj, target="c", name=None):
    """Lower, generate code for and compile obj; returns a runtime.Module (call it like a function).

    target: a Target or its string, e.g. "c -mcpu=native -num-threads=2".
    """
    from .codegen import c as codegen_c
    from .runtime.compiler import compile_source
    from .runtime.module import Module
    from .target import Target
    from .tir.transform import lower as lower_func

    target = Target(target)
    if target.kind != "c":
        raise TesseraError(f"tessera.build: target kind {target.kind!r} has no code generator yet; use 'c'")
    funcs = _functions(obj)
    if name is not None:
        if len(funcs) != 1:
            raise TesseraError("tessera.build: name= applies to a single function")
        funcs = [funcs[0].replace(name=name)]
    lowered = [lower_func(f, target) for f in funcs]
    source = codegen_c.generate_module(lowered, target)
    path = compile_source(source, target, name_hint=lowered[0].name)
    return Module(path)
