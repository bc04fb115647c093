//! A buildable firmware folder for a QEMU board beside the model sources (`rlxc compile --board`,
//! and `rlxc run --target cortex-m*`): `main.c` (runs the model over every input in `images.bin`,
//! read over semihosting, writes `outputs.bin`; with `-DRLX_SYSTICK` counts SysTick ticks),
//! `startup.c` (vector table, reset handler, FPU enable, newlib's rdimon crt0), the board's linker
//! script where it needs one, and a `Makefile` with the board's gcc and link flags. The C files live
//! in `targets/mcu/firmware/`, once.

use crate::Core;

const MAIN_C: &str = include_str!("../firmware/main.c");
const STARTUP_C: &str = include_str!("../firmware/startup.c");
const MICROBIT_LD: &str = include_str!("../firmware/microbit.ld");

/// One QEMU board: the core it has, the machine, and what the link needs there (where the vector
/// table goes; see startup.c).
#[derive(Clone, Copy, Debug)]
pub struct Board {
    pub name: &'static str,
    pub core: Core,
    /// `qemu-system-arm -M` machine.
    pub machine: &'static str,
    /// Link flags (a linker script is named by its file name, in the firmware folder).
    pub link: &'static [&'static str],
    /// A linker script the board needs: `(file name, text)`.
    pub script: Option<(&'static str, &'static str)>,
    /// SysTick's processor clock in QEMU: 25 MHz on the mps2 boards of QEMU's mps2.c, 20 MHz on
    /// mps2-an505 and 32 MHz on mps3-an547 (mps2-tz.c's sysclk), 16 MHz on the micro:bit
    /// (nrf51_soc.c's HCLK); each is checked by main.c's calibration loop. Under `-icount shift=0`
    /// one instruction is 1 ns, so instructions = ticks · 10^9 / hz.
    pub systick_hz: u64,
}

/// The boards, one per core (the first board of a core is its default).
pub const BOARDS: &[Board] = &[
    // QEMU 7.2 has no Cortex-M0+ board; the micro:bit's nRF51822 is a Cortex-M0, the same ARMv6-M
    // (thumbv6m) instruction set. Flash 256 KB at 0x0 and RAM 16 KB at 0x20000000: microbit.ld puts
    // the vector table at 0x0 and .data's load image in flash (copied by startup.c), the stack at the
    // top of RAM. (The real nRF51 has no SysTick; QEMU's armv7m model always provides one.)
    Board {
        name: "microbit",
        core: Core::M0Plus,
        machine: "microbit",
        link: &["-T", "microbit.ld", "-DRLX_COPY_DATA", "-DRLX_STACK_TOP=0x20004000"],
        script: Some(("microbit.ld", MICROBIT_LD)),
        systick_hz: 16_000_000,
    },
    Board { name: "mps2-an385", core: Core::M3, machine: "mps2-an385", link: &["-Wl,--section-start=.vectors=0x0"], script: None, systick_hz: 25_000_000 },
    Board { name: "mps2-an386", core: Core::M4, machine: "mps2-an386", link: &["-Wl,--section-start=.vectors=0x0"], script: None, systick_hz: 25_000_000 },
    Board { name: "mps2-an500", core: Core::M7, machine: "mps2-an500", link: &["-Wl,--section-start=.vectors=0x0"], script: None, systick_hz: 25_000_000 },
    // TrustZone boards boot Secure from the Secure alias of the code SRAM (SVTOR 0x10000000).
    Board {
        name: "mps2-an505",
        core: Core::M33,
        machine: "mps2-an505",
        link: &["-Wl,--section-start=.vectors=0x10000000", "-Wl,-Ttext-segment=0x10010000"],
        script: None,
        systick_hz: 20_000_000,
    },
    Board {
        name: "mps3-an547",
        core: Core::M55,
        machine: "mps3-an547",
        link: &["-Wl,--section-start=.vectors=0x10000000", "-Wl,-Ttext-segment=0x10010000", "-nostartfiles", "-DRLX_OWN_CRT0", "-DRLX_STACK_TOP=0x10080000"],
        script: None,
        systick_hz: 32_000_000,
    },
];

impl Board {
    /// The board named `name`.
    pub fn named(name: &str) -> Option<&'static Board> {
        BOARDS.iter().find(|b| b.name == name)
    }
    /// The default board of a core.
    pub fn of(core: Core) -> &'static Board {
        BOARDS.iter().find(|b| b.core == core).unwrap_or(&BOARDS[0])
    }
    /// Every board's name, for error messages.
    pub fn names() -> String {
        BOARDS.iter().map(|b| format!("{} ({})", b.name, b.core.name())).collect::<Vec<_>>().join(", ")
    }
    /// The gcc arguments that build `main.c startup.c NAME.c` into `elf` for this board, in the
    /// firmware folder (after `arm-none-eabi-gcc`; more flags may follow).
    pub fn gcc_args(&self, model: &str, systick: bool, elf: &str) -> Vec<String> {
        let mut v: Vec<String> = self.core.gcc_flags().split_whitespace().map(str::to_string).collect();
        v.extend(["-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "--specs=rdimon.specs"].map(String::from));
        if systick {
            v.push("-DRLX_SYSTICK".into());
        }
        v.push(format!("-DMODEL={model}"));
        v.push(format!("-DMODEL_H=\"{model}.h\""));
        v.extend(["-I", ".", "main.c", "startup.c"].map(String::from));
        v.push(format!("{model}.c"));
        v.extend(["-L", "."].map(String::from));
        v.extend(self.link.iter().map(|s| s.to_string()));
        v.extend(["-o".to_string(), elf.to_string()]);
        v
    }
    /// The `qemu-system-arm` arguments that run `elf` (with `-icount shift=0` when counting).
    pub fn qemu_args(&self, count: bool, elf: &str) -> Vec<String> {
        let mut v: Vec<String> = ["-M", self.machine, "-nographic", "-semihosting"].map(String::from).to_vec();
        if count {
            v.extend(["-icount", "shift=0"].map(String::from));
        }
        v.extend(["-kernel".to_string(), elf.to_string()]);
        v
    }
    /// The firmware files written beside `NAME.c` / `NAME.h`: `(file name, text)`.
    pub fn files(&self, model: &str) -> Vec<(String, String)> {
        let quote = |a: &String| if a.contains('"') { format!("'{a}'") } else { a.clone() };
        let gcc: Vec<String> = self.gcc_args(model, false, "fw.elf").iter().map(quote).collect();
        let qemu = self.qemu_args(false, "fw.elf").join(" ");
        let makefile = format!(
            "# Firmware for {model} on QEMU's {machine} ({core}), written by rlxc --board {board}.\n\
             # `make` builds fw.elf; `make run` runs it: main.c reads int8 inputs from images.bin (each\n\
             # {model}_INPUT_0_ELEMS bytes, quantized with the header's scale and zero point) over semihosting\n\
             # and writes the int8 outputs to outputs.bin. Add -DRLX_SYSTICK to count SysTick ticks.\n\
             fw.elf: main.c startup.c {model}.c {model}.h\n\
             \tarm-none-eabi-gcc {gcc}\n\n\
             run: fw.elf\n\
             \tqemu-system-arm {qemu}\n\n\
             .PHONY: run\n",
            machine = self.machine,
            core = self.core.name(),
            board = self.name,
            gcc = gcc.join(" "),
        );
        let mut v = vec![("main.c".to_string(), MAIN_C.to_string()), ("startup.c".to_string(), STARTUP_C.to_string())];
        if let Some((f, text)) = self.script {
            v.push((f.to_string(), text.to_string()));
        }
        v.push(("Makefile".to_string(), makefile));
        v
    }
}
