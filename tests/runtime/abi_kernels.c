/* Hand-written kernels that follow tessera's ABI (tessera/codegen/abi.py), for the runtime tests.
 * The tests put abi.C_HEADER where the marker below stands, so this file tracks abi.py.
 *   main(A: float32[n], B: float32[n], C: float32[n])        C = A + B
 *   axpy(X: float32[n], Y: float32[n], alpha: float32)        Y = alpha * X + Y
 *   fill(O: int64[m], value: int64)                           O[:] = value
 *   rowsum(X: float32[m, 4], Y: float32[m])                   Y = X.sum(axis=1)
 *   guarded(A: float32[n], k: int32)                          A[k] = 1; runtime error if k >= n
 *   count(O: int64[1])                                        O[0] += 1 (counts kernel runs)
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
/*TESSERA_ABI_HEADER*/

enum { OK = 0, ARG_COUNT = 1, DTYPE = 2, SHAPE = 3, STRIDE = 4, RUNTIME = 5 };
enum { K_TENSOR = 0, K_INT = 1, K_FLOAT = 2 };

#define FAIL(code, ...) do { snprintf(err, (size_t)err_len, __VA_ARGS__); return code; } while (0)

static int check_count(int32_t num_args, int32_t want, const char* fn, char* err, int32_t err_len) {
  if (num_args != want) FAIL(ARG_COUNT, "%s expects %d arguments, got %d", fn, want, num_args);
  return OK;
}

/* A compact tensor argument of the given dtype and rank. */
static int check_tensor(void** args, const int32_t* kinds, int i, const char* name, uint8_t code,
                        uint8_t bits, int32_t ndim, char* err, int32_t err_len) {
  if (kinds[i] != K_TENSOR) FAIL(DTYPE, "argument %s: expected a tensor", name);
  const tessera_tensor_t* t = (const tessera_tensor_t*)args[i];
  if (t->code != code || t->bits != bits || t->lanes != 1)
    FAIL(DTYPE, "argument %s: expected dtype code %d bits %d, got code %d bits %d", name, code, bits,
         t->code, t->bits);
  if (t->ndim != ndim) FAIL(SHAPE, "argument %s: expected rank %d, got %d", name, ndim, t->ndim);
  if (t->strides) {
    int64_t expect = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (t->shape[d] != 1 && t->strides[d] != expect)
        FAIL(STRIDE, "argument %s: must be compact row-major, dimension %d has stride %lld (want %lld)",
             name, d, (long long)t->strides[d], (long long)expect);
      expect *= t->shape[d];
    }
  }
  return OK;
}

static int check_extent(void** args, int i, const char* name, int d, int64_t want, const char* what,
                        char* err, int32_t err_len) {
  const tessera_tensor_t* t = (const tessera_tensor_t*)args[i];
  if (t->shape[d] != want)
    FAIL(SHAPE, "argument %s.shape[%d]: expected %lld (%s), got %lld", name, d, (long long)want, what,
         (long long)t->shape[d]);
  return OK;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define TRY(x) do { int rc_ = (x); if (rc_) return rc_; } while (0)
#define DATA(i, type) ((type*)((const tessera_tensor_t*)args[i])->data)
#define SHAPE_OF(i, d) (((const tessera_tensor_t*)args[i])->shape[d])

/* The timer loop shared by every function: one warm-up call, then `repeat` rounds of `number`
 * calls each (doubling `number` until a round lasts min_repeat_ms); results[r] = seconds per call. */
#define DEFINE_TIMER(NAME)                                                                         \
  int32_t tessera_time_##NAME(void** args, const int32_t* kinds, int32_t num_args, int32_t number, \
                              int32_t repeat, int32_t min_repeat_ms, double* results, char* err,   \
                              int32_t err_len) {                                                   \
    TRY(tessera_call_##NAME(args, kinds, num_args, err, err_len));                                 \
    for (int32_t r = 0; r < repeat; ++r) {                                                         \
      int64_t n = number;                                                                          \
      for (;;) {                                                                                   \
        double t0 = now_s();                                                                       \
        for (int64_t k = 0; k < n; ++k) NAME##_kernel(args);                                       \
        double dt = now_s() - t0;                                                                  \
        if (dt * 1e3 >= min_repeat_ms || n >= ((int64_t)1 << 40)) { results[r] = dt / n; break; } \
        n *= 2;                                                                                    \
      }                                                                                            \
    }                                                                                              \
    return OK;                                                                                     \
  }

/* ---- main: C = A + B ---------------------------------------------------------------------- */
static void main_kernel(void** args) {
  const float* A = DATA(0, const float); const float* B = DATA(1, const float); float* C = DATA(2, float);
  int64_t n = SHAPE_OF(0, 0);
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i];
}

int32_t tessera_call_main(void** args, const int32_t* kinds, int32_t num_args, char* err, int32_t err_len) {
  TRY(check_count(num_args, 3, "main", err, err_len));
  TRY(check_tensor(args, kinds, 0, "A", 2, 32, 1, err, err_len));
  TRY(check_tensor(args, kinds, 1, "B", 2, 32, 1, err, err_len));
  TRY(check_tensor(args, kinds, 2, "C", 2, 32, 1, err, err_len));
  int64_t n = SHAPE_OF(0, 0);
  TRY(check_extent(args, 1, "B", 0, n, "n", err, err_len));
  TRY(check_extent(args, 2, "C", 0, n, "n", err, err_len));
  main_kernel(args);
  return OK;
}
DEFINE_TIMER(main)

/* ---- axpy: Y = alpha * X + Y ---------------------------------------------------------------- */
static void axpy_kernel(void** args) {
  const float* X = DATA(0, const float); float* Y = DATA(1, float);
  float alpha = (float)*(const double*)args[2];
  int64_t n = SHAPE_OF(0, 0);
  for (int64_t i = 0; i < n; ++i) Y[i] = alpha * X[i] + Y[i];
}

int32_t tessera_call_axpy(void** args, const int32_t* kinds, int32_t num_args, char* err, int32_t err_len) {
  TRY(check_count(num_args, 3, "axpy", err, err_len));
  TRY(check_tensor(args, kinds, 0, "X", 2, 32, 1, err, err_len));
  TRY(check_tensor(args, kinds, 1, "Y", 2, 32, 1, err, err_len));
  if (kinds[2] != K_FLOAT) FAIL(DTYPE, "argument alpha: expected a float scalar");
  TRY(check_extent(args, 1, "Y", 0, SHAPE_OF(0, 0), "n", err, err_len));
  axpy_kernel(args);
  return OK;
}
DEFINE_TIMER(axpy)

/* ---- fill: O[:] = value --------------------------------------------------------------------- */
static void fill_kernel(void** args) {
  int64_t* O = DATA(0, int64_t);
  int64_t value = *(const int64_t*)args[1];
  for (int64_t i = 0; i < SHAPE_OF(0, 0); ++i) O[i] = value;
}

int32_t tessera_call_fill(void** args, const int32_t* kinds, int32_t num_args, char* err, int32_t err_len) {
  TRY(check_count(num_args, 2, "fill", err, err_len));
  TRY(check_tensor(args, kinds, 0, "O", 0, 64, 1, err, err_len));
  if (kinds[1] != K_INT) FAIL(DTYPE, "argument value: expected an int scalar");
  fill_kernel(args);
  return OK;
}
DEFINE_TIMER(fill)

/* ---- rowsum: Y = X.sum(axis=1), X is float32[m, 4] ----------------------------------------- */
static void rowsum_kernel(void** args) {
  const float* X = DATA(0, const float); float* Y = DATA(1, float);
  int64_t m = SHAPE_OF(0, 0);
  for (int64_t i = 0; i < m; ++i) Y[i] = X[i * 4] + X[i * 4 + 1] + X[i * 4 + 2] + X[i * 4 + 3];
}

int32_t tessera_call_rowsum(void** args, const int32_t* kinds, int32_t num_args, char* err, int32_t err_len) {
  TRY(check_count(num_args, 2, "rowsum", err, err_len));
  TRY(check_tensor(args, kinds, 0, "X", 2, 32, 2, err, err_len));
  TRY(check_tensor(args, kinds, 1, "Y", 2, 32, 1, err, err_len));
  TRY(check_extent(args, 0, "X", 1, 4, "4", err, err_len));
  TRY(check_extent(args, 1, "Y", 0, SHAPE_OF(0, 0), "m", err, err_len));
  rowsum_kernel(args);
  return OK;
}
DEFINE_TIMER(rowsum)

/* ---- guarded: A[k] = 1, with a run-time bound check ----------------------------------------- */
int32_t tessera_call_guarded(void** args, const int32_t* kinds, int32_t num_args, char* err, int32_t err_len) {
  TRY(check_count(num_args, 2, "guarded", err, err_len));
  TRY(check_tensor(args, kinds, 0, "A", 2, 32, 1, err, err_len));
  if (kinds[1] != K_INT) FAIL(DTYPE, "argument k: expected an int scalar");
  int64_t k = *(const int64_t*)args[1];
  if (k < 0 || k >= SHAPE_OF(0, 0)) FAIL(RUNTIME, "assertion failed: 0 <= k < n (k = %lld)", (long long)k);
  DATA(0, float)[k] = 1.0f;
  return OK;
}
static void guarded_kernel(void** args) { (void)args; }
DEFINE_TIMER(guarded)

/* ---- count: O[0] += 1, so tests can see how often the timer ran the kernel ------------------ */
static void count_kernel(void** args) { DATA(0, int64_t)[0] += 1; }

int32_t tessera_call_count(void** args, const int32_t* kinds, int32_t num_args, char* err, int32_t err_len) {
  TRY(check_count(num_args, 1, "count", err, err_len));
  TRY(check_tensor(args, kinds, 0, "O", 0, 64, 1, err, err_len));
  TRY(check_extent(args, 0, "O", 0, 1, "1", err, err_len));
  count_kernel(args);
  return OK;
}
DEFINE_TIMER(count)

const char tessera_metadata[] =
  "{\"version\": 1, \"target\": \"c\", \"functions\": ["
  "{\"name\": \"main\", \"entry\": \"tessera_call_main\", \"timer\": \"tessera_time_main\", \"params\": ["
  "  {\"name\": \"A\", \"kind\": \"tensor\", \"dtype\": \"float32\", \"shape\": [\"n\"], \"strides\": null},"
  "  {\"name\": \"B\", \"kind\": \"tensor\", \"dtype\": \"float32\", \"shape\": [\"n\"], \"strides\": null},"
  "  {\"name\": \"C\", \"kind\": \"tensor\", \"dtype\": \"float32\", \"shape\": [\"n\"], \"strides\": null}]},"
  "{\"name\": \"axpy\", \"entry\": \"tessera_call_axpy\", \"timer\": \"tessera_time_axpy\", \"params\": ["
  "  {\"name\": \"X\", \"kind\": \"tensor\", \"dtype\": \"float32\", \"shape\": [\"n\"], \"strides\": null},"
  "  {\"name\": \"Y\", \"kind\": \"tensor\", \"dtype\": \"float32\", \"shape\": [\"n\"], \"strides\": null},"
  "  {\"name\": \"alpha\", \"kind\": \"scalar\", \"dtype\": \"float32\"}]},"
  "{\"name\": \"fill\", \"entry\": \"tessera_call_fill\", \"timer\": \"tessera_time_fill\", \"params\": ["
  "  {\"name\": \"O\", \"kind\": \"tensor\", \"dtype\": \"int64\", \"shape\": [\"m\"], \"strides\": null},"
  "  {\"name\": \"value\", \"kind\": \"scalar\", \"dtype\": \"int64\"}]},"
  "{\"name\": \"rowsum\", \"entry\": \"tessera_call_rowsum\", \"timer\": \"tessera_time_rowsum\", \"params\": ["
  "  {\"name\": \"X\", \"kind\": \"tensor\", \"dtype\": \"float32\", \"shape\": [\"m\", 4], \"strides\": null},"
  "  {\"name\": \"Y\", \"kind\": \"tensor\", \"dtype\": \"float32\", \"shape\": [\"m\"], \"strides\": null}]},"
  "{\"name\": \"guarded\", \"entry\": \"tessera_call_guarded\", \"timer\": \"tessera_time_guarded\", \"params\": ["
  "  {\"name\": \"A\", \"kind\": \"tensor\", \"dtype\": \"float32\", \"shape\": [\"n\"], \"strides\": null},"
  "  {\"name\": \"k\", \"kind\": \"scalar\", \"dtype\": \"int32\"}]},"
  "{\"name\": \"count\", \"entry\": \"tessera_call_count\", \"timer\": \"tessera_time_count\", \"params\": ["
  "  {\"name\": \"O\", \"kind\": \"tensor\", \"dtype\": \"int64\", \"shape\": [1], \"strides\": null}]}"
  "]}";
