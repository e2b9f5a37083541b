"""The VDLA backend (target kind "vdla"): tessera's block lowering (no vthread serialization, no
vectorizing: virtual threads and rows are the accelerator's business), the VDLA code generator
(instruction stream + micro-ops, tessera/accel/vdla/codegen.py), a JSON module in the on-disk cache,
and the simulator as the device.

    mod = tessera.build(sch, target="vdla")               # dependency tokens: modules overlap
    mod = tessera.build(sch, target="vdla -sync=serial")  # every instruction waits for the previous
"""
from __future__ import annotations

import hashlib
import os

from ..accel.vdla.codegen import generate as vdla_generate
from ..accel.vdla.config import DEFAULT_CONFIG
from ..accel.vdla.module import VDLAModule
from ..runtime import cache
from ..target import Target
from ..tir.transform import (compact_buffer_allocation, flatten_buffer, lower_blocks, plan_buffer_allocation,
                             simplify)
from .base import Backend, KernelInfo, Source, register_backend


class VDLABackend(Backend):
    kind = "vdla"

    def passes(self, target: Target) -> list:
        """Blocks -> loops with flat buffers in the inp/wgt/acc scopes; vthread loops stay bound."""
        return [("plan_buffer_allocation", plan_buffer_allocation),
                ("lower_blocks", lower_blocks),
                ("compact_buffer_allocation", lambda f: compact_buffer_allocation(f, target=target)),
                ("flatten_buffer", flatten_buffer),
                ("simplify", simplify)]

    def render(self, lowered: list, target: Target, name_hint: str = "kernel") -> Source:
        serial = target.attrs.get("sync") == "serial"
        programs = [vdla_generate(f, DEFAULT_CONFIG, serial=serial) for f in lowered]
        infos = []
        for prog in programs:
            params = tuple({"name": p["name"], "kind": "tensor", "dtype": p["dtype"], "shape": list(p["shape"])}
                           for p in prog.params)
            infos.append(KernelInfo(prog.name, prog.name, "", prog.name, params, (), False, ()))
        return Source(VDLAModule.dumps(programs), tuple(infos), target, name_hint)

    def compile(self, source: Source) -> str:
        """The module's JSON in the cache, named by its hash: written atomically, and again when the file
        there is not this text (damaged, changed)."""
        key = hashlib.sha256(source.text.encode()).hexdigest()
        path = os.path.join(cache.folder("vdla"), f"{source.name_hint}-{key[:20]}.json")
        if not cache.hit(path, key):
            cache.write(path, source.text, "the VDLA module", record=False)
        return path

    def load(self, path: str) -> VDLAModule:
        return VDLAModule.load(path)


register_backend(VDLABackend())
