"""How the threads of the kernels that link libgomp wait: libgomp (the OpenMP runtime gcc's -fopenmp
links) configured before tessera loads its first library. Most of tessera's libraries call tessera's
own thread pool instead (runtime/pool.py); libgomp remains for those the pool does not fit (other
OpenMP constructs), sanitizer builds, exported models and TESSERA_OPENMP=libgomp.

Between two parallel regions, and at the barrier that ends one, a kernel's threads wait for each
other. libgomp spins while it waits -- by default GOMP_SPINCOUNT=300000 iterations of `pause`,
milliseconds on any x86 core -- and only then sleeps. On a machine whose cores other work shares
(another tessera process, any program with a spinning thread team), a thread spinning for a peer
the scheduler took off its core holds the core that peer needs, and every region of a model waits
for the scheduler to sort it out. OMP_WAIT_POLICY=passive (sleep at once) avoids that but pays a
wake-up per region on an idle machine. tessera bounds the spin instead (SPIN_COUNT, microseconds):
long enough to catch the next region of a model's back-to-back kernels, short enough that a waiting
thread gives its core back before the scheduler's time slice ends (benchmarks/contention.py measures
both sides: the latency alone and the slow-down beside another process).

libgomp reads these settings once, from the environment, when it is loaded. `configure()` (run by
Module before it loads a library that links libgomp) sets GOMP_SPINCOUNT for that load only, loading libgomp itself,
and restores the environment: processes started later do not inherit it. The user's own
OMP_WAIT_POLICY or GOMP_SPINCOUNT is left in force. Where libgomp was already in the process
(another library linked it), its settings are the ones the environment had then; `wait_policy()`
says which apply. A C program that links an exported library sets GOMP_SPINCOUNT itself. With
clang's libomp (CC=clang) KMP_BLOCKTIME plays this part; tessera leaves it as it is.
"""
from __future__ import annotations

import ctypes
import os
import threading

SPIN_COUNT = 300
LIBGOMP = "libgomp.so.1"            # the soname kernels built with gcc -fopenmp link
USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

_lock = threading.Lock()
_policy: str | None = None
_handle = None                      # the libgomp tessera loaded, kept for the life of the process


def configure() -> str:
    """Set libgomp's wait policy for this process (once; see the module docstring); returns
    wait_policy()."""
    global _policy
    if _policy is None:
        with _lock:
            if _policy is None:
                _policy = _configure()
    return _policy


def wait_policy() -> str:
    """One line saying how OpenMP threads wait in this process (before configure(): what it would set)."""
    return _policy if _policy is not None else _describe(_user_settings(), _libgomp_loaded(), None)


def _user_settings() -> dict:
    return {k: os.environ[k] for k in USER_SETTINGS if k in os.environ}


def _configure() -> str:
    global _handle
    user, loaded = _user_settings(), _libgomp_loaded()
    if user or loaded:
        return _describe(user, loaded, None)
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    try:
        _handle = ctypes.CDLL(LIBGOMP)
    except OSError as e:            # not found by that name: the kernels' own load brings their libgomp
        return _describe(user, loaded, e)
    finally:
        del os.environ["GOMP_SPINCOUNT"]
    return _describe(user, loaded, None)


def _describe(user: dict, loaded: bool, error) -> str:
    if loaded:
        return (f"libgomp was loaded before tessera's first library: its threads wait as the environment said "
                f"then ({_settings_text(user) or 'libgomp defaults: a spin of 300000 then sleep'})")
    if user:
        return f"OpenMP threads wait as the environment says: {_settings_text(user)}"
    if error is not None:
        return f"libgomp's defaults ({LIBGOMP} could not be loaded to bound its spin: {error})"
    return f"GOMP_SPINCOUNT={SPIN_COUNT} (tessera's bounded spin, then sleep)"


def _settings_text(settings: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in settings.items())


def _libgomp_loaded() -> bool:
    """Whether a libgomp is mapped into this process already (Linux: /proc/self/maps)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return any(os.path.basename(line.rstrip("\n").split(" ")[-1]).startswith("libgomp.so") for line in f)
    except OSError:
        return False


__all__ = ["SPIN_COUNT", "configure", "wait_policy"]
