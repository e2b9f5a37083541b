/* Conversions of the low-precision storage types (tessera/ir/dtype.py): the float8 / float4
 * minifloats and the sub-byte integers, exactly as ml_dtypes converts them: round to nearest even,
 * no saturation (an overflow becomes inf, or NaN where the format has no inf; float4_e2m1fn has
 * neither and clamps). ONNX's saturating casts clamp before they convert. In memory every element
 * takes one byte; a sub-byte integer or float4 value sits in the byte's low bits (ml_dtypes' layout).
 * Sections are pasted into generated C by name (tessera/codegen/c_files.py). */
#include <stdint.h>
#include <string.h>
#include <math.h>
//@ tsr_minifloat_t
/* A minifloat format: field widths, exponent bias, the bits of its largest finite value, and how it
 * spells NaN and infinity (kind). */
enum { TSR_IEEE,     /* inf and NaN in the top exponent, as IEEE 754 (e5m2) */
       TSR_FN,       /* no inf; NaN is every exponent and mantissa bit set (e4m3fn) */
       TSR_FNUZ,     /* no inf, no -0; NaN is the sign bit alone (e4m3fnuz, e5m2fnuz) */
       TSR_FINITE }; /* neither inf nor NaN (e2m1fn) */
typedef struct {
  int ebits, mbits, bias;
  uint32_t max_bits;
  int kind;
} tsr_minifloat_t;
/* the formats: {ebits, mbits, bias, max_bits, kind} (largest values 448, 240, 57344, 57344, 6) */
#define TSR_FLOAT8_E4M3FN {4, 3, 7, 0x7E, TSR_FN}
#define TSR_FLOAT8_E4M3FNUZ {4, 3, 8, 0x7F, TSR_FNUZ}
#define TSR_FLOAT8_E5M2 {5, 2, 15, 0x7B, TSR_IEEE}
#define TSR_FLOAT8_E5M2FNUZ {5, 2, 16, 0x7F, TSR_FNUZ}
#define TSR_FLOAT4_E2M1FN {2, 1, 1, 0x7, TSR_FINITE}
//@ tsr_minifloat_encode: tsr_minifloat_t
/* x -> the bits of the nearest value of format f (ties to even), from x's float32 bits. As in
 * ml_dtypes, a float64 or an integer converts to float32 first (the wrappers take a float). */
static inline uint8_t tsr_minifloat_encode(float x, const tsr_minifloat_t* f) {
  const int top_bit = f->ebits + f->mbits;              /* the sign bit's position */
  const uint32_t exp_ones = ((1u << f->ebits) - 1u) << f->mbits;
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  const uint32_t sign = (u >> 31) << top_bit;
  u &= 0x7fffffffu;                                     /* |x| */
  if (u > 0x7f800000u) {                                /* NaN */
    switch (f->kind) {
      case TSR_IEEE: return (uint8_t)(sign | exp_ones | 1u << (f->mbits - 1));  /* quiet NaN */
      case TSR_FN: return (uint8_t)(sign | exp_ones | ((1u << f->mbits) - 1u));
      case TSR_FNUZ: return (uint8_t)(1u << top_bit);
      default: return (uint8_t)(sign ^ 1u << top_bit);  /* a zero (ml_dtypes: of the other sign) */
    }
  }
  const int emin = 1 - f->bias;                         /* exponent of the smallest normal */
  const int drop = 23 - f->mbits;                       /* float32 mantissa bits that go */
  uint32_t bits;                                        /* |x| rounded, in the format */
  if (u < (uint32_t)(emin + 127) << 23) {               /* below the smallest normal: count */
    float a;                                            /* multiples of 2^(emin - mbits); 2^mbits */
    memcpy(&a, &u, sizeof(a));                          /* of them is the smallest normal's bits */
    bits = (uint32_t)rintf(a * ldexpf(1.0f, f->mbits - emin));   /* rounds to nearest even */
  } else {                                              /* normal: round the mantissa to nearest */
    const uint32_t r = (u + (1u << (drop - 1)) - 1u + (u >> drop & 1u)) >> drop;   /* even, */
    bits = r - ((uint32_t)(127 - f->bias) << f->mbits);  /* then rebias the exponent */
  }
  if (bits > f->max_bits) {                             /* overflow (inf included) */
    switch (f->kind) {
      case TSR_IEEE: return (uint8_t)(sign | exp_ones); /* inf */
      case TSR_FN: return (uint8_t)(sign | exp_ones | ((1u << f->mbits) - 1u));
      case TSR_FNUZ: return (uint8_t)(1u << top_bit);
      default: return (uint8_t)(sign | f->max_bits);    /* the largest value */
    }
  }
  if (bits == 0 && f->kind == TSR_FNUZ) return 0;       /* no -0 */
  return (uint8_t)(sign | bits);
}
//@ tsr_minifloat_decode: tsr_minifloat_t
/* The value of the bits b (the low 1 + ebits + mbits of them) of format f: every value of every
 * format is a normal float32. */
static inline float tsr_minifloat_decode(uint32_t b, const tsr_minifloat_t* f) {
  const int top_bit = f->ebits + f->mbits;
  b &= (1u << (top_bit + 1)) - 1u;
  const uint32_t e = b >> f->mbits & ((1u << f->ebits) - 1u), m = b & ((1u << f->mbits) - 1u);
  const int negative = b >> top_bit;
  const uint32_t e_top = (1u << f->ebits) - 1u, m_top = (1u << f->mbits) - 1u;
  const uint32_t u = (e - f->bias + 127) << 23 | m << (23 - f->mbits);  /* normal: float32 bits */
  float normal;                                                         /* with the exponent */
  memcpy(&normal, &u, sizeof(normal));                                  /* rebiased */
  const uint32_t unit_bits = (uint32_t)(1 - f->bias - f->mbits + 127) << 23;  /* subnormal: m units */
  float unit;                                                           /* of 2^(emin - mbits) */
  memcpy(&unit, &unit_bits, sizeof(unit));
  const float subnormal = (float)m * unit;
  const int top = e == e_top;
  const int inf = (f->kind == TSR_IEEE) & top & (m == 0);
  const int nan = ((f->kind == TSR_IEEE) & top & (m != 0)) | ((f->kind == TSR_FN) & top & (m == m_top))
                  | ((f->kind == TSR_FNUZ) & (b == 1u << top_bit));
  float v = e == 0 ? subnormal : normal;            /* selects, not branches: a loop of them */
  v = inf ? INFINITY : v;                           /* vectorizes */
  v = nan ? NAN : v;
  return negative ? -v : v;
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
