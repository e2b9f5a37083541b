/* The C helpers of tessera's ABI entry points (tessera/codegen/c_entry.py): argument checking for
 * `tessera_call_NAME`, the clock of `tessera_time_NAME`. The code generator pastes the sections a
 * translation unit uses into it (so a compiled library needs no file of tessera's); each section starts
 * at a `//@ name: dependencies` line, and what comes before the first section (these includes) is not
 * pasted. This file compiles on its own: tests/codegen/test_codegen_c_files.py checks it does. */
#include "tsr_includes.h"
#include "tsr_abi.h"

//@ TSR_TRY
/* argument checking for the entry functions */
#define TSR_TRY(call) do { int32_t tsr_s = (call); if (tsr_s != 0) return tsr_s; } while (0)

//@ tsr_kind_name
static const char* tsr_kind_name(int32_t kind) {
  return kind == 0 ? "a tensor" : kind == 1 ? "an int scalar" : kind == 2 ? "a float scalar" : "an unknown kind";
}

//@ tsr_dtype_name
static void tsr_dtype_name(char* buf, size_t n, const tessera_tensor_t* t) {
  static const char* codes[] = {"int", "uint", "float", "code3", "bfloat", "code5", "bool"};
  const char* code = t->code < 7 ? codes[t->code] : "code?";
  if (t->code == 6 && (t->bits == 8 || t->bits == 1)) snprintf(buf, n, "bool");
  else snprintf(buf, n, "%s%d", code, (int)t->bits);
  if (t->lanes != 1) snprintf(buf + strlen(buf), n - strlen(buf), "x%d", (int)t->lanes);
}

//@ tsr_get_tensor: tsr_kind_name tsr_dtype_name
static int32_t tsr_get_tensor(void** args, const int32_t* kinds, int32_t i, const char* name,
                              int32_t ndim, uint8_t code, uint8_t bits, const char* dtype,
                              const tessera_tensor_t** out, char* err, int32_t err_len) {
  if (kinds[i] != 0) {
    snprintf(err, err_len, "argument %d (%s): expected a tensor, got %s", (int)i, name, tsr_kind_name(kinds[i]));
    return 2;
  }
  const tessera_tensor_t* t = (const tessera_tensor_t*)args[i];
  if (t == NULL) {
    snprintf(err, err_len, "argument %d (%s): expected a tensor, got NULL", (int)i, name);
    return 2;
  }
  if (t->ndim != ndim) {
    snprintf(err, err_len, "argument %d (%s): expected %d dimensions, got %d", (int)i, name, (int)ndim, (int)t->ndim);
    return 3;
  }
  int bool_bits = code == 6 && (t->bits == 8 || t->bits == 1);
  if (t->code != code || (t->bits != bits && !bool_bits) || t->lanes != 1) {
    char got[32];
    tsr_dtype_name(got, sizeof(got), t);
    snprintf(err, err_len, "argument %d (%s): expected %s, got %s", (int)i, name, dtype, got);
    return 2;
  }
  *out = t;
  return 0;
}

//@ tsr_get_int: tsr_kind_name
static int32_t tsr_get_int(void** args, const int32_t* kinds, int32_t i, const char* name,
                           int64_t lo, int64_t hi, const char* dtype, int64_t* out, char* err, int32_t err_len) {
  if (kinds[i] != 1) {
    snprintf(err, err_len, "argument %d (%s): expected an int scalar (%s), got %s", (int)i, name, dtype, tsr_kind_name(kinds[i]));
    return 2;
  }
  int64_t v = *(const int64_t*)args[i];
  if (v < lo || v > hi) {
    snprintf(err, err_len, "argument %d (%s): value %lld does not fit %s", (int)i, name, (long long)v, dtype);
    return 2;
  }
  *out = v;
  return 0;
}

//@ tsr_get_float: tsr_kind_name
static int32_t tsr_get_float(void** args, const int32_t* kinds, int32_t i, const char* name,
                             const char* dtype, double* out, char* err, int32_t err_len) {
  if (kinds[i] == 2) *out = *(const double*)args[i];
  else if (kinds[i] == 1) *out = (double)*(const int64_t*)args[i];
  else {
    snprintf(err, err_len, "argument %d (%s): expected a float scalar (%s), got %s", (int)i, name, dtype, tsr_kind_name(kinds[i]));
    return 2;
  }
  return 0;
}

//@ tsr_stride
/* effective stride of dimension d in elements (compact row-major when strides is NULL) */
static int64_t tsr_stride(const tessera_tensor_t* t, int32_t d) {
  if (t->strides != NULL) return t->strides[d];
  int64_t s = 1;
  for (int32_t k = t->ndim - 1; k > d; --k) s *= t->shape[k];
  return s;
}

//@ tsr_expect
/* actual == expected, or an error naming the argument, the dimension and where expected came from */
static int32_t tsr_expect(int64_t actual, int64_t expected, int32_t status, int32_t i, const char* name,
                          int32_t d, const char* what, const char* expected_text, const char* source,
                          char* err, int32_t err_len) {
  if (actual == expected) return 0;
  if (source != NULL)
    snprintf(err, err_len, "argument %d (%s): dimension %d has %s %lld but %s = %lld from %s", (int)i, name,
             (int)d, what, (long long)actual, expected_text, (long long)expected, source);
  else if (expected_text != NULL)
    snprintf(err, err_len, "argument %d (%s): dimension %d has %s %lld, expected %s = %lld", (int)i, name,
             (int)d, what, (long long)actual, expected_text, (long long)expected);
  else
    snprintf(err, err_len, "argument %d (%s): dimension %d has %s %lld, expected %lld", (int)i, name, (int)d,
             what, (long long)actual, (long long)expected);
  return status;
}

//@ tsr_check_fits
static int32_t tsr_check_fits(int64_t v, int64_t lo, int64_t hi, int32_t i, const char* name, int32_t d,
                              const char* what, const char* var, const char* dtype, char* err, int32_t err_len) {
  if (v >= lo && v <= hi) return 0;
  snprintf(err, err_len, "argument %d (%s): dimension %d has %s %lld, which does not fit %s (%s)", (int)i,
           name, (int)d, what, (long long)v, var, dtype);
  return 3;
}

//@ tsr_check_compact
/* strides NULL, or those of a compact row-major array (size-1 dimensions may have any stride) */
static int32_t tsr_check_compact(const tessera_tensor_t* t, int32_t i, const char* name, char* err, int32_t err_len) {
  if (t->strides == NULL) return 0;
  int64_t expected = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] == 0) return 0;
    if (t->shape[d] != 1 && t->strides[d] != expected) {
      snprintf(err, err_len, "argument %d (%s): not compact row-major: dimension %d has stride %lld, expected %lld",
               (int)i, name, (int)d, (long long)t->strides[d], (long long)expected);
      return 4;
    }
    expected *= t->shape[d];
  }
  return 0;
}

//@ tsr_span
/* the bytes [lo, hi) the elements of a tensor argument span (lo == hi: no elements); a sub-byte
 * element takes a byte */
static void tsr_span(const tessera_tensor_t* t, uintptr_t* lo, uintptr_t* hi) {
  int64_t first = 0, last = 0, numel = 1;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->shape[d] == 0) { *lo = *hi = 0; return; }
    numel *= t->shape[d];
  }
  if (t->strides == NULL) last = numel - 1;
  else
    for (int32_t d = 0; d < t->ndim; ++d) {
      int64_t step = (t->shape[d] - 1) * t->strides[d];
      if (step < 0) first += step; else last += step;
    }
  int64_t item = t->bits < 8 ? 1 : t->bits / 8;   /* the entry took scalar elements only (lanes 1) */
  *lo = (uintptr_t)t->data + (uintptr_t)(first * item);
  *hi = (uintptr_t)t->data + (uintptr_t)((last + 1) * item);
}

//@ tsr_check_disjoint: tsr_span
/* a written argument's memory and another argument's do not overlap: the kernel's pointers are
 * restrict, so an output aliasing an input would be read after it was written */
static int32_t tsr_check_disjoint(const tessera_tensor_t* w, int32_t i, const char* wname,
                                  const tessera_tensor_t* t, int32_t j, const char* tname, char* err, int32_t err_len) {
  uintptr_t a0, a1, b0, b1;
  tsr_span(w, &a0, &a1);
  tsr_span(t, &b0, &b1);
  if (a0 == a1 || b0 == b1 || a1 <= b0 || b1 <= a0) return 0;
  snprintf(err, err_len, "argument %d (%s) is written by the function, and its memory overlaps argument %d (%s): "
           "arguments must not alias an output (pass a separate output array)", (int)i, wname, (int)j, tname);
  return 6;
}

//@ tsr_cpu_missing
/* The CPU features a library was compiled for, checked against CPUID before code that may use them
 * runs (an instruction the CPU lacks stops the process with SIGILL). A feature: where CPUID reports it
 * (leaf, subleaf, register 0-3 = eax ebx ecx edx, bit) and the XCR0 bits the OS must have enabled for
 * its registers. These functions are compiled for the baseline x86-64 (TSR_BASELINE), so that the
 * check itself runs on any x86-64 CPU whatever the library's target. */
typedef struct {
  const char* name;
  uint32_t leaf, subleaf, reg, bit;
  uint64_t xcr0;
} tsr_cpu_feature_t;

#if defined(__x86_64__) && defined(__GNUC__)
#define TSR_BASELINE __attribute__((target("arch=x86-64")))
/* libc's snprintf by its own symbol: under _FORTIFY_SOURCE (some distributions' gcc default) the name
 * snprintf is an always_inline wrapper, which gcc cannot inline into a function of another target */
extern int tsr_baseline_snprintf(char* buf, size_t n, const char* fmt, ...) __asm__("snprintf");
TSR_BASELINE static void tsr_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t r[4]) {
  __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(subleaf));
}

TSR_BASELINE static int tsr_cpu_has(const tsr_cpu_feature_t* f) {
  uint32_t r[4];
  tsr_cpuid(f->leaf & 0x80000000u, 0, r);              /* the highest leaf of the range */
  if (r[0] < f->leaf) return 0;
  tsr_cpuid(f->leaf, f->subleaf, r);
  if (!((r[f->reg] >> f->bit) & 1)) return 0;
  if (f->xcr0 == 0) return 1;
  tsr_cpuid(1, 0, r);
  if (!((r[2] >> 27) & 1)) return 0;                    /* OSXSAVE: the OS manages the registers' state */
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((((uint64_t)hi << 32) | lo) & f->xcr0) == f->xcr0;
}
#else
#define TSR_BASELINE
#define tsr_baseline_snprintf snprintf
static int tsr_cpu_has(const tsr_cpu_feature_t* f) { (void)f; return 1; }
#endif

/* 0 when this CPU has every feature of need[0..n-1]; else 1, and err (when not NULL) names the
 * missing ones and the target the library was built for */
TSR_BASELINE static int32_t tsr_cpu_missing(const tsr_cpu_feature_t* need, int32_t n, const char* target,
                                            char* err, int32_t err_len) {
  int32_t missing = 0;
  size_t len = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (tsr_cpu_has(&need[i])) continue;
    if (err != NULL && err_len > 0) {
      if (missing == 0) len = (size_t)tsr_baseline_snprintf(err, (size_t)err_len, "this library needs CPU features this CPU lacks:");
      if (len < (size_t)err_len)
        len += (size_t)tsr_baseline_snprintf(err + len, (size_t)err_len - len, "%s %s", missing ? "," : "", need[i].name);
    }
    ++missing;
  }
  if (missing && err != NULL && len < (size_t)err_len)
    tsr_baseline_snprintf(err + len, (size_t)err_len - len, " (built for target '%s'); rebuild it for this CPU", target);
  return missing != 0;
}

//@ tsr_now
static double tsr_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
