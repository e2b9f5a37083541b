"""Export a compiled graph as one deployable shared library (`exe.export_library("model.so")`).

It writes (executor/library.py builds it):
- model.so, self-contained: every kernel of the graph (one C function per distinct kernel, with
  its checked entry), the weights embedded in its read-only data (`PREFIX_weights`), the model
  entry points (`PREFIX_create/run/error/destroy`: the whole graph in one C call over the static
  memory plan), and `tessera_graph`, the compiled graph's document (graph/document.py);
- model.h beside it: the C API with the inputs' and outputs' shapes and dtypes as macros.
A graph with symbolic dimensions has no static memory plan: its library has everything but the
model entry points (and no header), and loads back as a GraphExecutor.
"""
from __future__ import annotations

from ..runtime.executor import target_path, write_library
from .library import DEFAULT_PREFIX, build_library


def export_library(exe, path, prefix: str | None = None) -> str:
    """Write the library of `exe` (tessera.compile's executor, or a CompiledGraph) to `path` and,
    with static shapes, its C header beside it (`<stem>.h`); returns the library's path.
    prefix: the C API's name prefix (default tessera_model)."""
    path = target_path(path)
    lib = build_library(exe, prefix or DEFAULT_PREFIX, pool=False)   # for any program: libgomp's OpenMP
    write_library(lib.path, lib.header, path)
    return path


__all__ = ["export_library"]
