"""The CUDA backend (target kind "cuda"): tessera's lowering plus the host/device split and
barriers, the CUDA renderer, nvcc to a cubin for the target's architecture (sm_90 by default;
cached on disk with ptxas' register/spill report) and the cupy loader (docs/gpu.md)."""
from __future__ import annotations

import json
import os
import re

from ..codegen.cuda import render
from ..errors import TesseraError
from ..runtime import cache
from ..runtime import cuda as rt
from .base import register_backend
from .gpu import GPUBackend, GPUSource, artifact_path, check_launch_limits

DEFAULT_ARCH = "sm_90"
MAX_THREADS = 1024            # threads per block on every architecture since sm_20
MAX_STATIC_SHARED = 48 * 1024  # bytes of static __shared__ memory per block
# bytes of shared memory (static + dynamic) a block may have, by compute capability (CUDA's table)
MAX_SHARED = {90: 227 * 1024, 89: 99 * 1024, 87: 163 * 1024, 86: 99 * 1024, 80: 163 * 1024, 75: 64 * 1024,
              70: 96 * 1024}


class CUDABackend(GPUBackend):
    kind = "cuda"
    warp_size = 32

    renderer = staticmethod(render)

    def compile(self, source: GPUSource) -> str:
        target = source.target
        limit = int(target.attrs.get("max-threads-per-block", MAX_THREADS))
        check_launch_limits(source, min(limit, MAX_THREADS), MAX_STATIC_SHARED, f"CUDA ({str(target)!r})")
        arch = target.attrs.get("arch", DEFAULT_ARCH)
        check_dynamic_shared(source, arch)
        path = artifact_path("cuda", source, "cu.json", arch)
        base = path[:-len(".cu.json")]
        if cache.hit(path) and cache.hit(base + ".cubin"):   # both verified against their integrity records
            return path
        with cache.new_file(base + ".cubin", "the CUDA cubin") as cubin:
            report = rt.compile_cuda(source.text, arch, base + ".cu", cubin)
            os.chmod(base + ".cu", 0o600)
        doc = {"version": 1, "kind": "cuda", "target": str(target), "arch": arch, "source": source.text,
               "functions": list(source.meta), "cubin": base + ".cubin", "ptxas": report}
        cache.write(path, json.dumps(doc), "the CUDA artifact")
        return path

    def load(self, path: str) -> rt.CUDAModule:
        return rt.CUDAModule(path)


def check_dynamic_shared(source: GPUSource, arch: str) -> None:
    """Refuse a kernel whose shared memory, static and dynamic together, exceeds what a block of the
    architecture may have."""
    m = re.fullmatch(r"sm_(\d+)a?", arch)
    cc = int(m.group(1)) if m else 90
    limit = MAX_SHARED.get(cc, min(MAX_SHARED.values()) if cc < 70 else 48 * 1024)
    for meta in source.meta:
        for k in meta["kernels"]:
            total = k["shared_bytes"] + k.get("dynamic_shared_bytes", 0)
            if total > limit:
                raise TesseraError(f"{meta['name']}: kernel {k['name']} needs {total} bytes of shared memory "
                                   f"({k['shared_bytes']} static, {k.get('dynamic_shared_bytes', 0)} dynamic); {arch} "
                                   f"allows {limit} a block: use smaller tiles or fewer pipeline stages")


register_backend(CUDABackend())
