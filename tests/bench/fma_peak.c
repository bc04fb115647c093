/* The core's f32 FMA peak, the ceiling for the GEMM micro-kernel (docs/ARCHITECTURE.md, *GEMM*).
 *
 *     cc -O2 -mavx512f tests/bench/fma_peak.c -o fma_peak && ./fma_peak
 *
 * A register-only loop of `vfmadd231ps` on 24 independent zmm accumulators (more than latency × ports,
 * 4 × 2, so no FMA waits on another), no loads or stores; 16 lanes × 2 flops per FMA. Prints the best of
 * 7 runs of 2·10⁸ FMAs each in GFLOP/s of the thread's CPU time (a loaded machine still lowers it: the
 * other work shares the core's caches and clock).
 */
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define FMAS24(reg)                                                                                           \
    ".irp r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23\n"                                  \
    "vfmadd231ps %%" reg "30,%%" reg "31,%%" reg "\\r\n"                                                      \
    ".endr\n"

int main(void) {
    const long iters = 200000000 / 24;
    double best = 0;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now();
        __asm__ volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n vpxord %%zmm31, %%zmm31, %%zmm31\n mov %0, %%rcx\n 1:\n" FMAS24("zmm") "dec %%rcx\n jnz 1b\n" ::"r"(iters)
                         : "rcx", "memory");
        double gf = (double)iters * 24 * 32 / (now() - t0) * 1e-9;
        if (gf > best) best = gf;
    }
    printf("zmm FMA peak: %.1f GFLOP/s (one thread, 24 accumulators)\n", best);
    return 0;
}
