"""Compilation targets: `Target("c -mcpu=native -num-threads=2")`, "cuda -arch=sm_90", "opencl", "vdla".

A Target is immutable and compared by its canonical text (`str(target)`), which parses back to an
equal Target. For CPU targets it knows the CPU features code generation may use (from
/proc/cpuinfo for the host, or from `-mattr` for a named `-mcpu`) and the C compiler flags.
"""
from __future__ import annotations

import functools
import os
import re

from .errors import TesseraError
from .toolchain import isa_features, workaround_flags

_KIND_ALIASES = {"c": "c", "llvm": "c", "cuda": "cuda", "opencl": "opencl", "vdla": "vdla"}

# option name -> validator(value, option text) -> canonical value; per kind.
_SANITIZERS = ("address", "undefined")


def _int_option(low):
    def check(value, opt):
        try:
            v = int(value)
        except ValueError:
            v = None
        if v is None or v < low:
            raise TesseraError(f"target option {opt}: expected an integer >= {low}, got {value!r}")
        return str(v)
    return check


def _choice_option(choices):
    def check(value, opt):
        if value not in choices:
            raise TesseraError(f"target option {opt}: expected one of {', '.join(choices)}, got {value!r}")
        return value
    return check


def _sanitize_option(value, opt):
    """'undefined,address' -> 'address,undefined': a comma list of sanitizers, canonical order."""
    names = [v.strip() for v in value.split(",")]
    bad = [v for v in names if v not in _SANITIZERS]
    if bad or not names:
        raise TesseraError(f"target option {opt}: expected one or more of {', '.join(_SANITIZERS)} "
                           f"(comma-separated), got {value!r}")
    return ",".join(s for s in _SANITIZERS if s in names)


def _name_option(value, opt):
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", value):
        raise TesseraError(f"target option {opt}: {value!r} is not a valid name")
    return value


def _cuda_arch(value, opt):
    if not re.fullmatch(r"sm_\d{2,3}[a-z]?", value):
        raise TesseraError(f"target option {opt}: expected an architecture such as sm_80 or sm_90, got {value!r}")
    return value


_OPTIONS = {
    "c": {"mcpu": _name_option, "mattr": None, "num-threads": _int_option(0),
          "sanitize": _sanitize_option},
    "cuda": {"arch": _cuda_arch, "max-threads-per-block": _int_option(1)},
    "opencl": {"device": _name_option, "max-threads-per-block": _int_option(1)},
    "vdla": {"sync": _choice_option(("tokens", "serial"))},
}

# Other spellings of CPU features (LLVM / gcc style) -> the /proc/cpuinfo name tessera uses.
_FEATURE_ALIASES = {"avx512vnni": "avx512_vnni", "avxvnni": "avx_vnni", "avx512bf16": "avx512_bf16",
                    "avx512fp16": "avx512_fp16", "avx512vbmi2": "avx512_vbmi2", "avx512bitalg": "avx512_bitalg",
                    "avx512vpopcntdq": "avx512_vpopcntdq", "avx512vp2intersect": "avx512_vp2intersect", "amxtile": "amx_tile", "amxint8": "amx_int8",
                    "amxbf16": "amx_bf16", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "sse3": "pni",
                    "bmi": "bmi1", "lzcnt": "abm", "sha": "sha_ni"}
# cpuinfo name -> gcc -m flag stem, where removing underscores is not enough.
_GCC_FEATURE = {"amx_tile": "amx-tile", "amx_int8": "amx-int8", "amx_bf16": "amx-bf16",
                "sse4_1": "sse4.1", "sse4_2": "sse4.2", "pni": "sse3", "bmi1": "bmi", "abm": "lzcnt",
                "sha_ni": "sha"}

# The instruction-set extensions compiled code may use, by their /proc/cpuinfo names, and where the
# CPU reports each (Intel SDM vol. 2, CPUID): (leaf, subleaf, register 0-3 = eax/ebx/ecx/edx, bit,
# the XCR0 bits the OS must have enabled for the registers it uses: 0x6 AVX, 0xe6 AVX-512, 0x60000
# AMX). A library records those its target has (`needed_features`) and is refused on a CPU without
# one (its code would die of SIGILL): by the loader against /proc/cpuinfo, by the model entry's
# create function against CPUID (codegen/c_entry.py cpu_check).
CPUID_FEATURES = {
    "sse": (1, 0, 3, 25, 0), "sse2": (1, 0, 3, 26, 0), "pni": (1, 0, 2, 0, 0), "pclmulqdq": (1, 0, 2, 1, 0),
    "ssse3": (1, 0, 2, 9, 0), "fma": (1, 0, 2, 12, 0x6), "sse4_1": (1, 0, 2, 19, 0), "sse4_2": (1, 0, 2, 20, 0),
    "movbe": (1, 0, 2, 22, 0), "popcnt": (1, 0, 2, 23, 0), "aes": (1, 0, 2, 25, 0), "avx": (1, 0, 2, 28, 0x6),
    "f16c": (1, 0, 2, 29, 0x6),
    "bmi1": (7, 0, 1, 3, 0), "avx2": (7, 0, 1, 5, 0x6), "bmi2": (7, 0, 1, 8, 0), "avx512f": (7, 0, 1, 16, 0xe6),
    "avx512dq": (7, 0, 1, 17, 0xe6), "adx": (7, 0, 1, 19, 0), "avx512ifma": (7, 0, 1, 21, 0xe6),
    "avx512cd": (7, 0, 1, 28, 0xe6), "sha_ni": (7, 0, 1, 29, 0), "avx512bw": (7, 0, 1, 30, 0xe6),
    "avx512vl": (7, 0, 1, 31, 0xe6),
    "avx512vbmi": (7, 0, 2, 1, 0xe6), "avx512_vbmi2": (7, 0, 2, 6, 0xe6), "gfni": (7, 0, 2, 8, 0),
    "vaes": (7, 0, 2, 9, 0x6), "vpclmulqdq": (7, 0, 2, 10, 0x6), "avx512_vnni": (7, 0, 2, 11, 0xe6),
    "avx512_bitalg": (7, 0, 2, 12, 0xe6), "avx512_vpopcntdq": (7, 0, 2, 14, 0xe6),
    "avx512_vp2intersect": (7, 0, 3, 8, 0xe6), "amx_bf16": (7, 0, 3, 22, 0x60000),
    "avx512_fp16": (7, 0, 3, 23, 0xe6), "amx_tile": (7, 0, 3, 24, 0x60000), "amx_int8": (7, 0, 3, 25, 0x60000),
    "avx_vnni": (7, 1, 0, 4, 0x6), "avx512_bf16": (7, 1, 0, 5, 0xe6),
    "abm": (0x80000001, 0, 2, 5, 0), "sse4a": (0x80000001, 0, 2, 6, 0), "xop": (0x80000001, 0, 2, 11, 0x6),
    "fma4": (0x80000001, 0, 2, 16, 0x6),
}


def canon_feature(name: str) -> str:
    """A feature name as /proc/cpuinfo spells it ('avx512vnni', 'AMX-TILE', 'sse4.1' accepted)."""
    name = name.strip().lower()
    alias = _FEATURE_ALIASES.get(name) or _FEATURE_ALIASES.get(name.replace("-", "").replace("_", ""))
    return alias or name.replace("-", "_")




@functools.lru_cache(maxsize=None)
def host_features() -> frozenset:
    """CPU feature flags of this machine, lower-case as /proc/cpuinfo spells them (read once)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def needed_features(target) -> tuple:
    """The CPU features a library built for `target` needs from the CPU that runs it: the
    instruction-set extensions of CPUID_FEATURES its code may use, sorted (none for a GPU target)."""
    target = Target(target)
    return tuple(sorted(f for f in target.features if f in CPUID_FEATURES)) if target.is_cpu else ()


def check_cpu_features(needed, what: str, target_text: str = "") -> None:
    """Refuse (TesseraError naming them) to run code that needs CPU features this machine lacks:
    `what` (a library's path) was built for `target_text` and records `needed`."""
    have = host_features()
    missing = [f for f in needed if f not in have]
    if missing:
        built = f" (built for target {target_text!r})" if target_text else ""
        raise TesseraError(f"{what} needs CPU features this machine lacks: {', '.join(missing)}{built}; its code "
                           f"would stop the process with an illegal instruction. Rebuild it here, or for a target "
                           f"this CPU has (e.g. 'c')")


def host_cores() -> int:
    """Number of cores this process may run on (its CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_CACHE: dict = {}


class Target:
    """A compilation target; build it from text ("c", "cuda -arch=sm_90", ...) or pass one through."""

    __slots__ = ("kind", "mcpu", "features", "attrs", "_mattr", "_threads", "_text", "_hash")

    def __new__(cls, target="c"):
        if isinstance(target, Target):
            return target
        if not isinstance(target, str):
            raise TesseraError(f"a target is a string such as 'c' or 'cuda -arch=sm_90', got {target!r}")
        cached = _CACHE.get(target)
        if cached is not None:
            return cached
        self = object.__new__(cls)
        self._parse(target)
        _CACHE[target] = self
        return self

    def _parse(self, text: str):
        set_ = object.__setattr__
        tokens = text.split()
        if not tokens:
            raise TesseraError(f"empty target string; valid kinds: {', '.join(_KIND_ALIASES)}")
        kind = _KIND_ALIASES.get(tokens[0].lower())
        if kind is None:
            raise TesseraError(f"unknown target kind {tokens[0]!r} in {text!r}; valid kinds: "
                               f"{', '.join(_KIND_ALIASES)} (llvm is an alias of c)")
        valid = _OPTIONS[kind]
        opts: dict[str, str] = {}
        for tok in tokens[1:]:
            m = re.fullmatch(r"--?([A-Za-z][A-Za-z0-9_-]*)=(.*)", tok)
            if not m or not m.group(2):
                raise TesseraError(f"bad target option {tok!r} in {text!r}: expected -key=value; "
                                   f"options of {kind}: {', '.join(valid) or 'none'}")
            key, value = m.group(1).replace("_", "-").lower(), m.group(2)
            if key not in valid:
                raise TesseraError(f"unknown option -{key} for target {kind!r} in {text!r}; "
                                   f"options of {kind}: {', '.join('-' + k for k in valid) or 'none'}")
            if key in opts:
                raise TesseraError(f"target option -{key} given twice in {text!r}")
            check = valid[key]
            opts[key] = check(value, f"-{key}") if check else value
        mcpu = opts.pop("mcpu", "native" if kind == "c" else None)
        mattr = _parse_mattr(opts.pop("mattr", ""), text)
        threads = int(opts.pop("num-threads", 0))
        features = _cpu_features(mcpu, mattr) if kind == "c" else frozenset()
        set_(self, "kind", kind)
        set_(self, "mcpu", mcpu)
        set_(self, "features", features)
        set_(self, "attrs", dict(sorted(opts.items())))
        set_(self, "_mattr", mattr)
        set_(self, "_threads", threads)
        parts = [kind]
        if mcpu is not None and mcpu != "native":
            parts.append(f"-mcpu={mcpu}")
        if mattr:
            parts.append("-mattr=" + ",".join(s + f for s, f in mattr))
        if threads:
            parts.append(f"-num-threads={threads}")
        parts += [f"-{k}={v}" for k, v in self.attrs.items()]
        set_(self, "_text", " ".join(parts))
        set_(self, "_hash", hash(self._text))

    def __setattr__(self, key, value):
        raise AttributeError("Target is immutable; build a new one from text")

    # ------------------------------------------------------------------ properties
    @property
    def num_threads(self) -> int:
        """Threads a parallel kernel uses: -num-threads, or (0 / unset) every usable core."""
        return self._threads or host_cores()

    @property
    def is_cpu(self) -> bool:
        """Whether code for this target runs on the host's CPU (kind "c"): x86 features, OpenMP."""
        return self.kind == "c"

    @property
    def vector_bits(self) -> int:
        """Width of the widest SIMD registers code generation should use."""
        f = self.features
        return 512 if "avx512f" in f else 256 if ("avx2" in f or "avx" in f) else 128

    def has_feature(self, name: str) -> bool:
        """Whether the CPU feature (cpuinfo or LLVM spelling, e.g. 'avx2', 'avx512vnni') is available."""
        return canon_feature(name) in self.features

    def cflags(self) -> list[str]:
        """C compiler flags for a shared library of this (C) target."""
        if self.kind != "c":
            raise TesseraError(f"target {self._text!r} is not compiled by a C compiler (only kind 'c' is)")
        flags = ["-O3", f"-march={self.mcpu}", "-fopenmp", "-fPIC", "-shared", "-std=gnu11"]
        flags += _mflags(self._mattr)
        if "avx512f" in self.features:
            flags.append("-mprefer-vector-width=512")
        flags += workaround_flags(self.features)
        san = self.attrs.get("sanitize")
        if san:
            flags += [f"-fsanitize={san}", "-fno-omit-frame-pointer"]
            if "undefined" in san.split(","):
                flags.append("-fno-sanitize-recover=undefined")  # UBSan aborts instead of going on
        return flags

    @staticmethod
    def host() -> "Target":
        """The machine tessera runs on: C with every CPU feature it has."""
        return Target("c")

    # ------------------------------------------------------------------ identity
    def __str__(self):
        return self._text

    def __repr__(self):
        return f"Target({self._text!r})"

    def __eq__(self, other):
        if isinstance(other, Target):
            return self._text == other._text
        if isinstance(other, str):
            try:
                return self._text == Target(other)._text
            except TesseraError:
                return False
        return NotImplemented

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        return (Target, (self._text,))


def _mflags(mattr: tuple) -> list[str]:
    """-mattr as C compiler flags: (('+', 'avx512_vnni'), ('-', 'avx512f')) -> -mavx512vnni -mno-avx512f."""
    out = []
    for sign, feat in mattr:
        stem = _GCC_FEATURE.get(feat, feat.replace("_", ""))
        out.append(f"-m{stem}" if sign == "+" else f"-mno-{stem}")
    return out


def _cpu_features(mcpu: str, mattr: tuple) -> frozenset:
    """The CPU features of a C target. The host's (/proc/cpuinfo) for -mcpu=native; a named CPU's
    as the C compiler defines them for -march=<mcpu>. -mattr adds and removes features, and what the
    compiler turns on or off with them follows (-mattr=-avx512f also drops avx512_vnni, so an
    AVX-512 host can build and run the AVX2 code paths). Without a C compiler, a named CPU has only
    the features -mattr lists."""
    flags = tuple(_mflags(mattr))
    if mcpu == "native" and not mattr:
        return host_features()
    feats = set(host_features()) if mcpu == "native" else set()
    for sign, feat in mattr:
        (feats.add if sign == "+" else feats.discard)(feat)
    enabled = isa_features(mcpu, flags)
    if enabled is None:
        return frozenset(feats)
    enabled = {canon_feature(f) for f in enabled}
    if mcpu != "native":
        return frozenset(feats | enabled)
    base = {canon_feature(f) for f in isa_features(mcpu, ())}
    return frozenset((feats - (base - enabled)) | (enabled - base))   # what -mattr took and gave


def _parse_mattr(value: str, text: str) -> tuple:
    """'+avx2,+fma,-avx512f' -> (('+', 'avx2'), ('+', 'fma'), ('-', 'avx512f')), canonical names."""
    if not value:
        return ()
    out = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        sign = item[0] if item[0] in "+-" else "+"
        name = canon_feature(item.lstrip("+-"))
        if not re.fullmatch(r"[a-z0-9_.]+", name):
            raise TesseraError(f"target option -mattr: {item!r} in {text!r} is not a feature name "
                               f"(expected e.g. +avx2,+fma,-avx512f)")
        out[name] = sign
    return tuple((s, f) for f, s in sorted(out.items()))
