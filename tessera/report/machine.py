"""The machine and target a report was measured on: CPU model and features, threads, the C compiler
and its flags, OpenMP's wait policy, and the versions of tessera, Python and numpy."""
from __future__ import annotations

import platform

import numpy as np

from ..autotune.database import __version__ as _TESSERA_VERSION
from ..errors import TesseraError
from ..runtime.openmp import wait_policy
from ..target import Target, host_cores, host_features
from ..toolchain import compiler_version, find_compiler


def tessera_version() -> str:
    """tessera's version as installed (the one the tuning records carry: autotune.database's)."""
    return _TESSERA_VERSION


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine_info(target) -> list:
    """(label, value) rows describing where the model was compiled and measured."""
    target = Target(target)
    rows = [("tessera", tessera_version()), ("target", str(target)),
            ("threads", f"{target.num_threads} of {host_cores()} usable cores"),
            ("CPU", cpu_model()), ("machine", f"{platform.system()} {platform.release()} {platform.machine()}")]
    if target.is_cpu:
        rows.append(("target CPU features", " ".join(sorted(target.features)) or "none"))
        extra = sorted(host_features() - target.features)
        rows.append(("host CPU features", "the target's" + (f", and {' '.join(extra)} (not used by the target)"
                                                             if extra else "")))
        try:
            argv = find_compiler()
            rows.append(("C compiler", f"{' '.join(argv)}: {compiler_version(argv)}"))
        except TesseraError as e:
            rows.append(("C compiler", f"not found ({e})"))
        rows.append(("compiler flags", " ".join(target.cflags())))
        rows.append(("OpenMP", wait_policy()))
    rows.append(("Python", f"{platform.python_implementation()} {platform.python_version()}"))
    rows.append(("numpy", np.__version__))
    return rows


__all__ = ["cpu_model", "machine_info", "tessera_version"]
