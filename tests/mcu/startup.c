/* Minimal Cortex-M startup for QEMU's mps2-an386 (Cortex-M4): a 16-entry vector table placed at
 * address 0 (link with -Wl,--section-start=.vectors=0x0), a reset handler that enables the FPU and
 * enters newlib's rdimon crt0 (`_start`: semihosting stack/heap, C runtime init, main, exit). */
#include <stdint.h>

extern void _start(void);

static uint64_t boot_stack[512];

static void reset_handler(void) {
    /* CPACR: full access to CP10/CP11 (the FPU), then synchronize. */
    *(volatile uint32_t *)0xE000ED88 |= 0xFu << 20;
    __asm volatile("dsb\n\tisb");
    _start();
    for (;;) {
    }
}

static void fault_handler(void) {
    for (;;) {
    }
}

__attribute__((section(".vectors"), used)) void (*const vector_table[16])(void) = {
    (void (*)(void))(boot_stack + 512), /* initial stack pointer */
    reset_handler,
    fault_handler, fault_handler, fault_handler, fault_handler, fault_handler, /* NMI, HardFault, MemManage, BusFault, UsageFault */
    0, 0, 0, 0,
    fault_handler, fault_handler, 0, /* SVCall, DebugMon, reserved */
    fault_handler, fault_handler, /* PendSV, SysTick */
};
