"""The C compiler driver: generated source -> shared library, cached on disk by content.

The cache key is the sha256 of the source, the compiler (path and `--version` line) and the
flags. Libraries live in `$TESSERA_CACHE_DIR` (default ~/.cache/tessera) as
`<key[:2]>/<key>.so`, with the readable `<key>.c` and the integrity record `<key>.so.sha256` beside,
all private to the user (runtime/cache.py). A build writes a temporary file in the same folder and
renames it into place, so concurrent builders of one source never see a partial library. A cache hit
is a hash of the source and a few `stat`s, no subprocess (once per process and library, a hash of the
library checked against its record; at most once in a few minutes per library, an access-time
update); a library that fails the check (truncated, changed, without a record) is built again. The
cache is capped ($TESSERA_CACHE_MAX_SIZE, default 10 GiB): after a build, now and then, runtime/cache.py
evicts the least recently used libraries.

Embedding the source: the compiler reads the source from stdin with `#line 1 "<key>.c"` in front
(its messages name the saved .c and its line numbers) and, unless the source defines
`tessera_source` itself, a `const char tessera_source[]` string literal appended at the end, so
`Module.get_source()` works on a library copied anywhere without its .c.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess

from .. import progress
from ..abi import c_string
from ..errors import BuildError, TesseraError
from ..target import Target
from ..toolchain import compiler_version, find_compiler
from . import cache
from .cache import cache_dir
from .pool import POOL_MARK, SOURCE as POOL_SOURCE

_SCHEME = "tessera-cc-1"   # bump when the build recipe below changes
_LINK_LIBS = ["-Wl,-Bsymbolic", "-lm"]   # the library's own symbols bind to itself
_HAS_SOURCE = re.compile(r"\btessera_source\b")

# Linking against tessera's thread pool (runtime/pool.py): the OpenMP calls gcc emits for what the pool
# implements go to __wrap_<name>, and libgomp, then unused, is not linked.
POOL_SYMBOLS = ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads", "GOMP_critical_name_start",
                "GOMP_critical_name_end", "GOMP_critical_start", "GOMP_critical_end")
POOL_LINK_FLAGS = ["-Wl," + ",".join(f"--wrap={s}" for s in POOL_SYMBOLS), "-Wl,--as-needed"]
_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+omp\b(.*)$", re.M)
_OMP_CALL = re.compile(r"\bomp_\w+")
# what the pool implements: a parallel loop split statically (GOMP_parallel), a critical section, simd
_POOL_PRAGMA = re.compile(r"\s*(parallel\s+for(\s+(num_threads|collapse)\s*\([^()]*\)|\s+schedule\s*\(\s*static\s*\))*"
                          r"|critical(\s*\(\s*\w+\s*\))?|simd\b.*)\s*")
_POOL_CALLS = {"omp_get_thread_num", "omp_get_num_threads"}


def openmp_runtime() -> str:
    """Which runtime the parallel loops of the libraries built now call: "pool" (tessera's, the
    default) or "libgomp" (TESSERA_OPENMP=libgomp: gcc's own, its wait bounded by runtime/openmp.py)."""
    value = os.environ.get("TESSERA_OPENMP", "pool")
    if value not in ("pool", "libgomp"):
        raise TesseraError(f"TESSERA_OPENMP={value!r}: expected 'pool' (tessera's thread pool, the default) or "
                           f"'libgomp'")
    return value


_POOL_LIBRARY: dict = {}   # kernel cache folder -> the pool library's path there (built once a process)


def pool_library() -> str:
    """Path of tessera's thread pool library (runtime/pool.py) in the kernel cache, built on first use;
    later calls cost a stat (every library that calls the pool asks), and build it again if it was
    evicted."""
    root = cache_dir()
    path = _POOL_LIBRARY.get(root)
    if path is None or not os.path.isfile(path):
        with open(POOL_SOURCE, encoding="utf-8") as f:
            path = _POOL_LIBRARY[root] = compile_source(f.read(), name_hint="tessera_pool", pool=False)
    return path


def fits_pool(source: str) -> bool:
    """Whether `source` has parallel loops and all its OpenMP is what tessera's pool implements."""
    pragmas = _PRAGMA.findall(source)
    return (any(p.split()[:2] == ["parallel", "for"] for p in pragmas)
            and all(_POOL_PRAGMA.fullmatch(p) for p in pragmas) and set(_OMP_CALL.findall(source)) <= _POOL_CALLS)


def compile_source(source: str, target=None, name_hint: str = "kernel", prepare=None, pool: bool = True) -> str:
    """Compile C `source` into a shared library for `target` (default: the host); returns its path.
    prepare(): called before the compiler runs, not on a cache hit (writes the files the source embeds).
    pool: its parallel loops run on tessera's thread pool (runtime/pool.py: the library names the
    pool's library, which Module loads before it) where the source fits it and the target has no
    sanitizer; False: on libgomp (a library for programs outside tessera)."""
    if not isinstance(source, str):
        raise TesseraError(f"compile_source expects C source text, got {type(source).__name__}")
    target = Target.host() if target is None else Target(target)
    flags = target.cflags()
    link = list(_LINK_LIBS)
    pool_path = None
    if pool and openmp_runtime() == "pool" and not target.attrs.get("sanitize") and fits_pool(source):
        link = POOL_LINK_FLAGS + link
        pool_path = pool_library()     # built (again, if evicted) before a library that calls it
    argv = find_compiler()
    ident = "\0".join([_SCHEME, " ".join(argv), compiler_version(argv), " ".join(flags), " ".join(link),
                       pool_path or ""])
    key = hashlib.sha256(ident.encode() + b"\0" + source.encode("utf-8")).hexdigest()
    sub = cache.folder(key[:2])
    so_path = os.path.join(sub, key + ".so")
    if cache.hit(so_path):
        progress.tally("from cache")
        return so_path

    # not built yet, or damaged (truncated, changed, no integrity record): built (again)
    cap = cache.max_size()   # a bad $TESSERA_CACHE_MAX_SIZE fails before the compile
    c_path = os.path.join(sub, key + ".c")
    cache.write(c_path, source, "the kernel source", record=False)
    if prepare is not None:
        prepare()
    unit = '#line 1 "' + c_path.replace("\\", "\\\\").replace('"', '\\"') + '"\n' + source
    if not _HAS_SOURCE.search(source):
        unit += "\n\n__attribute__((used)) const char tessera_source[] =\n" + c_string(source, lines=True) + ";\n"
    if pool_path is not None:      # where the loader finds the pool (runtime/pool.py: POOL_MARK)
        unit += ("\n__attribute__((used)) const char tessera_pool_library[] = "
                 + c_string(POOL_MARK.decode() + pool_path) + ";\n")
    with cache.new_file(so_path, "the compiled library") as tmp_so:
        cmd = argv + flags + ["-o", tmp_so, "-x", "c", "-", "-x", "none"] + link
        try:
            proc = subprocess.run(cmd, input=unit.encode("utf-8"), capture_output=True)
        except OSError as e:
            raise BuildError(f"cannot run the C compiler {argv[0]} for {name_hint!r}: {e}", c_path) from None
        if proc.returncode != 0:
            raise BuildError(f"C compilation of {name_hint!r} failed ({os.path.basename(argv[0])} exit "
                             f"code {proc.returncode}; command: {shlex.join(cmd)})", c_path,
                             proc.stderr.decode("utf-8", "replace"))
    cache.after_build(cache_dir(), cap)
    progress.tally("compiled")
    return so_path
