/* Memory read bandwidth, STREAM-like: the best of R sweeps that sum a buffer much larger than the
 * caches (the way a decode step streams its weights), split evenly over T threads.
 *   cc -O2 -march=native -pthread tests/bench/bandwidth.c -o bandwidth && ./bandwidth [THREADS] [MB]
 * Prints one JSON line: {"threads", "mb", "read_gb_s", "read_gb_s_cpu"}: bytes over wall time, and over
 * the busiest thread's CPU time (what the bandwidth is while the threads run, on a machine shared with
 * other work). tests/bench/llm.py uses it for the decode floor (weight bytes per token / read bandwidth). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }

struct job {
  const uint64_t *p;
  size_t n;
  uint64_t sum;
  double cpu_s;
};

static void *sweep(void *arg) {
  struct job *j = arg;
  double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  for (size_t i = 0; i + 8 <= j->n; i += 8) {
    s0 += j->p[i];
    s1 += j->p[i + 1];
    s2 += j->p[i + 2];
    s3 += j->p[i + 3];
    s4 += j->p[i + 4];
    s5 += j->p[i + 5];
    s6 += j->p[i + 6];
    s7 += j->p[i + 7];
  }
  j->sum = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
  j->cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  size_t mb = argc > 2 ? (size_t)atol(argv[2]) : 512;
  if (threads < 1 || threads > 64 || mb < 1) {
    fprintf(stderr, "usage: %s [THREADS 1..64] [MB >= 1]\n", argv[0]);
    return 1;
  }
  size_t n = mb * 1024 * 1024 / sizeof(uint64_t);
  uint64_t *buf = malloc(n * sizeof(uint64_t));
  if (!buf) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  memset(buf, 1, n * sizeof(uint64_t));
  pthread_t tid[64];
  struct job jobs[64];
  double best = 1e30, best_cpu = 1e30;
  uint64_t check = 0;
  for (int r = 0; r < 5; r++) {
    double t = now();
    for (int i = 0; i < threads; i++) {
      size_t per = n / threads / 8 * 8;
      jobs[i] = (struct job){buf + i * per, i == threads - 1 ? n - i * per : per, 0, 0};
      pthread_create(&tid[i], NULL, sweep, &jobs[i]);
    }
    double cpu = 0;
    for (int i = 0; i < threads; i++) {
      pthread_join(tid[i], NULL);
      check += jobs[i].sum;
      if (jobs[i].cpu_s > cpu) cpu = jobs[i].cpu_s;
    }
    t = now() - t;
    if (t < best) best = t;
    if (cpu < best_cpu) best_cpu = cpu;
  }
  double bytes = (double)(n * sizeof(uint64_t));
  printf("{\"threads\": %d, \"mb\": %zu, \"read_gb_s\": %.2f, \"read_gb_s_cpu\": %.2f, \"check\": %llu}\n", threads, mb, bytes / best / 1e9,
         bytes / best_cpu / 1e9, (unsigned long long)(check & 1));
  free(buf);
  return 0;
}
