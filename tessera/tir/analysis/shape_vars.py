"""An Analyzer seeded with what a function's signature says: its symbolic extents are >= 0."""
from __future__ import annotations

from ...arith import Analyzer
from ...ir import Buffer, Var


def shape_var_analyzer(func) -> Analyzer:
    """An Analyzer knowing that the symbolic extents in the function's buffer shapes are >= 0."""
    ana = Analyzer()
    seen = set()
    for p in func.params:
        if isinstance(p, Buffer):
            for s in p.shape:
                if isinstance(s, Var) and s not in seen and s.dtype.is_int():
                    seen.add(s)
                    ana.tighten(s, (0, float("inf")))
    return ana


__all__ = ["shape_var_analyzer"]
