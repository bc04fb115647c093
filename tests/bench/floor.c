/* The floor under a batch-1 linear layer on this machine, for `make bench` (tests/bench/bench.py).
 *
 * floor_gemv_us(k, n, threads, passes): the time of one y = x·W over a k×n f32 matrix W, written by hand
 * the way an ideal kernel would run it: W in column panels of 64 (one per thread), four 16-wide vector
 * accumulators per panel, one FMA per 64 bytes of weights, and an ideal hand-off to a second thread (a
 * spinning worker, one store to start it, one to report back). Weights stay in the cores' L2 between
 * passes, as they do for rlxc's and ONNX Runtime's back-to-back calls, so this measures how fast a core
 * streams weights from its L2: the best a matrix-vector product over these f32 weights can do here. Returns the fastest of
 * 30 measurements (after one to warm the caches) of `passes` passes each, in microseconds per pass.
 *
 * floor_noop(a, b, c): a function with NAME_run's signature that does nothing: its ctypes call time
 * is the part of a Python-timed NAME_run that is the call itself.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef float v16 __attribute__((vector_size(64)));
enum { PANEL = 64, VECS = PANEL / 16 };

struct job {
    const float *x, *w;
    float *y;
    int k;
};

static void panel(const struct job *j, int p) {
    const float *w = j->w + (size_t)p * j->k * PANEL;
    v16 acc[VECS] = {0};
    for (int i = 0; i < j->k; i++) {
        v16 xb = (v16){0} + j->x[i];
        for (int v = 0; v < VECS; v++) {
            v16 wv;
            memcpy(&wv, w + (size_t)i * PANEL + 16 * v, sizeof wv);
            acc[v] += xb * wv;
        }
    }
    memcpy(j->y + p * PANEL, acc, sizeof acc);
}

static struct job g_job;
static int g_panels;
static _Atomic long g_start, g_done;

/* The second thread: panels [g_panels/2, g_panels) of every pass, started by g_start. */
static void *worker(void *arg) {
    (void)arg;
    long seen = 0;
    for (;;) {
        long s;
        while ((s = atomic_load_explicit(&g_start, memory_order_acquire)) == seen)
            __builtin_ia32_pause();
        seen = s;
        if (s < 0) return NULL;
        for (int p = g_panels / 2; p < g_panels; p++) panel(&g_job, p);
        atomic_store_explicit(&g_done, s, memory_order_release);
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

double floor_gemv_us(int k, int n, int threads, int passes) {
    if (k <= 0 || n <= 0 || n % PANEL != 0 || passes <= 0 || threads < 1 || threads > 2) return -1.0;
    float *w = aligned_alloc(64, (size_t)k * n * sizeof(float));
    float *x = aligned_alloc(64, ((size_t)k * sizeof(float) + 63) / 64 * 64);
    float *y = aligned_alloc(64, (size_t)n * sizeof(float));
    if (!w || !x || !y) return -1.0;
    for (size_t i = 0; i < (size_t)k * n; i++) w[i] = (float)(i % 1000) * 1e-3f;
    for (int i = 0; i < k; i++) x[i] = 1.0f;
    g_job = (struct job){x, w, y, k};
    g_panels = n / PANEL;
    int two = threads == 2 && g_panels >= 2;
    pthread_t t;
    atomic_store(&g_start, 0);
    atomic_store(&g_done, 0);
    if (two && pthread_create(&t, NULL, worker, NULL) != 0) two = 0;
    long pass = 0;
    double best = 1e30;
    for (int rep = 0; rep < 31; rep++) {
        double t0 = now();
        for (int i = 0; i < passes; i++) {
            pass++;
            if (two) {
                atomic_store_explicit(&g_start, pass, memory_order_release);
                for (int p = 0; p < g_panels / 2; p++) panel(&g_job, p);
                while (atomic_load_explicit(&g_done, memory_order_acquire) != pass) __builtin_ia32_pause();
            } else {
                for (int p = 0; p < g_panels; p++) panel(&g_job, p);
            }
        }
        double us = (now() - t0) / passes * 1e6;
        if (rep > 0 && us < best) best = us; /* the first repetition warms the caches */
    }
    if (two) {
        atomic_store(&g_start, -1);
        pthread_join(t, NULL);
    }
    volatile float sink = y[0];
    (void)sink;
    free(w);
    free(x);
    free(y);
    return best;
}

int floor_noop(void *arena, const void *const *inputs, void *const *outputs) {
    (void)arena;
    (void)inputs;
    (void)outputs;
    return 0;
}
