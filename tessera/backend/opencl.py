"""The OpenCL backend (target kind "opencl"): tessera's lowering plus the host/device split and
barriers, the OpenCL C renderer, a JSON artifact (source + launch metadata; the program is built
once at compile time to report errors) and the pyopencl loader (docs/gpu.md)."""
from __future__ import annotations

from ..codegen.opencl import render
from ..runtime import cache
from ..runtime import opencl as rt
from .base import register_backend
from .gpu import GPUBackend, GPUSource, artifact_path, check_launch_limits


class OpenCLBackend(GPUBackend):
    kind = "opencl"

    renderer = staticmethod(render)

    def compile(self, source: GPUSource) -> str:
        limit = source.target.attrs.get("max-threads-per-block")
        if limit is not None:
            check_launch_limits(source, int(limit), None, f"target {str(source.target)!r}")
        path = artifact_path("opencl", source, "cl.json")
        if cache.hit(path):   # verified against its integrity record before anything reads it
            return path
        cl_path = path[:-len(".json")]
        cache.write(cl_path, source.text, "the OpenCL source", record=False)
        rt.build_program(source.text, source.target.attrs.get("device"), cl_path)
        with cache.new_file(path, "the OpenCL artifact") as tmp:
            rt.write_artifact(tmp, source.text, list(source.meta), str(source.target))
        return path

    def load(self, path: str) -> rt.OpenCLModule:
        return rt.OpenCLModule(path)


register_backend(OpenCLBackend())
