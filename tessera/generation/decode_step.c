/* One decoding step of a decoder language model over its KV cache (tessera.generation).

   dec_step reads the token of each batch row, runs every layer for that one position and writes
   the logits. The model is a GPT-2 (LayerNorm with bias, learned positions, GELU MLP, biases) or a
   LLaMA-style decoder (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP); cfg says
   which, with its sizes and where each weight lies. The indices CFG_*, L_* and FP_* are defined in
   front of this file by tessera/generation/engine.py, which owns the layout.

   Where the time goes: the matrix-vector products read every weight once per step, so they are
   written to stream the weights (rows [n, k] contiguous, four rows at a time against the activation
   vector of each batch row, 16 weights a row an iteration in vectors of the target's width: one
   AVX-512 register, two AVX2 ones, four SSE ones). A matrix stored as int8 (per-row scales) is
   widened to float inside the product: a quarter of the bytes read. The new key and value of each
   layer are written into the cache at slot `pos` in place; attention reads the slots
   [start[b], pos] of its row. One OpenMP team runs the whole step: each stage is a worksharing loop
   whose barrier orders it before the next. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <omp.h>

/* Vectors are the target's own width (DEC_NL float lanes: 16 with AVX-512, 8 with AVX/AVX2, 4
   otherwise): a wider generic vector is split by gcc into register pairs that it moves through the
   stack in every iteration (measured: the AVX2 float product at 0.7x the read bandwidth). A row
   block is consumed 16 weights (DEC_LANES) a row per iteration, in DEC_U native vectors each. */
#if defined(__AVX512F__)
#define DEC_NL 16
#elif defined(__AVX__)
#define DEC_NL 8
#else
#define DEC_NL 4
#endif
#define DEC_LANES 16
#define DEC_U (DEC_LANES / DEC_NL)
/* An int8 row block is read 16 bytes of each of four rows at a time, which the hardware prefetchers
   follow too late (measured: half the read bandwidth of a float row block, which reads whole lines);
   a software prefetch this far ahead of the block's linear sweep brings it to the read kernel's. */
#define DEC_PREFETCH 8192
typedef float dec_vf __attribute__((vector_size(DEC_NL * 4), aligned(4), may_alias));
typedef float dec_v8 __attribute__((vector_size(32)));
typedef float dec_v4 __attribute__((vector_size(16)));

/* DEC_NL int8 weights widened to a float vector: one sign extension and one conversion (gcc turns
   a generic __builtin_convertvector from int8 lanes into one scalar conversion a lane, which made
   the int8 step slower than the float one). */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline dec_vf dec_widen(const int8_t* p) {
  return (dec_vf)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
}
#elif defined(__AVX2__)
#include <immintrin.h>
static inline dec_vf dec_widen(const int8_t* p) {
  return (dec_vf)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)));
}
#elif defined(__SSE4_1__) && !defined(__AVX__)
#include <immintrin.h>
static inline dec_vf dec_widen(const int8_t* p) {
  int32_t w;
  memcpy(&w, p, sizeof w);
  return (dec_vf)_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(w)));
}
#else
typedef int8_t dec_vq __attribute__((vector_size(DEC_NL), aligned(1), may_alias));
typedef int32_t dec_vi __attribute__((vector_size(DEC_NL * 4)));
static inline dec_vf dec_widen(const int8_t* p) {
  return __builtin_convertvector(__builtin_convertvector(*(const dec_vq*)p, dec_vi), dec_vf);
}
#endif

/* the sum of the lanes, halving (a serial sum per row cost a quarter of an int8 row's product) */
static inline float dec_hsum(dec_vf v) {
#if DEC_NL == 16
  dec_v8 h = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
             __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  dec_v4 q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
#elif DEC_NL == 8
  dec_v4 q = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
#else
  dec_v4 q = v;
#endif
  return (q[0] + q[2]) + (q[1] + q[3]);
}

typedef int32_t dec_vi32 __attribute__((vector_size(DEC_NL * 4)));

static inline dec_vf dec_select(dec_vi32 mask, dec_vf a, dec_vf b) {   /* mask ? a : b, lane by lane */
  return (dec_vf)(((dec_vi32)a & mask) | ((dec_vi32)b & ~mask));
}

/* e^x lane by lane (Cephes' expf: x = n ln2 + r, a degree-5 polynomial of r, 2^n into the exponent
   bits; within 2 ulp of expf on [-87.3, 88.3], clamped there), so the activations and the softmax
   run at the vector width instead of one libm call an element. */
static inline dec_vf dec_vexp(dec_vf x) {
  const dec_vf zero = {0};
  x = dec_select(x < zero - 87.3f, zero - 87.3f, x);
  x = dec_select(x > zero + 88.3f, zero + 88.3f, x);
  dec_vf fx = x * 1.44269504088896341f + 0.5f;
  dec_vf fl = __builtin_convertvector(__builtin_convertvector(fx, dec_vi32), dec_vf);
  fl = dec_select(fl > fx, fl - 1.f, fl);                       /* floor */
  x = x - fl * 0.693359375f;
  x = x - fl * -2.12194440e-4f;
  dec_vf y = 1.9875691500e-4f * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * (x * x) + x + 1.f;
  const dec_vi32 n = __builtin_convertvector(fl, dec_vi32);
  return y * (dec_vf)((n + 127) << 23);
}

static inline float dec_exp1(float x) {
  const dec_vf v = {0};
  return dec_vexp(v + x)[0];
}

/* gpt2's gelu_new, u * sigmoid(2 * 0.79788456 (u + 0.044715 u^3)) = 0.5 u (1 + tanh(...)); llama's silu */
static inline dec_vf dec_gelu(dec_vf u) {
  return u / (1.f + dec_vexp(-1.5957691216057308f * (u + 0.044715f * (u * u * u))));
}

static inline dec_vf dec_silu(dec_vf u) { return u / (1.f + dec_vexp(-u)); }

typedef struct {
  const float* w;       /* float rows [n, k], or NULL when the matrix is int8 */
  const int8_t* q;      /* int8 rows [n, k], its per-row scales s */
  const float* s;
  const float* b;       /* bias [n] or NULL */
  int64_t n, k;
} dec_mat;

static const float* dec_at(const float* base, int64_t off) { return off < 0 ? 0 : base + off; }

/* entries W, Q, S, B of a matrix in the table (offsets into the float and int8 weights, -1: none) */
static dec_mat dec_matrix(const int64_t* e, const float* wf, const int8_t* wq, int64_t n, int64_t k) {
  dec_mat m;
  m.w = dec_at(wf, e[0]);
  m.q = e[1] < 0 ? 0 : wq + e[1];
  m.s = dec_at(wf, e[2]);
  m.b = dec_at(wf, e[3]);
  m.n = n;
  m.k = k;
  return m;
}

static inline dec_vf dec_load(const dec_mat* m, int64_t row, int64_t i) {
  if (m->q) return dec_widen(m->q + row * m->k + i);
  return *(const dec_vf*)(m->w + row * m->k + i);
}

static inline float dec_elem(const dec_mat* m, int64_t row, int64_t i) {
  return m->q ? (float)m->q[row * m->k + i] : m->w[row * m->k + i];
}

/* what a product does with its row's value: store it, add it to y, or store gelu_new of it (GPT-2's MLP:
   the activation in the product's epilogue saves a pass and a barrier a layer) */
#define DEC_STORE 0
#define DEC_ADD 1
#define DEC_GELU 2

static inline void dec_put(const dec_mat* m, int64_t row, float dot, float* y, int mode) {
  float v = m->s ? dot * m->s[row] : dot;
  if (m->b) v = v + m->b[row];
  if (mode == DEC_GELU) v = dec_gelu((dec_vf){0} + v)[0];
  *y = mode == DEC_ADD ? *y + v : v;
}

/* y[b, r] (+)= W[r] . x[b] (* s[r]) (+ bias[r]) for rows r0 .. r0 + 3: per row DEC_U accumulators
   of the target's width (4 DEC_U independent chains; the loops over u unroll) */
static void dec_rows4(const dec_mat* m, int64_t r0, const float* x, int64_t ldx, float* y, int64_t ldy,
                      int64_t B, int mode) {
  const int64_t k = m->k, kv = k - k % DEC_LANES;
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = x + b * ldx;
    dec_vf a0[DEC_U], a1[DEC_U], a2[DEC_U], a3[DEC_U];
    for (int u = 0; u < DEC_U; ++u) a0[u] = a1[u] = a2[u] = a3[u] = (dec_vf){0};
    int64_t i = 0;
    if (m->q) {
      const int8_t *q0 = m->q + r0 * k, *q1 = q0 + k, *q2 = q1 + k, *q3 = q2 + k;
      for (; i < kv; i += DEC_LANES) {
        /* the four rows are 4k contiguous bytes read 64 a step: fetch the line DEC_PREFETCH bytes ahead */
        __builtin_prefetch(q0 + DEC_PREFETCH + 4 * i);
        for (int u = 0; u < DEC_U; ++u) {
          const int64_t j = i + u * DEC_NL;
          const dec_vf xv = *(const dec_vf*)(xb + j);
          a0[u] += dec_widen(q0 + j) * xv;
          a1[u] += dec_widen(q1 + j) * xv;
          a2[u] += dec_widen(q2 + j) * xv;
          a3[u] += dec_widen(q3 + j) * xv;
        }
      }
    } else {
      const float *w0 = m->w + r0 * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
      for (; i < kv; i += DEC_LANES) {
        for (int u = 0; u < DEC_U; ++u) {
          const int64_t j = i + u * DEC_NL;
          const dec_vf xv = *(const dec_vf*)(xb + j);
          a0[u] += *(const dec_vf*)(w0 + j) * xv;
          a1[u] += *(const dec_vf*)(w1 + j) * xv;
          a2[u] += *(const dec_vf*)(w2 + j) * xv;
          a3[u] += *(const dec_vf*)(w3 + j) * xv;
        }
      }
    }
    for (int u = 1; u < DEC_U; ++u) {
      a0[0] += a0[u];
      a1[0] += a1[u];
      a2[0] += a2[u];
      a3[0] += a3[u];
    }
    float s[4] = {dec_hsum(a0[0]), dec_hsum(a1[0]), dec_hsum(a2[0]), dec_hsum(a3[0])};
    for (; i < k; ++i)
      for (int r = 0; r < 4; ++r) s[r] += dec_elem(m, r0 + r, i) * xb[i];
    for (int r = 0; r < 4; ++r) dec_put(m, r0 + r, s[r], y + b * ldy + r0 + r, mode);
  }
}

static void dec_row1(const dec_mat* m, int64_t r, const float* x, int64_t ldx, float* y, int64_t ldy,
                     int64_t B, int mode) {
  const int64_t k = m->k, kv = k - k % DEC_NL;
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = x + b * ldx;
    dec_vf a = {0};
    int64_t i = 0;
    for (; i < kv; i += DEC_NL) a += dec_load(m, r, i) * *(const dec_vf*)(xb + i);
    float s = dec_hsum(a);
    for (; i < k; ++i) s += dec_elem(m, r, i) * xb[i];
    dec_put(m, r, s, y + b * ldy + r, mode);
  }
}

/* y[b, :] (+)= m x[b, :] for every batch row: the rows split among the team in contiguous ranges */
static void dec_gemv(const dec_mat* m, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t B, int mode) {
  const int64_t blocks = (m->n + 3) / 4;
#pragma omp for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t r0 = blk * 4;
    if (r0 + 4 <= m->n) {
      dec_rows4(m, r0, x, ldx, y, ldy, B, mode);
    } else {
      for (int64_t r = r0; r < m->n; ++r) dec_row1(m, r, x, ldx, y, ldy, B, mode);
    }
  }
}

static float dec_dot(const float* a, const float* b, int64_t n) {
  const int64_t nv = n - n % DEC_NL;
  dec_vf acc = {0};
  int64_t i = 0;
  for (; i < nv; i += DEC_NL) acc += *(const dec_vf*)(a + i) * *(const dec_vf*)(b + i);
  float s = dec_hsum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

/* LayerNorm (gain g, bias b) or RMSNorm (b NULL, rms) of each batch row of x into y. Every thread
   computes all of it into its own y (a few thousand flops): no worksharing, so no barrier after it. */
static void dec_norm(int rms, const float* x, float* y, int64_t B, int64_t n, const float* g, const float* bias,
                     float eps) {
  for (int64_t r = 0; r < B; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    if (rms) {
      float ss = 0.f;
      for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
      const float inv = 1.f / sqrtf(ss / (float)n + eps);
      for (int64_t i = 0; i < n; ++i) yr[i] = g[i] * (xr[i] * inv);
    } else {
      float mean = 0.f, var = 0.f;
      for (int64_t i = 0; i < n; ++i) mean += xr[i];
      mean /= (float)n;
      for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const float inv = 1.f / sqrtf(var / (float)n + eps);
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mean) * inv * g[i] + bias[i];
    }
  }
}

/* rotate_half rotary embedding of one head vector v[d] at position p (inv_freq[d / 2]) */
static void dec_rope(float* v, int64_t d, int64_t p, const float* inv_freq) {
  const int64_t half = d / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float a = (float)p * inv_freq[j], c = cosf(a), s = sinf(a);
    const float x1 = v[j], x2 = v[j + half];
    v[j] = x1 * c - x2 * s;
    v[j + half] = x2 * c + x1 * s;
  }
}

void dec_step(const int64_t* cfg, const float* fpar, const float* wf, const int8_t* wq, float* cache_k,
                  float* cache_v, const int64_t* tokens, const int64_t* start, int64_t pos, float* work,
                  float* logits) {
  const int llama = cfg[CFG_ARCH] == ARCH_LLAMA;
  const int64_t L = cfg[CFG_LAYERS], Hd = cfg[CFG_HIDDEN], H = cfg[CFG_HEADS], KV = cfg[CFG_KV_HEADS],
                D = cfg[CFG_HEAD_DIM], F = cfg[CFG_FFN], V = cfg[CFG_VOCAB], MAX = cfg[CFG_MAX_LEN],
                B = cfg[CFG_BATCH];
  const int64_t nq = H * D, nqkv = (H + 2 * KV) * D, nup = llama ? 2 * F : F, rep = H / KV;
  const float eps = fpar[FP_EPS];
  const float* pos_emb = dec_at(wf, cfg[CFG_POS_EMB]);
  const float* inv_freq = dec_at(wf, cfg[CFG_ROPE]);
  float *x = work + cfg[CFG_W_X], *hs = work + cfg[CFG_W_H], *qkv = work + cfg[CFG_W_QKV],
        *att = work + cfg[CFG_W_ATT], *up = work + cfg[CFG_W_UP], *act = work + cfg[CFG_W_ACT],
        *scores = work + cfg[CFG_W_SCORES];
#pragma omp parallel num_threads(cfg[CFG_THREADS])
  {
    float* const h = hs + (int64_t)omp_get_thread_num() * B * Hd;    /* this thread's normed rows */
    /* token (and learned position) embeddings */
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      const float* e = wf + cfg[CFG_EMB] + tokens[b] * Hd;
      for (int64_t i = 0; i < Hd; ++i) x[b * Hd + i] = e[i];
      if (pos_emb)
        for (int64_t i = 0; i < Hd; ++i) x[b * Hd + i] += pos_emb[(pos - start[b]) * Hd + i];
    }
    for (int64_t l = 0; l < L; ++l) {
      const int64_t* t = cfg + cfg[CFG_LAYER0] + l * L_STRIDE;
      float* ck = cache_k + l * B * KV * MAX * D;
      float* cv = cache_v + l * B * KV * MAX * D;
      dec_norm(llama, x, h, B, Hd, dec_at(wf, t[L_N1G]), dec_at(wf, t[L_N1B]), eps);
      dec_mat m = dec_matrix(t + L_QKV, wf, wq, nqkv, Hd);
      dec_gemv(&m, h, Hd, qkv, nqkv, B, DEC_STORE);
      /* rotary embeddings; this position's keys and values into the cache at slot pos */
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < B * (H + KV); ++bh) {
        const int64_t b = bh / (H + KV), j = bh % (H + KV);
        float* v = qkv + b * nqkv + j * D;
        if (inv_freq) dec_rope(v, D, pos - start[b], inv_freq);
        if (j >= H) {
          const int64_t slot = ((b * KV + (j - H)) * MAX + pos) * D;
          memcpy(ck + slot, v, (size_t)D * sizeof(float));
          memcpy(cv + slot, v + KV * D, (size_t)D * sizeof(float));
        }
      }
      /* attention of each head over the slots [start[b], pos] of its row */
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < B * H; ++bh) {
        const int64_t b = bh / H, j = bh % H, g = j / rep;
        const float* q = qkv + b * nqkv + j * D;
        const float* kb = ck + (b * KV + g) * MAX * D;
        const float* vb = cv + (b * KV + g) * MAX * D;
        float* s = scores + bh * MAX;
        float* o = att + b * nq + j * D;
        const float scale = sqrtf((float)D);
        float mx = -INFINITY, sum = 0.f;
        for (int64_t p = start[b]; p <= pos; ++p) {
          s[p] = dec_dot(q, kb + p * D, D) / scale;
          mx = s[p] > mx ? s[p] : mx;
        }
        int64_t p = start[b];
        dec_vf vsum = {0};
        for (; p + DEC_NL <= pos + 1; p += DEC_NL) {
          const dec_vf e = dec_vexp(*(const dec_vf*)(s + p) - mx);
          *(dec_vf*)(s + p) = e;
          vsum += e;
        }
        sum = dec_hsum(vsum);
        for (; p <= pos; ++p) {
          s[p] = dec_exp1(s[p] - mx);
          sum += s[p];
        }
        for (int64_t i = 0; i < D; ++i) o[i] = 0.f;
        for (int64_t p = start[b]; p <= pos; ++p) {
          const float w = s[p] / sum;
          const float* vp = vb + p * D;
          for (int64_t i = 0; i < D; ++i) o[i] += w * vp[i];
        }
      }
      m = dec_matrix(t + L_O, wf, wq, Hd, nq);
      dec_gemv(&m, att, nq, x, Hd, B, DEC_ADD);
      dec_norm(llama, x, h, B, Hd, dec_at(wf, t[L_N2G]), dec_at(wf, t[L_N2B]), eps);
      m = dec_matrix(t + L_UP, wf, wq, nup, Hd);
      /* gpt2: gelu_new in the product's epilogue, straight into act; llama: silu(gate) * up (gate rows
         first), a pass of its own */
      dec_gemv(&m, h, Hd, llama ? up : act, nup, B, llama ? DEC_STORE : DEC_GELU);
      if (llama) {                                   /* (every thread takes the same branch) */
        const int64_t chunks = (F + DEC_NL - 1) / DEC_NL;   /* DEC_NL elements of one row a chunk */
#pragma omp for schedule(static)
        for (int64_t i = 0; i < B * chunks; ++i) {
          const int64_t b = i / chunks, c0 = i % chunks * DEC_NL;
          const float* g = up + b * nup + c0;
          float* a = act + b * F + c0;
          if (c0 + DEC_NL <= F) {
            *(dec_vf*)a = dec_silu(*(const dec_vf*)g) * *(const dec_vf*)(g + F);
          } else {
            for (int64_t c = 0; c0 + c < F; ++c) a[c] = dec_silu((dec_vf){0} + g[c])[0] * g[F + c];
          }
        }
      }
      m = dec_matrix(t + L_DOWN, wf, wq, Hd, F);
      dec_gemv(&m, act, F, x, Hd, B, DEC_ADD);
    }
    dec_norm(llama, x, h, B, Hd, dec_at(wf, cfg[CFG_NORM_G]), dec_at(wf, cfg[CFG_NORM_B]), eps);
    dec_mat head = dec_matrix(cfg + CFG_HEAD, wf, wq, V, Hd);
    dec_gemv(&head, h, Hd, logits, V, B, DEC_STORE);
  }
}
