/* A STREAM-like read kernel (tessera.generation.bandwidth): the memory read bandwidth a decoding step
   can reach at the same threads. Each thread of one OpenMP team sums its contiguous share of a float
   array, 64 floats (four cache lines) an iteration into independent accumulators of the target's
   vector width (a wider generic vector is moved through the stack by gcc on AVX2, which halved the
   figure), so the loads, not the adds, set the pace; the sums go to out[thread] so that nothing is
   elided. */
#include <stdint.h>
#include <omp.h>

#if defined(__AVX512F__)
#define RB_NL 16
#elif defined(__AVX__)
#define RB_NL 8
#else
#define RB_NL 4
#endif
#define RB_V (64 / RB_NL)                 /* vectors an iteration */
#define RB_A (RB_V < 8 ? RB_V : 8)        /* accumulators */
typedef float rb_vf __attribute__((vector_size(RB_NL * 4), aligned(4), may_alias));

void rb_read(const float* a, int64_t n, int64_t threads, float* out) {
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads(), blocks = n / 64;
    const int64_t lo = blocks * t / T, hi = blocks * (t + 1) / T;
    rb_vf acc[RB_A];
    for (int u = 0; u < RB_A; ++u) acc[u] = (rb_vf){0};
    for (int64_t i = lo; i < hi; ++i) {
      const rb_vf* p = (const rb_vf*)(a + i * 64);
      for (int u = 0; u < RB_V; ++u) acc[u % RB_A] += p[u];
    }
    for (int u = 1; u < RB_A; ++u) acc[0] += acc[u];
    float f = 0.f;
    for (int j = 0; j < RB_NL; ++j) f += acc[0][j];
    out[t] = f;
  }
}
