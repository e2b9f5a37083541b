"""Correctness of candidates: seeded inputs, the untuned program's outputs, the comparison, and the
cache-flushing timer (all used inside the runner's worker process).

Inputs are drawn per parameter from `numpy.random.default_rng([seed, index])`: floats standard
normal; signed integers in [-8, 8), unsigned in [0, 16) (small, so integer sums stay far from
overflow in any order), within the range a run-time check of the program demands of them where it
checks one (take's or gather's indices: `index_ranges`); bools half true. Outputs (the parameters the program stores to) start from
their own seeded random fill before every run, so an element a candidate forgets to write differs.
The expected outputs come from the workload's function built with no schedule, once per workload
and target (kept on disk beside the compiler cache, keyed by the untuned library, so a restarted
worker does not recompute them and a change of the compiler recomputes them).

Tolerance (per element): integers and bools exact; floats |got - want| <= rtol * (|want| + mean|want|)
with rtol 1e-3 for float32, 1e-2 for float16/bfloat16, 1e-9 for float64, and NaN exactly where the
reference has NaN. A reassociated float32 sum of K products is off by about K * 6e-8 relative to
the terms, far inside it for any K a GEMM has; a wrong index, a lost or doubled iteration or an
unwritten element is off by the size of a term, far outside it.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import tempfile

import numpy as np

from ...errors import TesseraError
from ...ir import Buffer, BufferStore, IntImm, PrimFunc, post_order_visit
from ...ir.expr import BufferLoad, Call, Cast
from ...tir.transform.lower_checks import CHECK_RANGE
from ...ir.dtype import numpy_dtype
from ...runtime.c_compiler import cache_dir, compile_source

RTOL = {"float16": 1e-2, "bfloat16": 1e-2, "float32": 1e-3, "float64": 1e-9}
REF_SCHEME = "tessera-ref-2"   # bump when inputs or the reference recipe change


def io_params(func: PrimFunc):
    """(shapes, numpy dtypes, is_output) per parameter; a TesseraError for what cannot be measured
    (scalar parameters, symbolic extents)."""
    written = set()
    post_order_visit(func.body, lambda n: written.add(n.buffer) if type(n) is BufferStore else None)
    shapes, dtypes, outs = [], [], []
    for p in func.params:
        if not isinstance(p, Buffer):
            raise TesseraError(f"measuring {func.name}: scalar parameter {p.name} has no value to measure with; "
                               f"make it a constant of the workload")
        dims = []
        for d in p.shape:
            if type(d) is not IntImm:
                raise TesseraError(f"measuring {func.name}: parameter {p.name} has the symbolic extent "
                                   f"{d.script()}; a workload to measure needs static shapes")
            dims.append(d.value)
        shapes.append(tuple(dims))
        dtypes.append(numpy_dtype(p.dtype))
        outs.append(p in written)
    if not any(outs):
        raise TesseraError(f"measuring {func.name}: the function writes none of its parameters")
    return shapes, dtypes, outs


def random_array(shape, dtype: np.dtype, rng, valid=None) -> np.ndarray:
    """Seeded data suited to the dtype (module docstring); integers within `valid` = [lo, hi) too
    where the program checks its values against such a range (index_ranges)."""
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo, hi = (-8, 8) if dtype.kind == "i" else (0, 16)
        if valid is not None:
            if valid[0] >= valid[1]:
                raise TesseraError(f"measuring: no integer passes the program's own range check [{valid[0]}, "
                                   f"{valid[1]}) (an index into an empty axis): nothing to measure it with")
            lo, hi = max(lo, valid[0]), min(hi, valid[1])
            if lo >= hi:     # the usual range misses the valid one: its lowest values
                lo, hi = valid[0], min(valid[1], valid[0] + 16)
        return rng.integers(lo, hi, shape).astype(dtype)
    return rng.standard_normal(shape, dtype=np.float64).astype(dtype)


def index_ranges(func: PrimFunc) -> dict:
    """{parameter buffer: (lo, hi)}: the range the program's run-time checks (check_range: take's and
    gather's indices, ...) demand of the integers it reads from a parameter, so that the seeded inputs
    are ones the program accepts (an index out of range is an error, not a measurement)."""
    params = {p for p in func.params if isinstance(p, Buffer)}
    out: dict = {}

    def visit(n):
        if type(n) is not Call or n.op != CHECK_RANGE:
            return
        v, lo, hi = n.args[:3]
        while type(v) is Cast:
            v = v.value
        if type(v) is not BufferLoad or v.buffer not in params:
            return
        try:
            lo_v, hi_v = int(np.ceil(lo.value)), int(np.ceil(hi.value))   # [lo, hi) of integers
        except (AttributeError, TypeError, ValueError, OverflowError):   # a bound known only at run time
            return
        old = out.get(v.buffer, (lo_v, hi_v))
        out[v.buffer] = (max(old[0], lo_v), min(old[1], hi_v))

    post_order_visit(func.body, visit)
    return out


class Reference:
    """Inputs, output fills and expected outputs of one workload, with scratch arrays to run
    candidates on (inputs are copied in before each run: a candidate cannot corrupt them)."""

    def __init__(self, func: PrimFunc, seed: int):
        self.shapes, self.dtypes, self.is_out = io_params(func)
        valid = index_ranges(func)
        self.data = [random_array(s, d, np.random.default_rng([seed, i, int(o)]), valid.get(p))
                     for i, (s, d, o, p) in enumerate(zip(self.shapes, self.dtypes, self.is_out, func.params))]
        self.scratch = [np.empty(s, d) for s, d in zip(self.shapes, self.dtypes)]
        self.expected = None
        self.names = [p.name for p in func.params]

    def fresh_args(self) -> list:
        """The scratch arrays, reset to the inputs and the output fills."""
        for dst, src in zip(self.scratch, self.data):
            np.copyto(dst, src)
        return self.scratch

    def compute_expected(self, fn, cache_path: str | None):
        """Run the untuned program (or read its outputs from cache_path) and keep its outputs."""
        if cache_path and self._load(cache_path):
            return
        args = self.fresh_args()
        fn(*args)
        self.expected = [a.copy() if o else None for a, o in zip(args, self.is_out)]
        if cache_path:
            self._save(cache_path)

    def _save(self, folder):
        os.makedirs(folder, exist_ok=True)
        for i, e in enumerate(self.expected):
            if e is None:
                continue
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".npy")
            with os.fdopen(fd, "wb") as f:
                np.save(f, _raw(e), allow_pickle=False)
            os.replace(tmp, os.path.join(folder, f"out{i}.npy"))

    def _load(self, folder) -> bool:
        out = []
        for i, (s, d, o) in enumerate(zip(self.shapes, self.dtypes, self.is_out)):
            if not o:
                out.append(None)
                continue
            try:
                raw = np.load(os.path.join(folder, f"out{i}.npy"), allow_pickle=False)
            except (OSError, ValueError):
                return False
            arr = raw.view(d) if raw.dtype.itemsize == d.itemsize else None
            if arr is None or arr.shape != s:
                return False
            out.append(arr)
        self.expected = out
        return True

    def compare(self, args) -> str | None:
        """None when every output matches the expected one within tolerance, else what differs."""
        for name, got, want, dt in zip(self.names, args, self.expected, self.dtypes):
            if want is None:
                continue
            msg = mismatch(got, want, dt)
            if msg:
                return f"output {name}: {msg}"
        return None


def _raw(a: np.ndarray) -> np.ndarray:
    """a viewed as unsigned integers of its width (np.save of ml_dtypes arrays does not read back)."""
    return a.view(f"u{a.dtype.itemsize}") if a.dtype != np.bool_ else a.view(np.uint8)


def mismatch(got: np.ndarray, want: np.ndarray, dtype: np.dtype) -> str | None:
    """What differs between got and want beyond the tolerance of the dtype (module docstring)."""
    if dtype.kind in "iub":
        bad = got != want
        if not bad.any():
            return None
        idx = np.unravel_index(int(np.argmax(bad)), want.shape)
        return (f"{int(bad.sum())} of {want.size} elements differ (exact match required for {dtype}); first at "
                f"{tuple(int(i) for i in idx)}: got {got[idx]}, expected {want[idx]}")
    ct = np.float64 if dtype.itemsize >= 8 else np.float32     # float16/bfloat16 compared in float32
    g, w = got.astype(ct, copy=False), want.astype(ct, copy=False)
    rtol = RTOL.get(str(dtype), 1e-3)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = float(np.abs(w).mean(dtype=np.float64))
        err = np.abs(g - w)
        tol = np.abs(w)
        tol += scale
        tol *= rtol
        if (err <= tol).all():          # the common case, in a few passes over the outputs
            return None
        wnan, finite = np.isnan(w), np.isfinite(w)
        if not finite.all():            # the mean above was not finite: the scale of the finite part
            scale = float(np.abs(w[finite]).mean(dtype=np.float64)) if finite.any() else 0.0
            tol = rtol * (np.abs(w) + scale)
        bad = (np.isnan(g) != wnan) | (finite & ~(err <= tol)) | (np.isinf(w) & (g != w))
    if not bad.any():
        return None
    idx = np.unravel_index(int(np.argmax(bad)), w.shape)
    err_f = np.where(finite, err, 0)
    return (f"{int(bad.sum())} of {w.size} elements differ beyond rtol {rtol} (relative to |expected| + "
            f"mean|expected| = {scale:.3g}); first at {tuple(int(i) for i in idx)}: got {float(g[idx]):.7g}, expected "
            f"{float(w[idx]):.7g}; max abs error {float(np.nanmax(err_f)) if err_f.size else 0.0:.3g}")


def reference_folder(key: str, library: str, seed: int) -> str:
    """Where the expected outputs of workload `key`, computed by `library` (the untuned program's
    compiled file, named by the hash of its source and flags) with inputs of `seed`, are kept."""
    h = hashlib.sha256(json.dumps([REF_SCHEME, key, library, seed]).encode()).hexdigest()[:20]
    return os.path.join(cache_dir(), "autotune-ref", f"{key}-{h}")


# ---------------------------------------------------------------------------------------------
# timing with the caches flushed before each repeat
# ---------------------------------------------------------------------------------------------
FLUSH_TIMER_SRC = r"""
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TSR_HAVE_CLFLUSH 1
#endif
typedef int32_t (*tsr_entry_fn)(void**, const int32_t*, int32_t, char*, int32_t);
/* the leading fields of tessera_tensor_t (tessera/abi.py) */
typedef struct { void* data; const int64_t* shape; const int64_t* strides; int32_t ndim;
                 uint8_t code; uint8_t bits; uint16_t lanes; } tsr_flush_tensor_t;

static double tsr_flush_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Evict arguments from every cache: clflush of each tensor argument's lines (coherent: every core's
   caches) where the CPU has it -- every argument, or those with only[i] set -- and a write sweep over
   `nbytes` of buf (twice the last-level cache; none when 0). */
static void tsr_flush(void** args, const int32_t* kinds, int32_t num_args, const int32_t* only,
                      volatile unsigned char* buf, int64_t nbytes) {
#ifdef TSR_HAVE_CLFLUSH
  for (int32_t i = 0; i < num_args; ++i) {
    if (kinds[i] != 0 || (only && !only[i])) continue;   /* KIND_TENSOR */
    const tsr_flush_tensor_t* t = (const tsr_flush_tensor_t*)args[i];
    int64_t n = ((int64_t)t->bits * t->lanes + 7) / 8;
    for (int32_t d = 0; d < t->ndim; ++d) n *= t->shape[d];
    const char* p = (const char*)t->data;
    for (int64_t off = 0; off < n; off += 64) _mm_clflush(p + off);
  }
  _mm_mfence();
#endif
  for (int64_t i = 0; i < nbytes; i += 64) buf[i] += 1;
}

/* TVM's time evaluator, optionally with its cache flush: a warm-up call (unless the caller has just
   made one), then `repeat` measurements of `number` calls each; without a flush, `number` grows until
   a measurement lasts min_repeat_ms (as the module's own timer); with one (`flush` set), the caches
   are flushed before each measurement: every argument and a sweep of flush_bytes, or (`only` given)
   the arguments it marks alone. */
int32_t tessera_time_entry(void* entry, void** args, const int32_t* kinds, int32_t num_args, int32_t number,
                           int32_t repeat, int32_t min_repeat_ms, int32_t warmup, double* results,
                           int32_t flush, const int32_t* only, volatile unsigned char* buf, int64_t flush_bytes,
                           char* err, int32_t err_len) {
  tsr_entry_fn f = (tsr_entry_fn)entry;
  int32_t rc;
  if (warmup) {
    rc = f(args, kinds, num_args, err, err_len);
    if (rc) return rc;
  }
  int64_t n = number;
  for (int32_t r = 0; r < repeat; ++r) {
    double elapsed;
    for (;;) {
      if (flush) tsr_flush(args, kinds, num_args, only, buf, flush_bytes);
      double t0 = tsr_flush_now();
      for (int64_t k = 0; k < n; ++k) {
        rc = f(args, kinds, num_args, err, err_len);
        if (rc) return rc;
      }
      elapsed = tsr_flush_now() - t0;
      if (flush || min_repeat_ms <= 0 || elapsed * 1e3 >= (double)min_repeat_ms || n >= ((int64_t)1 << 40)) break;
      double grow = elapsed > 0 ? (double)min_repeat_ms / (elapsed * 1e3) + 1.0 : 1e9;
      n *= grow < 2 ? 2 : grow > 1e9 ? (int64_t)1000000000 : (int64_t)grow;
    }
    results[r] = elapsed / (double)n;
  }
  return 0;
}
"""


def llc_bytes() -> int:
    """Size of the largest CPU cache (sysfs), 32 MiB when unknown."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in os.listdir(base):
            try:
                with open(os.path.join(base, d, "size")) as f:
                    text = f.read().strip()
            except OSError:
                continue
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            digits = text.rstrip("KMG")
            if digits.isdigit():
                best = max(best, int(digits) * mult)
    except OSError:
        pass
    return best or 32 << 20


class EntryTimer:
    """Times a module function from C through its checked entry (FLUSH_TIMER_SRC): with the caches
    flushed before each repeat, and/or without the warm-up call when the caller has just made one.
    Each timed call goes through the entry's argument checks (tens of nanoseconds; the module's own
    timer, used otherwise, checks once). The argument array is runtime/module.py's."""

    def __init__(self, target):
        lib = ctypes.CDLL(compile_source(FLUSH_TIMER_SRC, target, name_hint="entry_timer"))
        self._fn = lib.tessera_time_entry
        self._fn.restype = ctypes.c_int32
        self._lib = lib
        self.nbytes = 2 * llc_bytes()
        self._buf = None

    def time(self, func, module, args, number: int, repeat: int, min_repeat_ms: int = 0, flush=False,
             warmup: bool = True) -> list:
        """Seconds per call of `func` (a runtime Function of `module`) per repeat. flush: False; True
        (every argument evicted and the last-level cache swept before each repeat); or a collection
        of argument positions, those alone evicted (a model's weights, which come from memory, while
        the activations its previous node wrote stay in cache)."""
        only = None
        if flush is not True and flush is not False:
            pos = sorted({int(i) for i in flush})
            if pos and not 0 <= pos[0] <= pos[-1] < len(args):
                raise TesseraError(f"{func.name}: flush positions {pos} out of range for {len(args)} arguments")
            only = (ctypes.c_int32 * max(len(args), 1))(*[int(i in pos) for i in range(len(args))])
            flush = bool(pos)
        sweep = flush and only is None
        if sweep and self._buf is None:
            self._buf = (ctypes.c_ubyte * self.nbytes)()
        entry = next(f["entry"] for f in module.metadata["functions"] if f["name"] == func.name)
        addr = ctypes.cast(getattr(module._lib, entry), ctypes.c_void_p)
        slots, keep = func._pack(args)
        results = (ctypes.c_double * repeat)()
        err = ctypes.create_string_buffer(1024)
        rc = self._fn(addr, slots, func._kinds, len(args), int(number), int(repeat), int(min_repeat_ms),
                      int(bool(warmup)), results, int(bool(flush)), only, self._buf if sweep else None,
                      ctypes.c_int64(self.nbytes if sweep else 0), err, 1024)
        del keep
        if rc:
            raise TesseraError(f"{func.name}: {err.value.decode('utf-8', 'replace') or f'status {rc}'}")
        return list(results)


__all__ = ["Reference", "io_params", "random_array", "mismatch", "reference_folder", "EntryTimer", "llc_bytes",
           "RTOL"]
