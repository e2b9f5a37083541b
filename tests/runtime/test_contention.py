"""A machine whose cores other work shares: kernels on libgomp wait for each other with a bounded spin
(runtime/openmp.py: libgomp configured before the first library loads; tessera's own thread pool is
tests/runtime/test_pool.py), and tessera can tell a busy machine from a slow program
(runtime/contention.py: threads' waits for a CPU, stalled repeats)."""
import os
import subprocess
import sys
import time

import pytest

import tessera
from tessera import te, tir
from tessera.runtime import contention, openmp
from tessera.toolchain import gcc_version

TARGET = "c -num-threads=2"


@pytest.fixture(scope="module")
def parallel_library():
    """A kernel with a parallel loop linking libgomp (TESSERA_OPENMP=libgomp: not tessera's thread
    pool), built here for the subprocesses to load."""
    A = te.placeholder((256,), name="A")
    B = te.compute((256,), lambda i: A[i] * 2.0, name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    sch.parallel(sch.get_loops(sch.get_block("B"))[0])
    before = os.environ.get("TESSERA_OPENMP")
    os.environ["TESSERA_OPENMP"] = "libgomp"
    try:
        return tessera.build(sch.mod, target=TARGET).path
    finally:
        if before is None:
            del os.environ["TESSERA_OPENMP"]
        else:
            os.environ["TESSERA_OPENMP"] = before


def libgomp_settings(library: str, **env) -> dict:
    """Load `library` through tessera in a fresh process (env: the OpenMP variables set there) and read
    back what libgomp took (omp_display_env), what tessera says and whether the environment changed."""
    code = ("import ctypes, os, sys\n"
            "from tessera.runtime.module import Module\n"
            "from tessera.runtime import openmp\n"
            f"Module({library!r})\n"
            "print('POLICY', openmp.wait_policy())\n"
            "print('ENV', os.environ.get('GOMP_SPINCOUNT'))\n"
            "sys.stdout.flush()\n"
            "gomp = ctypes.CDLL('libgomp.so.1')\n"
            "gomp.omp_display_env(1) if hasattr(gomp, 'omp_display_env') else None\n")
    clean = {k: v for k, v in os.environ.items() if k not in openmp.USER_SETTINGS}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**clean, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **env})
    assert proc.returncode == 0, proc.stderr
    out = {}
    for line in (proc.stdout + proc.stderr).splitlines():        # omp_display_env writes to stderr
        word, _, rest = line.strip().partition(" ")
        if word in ("POLICY", "ENV"):
            out[word] = rest
        elif word in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
            out[word] = rest.split("=", 1)[1].strip().strip("'")
    if "GOMP_SPINCOUNT" not in out:
        pytest.skip("this libgomp does not display its settings (omp_display_env, GCC 11 and later)")
    return out


needs_libgomp = pytest.mark.skipif(gcc_version() is None, reason="kernels link libgomp only when built by gcc")


@needs_libgomp
def test_loading_a_library_bounds_how_long_libgomp_spins(parallel_library):
    got = libgomp_settings(parallel_library)
    assert got["GOMP_SPINCOUNT"] == str(openmp.SPIN_COUNT)       # libgomp's own default spins 300000
    assert "bounded spin" in got["POLICY"]
    assert got["ENV"] == "None"                                  # set for libgomp's load only


@needs_libgomp
@pytest.mark.parametrize("env, spin", [({"OMP_WAIT_POLICY": "passive"}, "0"), ({"GOMP_SPINCOUNT": "1234"}, "1234")])
def test_the_users_own_openmp_wait_settings_stay_in_force(parallel_library, env, spin):
    got = libgomp_settings(parallel_library, **env)
    assert got["GOMP_SPINCOUNT"] == spin
    assert "as the environment says" in got["POLICY"] and next(iter(env)) in got["POLICY"]


def spin_for(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_waits_for_a_cpu_are_counted_when_another_process_takes_turns_on_the_core():
    if contention.thread_waits() is None:
        pytest.skip("this kernel does not report threads' run-queue waits (/proc/self/task/*/schedstat)")
    saved = os.sched_getaffinity(0)
    cpu = min(saved)
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    try:
        os.sched_setaffinity(0, {cpu})
        spin_for(0.1)                           # the hog is pinned and running by now
        with contention.WaitMeter() as m:
            spin_for(0.3)                       # two runnable processes on one core take turns
    finally:
        os.sched_setaffinity(0, saved)
        hog.kill()
        hog.wait()
    assert m.waited > 0.25 * m.wall and m.busy
    assert "waited" in contention.busy_reason([m.wall], m)


def test_a_repeat_far_slower_than_the_fastest_is_a_stall():
    kept, stalled = contention.split_stalls([0.025e-3, 7.9e-3, 0.026e-3])
    assert kept == [0.025e-3, 0.026e-3] and stalled == [7.9e-3]
    assert contention.split_stalls([1.0, 1.2, 0.9]) == ([1.0, 1.2, 0.9], [])
    # whole calls from Python: a jitter under the floor is no stall however large the ratio
    assert contention.split_stalls([20e-6, 90e-6], floor=1e-3) == ([20e-6, 90e-6], [])


class Meter:
    def __init__(self, waited, wall):
        self.waited, self.wall = waited, wall

    busy = contention.WaitMeter.busy


def test_busy_reason_names_the_waits_and_the_stalls_and_is_none_for_clean_times():
    assert contention.busy_reason([5.5e-3, 5.6e-3, 5.4e-3], Meter(0.0, 0.02)) is None
    assert contention.busy_reason([5.5e-3, 5.6e-3], Meter(0.0005, 0.002)) is None    # a wake-up's wait, no more
    why = contention.busy_reason([5.5e-3, 424e-3, 5.4e-3], Meter(0.2, 0.44))
    assert "waited 200.0 ms for a CPU in 440.0 ms" in why and "1 of 3 runs stalled (up to 79x" in why
