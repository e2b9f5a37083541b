/* tessera's thread pool: the OpenMP entry points gcc -fopenmp emits for tessera's kernels (`parallel
   for`, `critical`), reached through the linker's --wrap (runtime/pool.py), run on persistent worker
   threads that wait for the next parallel region by spinning (sched_yield() every few microseconds)
   for a bounded time (TESSERA_SPIN_US microseconds, clock time, not iterations) while the machine has
   a free core for each thread of a team, and otherwise sleep on a futex at once (sample(), below).

   Why not libgomp's own wait: libgomp spins GOMP_SPINCOUNT iterations of `pause` without yielding or
   looking at the machine, then sleeps. A spin short enough not to hold a core another process needs
   is too short to catch a model's next kernel where waking a thread is slow (a VM); a long one holds
   the core.

   Each thread that starts parallel regions (the "master": a Python thread running a model) has its
   own workers, made on first use and grown to the largest team it asked for; all of them take part
   in every region (those beyond its num_threads only check in), so one counter says when a region
   is over. A region started inside a region runs on the calling thread alone (as libgomp without
   nested parallelism). After fork() the child makes new workers. The library embeds no
   tessera_source string (this file is its source). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TSR_MAX_THREADS 1024

typedef struct Pool {
  _Atomic int gen;              /* bumped once per region: the workers' futex word */
  _Atomic int sleepers;         /* workers asleep (or about to be) on gen */
  _Atomic int remaining;        /* workers not yet done with the region: the master's futex word */
  _Atomic int master_asleep;
  _Atomic int stop;
  void (*fn)(void*);            /* the region, written before gen is bumped */
  void* data;
  int nthreads;                 /* the team: the master (0) and workers 1 .. nthreads - 1 */
  int nworkers;
  pthread_t threads[TSR_MAX_THREADS];
  unsigned epoch;               /* fork_epoch when made: a child of fork() has none of its workers */
} Pool;

typedef struct {
  Pool* pool;
  int id;
  int seen;                     /* gen when the worker was made: it waits for the next region */
} WorkerArg;

static __thread Pool* tls_pool;
static __thread int tls_id = 0, tls_n = 1, tls_in_team = 0;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t pool_key;
static pthread_mutex_t critical = PTHREAD_MUTEX_INITIALIZER;
static _Atomic unsigned fork_epoch;
static long long spin_ns = 200000;   /* TESSERA_SPIN_US (default 200 us) */
static int default_threads = 1;

static void futex_wait(_Atomic int* addr, int val) {
  syscall(SYS_futex, (int*)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake(_Atomic int* addr, int n) {
  syscall(SYS_futex, (int*)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Whether the pool's threads may spin: only while the machine has a free core for each thread of a
   team. A spinning thread is runnable all the time, so where other threads want the cores it runs
   only in its turn, a time slice later, while a sleeping one runs as soon as it is woken: every
   parallel region of a model would wait that long. The masters look at the number of runnable
   threads on the machine (/proc/loadavg's fourth field) at most every SAMPLE_NS; the others (all but
   this master and the pool threads spinning now), averaged over the last samples (each sample half
   the average, in 1/256ths), and a team must fit the online cores: above half a thread over, the
   threads sleep; below a quarter, they spin again (a passing kernel thread is not a busy machine,
   nor is a neighbour between two of its own parallel regions an idle one). */
#define SAMPLE_NS 5000000LL
static _Atomic int spin_ok = 1, others_avg, spinning;
static _Atomic long long sampled_at;
static int online_cpus = 1;

static void sample(long long t, int team) {
  long long prev = atomic_load(&sampled_at);
  if (t - prev < SAMPLE_NS || !atomic_compare_exchange_strong(&sampled_at, &prev, t)) return;
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return;
  buf[n] = 0;
  char* p = buf;
  for (int field = 0; field < 3 && p != NULL; field++) {
    p = strchr(p, ' ');
    if (p != NULL) p++;
  }
  if (p == NULL) return;
  int others = atoi(p) - 1 - atomic_load(&spinning);
  if (others < 0) others = 0;
  int avg = (atomic_load(&others_avg) + others * 256) / 2;    /* one master samples at a time */
  atomic_store(&others_avg, avg);
  int over = avg - (online_cpus - team) * 256;                  /* threads beyond the free cores */
  if (over > 128) atomic_store(&spin_ok, 0);
  else if (over < 64) atomic_store(&spin_ok, 1);
}

/* Spin until *w != old (want_change) or *w == old (!want_change), for at most spin_ns (yielding the
   core every few microseconds), where spinning is allowed; whether it happened. */
static int spin(_Atomic int* w, int old, int want_change) {
  if (spin_ns <= 0 || !atomic_load_explicit(&spin_ok, memory_order_relaxed)) {
    int v = atomic_load_explicit(w, memory_order_acquire);
    return (v != old) == want_change;
  }
  atomic_fetch_add(&spinning, 1);
  long long t0 = 0;
  int got = 0;
  for (unsigned i = 1;; i++) {
    int v = atomic_load_explicit(w, memory_order_acquire);
    if ((v != old) == want_change) {
      got = 1;
      break;
    }
    cpu_relax();
    if ((i & 63) == 0) {
      long long t = now_ns();
      if (t0 == 0) t0 = t;
      else if (t - t0 >= spin_ns || !atomic_load_explicit(&spin_ok, memory_order_relaxed)) break;
      sched_yield();
    }
  }
  atomic_fetch_sub(&spinning, 1);
  return got;
}

static void destroy(void* p);
static void after_fork_child(void) {   /* the child has this thread only */
  atomic_fetch_add(&fork_epoch, 1);
  tls_pool = NULL;
  atomic_store(&spinning, 0);
  pthread_mutex_init(&critical, NULL);
}

static void init(void) {
  const char* s = getenv("TESSERA_SPIN_US");
  if (s && *s) {
    char* end;
    long long us = strtoll(s, &end, 10);
    if (*end == 0 && us >= 0) spin_ns = us * 1000LL;
  }
  const char* w = getenv("OMP_WAIT_POLICY");
  if (w && (strcmp(w, "passive") == 0 || strcmp(w, "PASSIVE") == 0)) spin_ns = 0;
  int n = 0;
  const char* e = getenv("OMP_NUM_THREADS");
  if (e && *e) n = atoi(e);
  if (n <= 0) {
    cpu_set_t set;
    n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  }
  default_threads = n < 1 ? 1 : n > TSR_MAX_THREADS ? TSR_MAX_THREADS : n;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  online_cpus = cpus < 1 ? 1 : (int)cpus;
  pthread_key_create(&pool_key, destroy);
  pthread_atfork(NULL, NULL, after_fork_child);
}

static void* worker(void* arg) {
  WorkerArg a = *(WorkerArg*)arg;
  free(arg);
  Pool* p = a.pool;
  int seen = a.seen;
  tls_in_team = 1;
  for (;;) {
    if (!spin(&p->gen, seen, 1)) {
      atomic_fetch_add(&p->sleepers, 1);
      while (atomic_load(&p->gen) == seen) futex_wait(&p->gen, seen);
      atomic_fetch_sub(&p->sleepers, 1);
    }
    seen = atomic_load(&p->gen);
    if (atomic_load(&p->stop)) return NULL;
    if (a.id < p->nthreads) {
      tls_id = a.id;
      tls_n = p->nthreads;
      p->fn(p->data);
      tls_id = 0;
      tls_n = 1;
    }
    if (atomic_fetch_sub(&p->remaining, 1) == 1 && atomic_load(&p->master_asleep)) futex_wake(&p->remaining, 1);
  }
}

/* start region: every worker runs it (or checks in) */
static void start(Pool* p) {
  atomic_store(&p->remaining, p->nworkers);
  atomic_fetch_add(&p->gen, 1);
  if (atomic_load(&p->sleepers) > 0) futex_wake(&p->gen, INT_MAX);
}

static void wait_done(Pool* p) {
  if (spin(&p->remaining, 0, 0)) return;
  for (;;) {
    int r = atomic_load(&p->remaining);
    if (r == 0) break;
    atomic_store(&p->master_asleep, 1);
    r = atomic_load(&p->remaining);
    if (r != 0) futex_wait(&p->remaining, r);
    atomic_store(&p->master_asleep, 0);
  }
}

static void destroy(void* arg) {   /* the master thread ends: its workers end with it */
  Pool* p = arg;
  if (p == NULL || p->epoch != atomic_load(&fork_epoch)) return;
  atomic_store(&p->stop, 1);
  p->nthreads = 0;
  start(p);
  for (int i = 0; i < p->nworkers; i++) pthread_join(p->threads[i], NULL);
  free(p);
}

/* this thread's pool with at least `workers` workers; NULL where no thread can be made */
static Pool* get_pool(int workers) {
  Pool* p = tls_pool;
  if (p != NULL && p->epoch != atomic_load(&fork_epoch)) p = NULL;   /* made before fork(): abandoned */
  if (p == NULL) {
    p = calloc(1, sizeof(Pool));
    if (p == NULL) return NULL;
    p->epoch = atomic_load(&fork_epoch);
    tls_pool = p;
    pthread_setspecific(pool_key, p);
  }
  if (p->nworkers < workers) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* signals go to the program's own threads */
    while (p->nworkers < workers) {
      WorkerArg* a = malloc(sizeof(WorkerArg));
      if (a == NULL) break;
      a->pool = p;
      a->id = p->nworkers + 1;
      a->seen = atomic_load(&p->gen);
      if (pthread_create(&p->threads[p->nworkers], NULL, worker, a) != 0) {
        free(a);
        break;
      }
      p->nworkers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  return p;
}

static void run_alone(void (*fn)(void*), void* data) {
  int id = tls_id, n = tls_n, in = tls_in_team;
  tls_id = 0;
  tls_n = 1;
  tls_in_team = 1;
  fn(data);
  tls_id = id;
  tls_n = n;
  tls_in_team = in;
}

void __wrap_GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  (void)flags;
  pthread_once(&once, init);
  int n = num_threads ? (int)num_threads : default_threads;
  if (n > TSR_MAX_THREADS) n = TSR_MAX_THREADS;
  if (n <= 1 || tls_in_team) {
    run_alone(fn, data);
    return;
  }
  Pool* p = get_pool(n - 1);
  if (p == NULL || p->nworkers == 0) {
    run_alone(fn, data);
    return;
  }
  if (n > p->nworkers + 1) n = p->nworkers + 1;   /* as many as could be made */
  sample(now_ns(), n);
  p->fn = fn;
  p->data = data;
  p->nthreads = n;
  start(p);
  tls_in_team = 1;
  tls_n = n;
  fn(data);
  tls_in_team = 0;
  tls_n = 1;
  wait_done(p);
}

int __wrap_omp_get_thread_num(void) { return tls_id; }
int __wrap_omp_get_num_threads(void) { return tls_n; }
void __wrap_GOMP_critical_name_start(void** name) { (void)name; pthread_mutex_lock(&critical); }
void __wrap_GOMP_critical_name_end(void** name) { (void)name; pthread_mutex_unlock(&critical); }
void __wrap_GOMP_critical_start(void) { pthread_mutex_lock(&critical); }
void __wrap_GOMP_critical_end(void) { pthread_mutex_unlock(&critical); }

/* for runtime/pool.py: the spin in microseconds and the default team size */
long long tsr_pool_spin_us(void) { pthread_once(&once, init); return spin_ns / 1000; }
int tsr_pool_default_threads(void) { pthread_once(&once, init); return default_threads; }
