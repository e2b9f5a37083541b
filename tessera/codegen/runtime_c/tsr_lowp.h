/* Conversions of the low-precision storage types (tessera/ir/dtype.py): the float8 / float4
 * minifloats and the sub-byte integers, exactly as ml_dtypes converts them: round to nearest even,
 * no saturation (an overflow becomes inf, or NaN where the format has no inf; float4_e2m1fn has
 * neither and clamps). ONNX's saturating casts clamp before they convert. In memory every element
 * takes one byte; a sub-byte integer or float4 value sits in the byte's low bits (ml_dtypes' layout).
 * Sections are pasted into generated C by name (tessera/codegen/c_files.py). */
#include <stdint.h>
#include <math.h>
//@ tsr_minifloat_t
/* A minifloat format: field widths, exponent bias, largest finite value, and how it spells NaN and
 * infinity (kind). */
enum { TSR_IEEE,     /* inf and NaN in the top exponent, as IEEE 754 (e5m2) */
       TSR_FN,       /* no inf; NaN is every exponent and mantissa bit set (e4m3fn) */
       TSR_FNUZ,     /* no inf, no -0; NaN is the sign bit alone (e4m3fnuz, e5m2fnuz) */
       TSR_FINITE }; /* neither inf nor NaN (e2m1fn) */
typedef struct {
  int ebits, mbits, bias;
  double max;
  int kind;
} tsr_minifloat_t;
/* the formats: {ebits, mbits, bias, max, kind} */

#define TSR_FLOAT8_E4M3FN {4, 3, 7, 448.0, TSR_FN}
#define TSR_FLOAT8_E4M3FNUZ {4, 3, 8, 240.0, TSR_FNUZ}
#define TSR_FLOAT8_E5M2 {5, 2, 15, 57344.0, TSR_IEEE}
#define TSR_FLOAT8_E5M2FNUZ {5, 2, 16, 57344.0, TSR_FNUZ}
#define TSR_FLOAT4_E2M1FN {2, 1, 1, 6.0, TSR_FINITE}
//@ tsr_minifloat_encode: tsr_minifloat_t
/* x -> the bits of the nearest value of format f (ties to even). The per-type wrappers take a
 * float: like ml_dtypes, a float64 or an integer converts to float32 first. */
static inline uint8_t tsr_minifloat_encode(double x, const tsr_minifloat_t* f) {
  const int top_bit = f->ebits + f->mbits;              /* the sign bit's position */
  const uint32_t sign = signbit(x) ? 1u << top_bit : 0u;
  const uint32_t exp_ones = ((1u << f->ebits) - 1u) << f->mbits;
  if (isnan(x)) {
    switch (f->kind) {
      case TSR_IEEE: return (uint8_t)(sign | exp_ones | 1u << (f->mbits - 1));  /* quiet NaN */
      case TSR_FN: return (uint8_t)(sign | exp_ones | ((1u << f->mbits) - 1u));
      case TSR_FNUZ: return (uint8_t)(1u << top_bit);
      default: return (uint8_t)(sign ^ 1u << top_bit);  /* a zero (ml_dtypes: of the other sign) */
    }
  }
  const int emin = 1 - f->bias;                          /* exponent of the smallest normal */
  double a = fabs(x), q = a;
  if (!isinf(a)) {                                       /* a on the format's grid: spacing */
    int e;                                               /* 2^(e - mbits) in [2^e, 2^(e+1)), */
    frexp(a, &e);                                        /* the subnormal spacing below 2^emin */
    e = e - 1 < emin ? emin : e - 1;
    const double ulp = ldexp(1.0, e - f->mbits);
    q = rint(a / ulp) * ulp;                             /* rounds to nearest even */
  }
  if (q > f->max) {                                      /* overflow */
    switch (f->kind) {
      case TSR_IEEE: return (uint8_t)(sign | exp_ones);  /* inf */
      case TSR_FN: return (uint8_t)(sign | exp_ones | ((1u << f->mbits) - 1u));
      case TSR_FNUZ: return (uint8_t)(1u << top_bit);
      default: return (uint8_t)(sign | ((1u << top_bit) - 1u));  /* the largest value */
    }
  }
  if (q == 0.0) return (uint8_t)(f->kind == TSR_FNUZ ? 0u : sign);
  int e;
  frexp(q, &e);
  e -= 1;
  if (e < emin)                                          /* subnormal: exponent field 0 */
    return (uint8_t)(sign | (uint32_t)ldexp(q, f->mbits - emin));
  const uint32_t mantissa = (uint32_t)ldexp(q, f->mbits - e) - (1u << f->mbits);
  return (uint8_t)(sign | (uint32_t)(e + f->bias) << f->mbits | mantissa);
}
//@ tsr_minifloat_decode: tsr_minifloat_t
/* The value of the bits b (the low 1 + ebits + mbits of them) of format f. */
static inline float tsr_minifloat_decode(uint32_t b, const tsr_minifloat_t* f) {
  const int top_bit = f->ebits + f->mbits;
  b &= (1u << (top_bit + 1)) - 1u;
  const uint32_t e = b >> f->mbits & ((1u << f->ebits) - 1u), m = b & ((1u << f->mbits) - 1u);
  const int negative = b >> top_bit;
  const uint32_t e_top = (1u << f->ebits) - 1u, m_top = (1u << f->mbits) - 1u;
  if ((f->kind == TSR_FNUZ && b == 1u << top_bit) || (f->kind == TSR_FN && e == e_top && m == m_top)
      || (f->kind == TSR_IEEE && e == e_top && m != 0))
    return negative ? -NAN : NAN;
  if (f->kind == TSR_IEEE && e == e_top) return negative ? -INFINITY : INFINITY;
  const double v = e == 0 ? ldexp((double)m, 1 - f->bias - f->mbits)
                          : ldexp((double)((1u << f->mbits) | m), (int)e - f->bias - f->mbits);
  return (float)(negative ? -v : v);
}
//@ tsr_float8_e4m3fn_to_float: tsr_minifloat_decode
static inline float tsr_float8_e4m3fn_to_float(uint8_t b) {
  static const tsr_minifloat_t f = TSR_FLOAT8_E4M3FN;
  return tsr_minifloat_decode(b, &f);
}
//@ tsr_float_to_float8_e4m3fn: tsr_minifloat_encode
static inline uint8_t tsr_float_to_float8_e4m3fn(float x) {
  static const tsr_minifloat_t f = TSR_FLOAT8_E4M3FN;
  return tsr_minifloat_encode(x, &f);
}
//@ tsr_round_float8_e4m3fn: tsr_float8_e4m3fn_to_float tsr_float_to_float8_e4m3fn
/* x rounded to float8_e4m3fn (a value of that type computes as a float) */
static inline float tsr_round_float8_e4m3fn(float x) { return tsr_float8_e4m3fn_to_float(tsr_float_to_float8_e4m3fn(x)); }
//@ tsr_float8_e4m3fnuz_to_float: tsr_minifloat_decode
static inline float tsr_float8_e4m3fnuz_to_float(uint8_t b) {
  static const tsr_minifloat_t f = TSR_FLOAT8_E4M3FNUZ;
  return tsr_minifloat_decode(b, &f);
}
//@ tsr_float_to_float8_e4m3fnuz: tsr_minifloat_encode
static inline uint8_t tsr_float_to_float8_e4m3fnuz(float x) {
  static const tsr_minifloat_t f = TSR_FLOAT8_E4M3FNUZ;
  return tsr_minifloat_encode(x, &f);
}
//@ tsr_round_float8_e4m3fnuz: tsr_float8_e4m3fnuz_to_float tsr_float_to_float8_e4m3fnuz
/* x rounded to float8_e4m3fnuz (a value of that type computes as a float) */
static inline float tsr_round_float8_e4m3fnuz(float x) { return tsr_float8_e4m3fnuz_to_float(tsr_float_to_float8_e4m3fnuz(x)); }
//@ tsr_float8_e5m2_to_float: tsr_minifloat_decode
static inline float tsr_float8_e5m2_to_float(uint8_t b) {
  static const tsr_minifloat_t f = TSR_FLOAT8_E5M2;
  return tsr_minifloat_decode(b, &f);
}
//@ tsr_float_to_float8_e5m2: tsr_minifloat_encode
static inline uint8_t tsr_float_to_float8_e5m2(float x) {
  static const tsr_minifloat_t f = TSR_FLOAT8_E5M2;
  return tsr_minifloat_encode(x, &f);
}
//@ tsr_round_float8_e5m2: tsr_float8_e5m2_to_float tsr_float_to_float8_e5m2
/* x rounded to float8_e5m2 (a value of that type computes as a float) */
static inline float tsr_round_float8_e5m2(float x) { return tsr_float8_e5m2_to_float(tsr_float_to_float8_e5m2(x)); }
//@ tsr_float8_e5m2fnuz_to_float: tsr_minifloat_decode
static inline float tsr_float8_e5m2fnuz_to_float(uint8_t b) {
  static const tsr_minifloat_t f = TSR_FLOAT8_E5M2FNUZ;
  return tsr_minifloat_decode(b, &f);
}
//@ tsr_float_to_float8_e5m2fnuz: tsr_minifloat_encode
static inline uint8_t tsr_float_to_float8_e5m2fnuz(float x) {
  static const tsr_minifloat_t f = TSR_FLOAT8_E5M2FNUZ;
  return tsr_minifloat_encode(x, &f);
}
//@ tsr_round_float8_e5m2fnuz: tsr_float8_e5m2fnuz_to_float tsr_float_to_float8_e5m2fnuz
/* x rounded to float8_e5m2fnuz (a value of that type computes as a float) */
static inline float tsr_round_float8_e5m2fnuz(float x) { return tsr_float8_e5m2fnuz_to_float(tsr_float_to_float8_e5m2fnuz(x)); }
//@ tsr_float4_e2m1fn_to_float: tsr_minifloat_decode
static inline float tsr_float4_e2m1fn_to_float(uint8_t b) {
  static const tsr_minifloat_t f = TSR_FLOAT4_E2M1FN;
  return tsr_minifloat_decode(b, &f);
}
//@ tsr_float_to_float4_e2m1fn: tsr_minifloat_encode
static inline uint8_t tsr_float_to_float4_e2m1fn(float x) {
  static const tsr_minifloat_t f = TSR_FLOAT4_E2M1FN;
  return tsr_minifloat_encode(x, &f);
}
//@ tsr_round_float4_e2m1fn: tsr_float4_e2m1fn_to_float tsr_float_to_float4_e2m1fn
/* x rounded to float4_e2m1fn (a value of that type computes as a float) */
static inline float tsr_round_float4_e2m1fn(float x) { return tsr_float4_e2m1fn_to_float(tsr_float_to_float4_e2m1fn(x)); }
//@ tsr_int4_value
/* The sub-byte integers: the value in a byte's low bits (sign-extended for int4/int2), and an
 * integer wrapped to the type (its low bits, as numpy and ml_dtypes wrap) */
static inline int8_t tsr_int4_value(uint8_t b) { return (int8_t)((b & 0xF) ^ 0x8) - 0x8; }
//@ tsr_wrap_int4: tsr_int4_value
static inline int8_t tsr_wrap_int4(int64_t v) { return tsr_int4_value((uint8_t)v); }
//@ tsr_uint4_value
static inline uint8_t tsr_uint4_value(uint8_t b) { return b & 0xF; }
//@ tsr_wrap_uint4
static inline uint8_t tsr_wrap_uint4(int64_t v) { return (uint8_t)(v & 0xF); }
//@ tsr_int2_value
static inline int8_t tsr_int2_value(uint8_t b) { return (int8_t)((b & 0x3) ^ 0x2) - 0x2; }
//@ tsr_wrap_int2: tsr_int2_value
static inline int8_t tsr_wrap_int2(int64_t v) { return tsr_int2_value((uint8_t)v); }
//@ tsr_uint2_value
static inline uint8_t tsr_uint2_value(uint8_t b) { return b & 0x3; }
//@ tsr_wrap_uint2
static inline uint8_t tsr_wrap_uint2(int64_t v) { return (uint8_t)(v & 0x3); }
