"""Text form of the IR (placeholder: expressions only; statements come with the full printer)."""
from __future__ import annotations


def script(node) -> str:
    from . import expr as E

    if isinstance(node, E.Var):
        return node.name
    if isinstance(node, (E.IntImm, E.FloatImm)):
        return repr(node.value)
    if isinstance(node, E.BinaryOp) or isinstance(node, E.CmpOp):
        return f"({script(node.a)} {node.symbol} {script(node.b)})"
    return f"<{type(node).__name__}>"
