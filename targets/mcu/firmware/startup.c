/* Minimal Cortex-M startup for QEMU's MPS2/MPS3 boards and the micro:bit: a 16-entry vector table
 * placed where the board boots (link with -Wl,--section-start=.vectors=ADDR: 0x0 on mps2-an385 / an386
 * / an500, 0x10000000 — the Secure alias of the code SRAM, the boards' reset SVTOR — on mps2-an505 and
 * mps3-an547, which boot in Secure state; on the micro:bit, whose RAM is not where its flash is,
 * targets/mcu/firmware/microbit.ld puts it at 0x0; the board table in targets/mcu/src/firmware.rs), a reset handler that copies
 * .data from flash (-DRLX_COPY_DATA), enables the FPU (and MVE) when the core has one and enters
 * newlib's rdimon crt0 (`_start`: semihosting stack/heap, C runtime init, main, exit). */
#include <stdint.h>

#ifdef RLX_OWN_CRT0
/* mps3-an547 (link with -nostartfiles -DRLX_OWN_CRT0 -DRLX_STACK_TOP=0x10080000): QEMU's semihosting
 * HEAPINFO there names the Non-secure ITCM alias (the largest plain RAM it sees), below this image at
 * the Secure alias, so newlib's crt0 would set a heap limit under `end` and every malloc (fopen's
 * FILE) would fail. This replacement keeps newlib's default limit: the heap grows from `end` towards
 * the stack, which starts at the top of the Secure ITCM (RLX_STACK_TOP, the vector table's SP). */
extern char __bss_start__[], __bss_end__[];
extern void initialise_monitor_handles(void);
extern void __libc_init_array(void);
extern int main(void);
extern void exit(int);

/* crti/crtn are not linked with -nostartfiles: newlib's init/fini arrays call these. */
void _init(void) {}
void _fini(void) {}

void _start(void) {
    for (char *p = __bss_start__; p < __bss_end__; p++) {
        *(volatile char *)p = 0;
    }
    initialise_monitor_handles();
    __libc_init_array();
    exit(main());
}
#else
extern void _start(void);
#endif

#ifndef RLX_STACK_TOP
static uint64_t boot_stack[512];
#define RLX_STACK_TOP (boot_stack + 512)
#endif

#ifdef RLX_COPY_DATA
/* Flash boards (microbit.ld): .data is linked in RAM and loaded in flash; crt0 only zeroes .bss. */
extern char __data_start__[], __data_end__[], __data_load__[];
#endif

static void reset_handler(void) {
#ifdef RLX_COPY_DATA
    for (char *d = __data_start__, *s = __data_load__; d < __data_end__; d++, s++) {
        *(volatile char *)d = *s;
    }
#endif
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    /* CPACR: full access to CP10/CP11 (the FPU; also MVE on the M55), then synchronize. */
    *(volatile uint32_t *)0xE000ED88 |= 0xFu << 20;
    __asm volatile("dsb\n\tisb");
#endif
    _start();
    for (;;) {
    }
}

static void fault_handler(void) {
    for (;;) {
    }
}

__attribute__((section(".vectors"), used)) void (*const vector_table[16])(void) = {
    (void (*)(void))(RLX_STACK_TOP), /* initial stack pointer */
    reset_handler,
    fault_handler, fault_handler, fault_handler, fault_handler, fault_handler, /* NMI, HardFault, MemManage, BusFault, UsageFault */
    0, 0, 0, 0,
    fault_handler, fault_handler, 0, /* SVCall, DebugMon, reserved */
    fault_handler, fault_handler, /* PendSV, SysTick */
};
