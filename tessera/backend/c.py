"""The C backend (target kind "c"): tessera's lowering pipeline, the C/OpenMP renderer, the C
compiler driver with its on-disk cache, and the ctypes loader."""
from __future__ import annotations

from ..codegen.c import render_module
from ..codegen.c_entry import WRITTEN_PARAMS, written_params
from ..runtime.c_compiler import compile_source
from ..runtime.module import Module
from ..target import Target
from ..tir.transform import pipeline
from .base import Backend, KernelInfo, Source, register_backend


class CBackend(Backend):
    kind = "c"

    def passes(self, target: Target) -> list:
        """tir.transform's pipeline, bound to the target (vector width, intrinsic features)."""
        return pipeline(target)

    def lower(self, func, target: Target, dump=None):
        """The lowered function, carrying which buffer parameters it writes (WRITTEN_PARAMS), found
        before lowering erases its blocks' write regions: the entry checks and records them."""
        written = written_params(func)
        return super().lower(func, target, dump).with_attr(WRITTEN_PARAMS, written)

    def render(self, lowered: list, target: Target, name_hint: str = "kernel") -> Source:
        text, infos = render_module(lowered, target)
        return Source(text, tuple(KernelInfo.from_dict(i) for i in infos), target, name_hint)

    def compile(self, source: Source) -> str:
        return compile_source(source.text, source.target, name_hint=source.name_hint, prepare=source.prepare,
                              pool=source.pool)

    def load(self, path: str) -> Module:
        return Module(path)


register_backend(CBackend())
