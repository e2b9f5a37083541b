"""lower_vthread: virtual-thread loops (bound to vthread, vthread.x/y/z) become serial loops.

A virtual thread only says that iterations are independent; running them one after another is a
correct execution on every target, and the one the C target has. Other thread bindings
(blockIdx, threadIdx) are left for a GPU backend; the C code generator refuses them by name.
"""
from __future__ import annotations

from ...ir import For, ForKind, PrimFunc
from ._stmt_mutator import StmtMutator


def _is_vthread(loop: For) -> bool:
    tb = loop.thread_binding
    tag = getattr(tb, "thread_tag", tb)
    return loop.kind == ForKind.THREAD_BINDING and isinstance(tag, str) and \
        (tag == "vthread" or tag.startswith("vthread."))


class _VThread(StmtMutator):
    def visit_For(self, loop):
        loop = self.generic_visit(loop)
        if _is_vthread(loop):
            return loop.replace(kind=ForKind.SERIAL, thread_binding=None)
        return loop


def lower_vthread(func: PrimFunc) -> PrimFunc:
    """`func` with its vthread-bound loops made serial."""
    body = _VThread().visit(func.body)
    return func if body is func.body else func.with_body(body)
