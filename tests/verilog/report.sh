#!/usr/bin/env bash
# Area and cycles of `rlxc compile --target verilog` for the MNIST MLP at several --macs-per-cycle
# settings (the figures in docs/targets.md, "Verilog"). Run from the repository root after
# `cargo test --release -p rlxc --test verilog` has trained/cached the fixtures (build/mcu-test/data):
#   tests/verilog/report.sh [MACS...]        (default: 1 8 32; also `make verilog-report`)
# For each setting: compile, Icarus simulation of the testbench (20 of rlxc's calibration vectors; with
# FULL=1 also the 1,000 test images the cargo test writes to build/verilog-test/mlp-p8, when MACS=8),
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
  echo "| MACs/cycle | cycles / inference | generic \`synth\`: logic cells (+ memories) | flip-flops | iCE40: SB_LUT4 / SB_CARRY / SB_DFF* / SB_RAM40_4K | Xilinx 7: LUTs / FFs / DSP48E1 / RAMB36E1+RAMB18E1 | simulation |"
  echo "|---:|---:|---:|---:|---|---|---|"
} > "$OUT/report.md"
for m in "${MACS[@]}"; do
  d="$OUT/mlp-p$m"
  rm -rf "$d"
  "$RLXC" compile "$DATA/mlp.onnx" --target verilog --calibrate "$DATA/calib_mlp.npy" --macs-per-cycle "$m" -o "$d" >/dev/null
  cycles=$(grep -o '"cycles_per_inference": [0-9]*' "$d/mlp.json" | grep -o '[0-9]*$')
  (cd "$d" && verilator --lint-only -Wall mlp.v)
  (cd "$d" && iverilog -g2005 -o tb.vvp mlp_tb.v mlp.v && vvp -n tb.vvp +vectors=20 > sim.log)
  sim=$(grep -E '^(PASS|FAIL)' "$d/sim.log" | head -1)
  if [ "${FULL:-0}" = 1 ] && [ "$m" = 8 ] && [ -f build/verilog-test/mlp-p8/test_in.mem ]; then
    cp build/verilog-test/mlp-p8/test_in.mem build/verilog-test/mlp-p8/test_expected.mem "$d/"
    (cd "$d" && vvp -n tb.vvp +vectors=1000 +in=test_in.mem +expected=test_expected.mem > sim1000.log)
    sim="$sim; test images: $(grep -E '^(PASS|FAIL)' "$d/sim1000.log" | head -1)"
  fi
  (cd "$d" && yosys -q -l generic.log -p "read_verilog mlp.v; synth -top mlp -run begin:fine; opt -fast -full; techmap; opt -fast; abc -fast; opt -fast; stat" >/dev/null 2>&1)
  (cd "$d" && yosys -q -l ice40.log -p "read_verilog mlp.v; synth_ice40 -top mlp; stat" >/dev/null 2>&1)
  (cd "$d" && yosys -q -l xilinx.log -p "read_verilog mlp.v; synth_xilinx -top mlp; stat" >/dev/null 2>&1)
  mems=$(stat_cells "$d/generic.log" '\$mem_v2')
  total=$(stat_total "$d/generic.log")
  ffs=$(stat_cells "$d/generic.log" '\$_S?DFFE?_[A-Z0-9_]*')
  echo "| $m | $cycles | $((total - mems)) (+ $mems) | $ffs | $(stat_cells "$d/ice40.log" SB_LUT4) / $(stat_cells "$d/ice40.log" SB_CARRY) / $(stat_cells "$d/ice40.log" 'SB_DFF[A-Z]*') / $(stat_cells "$d/ice40.log" SB_RAM40_4K) | $(stat_cells "$d/xilinx.log" 'LUT[1-6]') / $(stat_cells "$d/xilinx.log" 'FD[A-Z]*') / $(stat_cells "$d/xilinx.log" 'DSP48E1') / $(stat_cells "$d/xilinx.log" 'RAMB36E1') + $(stat_cells "$d/xilinx.log" 'RAMB18E1') | $sim |" >> "$OUT/report.md"
done
cat "$OUT/report.md"
