/* Firmware test driver: runs an rlxc-compiled int8 model over every image in `images.bin`
 * (INPUT_0_ELEMS int8 values each, already quantized with the header's scale and zero point), read
 * over semihosting, and writes the int8 outputs to `outputs.bin` in the same order. Prints the number
 * of images and a histogram of predicted classes. Exit code 0 on success.
 *
 * Build (MODEL is the artifact name): arm-none-eabi-gcc -mcpu=cortex-m4 -mthumb -mfloat-abi=hard
 *   -mfpu=fpv4-sp-d16 -O2 --specs=rdimon.specs -DMODEL=mlp -DMODEL_H='"mlp.h"' -I DIR
 *   main.c startup.c DIR/mlp.c -Wl,--section-start=.vectors=0x0 -o fw.elf
 *
 * -DRLX_SYSTICK: also time every run with SysTick (24-bit, processor clock) and print
 * `systick T` (the sum over all images). Under `qemu -icount shift=0` one instruction is 1 ns of
 * virtual time, so on mps2-an386 (25 MHz) T·40 is the number of instructions the model ran, on the
 * micro:bit (16 MHz) T·62.5 (QEMU does not model cycles). The clock is checked first: `systick-calib C`
 * is the ticks of a loop of 2,000,000 instructions (1,000,000 × subs + bne), 2·10^6·HZ/10^9 ± 1. */
#include <stdint.h>
#include <stdio.h>
#include MODEL_H

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define RUN CAT(MODEL, _run)
#define IN_ELEMS CAT(MODEL, _INPUT_0_ELEMS)
#define OUT_ELEMS CAT(MODEL, _OUTPUT_0_ELEMS)

static int8_t in[IN_ELEMS];
static int8_t out[OUT_ELEMS];

int main(void) {
    FILE *fi = fopen("images.bin", "rb");
    FILE *fo = fopen("outputs.bin", "wb");
    if (!fi || !fo) {
        printf("cannot open images.bin / outputs.bin\n");
        return 3;
    }
    int n = 0, hist[OUT_ELEMS] = {0};
#ifdef RLX_SYSTICK
    volatile uint32_t *syst = (volatile uint32_t *)0xE000E010; /* CSR, RVR, CVR */
    syst[1] = 0xFFFFFF;
    syst[2] = 0;
    syst[0] = 5; /* enable, processor clock, no interrupt */
    unsigned long long ticks = 0;
    uint32_t k = 1000000, c0 = syst[2];
    __asm volatile(".syntax unified\n1:\tsubs %0, %0, #1\n\tbne 1b" : "+l"(k) : : "cc");
    printf("systick-calib %lu\n", (unsigned long)((c0 - syst[2]) & 0xFFFFFF));
#endif
    while (fread(in, 1, IN_ELEMS, fi) == IN_ELEMS) {
#ifdef RLX_SYSTICK
        uint32_t t0 = syst[2];
#endif
        int rc = RUN(in, out);
#ifdef RLX_SYSTICK
        ticks += (t0 - syst[2]) & 0xFFFFFF;
#endif
        if (rc != 0) {
            printf("run failed: %d\n", rc);
            return 2;
        }
        if (fwrite(out, 1, OUT_ELEMS, fo) != OUT_ELEMS) {
            printf("write failed\n");
            return 4;
        }
        int best = 0;
        for (int j = 1; j < OUT_ELEMS; j++) {
            if (out[j] > out[best]) best = j;
        }
        hist[best]++;
        n++;
    }
    fclose(fi);
    fclose(fo);
    printf("images %d predictions", n);
    for (int j = 0; j < OUT_ELEMS; j++) printf(" %d", hist[j]);
    printf("\n");
#ifdef RLX_SYSTICK
    printf("systick %llu\n", ticks);
#endif
    return 0;
}
