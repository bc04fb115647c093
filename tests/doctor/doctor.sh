#!/usr/bin/env bash
# make doctor: one smoke check per external tool the tests rely on. Each check runs the tool for real
# (builds and runs a program, simulates, validates) and, when it fails, names the Debian package (or
# make target) that provides it. Exits 1 if any check failed, after running them all.
#   tests/doctor/doctor.sh [--llm] [--cuda]     (--llm: llama.cpp reference; --cuda: ptxas)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${RLX_PY:-$PWD/.venv/bin/python}
W=build/doctor
rm -rf "$W" && mkdir -p "$W"
failed=()

check() { # check NAME HOW-TO-FIX COMMAND...
    local name=$1 fix=$2
    shift 2
    local log="$W/$(echo "$name" | tr -c 'a-zA-Z0-9' _).log"
    if "$@" >"$log" 2>&1; then
        printf 'ok    %s\n' "$name"
    else
        printf 'FAIL  %s -- %s\n' "$name" "$fix"
        sed 's/^/        /' "$log" | tail -n 8
        failed+=("$name")
    fi
}

cat >"$W/hello.c" <<'C'
#include <stdio.h>
int main(void) { printf("rlxc doctor %d\n", 6 * 7); return 0; }
C

cc_host() { cc -O2 -o "$W/hello" "$W/hello.c" && "$W/hello" | grep -qx 'rlxc doctor 42'; }
# tests/gpu/emulate_cuda.py's fp16 tensor cores: gcc's _Float16, rounding 1 + 2^-11 to even (0x3c00).
gcc_f16() {
    printf '#include <stdio.h>\n#include <string.h>\nint main(void){ _Float16 h = (_Float16)1.00048828125f; unsigned short u; memcpy(&u, &h, 2); printf("%%04x\\n", u); return 0; }\n' >"$W/f16.c" &&
        gcc -O1 -o "$W/f16" "$W/f16.c" && "$W/f16" | grep -qx '3c00'
}
llvm() { llvm-config-19 --version | grep -q '^19\.' && echo 'define i32 @f() { ret i32 42 }' >"$W/f.ll" && llc-19 -mtriple=aarch64-linux-gnu -filetype=obj "$W/f.ll" -o "$W/f.o"; }
aarch64() {
    aarch64-linux-gnu-gcc -static -O2 -o "$W/hello-a64" "$W/hello.c" && qemu-aarch64 "$W/hello-a64" | grep -qx 'rlxc doctor 42'
}
cortex_m() {
    cat >"$W/fw.c" <<'C'
#include <stdio.h>
int main(void) { printf("rlxc doctor %d\n", 6 * 7); return 7; }
C
    arm-none-eabi-gcc -mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16 -O2 --specs=rdimon.specs \
        -Wl,--section-start=.vectors=0x0 -o "$W/fw.elf" "$W/fw.c" targets/mcu/firmware/startup.c || return 1
    local out rc
    out=$(timeout 60 qemu-system-arm -M mps2-an386 -nographic -semihosting -kernel "$W/fw.elf" </dev/null)
    rc=$?
    echo "$out"
    [ "$rc" = 7 ] && grep -qx 'rlxc doctor 42' <<<"$(tr -d '\r' <<<"$out")"
}
icarus() {
    cat >"$W/t.v" <<'V'
module t; reg [7:0] a; initial begin a = 8'd6 * 8'd7; if (a === 8'd42) $display("rlxc doctor 42"); $finish; end endmodule
V
    iverilog -g2005 -o "$W/t.vvp" "$W/t.v" && vvp -n "$W/t.vvp" | grep -qx 'rlxc doctor 42'
}
verilator_lint() {
    cat >"$W/m.v" <<'V'
module m(input wire [7:0] a, output wire [7:0] y); assign y = a + 8'd1; endmodule
V
    verilator --lint-only -Wall "$W/m.v"
}
yosys_synth() { yosys -q -p "read_verilog $W/m.v; synth -top m; stat" ; }
spirv() {
    cat >"$W/k.comp" <<'G'
#version 430
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer B { uint v[]; };
void main() { v[0] = 42u; }
G
    glslangValidator -V "$W/k.comp" -o "$W/k.spv" && spirv-val "$W/k.spv"
}
glslang() { glslangValidator "$W/k.comp"; }
lavapipe() { vulkaninfo --summary 2>&1 | tee /dev/stderr | grep -qi 'llvmpipe'; }
protoc_check() { protoc --version; }
# OpenMPI (the sharded artifacts' tests: mpirun -np 2/4 on loopback, as root in a container) and the
# libclang the mpi crate's bindgen step loads.
openmpi() {
    cat >"$W/mpi.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) { int r, n; MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
  int s = 0, one = 1; MPI_Allreduce(&one, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); if (r == 0) printf("rlxc doctor %d\n", 21 * s); MPI_Finalize(); return 0; }
C
    mpicc -O2 -o "$W/mpi" "$W/mpi.c" &&
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 mpirun --oversubscribe -np 2 "$W/mpi" | grep -qx 'rlxc doctor 42'
}
libclang() { ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/x86_64-linux-gnu/libclang-*.so* 2>/dev/null | grep -q .; }
venv() {
    "$PY" -c 'import numpy, onnx, onnxruntime as ort
from onnx import helper, TensorProto
g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": numpy.array([1, 20], "f4")})[0]
assert y.tolist() == [2, 40], y
print("onnx", onnx.__version__, "onnxruntime", ort.__version__)'
}
rust_targets() { rustup target list --installed | grep -qx aarch64-unknown-linux-gnu && rustup target list --installed | grep -qx thumbv7em-none-eabihf; }
fuzz_tools() { cargo +nightly --version && cargo fuzz --version; }
llama_cpp() { "$PY" -c 'import llama_cpp; print(llama_cpp.__version__)'; }
ptxas_check() {
    local ptxas
    ptxas=$("$PY" -c 'import nvidia.cuda_nvcc, os; print(os.path.join(list(nvidia.cuda_nvcc.__path__)[0], "bin", "ptxas"))') || return 1
    printf '.version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n' >"$W/k.ptx"
    "$ptxas" -arch=sm_90 "$W/k.ptx" -o "$W/k.cubin"
}

disk_space() {
    # make build + make test write about 14 GiB under target/ (the release build with its incremental cache,
    # the LLVM-free build, test artifacts): what target/ already holds counts towards it. A full disk shows up
    # later as a linker's "No space left on device" in the middle of a test; here it is named up front.
    local need_kib=$((14 * 1024 * 1024)) have_kib used_kib=0
    [ -d target ] && used_kib=$(du -sk target 2>/dev/null | cut -f1)
    have_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
    need_kib=$((need_kib - used_kib))
    [ "$need_kib" -lt $((2 * 1024 * 1024)) ] && need_kib=$((2 * 1024 * 1024))
    echo "free: $((have_kib / 1024)) MiB, needed: $((need_kib / 1024)) MiB (target/ holds $((used_kib / 1024)) MiB)"
    [ "$have_kib" -ge "$need_kib" ]
}

check "C compiler (host)" "apt-get install gcc" cc_host
check "gcc's _Float16, rounding to nearest even (fp16 CPU emulation)" "apt-get install gcc" gcc_f16
check "LLVM 19 (llvm-config-19, llc-19)" "apt-get install llvm-19 llvm-19-dev" llvm
check "protoc" "apt-get install protobuf-compiler" protoc_check
check "OpenMPI (mpicc, mpirun -np 2)" "apt-get install openmpi-bin libopenmpi-dev" openmpi
check "libclang (bindgen for the mpi crate)" "apt-get install libclang-dev" libclang
check "aarch64 static C program under qemu-aarch64" "apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user" aarch64
check "Cortex-M4 firmware under qemu-system-arm (semihosting)" "apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm" cortex_m
check "Icarus Verilog (iverilog + vvp)" "apt-get install iverilog" icarus
check "Verilator lint" "apt-get install verilator" verilator_lint
check "Yosys synthesis" "apt-get install yosys" yosys_synth
check "glslang + spirv-val" "apt-get install glslang-tools spirv-tools" spirv
check "lavapipe found by the Vulkan loader" "apt-get install mesa-vulkan-drivers libvulkan1 vulkan-tools" lavapipe
check "Rust targets aarch64 + thumbv7em" "rustup target add aarch64-unknown-linux-gnu thumbv7em-none-eabihf" rust_targets
check "disk space for the build and the tests (~14 GiB)" "free space on the file system holding the checkout" disk_space
check "venv: numpy, onnx, onnxruntime" "make venv (requirements.txt)" venv
check "cargo fuzz on nightly" "make fuzz-setup (rustup toolchain install nightly; cargo install cargo-fuzz)" fuzz_tools
for a in "$@"; do
    case $a in
        --llm) check "llama.cpp (llama-cpp-python)" "make llama-ref" llama_cpp ;;
        --cuda) check "ptxas (nvidia-cuda-nvcc-cu12)" "make venv (requirements.txt: nvidia-cuda-nvcc-cu12)" ptxas_check ;;
        *) echo "doctor: unknown option $a" >&2; exit 2 ;;
    esac
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "doctor: ${#failed[@]} check(s) failed: ${failed[*]}" >&2
    exit 1
fi
echo "doctor: every tool works"
