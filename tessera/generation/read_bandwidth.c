/* A STREAM-like read kernel (tessera.generation.bandwidth): the memory read bandwidth a decoding step
   can reach at the same threads. Each thread of one OpenMP team sums its contiguous share of a float
   array, 64 floats (four cache lines) an iteration in four independent 16-lane accumulators, so
   the loads, not the adds, set the pace; the sums go to out[thread] so that nothing is elided. */
#include <stdint.h>
#include <omp.h>

typedef float rb_vf __attribute__((vector_size(64), aligned(64), may_alias));

void rb_read(const float* a, int64_t n, int64_t threads, float* out) {
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads(), blocks = n / 64;
    const int64_t lo = blocks * t / T, hi = blocks * (t + 1) / T;
    rb_vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (int64_t i = lo; i < hi; ++i) {
      const rb_vf* p = (const rb_vf*)(a + i * 64);
      a0 += p[0];
      a1 += p[1];
      a2 += p[2];
      a3 += p[3];
    }
    const rb_vf s = (a0 + a1) + (a2 + a3);
    float f = 0.f;
    for (int j = 0; j < 16; ++j) f += s[j];
    out[t] = f;
  }
}
