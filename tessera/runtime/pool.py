"""tessera's thread pool for its C libraries (runtime/tsr_pool.c): the OpenMP entry points gcc emits
for `parallel for` and `critical`, on persistent workers that wait for the next parallel region by
spinning (yielding the core every few microseconds) for up to TESSERA_SPIN_US microseconds (default
200) while the machine has a free core for each thread of a team, and otherwise sleep at once.

Why not libgomp's wait (runtime/openmp.py): its spin is a count of `pause`s that never yields and
never looks at the machine. Short enough to give a busy machine its cores back, it is too short to
catch a model's next kernel where waking a thread is slow (a virtual machine), and the model's every
kernel waits for a wake-up; long, it holds cores another process needs. A spinning thread is also
never woken ahead of others, so on a busy machine every parallel region would wait a time slice for
it: there the pool's threads sleep, which is why it watches the machine (docs/performance.md).

How a library gets it (runtime/c_compiler.py): gcc -fopenmp still lowers the pragmas; the link
renames the calls (`-Wl,--wrap=GOMP_parallel,...`: `__wrap_GOMP_parallel`) and drops libgomp, and the
library names the pool library's path in the kernel cache (after POOL_MARK); Module loads that once a
process, with its symbols global (`load`), before the first such library. Only sources whose OpenMP
is within what the pool implements take it (c_compiler.fits_pool); the rest, sanitizer builds,
libraries for programs outside tessera (an exported model) and TESSERA_OPENMP=libgomp link libgomp.
"""
from __future__ import annotations

import ctypes
import os
import threading

from ..errors import TesseraError
from .cache import cache_dir, check_before_load

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tsr_pool.c")
POOL_MARK = b"tessera-pool-library:"   # in a library that calls the pool, before the pool library's path

_lock = threading.Lock()
_handle = None


def load(path: str) -> ctypes.CDLL:
    """Load the pool library at `path` with its symbols global, once a process; the libraries that call
    the pool resolve against it. Only an entry of this kernel cache, checked against its integrity
    record, is loaded: the path comes from a library's bytes."""
    global _handle
    if _handle is None:
        with _lock:
            if _handle is None:
                real, root = os.path.realpath(path), os.path.realpath(cache_dir())
                if os.path.dirname(os.path.dirname(real)) != root:
                    raise TesseraError(f"a library names {path} as tessera's thread pool library, which is not an "
                                       f"entry of this kernel cache ({root}): tessera loads the pool only from its "
                                       f"cache; compile the model again here, or export it with its executor's "
                                       f"export_library (which links libgomp)")
                if not os.path.isfile(real):
                    raise TesseraError(f"tessera's thread pool library {path} is not there (the kernel cache was "
                                       f"cleared since the library was built): compile the model again, or export "
                                       f"it with its executor's export_library (which links libgomp)")
                check_before_load(real)
                lib = ctypes.CDLL(real, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
                lib.tsr_pool_spin_us.restype = ctypes.c_longlong
                lib.tsr_pool_default_threads.restype = ctypes.c_int
                _handle = lib
    return _handle


def describe() -> str:
    """One line: how the pool's threads wait (for the wait-policy lines of benchmarks and reports)."""
    lib = _handle
    if lib is None:
        return "tessera's thread pool: not loaded in this process (no library that calls it loaded yet)"
    return (f"tessera's thread pool: workers spin (yielding the core) {lib.tsr_pool_spin_us()} us for the next "
            f"parallel region while the machine has a core for each, else sleep; "
            f"{lib.tsr_pool_default_threads()} threads unless a kernel says")


__all__ = ["POOL_MARK", "SOURCE", "describe", "load"]
