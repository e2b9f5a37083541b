"""The build layer: one Backend per target kind (its lowering pipeline, renderer, compiler driver
and loader), and the one entry every caller uses, from PrimFuncs + a Target to an artifact.

    art = tessera.backend.build(func, "c -num-threads=2")   # lower -> render -> compile -> load
    art.module(a, b, c); art.source.text; art.source.functions[0].params
    src = tessera.backend.generate(sch, target)             # lower -> render only (compile later)

Adding a target kind is adding one module here that registers a Backend (docs/internals.md,
"Adding a backend").
"""
from . import c  # noqa: F401  (registers the "c" backend)
from . import vdla  # noqa: F401  (registers the "vdla" backend)
from . import cuda  # noqa: F401  (registers the "cuda" backend)
from . import opencl  # noqa: F401  (registers the "opencl" backend)
from .base import (Artifact, Backend, KernelInfo, Source, build, functions_of, generate, get_backend,
                   register_backend)

__all__ = ["Artifact", "Backend", "KernelInfo", "Source", "build", "functions_of", "generate", "get_backend",
           "register_backend"]
