#!/usr/bin/env bash
# On the GPU machine, after run_cuda.sh (its bench_cuda.py leaves the unpacked artifacts, their weights
# and each one's inputs in /tmp/rlx-cuda-*): Nsight Compute's view of one MiniLM layer's kernels in rlxc's
# artifacts and of PyTorch's (cuBLAS's) kernels at the same matmul shapes and precisions — throughput
# against the chip's peaks, occupancy, warp stall reasons, memory traffic — to say why a tile is slower
# than cuBLAS's. Needs a runtime where ncu reads the counters (Firecracker; not gVisor: it says so and
# goes on). Clocks are left as found (--clock-control none). Raw reports: $OUT/ncu-NAME.txt.
# Usage: profile_cuda.sh CARRIED_DIR   PROFILE_ARTS="minilm_b32_bf16 …" (default below), KERNELS=regex
# of entry names (default: the second layer's, k12 … k20).
set -uo pipefail
C=$1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "profile_cuda.sh: no ncu on this machine"; exit 0; }
W=$(ls -dt /tmp/rlx-cuda-* | head -1)
S="--clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats"
for A in ${PROFILE_ARTS:-minilm_b32_bf16 minilm_b32_tf32 minilm_b8_bf16}; do
  b=${A#minilm_b}; b=${b%%_*}
  # bench_cuda.py's inputs for its per-kernel timing, or the reference's where the batch has one.
  if [ -e "$W/prof_${A}_input_ids.bin" ]; then ins=$(for n in input_ids attention_mask token_type_ids; do echo "$W/prof_${A}_$n.bin"; done)
  else ins=$(ls "$C"/ref/minilm_b$b/in{0,1,2}.bin); fi
  [ -d "$W/art/$A" ] || { echo "profile_cuda.sh: no $A"; continue; }
  timeout 120 "$NCU" $S --graph-profiling node -k "regex:^(${KERNELS:-k1[2-9]|k20})$" -c 9 \
    "$C/cuda_run" "$W/art/$A" minilm 1 "$W/ncu-out" $ins > "$OUT/ncu-$A.txt" 2>&1
  echo "$A: ncu rc $? ($(grep -c '^  k[0-9]' "$OUT/ncu-$A.txt") kernels)"
done
# cuBLAS at MiniLM batch 32's four matmul shapes (x[4096, K] @ W[N, K]ᵀ), tf32 and bf16.
cat > "$W/torch_gemm.py" <<'EOF'
import torch
for p in ["tf32", "bf16"]:
    torch.backends.cuda.matmul.allow_tf32 = p == "tf32"
    dt = torch.bfloat16 if p == "bf16" else torch.float32
    for k, n in [(384, 1152), (384, 384), (384, 1536), (1536, 384)]:
        x, w, b = torch.randn(4096, k, device="cuda", dtype=dt), torch.randn(n, k, device="cuda", dtype=dt), torch.randn(n, device="cuda", dtype=dt)
        torch.nn.functional.linear(x, w, b)
        torch.cuda.synchronize()
EOF
timeout 150 "$NCU" $S -k "regex:gemm|nvjet|sm90|cutlass|xmma" python3 "$W/torch_gemm.py" > "$OUT/ncu-torch.txt" 2>&1
echo "torch: ncu rc $? ($(grep -c 'Section: GPU Speed Of Light' "$OUT/ncu-torch.txt") kernels)"
