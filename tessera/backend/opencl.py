"""The OpenCL backend (target kind "opencl"): tessera's lowering plus the host/device split and
barriers, the OpenCL C renderer, a JSON artifact (source + launch metadata; the program is built
once at compile time to report errors) and the pyopencl loader (docs/gpu.md)."""
from __future__ import annotations

import os
import tempfile

from ..codegen.opencl import render
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
        if os.path.exists(path):
            return path
        cl_path = path[:-len(".json")]
        with open(cl_path, "w") as f:
            f.write(source.text)
        rt.build_program(source.text, source.target.attrs.get("device"), cl_path)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".json")
        os.close(fd)
        rt.write_artifact(tmp, source.text, list(source.meta), str(source.target))
        os.replace(tmp, path)
        return path

    def load(self, path: str) -> rt.OpenCLModule:
        return rt.OpenCLModule(path)


register_backend(OpenCLBackend())
