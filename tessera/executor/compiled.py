"""The CompiledGraph behind an executor the graph compiler made in this process."""
from __future__ import annotations

from ..errors import TesseraError
from ..graph.lowering import CompiledGraph


def compiled_of(exe) -> CompiledGraph:
    """The CompiledGraph of a CompiledGraph or of an executor the graph compiler made in this process."""
    if isinstance(exe, CompiledGraph):
        return exe
    c = getattr(exe, "compiled", None)
    if isinstance(c, CompiledGraph):
        return c
    raise TesseraError(f"expected the executor tessera.compile returns (or a CompiledGraph), got "
                       f"{type(exe).__name__}; a library loaded from a file is exported by copying it: "
                       f"exe.export_library(path)")


__all__ = ["compiled_of"]
