"""Vector float32 math for the C backend: exp, log, tanh, erf and sigmoid on whole vectors.

Written in GCC vector-extension C (no intrinsics), so one template serves every lane count the
target's registers take (float32x4, x8 for AVX2, x16 for AVX-512); gcc turns the selects into
blends and the polynomials into FMAs. Each function reduces the argument's range and evaluates a
short polynomial on the reduced argument; the error bounds below are the largest measured over
tens of millions of arguments against float64 numpy rounded to float32 (tests/codegen/
test_vector_math.py re-measures them over every binade, with inf, nan, denormals and overflow):

    exp      1.05 ulp  Cody-Waite reduction x = n ln2 + r, degree-7 polynomial (Cephes), 2^n in
                       two factors so denormal results round once; exp(x > 88.72) = inf, and 0 below
                       -103.97
    log      0.85 ulp  x = m 2^e with m in [sqrt(1/2), sqrt(2)), degree-9 polynomial in m - 1
                       (Cephes); denormals scaled by 2^23 first; log(0) = -inf, log(x < 0) = nan
    tanh     1.4 ulp   |x| < 0.625: odd polynomial (Cephes); else 1 - 2 / (exp(2|x|) + 1), x's sign
    sigmoid  2.3 ulp   e = exp(-|x|): 1 / (1 + e) for x >= 0, e / (1 + e) below (no overflow, and
                       results keep their precision down into the denormals)
    erf      1.2 ulp   |x| < 0.921875: x + x R(x^2); above, 1 - exp(Q(|x|)) with Q ~ log(erfc) (both
                       polynomials fitted for this helper in float64, weighted to the ulp of erf);
                       +-1 from |x| = 3.92 on

NaN in gives NaN out (the quiet form of the input). Results may differ from glibc's scalar
functions (which are correctly rounded or nearly) by up to the bounds above.
"""
from __future__ import annotations

from string import Template

# intrinsic -> helper; the largest error in ulp (as documented above, checked by the tests)
VECTOR_MATH = {"exp": "exp", "fast_exp": "exp", "log": "log", "tanh": "tanh", "fast_tanh": "tanh",
               "erf": "erf", "fast_erf": "erf", "sigmoid": "sigmoid"}
MAX_ULP = {"exp": 1.05, "log": 0.85, "tanh": 1.4, "sigmoid": 2.3, "erf": 1.2}

# each body (a string.Template) uses $V (the float vector type), $I (the int32 vector type with
# as many lanes), $SEL (the select helper: $SEL(mask, a, b)), $EXP (the vector exp) and $NAME
_BODIES = {
    "exp": """\
/* exp(x) on every lane: n = round(x / ln2), r = x - n ln2 (ln2 in two parts: n * C1 is exact),
   exp(r) by Cephes' polynomial on |r| <= ln2/2, times 2^n built in the exponent bits as two
   factors (so results in the denormal range round once). Max error 1.05 ulp; nan stays nan. */
static inline $V $NAME($V x) {
  const $V zero = {0};
  const $I nan = x != x;
  $V xc = $SEL(x > 89.0f, zero + 89.0f, x);       /* exp(89) is inf in float32 */
  xc = $SEL(xc < -104.0f, zero - 104.0f, xc);    /* exp(-104) rounds to 0 */
  const $V t = xc * 1.44269504088896341f + 12582912.0f;  /* + 1.5 * 2^23 rounds to an integer */
  const $I n = ($I)t - 0x4B400000;
  const $V fn = t - 12582912.0f;
  $V r = xc - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  const $V z = r * r;
  $V p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  const $I n1 = n >> 1, n2 = n - n1;            /* n in [-150, 128]: each half gives a normal 2^k */
  const $V y = p * ($V)((n1 + 127) << 23) * ($V)((n2 + 127) << 23);
  return $SEL(nan, x + x, y);
}""",
    "log": """\
/* log(x) on every lane: x = m 2^e, m in [sqrt(1/2), sqrt(2)) (denormals scaled by 2^23 first),
   log(m) = f - f^2/2 + f^3 P(f) with f = m - 1 (Cephes), plus e ln2 in two parts. Max error
   0.85 ulp; log(0) = -inf, log(inf) = inf, log(x < 0) = nan, nan stays nan. */
static inline $V $NAME($V x) {
  const $V zero = {0};
  const $I tiny = x < 1.17549435e-38f;           /* denormal (or zero, or negative) */
  const $V xs = $SEL(tiny, x * 8388608.0f, x);
  const $I bits = ($I)xs;
  $I e = ((bits >> 23) & 0xff) - 126 - (tiny & 23);
  $V m = ($V)((bits & 0x007fffff) | 0x3f000000);  /* [0.5, 1) */
  const $I low = m < 0.707106781186547524f;
  e = e + low;                                  /* low is -1 where m < sqrt(1/2): m doubles */
  m = m + ($V)(($I)m & low) - 1.0f;
  const $V fe = __builtin_convertvector(e, $V);
  const $V z = m * m;
  $V p = m * 7.0376836292e-2f - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  $V y = p * m * z;
  y = y + fe * -2.12194440e-4f;
  y = y - z * 0.5f;
  $V r = m + y;
  r = r + fe * 0.693359375f;
  const $V inf = zero + __builtin_inff();
  r = $SEL(x == inf, inf, r);
  r = $SEL(x == zero, zero - __builtin_inff(), r);
  r = $SEL(x < zero, zero + __builtin_nanf(""), r);
  return $SEL(x != x, x + x, r);
}""",
    "tanh": """\
/* tanh(x) on every lane: |x| < 0.625 by Cephes' odd polynomial, else 1 - 2 / (exp(2|x|) + 1) with
   the sign of x (|x| clamped to 10: tanh rounds to 1 in float32 from 9.011 on, so tanh(+-inf) is
   +-1 exactly). Max error 1.4 ulp; nan stays nan. */
static inline $V $NAME($V x) {
  const $V zero = {0};
  const $I sign = ($I)x & ($I)(-zero);
  const $V z = ($V)(($I)x ^ sign);
  const $V x2 = x * x;
  $V p = x2 * -5.70498872745e-3f + 2.06390887954e-2f;
  p = p * x2 - 5.37397155531e-2f;
  p = p * x2 + 1.33314422036e-1f;
  p = p * x2 - 3.33332819422e-1f;
  const $V small = ($V)(($I)(p * x2 * x + x) | sign);  /* tanh(-0) = -0 */
  const $V zc = $SEL(z > 10.0f, zero + 10.0f, z);
  const $V e = $EXP(zc + zc);
  const $V big = ($V)(($I)(1.0f - 2.0f / (e + 1.0f)) | sign);
  return $SEL(z < 0.625f, small, big);
}""",
    "sigmoid": """\
/* sigmoid(x) = 1 / (1 + exp(-x)) on every lane, as e = exp(-|x|): 1 / (1 + e) for x >= 0 and
   e / (1 + e) for x < 0 (no overflow; small results keep their precision down into the
   denormals). Max error 2.3 ulp; nan stays nan. */
static inline $V $NAME($V x) {
  const $V zero = {0};
  const $I neg = x < zero;
  const $V e = $EXP(($V)(($I)x | ($I)(-zero)));  /* exp(-|x|) */
  return $SEL(neg, e, zero + 1.0f) / (1.0f + e);
}""",
    "erf": """\
/* erf(x) on every lane, z = |x|: for z < 0.921875, x + x R(x^2); above, 1 - exp(Q(z)) with
   Q ~ log(erfc(z)) (both polynomials fitted for this helper, weighted so the error is in ulp of
   erf), z clamped to 3.92 where erf is 1 in float32; x's sign. Max error 1.2 ulp; nan stays nan. */
static inline $V $NAME($V x) {
  const $V zero = {0};
  const $I sign = ($I)x & ($I)(-zero);
  $V z = ($V)(($I)x ^ sign);
  z = $SEL(z > 3.92f, zero + 3.92f, z);
  const $V x2 = x * x;
  $V r = x2 * 8.392696327e-05f - 8.148506167e-04f;
  r = r * x2 + 5.201591644e-03f;
  r = r * x2 - 2.685964666e-02f;
  r = r * x2 + 1.128370017e-01f;
  r = r * x2 - 3.761263490e-01f;
  r = r * x2 + 1.283791661e-01f;
  const $V small = x * r + x;
  $V q = z * -2.576606732e-07f - 1.789913949e-05f;
  q = q * z + 4.175393551e-04f;
  q = q * z - 4.121079110e-03f;
  q = q * z + 2.502932586e-02f;
  q = q * z - 1.081785336e-01f;
  q = q * z - 6.334168315e-01f;
  q = q * z - 1.129487991e+00f;
  q = q * z + 1.702496520e-04f;
  const $V big = ($V)(($I)(1.0f - $EXP(q)) | sign);
  return $SEL(z < 0.921875f, small, big);
}""",
}

_DEPENDS = {"tanh": ("exp",), "sigmoid": ("exp",), "erf": ("exp",)}


def helper_name(base: str, vtype: str) -> str:
    return f"tsr_v{base}_{vtype}"


def helper_sources(base: str, vtype: str, itype: str, select: str) -> list[tuple[str, str]]:
    """[(name, C source)] of the helper for `base` on vector type vtype (float32xN) and those it
    calls, dependencies first. itype: the int32xN type; select: the name of the select helper
    `select(int32xN mask, vtype a, vtype b)`."""
    out = []
    for dep in _DEPENDS.get(base, ()):
        out.extend(helper_sources(dep, vtype, itype, select))
    code = Template(_BODIES[base]).substitute(NAME=helper_name(base, vtype), V=vtype, I=itype, SEL=select,
                                              EXP=helper_name("exp", vtype))
    out.append((helper_name(base, vtype), code))
    return out
