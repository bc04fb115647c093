/* Runs a CUDA artifact folder (`rlxc compile --target cuda`) through runtime-min's C API
 * (runtime-min/include/rlx_cuda.h): the C twin of cuda_run.rs. `make cuda-c-example` builds it as
 * build/cuda-c/cuda_run_c, linked against target/rt-cuda/release/librlx_rt.a.
 *
 *     cuda_run_c DIR NAME RUNS OUTDIR IN0.bin [IN1.bin ...]
 *
 * Inputs are raw little-endian tensors (numpy's `tofile`) in port order, each exactly its port's bytes;
 * one run writes OUTDIR/out0.bin, out1.bin, ... (OUTDIR created if missing), then RUNS runs (copy in,
 * one graph launch, copy out) are timed and their median printed. Exit 0; 2 on a usage error (wrong
 * arguments, input count or size); 3 when the artifact does not load (no CUDA driver, no device, a
 * missing file: the message on stderr); 1 on any other error. */
#define _POSIX_C_SOURCE 200809L

#include "rlx_cuda.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The whole file `path` into a new buffer (*len its bytes); NULL with a message on failure. */
static void *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cuda_run_c: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0) goto fail;
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) goto fail;
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf) goto fail;
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        goto fail;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
fail:
    fprintf(stderr, "cuda_run_c: cannot read %s\n", path);
    fclose(f);
    return NULL;
}

static int write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cuda_run_c: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int bad = fwrite(data, 1, len, f) != len;
    bad |= fclose(f) != 0;
    if (bad) fprintf(stderr, "cuda_run_c: cannot write %s\n", path);
    return bad ? -1 : 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: cuda_run_c DIR NAME RUNS OUTDIR IN0.bin [IN1.bin ...]\n");
        return 2;
    }
    char *end;
    errno = 0;
    unsigned long runs = strtoul(argv[3], &end, 10);
    if (errno || *end || end == argv[3] || argv[3][0] == '-') {
        fprintf(stderr, "cuda_run_c: RUNS must be a number, got %s\n", argv[3]);
        return 2;
    }
    const char *outdir = argv[4];
    size_t given = (size_t)(argc - 5);

    char err[1024];
    RlxCuda *m = rlx_cuda_load(argv[1], argv[2], err, sizeof err);
    if (!m) {
        fprintf(stderr, "cuda_run_c: %s\n", err);
        return 3;
    }

    int rc = 1;
    size_t ni = rlx_cuda_inputs(m), no = rlx_cuda_outputs(m);
    const void **ins = calloc(ni ? ni : 1, sizeof *ins);
    void **outs = calloc(no ? no : 1, sizeof *outs);
    double *ts = calloc(runs ? runs : 1, sizeof *ts);
    if (!ins || !outs || !ts) {
        fprintf(stderr, "cuda_run_c: out of memory\n");
        goto done;
    }
    if (given != ni) {
        fprintf(stderr, "cuda_run_c: %zu input files given, the model takes %zu inputs\n", given, ni);
        rc = 2;
        goto done;
    }
    for (size_t i = 0; i < ni; i++) {
        size_t len = 0;
        ins[i] = read_file(argv[5 + i], &len);
        if (!ins[i]) goto done;
        uint64_t want = rlx_cuda_input_bytes(m, i);
        if ((uint64_t)len != want) {
            fprintf(stderr, "cuda_run_c: %s has %zu bytes, input %zu of the model takes %llu\n", argv[5 + i], len, i,
                    (unsigned long long)want);
            rc = 2;
            goto done;
        }
    }
    for (size_t o = 0; o < no; o++) {
        uint64_t n = rlx_cuda_output_bytes(m, o);
        if (n > SIZE_MAX || !(outs[o] = malloc(n ? (size_t)n : 1))) {
            fprintf(stderr, "cuda_run_c: cannot allocate output %zu (%llu bytes)\n", o, (unsigned long long)n);
            goto done;
        }
    }

    if (rlx_cuda_run(m, ins, outs) != 0) {
        fprintf(stderr, "cuda_run_c: %s\n", rlx_cuda_error(m));
        goto done;
    }
    if (mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "cuda_run_c: %s: %s\n", outdir, strerror(errno));
        goto done;
    }
    for (size_t o = 0; o < no; o++) {
        size_t plen = strlen(outdir) + 32;
        char *path = malloc(plen);
        if (!path) goto done;
        snprintf(path, plen, "%s/out%zu.bin", outdir, o);
        int w = write_file(path, outs[o], (size_t)rlx_cuda_output_bytes(m, o));
        free(path);
        if (w != 0) goto done;
    }

    for (unsigned long r = 0; r < runs; r++) {
        double t = now_us();
        if (rlx_cuda_run(m, ins, outs) != 0) {
            fprintf(stderr, "cuda_run_c: %s\n", rlx_cuda_error(m));
            goto done;
        }
        ts[r] = now_us() - t;
    }
    qsort(ts, runs, sizeof *ts, cmp_double);
    printf("cuda device: %s\n", rlx_cuda_device(m));
    printf("c api: %lu runs: p50 %.1f µs\n", runs, runs ? ts[runs / 2] : 0.0);
    rc = 0;

done:
    if (ins)
        for (size_t i = 0; i < ni; i++) free((void *)ins[i]);
    if (outs)
        for (size_t o = 0; o < no; o++) free(outs[o]);
    free(ins);
    free(outs);
    free(ts);
    rlx_cuda_free(m);
    return rc;
}
