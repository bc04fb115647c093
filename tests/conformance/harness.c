/* Generic runner for one compiled conformance case (see compiler/rlxc/src/conformance.rs).
 *
 *   harness ARENA_BYTES NUM_INPUTS IN_FILE... NUM_OUTPUTS OUT_FILE OUT_BYTES ...
 *
 * Reads each input from a raw little-endian file (its size is the input's byte size), calls
 * rlxmodel_run with a 64-byte aligned arena, and writes each output's OUT_BYTES bytes to OUT_FILE.
 * Exit status: 0 on success, 10 + the error code rlxmodel_run returned, 2 on usage or I/O errors.
 * The same source links unchanged for x86_64 (cc) and aarch64 (aarch64-linux-gnu-gcc -static, run
 * under qemu-aarch64), so a crash in generated code takes down only this process. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rlxmodel_run(void *arena, const void *const *inputs, void *const *outputs);

/* 64-byte aligned, at least 64 bytes (so zero-sized tensors still get a valid pointer), zeroed. */
static void *alloc64(size_t n) {
    size_t sz = (n + 63) / 64 * 64;
    if (sz == 0) sz = 64;
    void *p = aligned_alloc(64, sz);
    if (p) memset(p, 0, sz);
    return p;
}

static int fail(const char *what, const char *arg) {
    fprintf(stderr, "harness: %s %s\n", what, arg ? arg : "");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 4) return fail("usage: harness ARENA_BYTES NUM_INPUTS IN_FILE... NUM_OUTPUTS OUT_FILE OUT_BYTES ...", NULL);
    int a = 1;
    size_t arena_bytes = strtoull(argv[a++], NULL, 10);
    long nin = strtol(argv[a++], NULL, 10);
    if (nin < 0 || a + nin >= argc) return fail("bad input count", NULL);
    const void **ins = calloc((size_t)nin + 1, sizeof(void *));
    for (long i = 0; i < nin; i++) {
        const char *path = argv[a++];
        FILE *f = fopen(path, "rb");
        if (!f) return fail("cannot open input", path);
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        void *buf = alloc64((size_t)len);
        if (!buf) return fail("out of memory for", path);
        if (len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len) return fail("cannot read input", path);
        fclose(f);
        ins[i] = buf;
    }
    long nout = strtol(argv[a++], NULL, 10);
    if (nout < 0 || a + 2 * nout != argc) return fail("bad output arguments", NULL);
    void **outs = calloc((size_t)nout + 1, sizeof(void *));
    const char **out_paths = calloc((size_t)nout + 1, sizeof(char *));
    size_t *out_bytes = calloc((size_t)nout + 1, sizeof(size_t));
    for (long i = 0; i < nout; i++) {
        out_paths[i] = argv[a++];
        out_bytes[i] = strtoull(argv[a++], NULL, 10);
        outs[i] = alloc64(out_bytes[i]);
        if (!outs[i]) return fail("out of memory for", out_paths[i]);
    }
    void *arena = alloc64(arena_bytes);
    if (!arena) return fail("out of memory for the arena", NULL);
    int code = rlxmodel_run(arena, ins, outs);
    if (code != 0) {
        fprintf(stderr, "harness: rlxmodel_run returned %d\n", code);
        return 10 + code;
    }
    for (long i = 0; i < nout; i++) {
        FILE *f = fopen(out_paths[i], "wb");
        if (!f) return fail("cannot create output", out_paths[i]);
        if (out_bytes[i] > 0 && fwrite(outs[i], 1, out_bytes[i], f) != out_bytes[i]) return fail("cannot write output", out_paths[i]);
        if (fclose(f) != 0) return fail("cannot write output", out_paths[i]);
    }
    return 0;
}
