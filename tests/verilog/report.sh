#!/usr/bin/env bash
# Area and cycles of `rlxc compile --target verilog` for the MNIST MLP and the LeNet-style CNN at
# several --macs-per-cycle settings (the figures in docs/targets.md, "Verilog"). Run from the
# repository root after `cargo test --release -p rlxc --test verilog` has trained/cached the fixtures
# (build/mcu-test/data):
#   tests/verilog/report.sh [MACS...]        (MLP settings, default: 1 8 32; also `make verilog-report`)
#   CNN_MACS="1 16" (default) sets the CNN's; CNN_MACS= skips the CNN.
# For each setting: compile, Icarus simulation of the testbench (20 of rlxc's calibration vectors; with
# FULL=1 also the 1,000 test images the cargo test writes to build/verilog-test/mlp-p8, when MACS=8,
# and CNN_IMAGES (default 200) MNIST test images for the CNN at 16 MACs, through the cargo test),
# Yosys generic `synth` (logic cells; memories kept as $mem cells), `synth_ice40` and `synth_xilinx`.
# Writes build/verilog-report/report.md and prints it.
set -euo pipefail
RLXC=${RLXC:-./target/release/rlxc}
DATA=build/mcu-test/data
OUT=build/verilog-report
MACS=("$@")
[ ${#MACS[@]} -gt 0 ] || MACS=(1 8 32)
[ -f "$DATA/mlp.onnx" ] || { echo "no $DATA/mlp.onnx: run 'cargo test --release -p rlxc --test verilog' first" >&2; exit 1; }
mkdir -p "$OUT"
stat_cells() { # log file, cell name regex -> sum of counts in the last stat section
  awk -v re="$2" '/Printing statistics/ {delete n} $1 ~ "^(" re ")$" && $2 ~ /^[0-9]+$/ {n[$1]+=$2} END {s=0; for (k in n) s+=n[k]; print s}' "$1"
}
stat_total() { awk '/Printing statistics/ {t=0} /Number of cells:/ {t=$NF} END {print t}' "$1"; }
{
  echo "| model | MACs/cycle | cycles / inference | generic \`synth\`: logic cells (+ memories) | flip-flops | iCE40: SB_LUT4 / SB_CARRY / SB_DFF* / SB_RAM40_4K | Xilinx 7: LUTs / FFs / DSP48E1 / RAMB36E1+RAMB18E1 | simulation |"
  echo "|---|---:|---:|---:|---:|---|---|---|"
} > "$OUT/report.md"
cnn_full=""
if [ "${FULL:-0}" = 1 ] && [ -n "${CNN_MACS-1 16}" ]; then
  # The CNN on CNN_IMAGES MNIST test images at 16 MACs against the interpreter (the cargo test's run).
  RLX_VERILOG_CNN_IMAGES=${CNN_IMAGES:-200} cargo test --release -p rlxc --test verilog mnist_cnn -- --nocapture > "$OUT/cnn-images.log" 2>&1
  cnn_full=$(grep -o 'cnn --macs-per-cycle 16: .*' "$OUT/cnn-images.log" | head -1 | sed 's/^cnn --macs-per-cycle 16: //')
fi
row() { # model, MACs
  local model=$1 m=$2 d="$OUT/$1-p$2"
  rm -rf "$d"
  "$RLXC" compile "$DATA/$model.onnx" --target verilog --calibrate "$DATA/calib_$model.npy" --macs-per-cycle "$m" -o "$d" >/dev/null
  cycles=$(grep -o '"cycles_per_inference": [0-9]*' "$d/$model.json" | grep -o '[0-9]*$')
  (cd "$d" && verilator --lint-only -Wall $model.v)
  (cd "$d" && iverilog -g2005 -o tb.vvp ${model}_tb.v $model.v && vvp -n tb.vvp +vectors=20 > sim.log)
  sim="calibration vectors: $(grep -E '^(PASS|FAIL)' "$d/sim.log" | head -1)"
  if [ "${FULL:-0}" = 1 ] && [ "$model" = mlp ] && [ "$m" = 8 ] && [ -f build/verilog-test/mlp-p8/test_in.mem ]; then
    cp build/verilog-test/mlp-p8/test_in.mem build/verilog-test/mlp-p8/test_expected.mem "$d/"
    (cd "$d" && vvp -n tb.vvp +vectors=1000 +in=test_in.mem +expected=test_expected.mem > sim1000.log)
    sim="$sim; test images: $(grep -E '^(PASS|FAIL)' "$d/sim1000.log" | head -1)"
  fi
  if [ "$model" = cnn ] && [ "$m" = 16 ] && [ -n "$cnn_full" ]; then
    sim="$sim; test images: $cnn_full"
  fi
  (cd "$d" && yosys -q -l generic.log -p "read_verilog $model.v; synth -top $model -run begin:fine; opt -fast -full; techmap; opt -fast; abc -fast; opt -fast; stat" >/dev/null 2>&1)
  (cd "$d" && yosys -q -l ice40.log -p "read_verilog $model.v; synth_ice40 -top $model; stat" >/dev/null 2>&1)
  (cd "$d" && yosys -q -l xilinx.log -p "read_verilog $model.v; synth_xilinx -top $model; stat" >/dev/null 2>&1)
  mems=$(stat_cells "$d/generic.log" '\$mem_v2')
  total=$(stat_total "$d/generic.log")
  ffs=$(stat_cells "$d/generic.log" '\$_S?DFFE?_[A-Z0-9_]*')
  echo "| $model | $m | $cycles | $((total - mems)) (+ $mems) | $ffs | $(stat_cells "$d/ice40.log" SB_LUT4) / $(stat_cells "$d/ice40.log" SB_CARRY) / $(stat_cells "$d/ice40.log" 'SB_DFF[A-Z]*') / $(stat_cells "$d/ice40.log" SB_RAM40_4K) | $(stat_cells "$d/xilinx.log" 'LUT[1-6]') / $(stat_cells "$d/xilinx.log" 'FD[A-Z]*') / $(stat_cells "$d/xilinx.log" 'DSP48E1') / $(stat_cells "$d/xilinx.log" 'RAMB36E1') + $(stat_cells "$d/xilinx.log" 'RAMB18E1') | $sim |" >> "$OUT/report.md"
}
for m in "${MACS[@]}"; do row mlp "$m"; done
for m in ${CNN_MACS-1 16}; do row cnn "$m"; done
cat "$OUT/report.md"
