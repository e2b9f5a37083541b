"""The host's C toolchain: which compiler, its version, and the CPU features a -march enables.

Below both `target` (which asks the compiler what a named CPU or a -mattr list means) and
`runtime.c_compiler` (which builds with it).
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess

from .errors import BuildError, TesseraError

_COMPILERS: dict = {}      # $CC value -> argv prefix of the compiler
_VERSIONS: dict = {}       # argv prefix -> first line of `--version`
# predefined macros naming an instruction-set extension (__AVX2__, __AVX512VNNI__, __AMX_TILE__, ...)
_ISA_MACRO = re.compile(r"#define __((?:SSE[0-9_]*|SSSE3|SSE4A|AVX[A-Z0-9_]*|FMA4?|F16C|AMX_[A-Z0-9_]+"
                        r"|BMI2?|POPCNT|LZCNT|MOVBE|GFNI|VAES|VPCLMULQDQ|SHA|ADX))__ 1$", re.M)


def find_compiler() -> list[str]:
    """The C compiler command: $CC (may carry arguments), else gcc, cc or clang from PATH."""
    env = os.environ.get("CC", "")
    argv = _COMPILERS.get(env)
    if argv is not None:
        return argv
    if env.strip():
        argv = shlex.split(env)
        exe = shutil.which(argv[0])
        if exe is None:
            raise BuildError(f"the C compiler named by $CC ({env!r}) was not found")
        argv = [exe] + argv[1:]
    else:
        exe = next((p for p in map(shutil.which, ("gcc", "cc", "clang")) if p), None)
        if exe is None:
            raise BuildError("no C compiler found: install gcc (or clang) or set $CC")
        argv = [exe]
    _COMPILERS[env] = argv
    return argv


def compiler_version(argv: list[str]) -> str:
    """First line of `<compiler> --version` (asked once per process)."""
    key = tuple(argv)
    version = _VERSIONS.get(key)
    if version is None:
        try:
            out = subprocess.run(argv + ["--version"], capture_output=True, text=True, timeout=60)
        except OSError as e:
            raise BuildError(f"cannot run the C compiler {argv[0]}: {e}") from None
        version = (out.stdout or out.stderr).strip().split("\n", 1)[0]
        _VERSIONS[key] = version
    return version


def isa_features(march: str, mflags: tuple = ()) -> frozenset | None:
    """The instruction-set extensions the C compiler enables for `-march=<march> <mflags>`, as the
    macro stems it predefines, lower-case ('avx2', 'avx512vnni', 'amx_tile', 'sse4_1'); the compiler
    resolves what a named CPU has and what turning a feature off takes with it (-mno-avx512f drops
    every AVX-512 extension). None where no C compiler is installed."""
    try:
        argv = find_compiler()
    except BuildError:
        return None
    macros = _predefined(tuple(argv), (f"-march={march}", *mflags))
    return frozenset(m.group(1).lower() for m in _ISA_MACRO.finditer(macros))


def gcc_version() -> tuple | None:
    """(major, minor, patchlevel) of the C compiler when it is GCC (not clang), else None."""
    try:
        argv = find_compiler()
    except BuildError:
        return None
    return _gcc_version(tuple(argv))


@functools.lru_cache(maxsize=None)
def _gcc_version(argv: tuple) -> tuple | None:
    macros = _predefined(argv, ())
    if "__clang__" in macros:
        return None
    v = [re.search(rf"#define __GNUC{part}__ (\d+)", macros) for part in ("", "_MINOR", "_PATCHLEVEL")]
    return tuple(int(m.group(1)) for m in v) if all(v) else None


def workaround_flags(features) -> list[str]:
    """Flags that keep the installed C compiler away from its known miscompiles for a target with
    these CPU features. GCC before 12.4 / 13.3 vectorizes if-converted loops with masked loads
    (AVX vmaskmovps, AVX-512 masks) whose masks or lanes belong to other elements (GCC PR 114375,
    a permutation of masked loads dropped): `x < 0 ? x * slope : x` over a [3, 4, 5] array gave 10
    of 60 wrong elements on AVX-512, a Concat's `i < 3 ? A[..] : B[..]` zeros on AVX and AVX2.
    Loop if-conversion is what makes those masked loads; tessera vectorizes its own selects."""
    if "avx" not in features:
        return []
    v = gcc_version()
    if v is not None and (v < (12, 4, 0) or (13, 0, 0) <= v < (13, 3, 0)):
        return ["-fno-tree-loop-if-convert"]
    return []


@functools.lru_cache(maxsize=None)
def _predefined(argv: tuple, flags: tuple) -> str:
    """The compiler's predefined macros (`-dM -E`) for `flags`."""
    cmd = list(argv) + [*flags, "-dM", "-E", "-x", "c", "-"]
    try:
        proc = subprocess.run(cmd, input="", capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise BuildError(f"cannot run the C compiler {argv[0]}: {e}") from None
    if proc.returncode != 0:
        msg = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:300])
        raise TesseraError(f"the C compiler ({os.path.basename(argv[0])}) refuses "
                           f"{' '.join(flags)}: {msg.strip()}")
    return proc.stdout


def asan_runtime() -> str:
    """Path of the compiler's AddressSanitizer runtime (to LD_PRELOAD for `-sanitize=address` modules)."""
    argv = find_compiler()
    out = subprocess.run(argv + ["-print-file-name=libasan.so"], capture_output=True, text=True)
    path = out.stdout.strip()
    if out.returncode != 0 or not os.path.isabs(path):
        raise TesseraError(f"{argv[0]} does not ship an AddressSanitizer runtime (libasan.so)")
    return path
