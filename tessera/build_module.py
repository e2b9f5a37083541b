"""tessera.build: a PrimFunc (or IRModule, or Schedule) -> a compiled, callable runtime Module,
through the target kind's Backend (tessera/backend)."""
from __future__ import annotations

from .backend import functions_of, get_backend
from .backend import build as backend_build
from .errors import resource_errors
from .ir import IRModule
from .ir.functor import children, depth
from .ir.stmt import Block, BufferStore, Stmt
from .target import Target


def lower(obj, target=None):
    """The lowered PrimFunc(s) of obj, as build would generate them (for inspection)."""
    target = Target(target or "c")
    backend = get_backend(target)
    funcs = functions_of(obj)
    with resource_errors(f"tessera.lower of {_names(funcs)}", lambda: _deepest(funcs)):
        funcs = [backend.lower(f, target) for f in funcs]
    return funcs[0] if len(funcs) == 1 else IRModule({f.name: f for f in funcs})


def build(obj, target="c", name=None):
    """Lower, generate code for and compile obj; returns a runtime.Module (call it like a function).

    target: a Target or its string, e.g. "c -mcpu=native -num-threads=2".
    """
    funcs = functions_of(obj)
    with resource_errors(f"tessera.build of {_names(funcs)}", lambda: _deepest(funcs)):
        return backend_build(obj, Target(target), name).module


def _names(funcs) -> str:
    """'PrimFunc 'main'' or 'PrimFuncs 'a', 'b'', for messages."""
    return "PrimFunc" + ("s " if len(funcs) != 1 else " ") + ", ".join(repr(f.name) for f in funcs)


def _deepest(funcs) -> str | None:
    """Which stored value of funcs is the deepest expression and how deep, for a RecursionError's message."""
    levels, where = 0, ""
    for f in funcs:
        stack = [(f.body, None)]
        while stack:
            node, block = stack.pop()
            if isinstance(node, Block):
                block = node.name_hint
            elif isinstance(node, BufferStore):
                d = depth(node.value)
                if d > levels:
                    levels = d
                    where = f"the value stored to {node.buffer.name!r}" + (f" in block {block!r}" if block else "") + \
                        f" of {f.name!r}"
            stack.extend((c, block) for c in children(node) if isinstance(c, Stmt))
    return f"{where} is an expression {levels} levels deep" if levels else None
