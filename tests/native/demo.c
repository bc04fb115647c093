/* make demo: a CNN trained on MNIST (tests/mcu/train_mnist.py, numpy, 4,000 images), compiled by
 * rlxc for this machine (build/demo/mnist.o + mnist.h), classifies the 1,000 held-out digits.
 *
 *     demo test_x.f32 test_y.i64      (raw little-endian: [1000,784] float in [0,1]; [1000] int64)
 */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "mnist.h"

static void *slurp(const char *path, size_t want) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    void *buf = malloc(want);
    if (!buf || fread(buf, 1, want, f) != want) { fprintf(stderr, "%s: expected %zu bytes\n", path, want); exit(1); }
    fclose(f);
    return buf;
}

static void show(const float *img) {
    for (int r = 2; r < 26; r += 2) {
        for (int c = 2; c < 26; c++) {
            float v = (img[r * 28 + c] + img[(r + 1) * 28 + c]) / 2;
            putchar(v > 0.6f ? '#' : v > 0.25f ? '+' : '.');
        }
        putchar('\n');
    }
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s test_x.f32 test_y.i64\n", argv[0]); return 2; }
    enum { N = 1000, PIXELS = mnist_INPUT_0_ELEMS };
    float *x = slurp(argv[1], sizeof(float) * N * PIXELS);
    int64_t *y = slurp(argv[2], sizeof(int64_t) * N);
    static _Alignas(16) unsigned char arena[mnist_ARENA_BYTES + 1];
    float logits[mnist_OUTPUT_0_ELEMS];
    int correct = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++) {
        const void *ins[] = { x + (size_t)i * PIXELS };
        void *outs[] = { logits };
        int rc = mnist_run(arena, ins, outs);
        if (rc != mnist_OK) { fprintf(stderr, "mnist_run returned %d\n", rc); return 1; }
        int best = 0;
        for (int k = 1; k < mnist_OUTPUT_0_ELEMS; k++) if (logits[k] > logits[best]) best = k;
        correct += best == y[i];
        if (i < 3) {
            show(x + (size_t)i * PIXELS);
            printf("image %d: predicted %d, label %lld\n\n", i, best, (long long)y[i]);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / N;
    printf("accuracy on %d held-out MNIST digits: %.1f%% (%d correct), %.1f us per image, arena %d bytes\n",
           N, 100.0 * correct / N, correct, us, (int)mnist_ARENA_BYTES);
    return 0;
}
