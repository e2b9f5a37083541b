"""tessera's thread pool (runtime/tsr_pool.c, runtime/pool.py): which libraries call it, that their
parallel loops are right on it (many regions, nested regions, critical sections, several threads
starting regions at once, a forked child), and that a library for programs outside tessera links
libgomp instead."""
import multiprocessing
import os
import shutil
import subprocess
import threading

import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.errors import TesseraError
from tessera.runtime import c_compiler, pool
from tessera.toolchain import find_compiler, gcc_version

needs_gcc = pytest.mark.skipif(gcc_version() is None, reason="the pool stands in for libgomp, gcc's OpenMP")
needs_nm = pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) reads a library's symbols")


def _openmp_imports(path) -> set:
    out = subprocess.run(["nm", "-D", "--undefined-only", str(path)], capture_output=True, text=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines()
            if "GOMP_" in line or "omp_" in line}


def _parallel_double(n=4096, threads=2):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    o, _ = sch.split(sch.get_loops(sch.get_block("B"))[0], [None, 64])
    sch.parallel(o)
    return tessera.build(sch.mod, target=f"c -num-threads={threads}")


@pytest.mark.parametrize("source, fits", [
    ("#pragma omp parallel for\nfor (;;) {}", True),
    ("  #pragma omp parallel for num_threads(4)\n#pragma omp critical(tsr_failure)\n#pragma omp simd\n", True),
    ("#pragma omp parallel for schedule(static) collapse(2)\nomp_get_thread_num(); omp_get_num_threads();", True),
    ("#pragma omp simd\nfor (;;) {}", False),                                   # no parallel region
    ("#pragma omp parallel for schedule(dynamic)\n", False),                    # GOMP_loop_dynamic_*
    ("#pragma omp parallel for reduction(+:s)\n", False),                       # reductions: atomics, GOMP_*
    ("#pragma omp parallel num_threads(2)\n#pragma omp for\n", False),          # worksharing, barriers
    ("#pragma omp parallel for\n#pragma omp barrier\n", False),
    ("#pragma omp parallel for\ndouble t = omp_get_wtime();", False),           # another runtime call
])
def test_only_sources_within_what_the_pool_implements_take_it(source, fits):
    assert c_compiler.fits_pool(source) == fits


@needs_gcc
@needs_nm
def test_a_parallel_kernel_calls_the_pool_and_not_libgomp():
    mod = _parallel_double()
    imports = _openmp_imports(mod.path)
    assert imports and imports <= {f"__wrap_{s}" for s in c_compiler.POOL_SYMBOLS}
    a = np.arange(4096, dtype=np.float32)
    b = np.zeros_like(a)
    mod(a, b)
    np.testing.assert_array_equal(b, a * 2 + 1)
    assert "thread pool" in pool.describe()


@needs_gcc
@needs_nm
def test_tessera_openmp_libgomp_links_libgomp_and_other_values_are_refused(monkeypatch):
    monkeypatch.setenv("TESSERA_OPENMP", "libgomp")
    mod = _parallel_double(n=2048)
    assert "GOMP_parallel" in _openmp_imports(mod.path)
    a = np.ones(2048, np.float32)
    b = np.zeros_like(a)
    mod(a, b)
    np.testing.assert_array_equal(b, 3.0)
    monkeypatch.setenv("TESSERA_OPENMP", "gomp")
    with pytest.raises(TesseraError, match="TESSERA_OPENMP='gomp'"):
        _parallel_double(n=1024)


@needs_gcc
@needs_nm
def test_an_exported_model_links_libgomp_for_programs_outside_tessera(tmp_path):
    from tessera.graph import Builder
    gb = Builder()
    x = gb.input("x", (256, 1024))
    gb.output(gb.op("nn.relu", x))
    exe = tessera.compile(gb.finish(), target="c -num-threads=2")
    assert any(s.startswith("__wrap_") for k in exe.kernels for s in _openmp_imports(k.module.path))
    path = exe.export_library(tmp_path / "m.so")
    imports = _openmp_imports(path)
    assert "GOMP_parallel" in imports and not any(s.startswith("__wrap_") for s in imports)


C_STRESS = r"""
#include <stdio.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/wait.h>
#include <omp.h>
static int work(int n, int nt) {   /* every iteration once, the critical section entered once */
  long long s = 0; int once = 0;
#pragma omp parallel for num_threads(nt)
  for (int i = 0; i < n; i++) {
    if (i == n - 1) {
#pragma omp critical(tsr_failure)
      once += 1;
    }
    __atomic_fetch_add(&s, i, __ATOMIC_RELAXED);
  }
  return s == (long long)n * (n - 1) / 2 && once == 1;
}
static int nested(void) {          /* a region inside a region runs on its thread alone */
  int ok = 1;
#pragma omp parallel for num_threads(2)
  for (int i = 0; i < 2; i++) {
    if (omp_get_num_threads() != 2) __atomic_store_n(&ok, 0, 0);
    if (!work(100, 3)) __atomic_store_n(&ok, 0, 0);
  }
  return ok;
}
static void* master(void* arg) {   /* several threads start regions at once: a pool each */
  (void)arg; long ok = 1;
  for (int r = 0; r < 500; r++) ok &= work(1000 + r % 7, 1 + r % 4);
  return (void*)ok;
}
int main(void) {
  int ok = 1;
  for (int r = 0; r < 5000; r++) ok &= work(64 + r % 13, 1 + r % 3);
  if (!ok) { puts("regions"); return 1; }
  if (!nested()) { puts("nested"); return 1; }
  pthread_t th[3];
  for (int i = 0; i < 3; i++) pthread_create(&th[i], 0, master, 0);
  for (int i = 0; i < 3; i++) { void* v; pthread_join(th[i], &v); ok &= (long)v; }
  if (!ok) { puts("masters"); return 1; }
  pid_t pid = fork();               /* the child has none of the parent's workers: it makes its own */
  if (pid == 0) { int c = 1; for (int r = 0; r < 200; r++) c &= work(100, 2); _exit(c ? 0 : 1); }
  int st; waitpid(pid, &st, 0);
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) { puts("fork"); return 1; }
  puts("ok");
  return 0;
}
"""


@needs_gcc
@pytest.mark.parametrize("spin_us", ["200", "0"])
def test_the_pool_runs_openmp_regions_right(tmp_path, spin_us):
    """A C program of OpenMP regions linked against the pool as tessera links its libraries: each
    region's iterations exactly once, nested regions, critical sections, concurrent masters, fork;
    spinning and sleeping workers alike."""
    (tmp_path / "stress.c").write_text(C_STRESS)
    exe = tmp_path / "stress"
    cmd = find_compiler() + ["-O2", "-fopenmp", "-pthread", str(tmp_path / "stress.c"), pool.SOURCE,
                             "-o", str(exe)] + c_compiler.POOL_LINK_FLAGS
    subprocess.run(cmd, check=True, capture_output=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TESSERA_SPIN_US": spin_us})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


@needs_gcc
def test_python_threads_and_a_forked_child_run_parallel_kernels():
    mod = _parallel_double(n=8192, threads=2)
    a = np.arange(8192, dtype=np.float32)
    errors = []

    def run():
        for _ in range(200):
            b = np.zeros_like(a)
            mod(a, b)
            if not np.array_equal(b, a * 2 + 1):
                errors.append("wrong")

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as p:
        assert p.apply(_child_run, (mod.path,)) is True


def _child_run(path):
    from tessera.runtime.module import Module
    mod = Module(path)
    a = np.arange(8192, dtype=np.float32)
    b = np.zeros_like(a)
    for _ in range(50):
        mod(a, b)
    return bool(np.array_equal(b, a * 2 + 1))


@needs_gcc
def test_a_fresh_process_loads_the_pool_a_library_names_without_the_compiler(tmp_path):
    """A measuring worker or a later process loads a pool-calling library from the cache: the library
    names the pool library, which is loaded first, and nothing of the compiler is imported. A named
    pool library outside the kernel cache, or gone from it, is refused by name."""
    import sys
    import textwrap

    mod = _parallel_double(n=1024)
    script = textwrap.dedent(f"""
        import importlib.abc, sys
        class Blocker(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "tessera.runtime.c_compiler":
                    raise ImportError("blocked for this test: " + name)
        sys.meta_path.insert(0, Blocker())
        import numpy as np
        from tessera.runtime.module import Module
        from tessera.runtime import pool
        m = Module({mod.path!r})
        a = np.ones(1024, np.float32); b = np.zeros_like(a); m(a, b)
        print(float(b.sum()), "thread pool" in pool.describe())
        """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3072.0", "True"]
    copy = tmp_path / "k.so"
    shutil.copyfile(mod.path, copy)
    data = copy.read_bytes()
    at = data.index(pool.POOL_MARK) + len(pool.POOL_MARK)
    for fake, says in ((b"/tmp/evil/", "not an entry of this kernel cache"),
                       (data[at:data.index(b"\0", at)][:-4] + b".xyz", "is not there")):
        copy.write_bytes(data[:at] + fake + data[at + len(fake):])   # same length: the string ends where it did
        proc = subprocess.run([sys.executable, "-c", f"from tessera.runtime.module import Module; Module({str(copy)!r})"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and says in proc.stderr, proc.stderr[-500:]
