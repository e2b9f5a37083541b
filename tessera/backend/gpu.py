"""What the GPU backends (opencl, cuda) share: the lowering pipeline (tessera's, then the
host/device split and the barriers) and a Source that carries the launch metadata as data."""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass

from ..errors import TesseraError
from ..runtime import cache
from ..target import Target
from ..tir.transform import pipeline
from ..tir.transform.lower_cross_thread_reduction import lower_cross_thread_reduction
from ..tir.transform.split_host_device import split_host_device
from ..tir.transform.thread_sync import thread_sync
from .base import Backend, KernelInfo, Source


@dataclass(frozen=True)
class GPUSource(Source):
    """A GPU translation unit: the kernels' text, and per function its parameters, workspaces and
    kernels with their launch shapes (codegen.gpu.render_gpu_module's metadata)."""

    meta: tuple = ()


class GPUBackend(Backend):
    """What the OpenCL and CUDA backends share: the passes (lower_cross_thread_reduction,
    tir.transform's pipeline for the target, then split_host_device and thread_sync) and rendering
    through the subclass's `renderer` (codegen.opencl.render or codegen.cuda.render) into a GPUSource."""

    renderer = None   # (lowered, target) -> (text, per-function metadata)
    warp_size = None  # lanes a warp_shuffle_xor exchanges among (CUDA: 32); None: reductions across
    #                   threads go through shared memory only

    def passes(self, target: Target) -> list:
        cross_thread = functools.partial(lower_cross_thread_reduction, warp_size=self.warp_size)
        return ([("lower_cross_thread_reduction", cross_thread)] + pipeline(target)
                + [("split_host_device", split_host_device), ("thread_sync", thread_sync)])

    def render(self, lowered: list, target: Target, name_hint: str = "kernel") -> GPUSource:
        text, metas = type(self).renderer(lowered, target)
        infos = tuple(KernelInfo(m["name"], m["name"], "", ",".join(k["name"] for k in m["kernels"]),
                                 tuple(m["params"]), (), False, ()) for m in metas)
        return GPUSource(text, infos, target, name_hint, meta=tuple(metas))


def artifact_path(kind: str, source: GPUSource, ext: str, extra: str = "") -> str:
    """The cache path of a GPU artifact, keyed by the source, its metadata, the target and extra."""
    key = hashlib.sha256("\0".join([kind, str(source.target), extra, source.text,
                                    json.dumps(source.meta, sort_keys=True)]).encode("utf-8")).hexdigest()
    return os.path.join(cache.folder(key[:2]), f"{key}.{ext}")


def check_launch_limits(source: GPUSource, max_threads: int | None, max_shared: int | None, where: str):
    """Refuse a kernel with more threads per block / work-group, or more shared memory, than the
    limits allow; the error names the function, the kernel and the limit."""
    for m in source.meta:
        for k in m["kernels"]:
            threads = k["block"][0] * k["block"][1] * k["block"][2]
            if max_threads is not None and threads > max_threads:
                raise TesseraError(f"{m['name']}: kernel {k['name']} has {threads} threads per block (threadIdx "
                                   f"extents {tuple(k['block'])}); {where} allows at most {max_threads}: split "
                                   f"the thread-bound loops smaller")
            if max_shared is not None and k["shared_bytes"] > max_shared:
                raise TesseraError(f"{m['name']}: kernel {k['name']} declares {k['shared_bytes']} bytes of shared "
                                   f"memory; {where} allows at most {max_shared}: use smaller shared tiles")
