/* app.c: runs any model compiled by rlxc, written against its generated header only.
 *
 * Build (NAME is the artifact name, the prefix of every symbol in NAME.h):
 *     cc -O2 -DMODEL=NAME -I DIR tests/native/app.c DIR/NAME.o DIR/librlx_rt.a -lpthread -ldl -lm
 * (the header is included as "NAME.h"; -DMODEL_H='"other.h"' overrides that).
 *
 * Usage:
 *     app [--null-input] IN_0 … IN_{n-1} OUT_0 … OUT_{m-1}
 * Each IN_i is the raw little-endian bytes of input i (exactly NAME_INPUT_i_BYTES); each OUT_i is
 * written with the raw bytes of output i. --null-input passes NULL for input 0, to check that
 * NAME_run returns NAME_ERR_NULL_INPUT.
 *
 * Exit: 0 success; 1 bad usage or I/O; 3 NAME_run returned an error (its name is printed).
 */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef MODEL
#error "define MODEL to the artifact name, e.g. -DMODEL=cnn"
#endif

/* M(ARENA_BYTES) -> NAME_ARENA_BYTES, M(run) -> NAME_run, … */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define M(x) CAT(MODEL, x)
#define STR_(x) #x
#define STR(x) STR_(x)
/* NAME_OF(ERR_NULL_INPUT) -> "NAME_ERR_NULL_INPUT" (the macro's name, not its value). */
#define NAME_OF(x) STR(MODEL) "_" #x

#ifndef MODEL_H
#define MODEL_H STR(MODEL.h)
#endif
#include MODEL_H

/* The port tables, from the header's per-port macros (up to 8 of each). */
#if M(NUM_INPUTS) > 8 || M(NUM_OUTPUTS) > 8
#error "app.c handles at most 8 inputs and 8 outputs"
#endif
#define PORT(kind, i) {M(kind##_##i##_NAME), M(kind##_##i##_BYTES)}
struct port { const char *name; size_t bytes; };
static const struct port inputs_spec[M(NUM_INPUTS) + 1] = {
#if M(NUM_INPUTS) > 0
    PORT(INPUT, 0),
#endif
#if M(NUM_INPUTS) > 1
    PORT(INPUT, 1),
#endif
#if M(NUM_INPUTS) > 2
    PORT(INPUT, 2),
#endif
#if M(NUM_INPUTS) > 3
    PORT(INPUT, 3),
#endif
#if M(NUM_INPUTS) > 4
    PORT(INPUT, 4),
#endif
#if M(NUM_INPUTS) > 5
    PORT(INPUT, 5),
#endif
#if M(NUM_INPUTS) > 6
    PORT(INPUT, 6),
#endif
#if M(NUM_INPUTS) > 7
    PORT(INPUT, 7),
#endif
    {0, 0},
};
static const struct port outputs_spec[M(NUM_OUTPUTS) + 1] = {
#if M(NUM_OUTPUTS) > 0
    PORT(OUTPUT, 0),
#endif
#if M(NUM_OUTPUTS) > 1
    PORT(OUTPUT, 1),
#endif
#if M(NUM_OUTPUTS) > 2
    PORT(OUTPUT, 2),
#endif
#if M(NUM_OUTPUTS) > 3
    PORT(OUTPUT, 3),
#endif
#if M(NUM_OUTPUTS) > 4
    PORT(OUTPUT, 4),
#endif
#if M(NUM_OUTPUTS) > 5
    PORT(OUTPUT, 5),
#endif
#if M(NUM_OUTPUTS) > 6
    PORT(OUTPUT, 6),
#endif
#if M(NUM_OUTPUTS) > 7
    PORT(OUTPUT, 7),
#endif
    {0, 0},
};

/* The documented name of a NAME_run return code. */
static const char *error_name(int rc) {
    switch (rc) {
    case M(OK): return NAME_OF(OK);
    case M(ERR_NULL_ARENA): return NAME_OF(ERR_NULL_ARENA);
    case M(ERR_NULL_INPUTS): return NAME_OF(ERR_NULL_INPUTS);
    case M(ERR_NULL_OUTPUTS): return NAME_OF(ERR_NULL_OUTPUTS);
    case M(ERR_NULL_INPUT): return NAME_OF(ERR_NULL_INPUT);
    case M(ERR_NULL_OUTPUT): return NAME_OF(ERR_NULL_OUTPUT);
    case M(ERR_MISALIGNED_ARENA): return NAME_OF(ERR_MISALIGNED_ARENA);
    case M(ERR_NULL_WEIGHTS): return NAME_OF(ERR_NULL_WEIGHTS);
    default: return "unknown error code";
    }
}

/* 16-byte aligned, at least 16 bytes (so a 0-byte port still gets a valid pointer). */
static void *alloc16(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 16, bytes < 16 ? 16 : bytes) != 0) return NULL;
    return p;
}

static int read_exact(const char *path, void *buf, size_t bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return -1; }
    size_t got = fread(buf, 1, bytes, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != bytes || extra) {
        fprintf(stderr, "%s: expected exactly %zu bytes\n", path, bytes);
        return -1;
    }
    return 0;
}

static int write_all(const char *path, const void *buf, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return -1; }
    size_t put = fwrite(buf, 1, bytes, f);
    if (fclose(f) != 0 || put != bytes) { perror(path); return -1; }
    return 0;
}

int main(int argc, char **argv) {
    enum { NI = M(NUM_INPUTS), NO = M(NUM_OUTPUTS) };
    int null_input = 0, a = 1;
    if (a < argc && strcmp(argv[a], "--null-input") == 0) { null_input = 1; a++; }
    if (argc - a != NI + NO) {
        fprintf(stderr, "usage: %s [--null-input]", argv[0]);
        for (int i = 0; i < NI; i++) fprintf(stderr, " %s.bin", inputs_spec[i].name);
        for (int i = 0; i < NO; i++) fprintf(stderr, " OUT_%s.bin", outputs_spec[i].name);
        fprintf(stderr, "\n");
        return 1;
    }

    const void *ins[NI + 1];
    void *outs[NO + 1];
    for (int i = 0; i < NI; i++) {
        void *p = alloc16(inputs_spec[i].bytes);
        if (!p || read_exact(argv[a + i], p, inputs_spec[i].bytes) != 0) return 1;
        ins[i] = p;
    }
    for (int i = 0; i < NO; i++) {
        outs[i] = alloc16(outputs_spec[i].bytes);
        if (!outs[i]) return 1;
        memset(outs[i], 0xff, outputs_spec[i].bytes); /* NaN-filled: unwritten outputs show up */
    }
    void *arena = alloc16(M(ARENA_BYTES));
    if (!arena) { fprintf(stderr, "cannot allocate %zu arena bytes\n", (size_t)M(ARENA_BYTES)); return 1; }
    if (null_input && NI > 0) ins[0] = NULL;

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = M(run)(arena, ins, outs);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc != M(OK)) {
        fprintf(stderr, "%s returned %d (%s)\n", NAME_OF(run), rc, error_name(rc));
        return 3;
    }
    fprintf(stderr, "%s: %.3f ms\n", NAME_OF(run),
            (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    for (int i = 0; i < NO; i++)
        if (write_all(argv[a + NI + i], outs[i], outputs_spec[i].bytes) != 0) return 1;
    return 0;
}
