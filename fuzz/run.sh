#!/usr/bin/env bash
# Runs fuzz targets for a fixed time each, in parallel, and prints a table:
# target, seconds, executions (libFuzzer's stat::number_of_executed_units), corpus size, new crashes.
#
#   fuzz/run.sh [TARGET…] [--seconds N] [-j J] [--bin-dir DIR] [--corpus-dir DIR] [--out DIR]
#
# TARGET…        default: every target (the binaries in --bin-dir, else fuzz/fuzz_targets/*.rs)
# --seconds N    libFuzzer's -max_total_time for each target (default 600)
# --seed N       libFuzzer's -seed (default: from the clock); make fuzz-smoke fixes it, so the CI pass
#                replays the same mutations every time and fails only on a real regression
# -j J           targets run at once (default 2); each is one libFuzzer process on one core
# --bin-dir DIR  prebuilt binaries (`cargo +nightly fuzz build -O -a`, x86-64 Linux) instead of
#                building here: nothing of cargo is needed on the machine then
# --corpus-dir D corpus folders D/<target>/ (default fuzz/corpus; fuzz/seed.sh fills it); new
#                inputs libFuzzer finds are added there
# --out DIR      logs, crash artifacts and the summary (default fuzz/out): DIR/logs/<target>.log,
#                DIR/artifacts/<target>/crash-… (also timeout-…, oom-…), DIR/summary.md
#
# Per-target libFuzzer flags (-max_len suited to the format) come from the `//! libfuzzer: …` line of
# fuzz_targets/<target>.rs; every run also gets -rss_limit_mb=2048 -timeout=10 (an input slower than
# 10 s is a bug too) -print_final_stats=1. Exits 1 when any target found a crash, timeout or OOM.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
seconds=600 jobs=2 seed="" bin_dir="" corpus_dir="$here/corpus" out="$here/out"
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    -j) jobs="$2"; shift 2 ;;
    -j*) jobs="${1#-j}"; shift ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --corpus-dir) corpus_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

if [[ -z "$bin_dir" ]]; then
  # Build every target: release (-O) with debug assertions (-a: integer overflow panics), ASAN.
  (cd "$here" && cargo +nightly fuzz build -O -a >&2)
  bin_dir="$here/target/x86_64-unknown-linux-gnu/release"
  if ((${#targets[@]} == 0)); then
    for f in "$here"/fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
  fi
elif ((${#targets[@]} == 0)); then
  for f in "$bin_dir"/*; do
    [[ -f "$f" && -x "$f" ]] && targets+=("$(basename "$f")")
  done
fi
((${#targets[@]})) || { echo "run.sh: no targets" >&2; exit 2; }
mkdir -p "$out/logs" "$out/artifacts"

count_findings() { find "$1" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) 2>/dev/null | wc -l; }

run_one() {
  local t="$1" bin="$bin_dir/$1" corpus="$corpus_dir/$1" art="$out/artifacts/$1/" flags=()
  [[ -x "$bin" ]] || { echo "run.sh: no binary $bin" >&2; return 2; }
  mkdir -p "$corpus" "$art"
  local src="$here/fuzz_targets/$t.rs"
  if [[ -f "$src" ]]; then
    read -r -a flags <<<"$(sed -n 's|^//! libfuzzer: *||p' "$src" | head -1)"
  fi
  local before start rc=0
  before=$(count_findings "$art")
  start=$(date +%s)
  "$bin" -max_total_time="$seconds" ${seed:+-seed="$seed"} -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$art" "${flags[@]}" "$corpus" >"$out/logs/$t.log" 2>&1 || rc=$?
  local secs=$(( $(date +%s) - start ))
  local execs corpus_n found
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/logs/$t.log" | tail -1)
  corpus_n=$(find "$corpus" -maxdepth 1 -type f | wc -l)
  found=$(( $(count_findings "$art") - before ))
  echo "$t ${secs} ${execs:-?} ${corpus_n} ${found} ${rc}" >"$out/logs/$t.result"
}

echo "fuzzing ${#targets[@]} target(s) for ${seconds} s each, ${jobs} at a time; logs in $out/logs" >&2
running=0
for t in "${targets[@]}"; do
  rm -f "$out/logs/$t.result"
  run_one "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then wait -n || true; running=$((running - 1)); fi
done
wait || true

status=0
summary="$out/summary.md"
{
  echo "| target | seconds | executions | exec/s | corpus | crashes |"
  echo "|---|---:|---:|---:|---:|---:|"
  for t in "${targets[@]}"; do
    if [[ ! -f "$out/logs/$t.result" ]]; then
      echo "| $t | – | – | – | – | did not run |"; status=1; continue
    fi
    read -r name secs execs corpus_n found rc <"$out/logs/$t.result"
    rate="–"
    [[ "$execs" =~ ^[0-9]+$ ]] && ((secs > 0)) && rate=$((execs / secs))
    note="$found"
    if ((found > 0)) || ((rc != 0)); then
      status=1
      note="$found (exit $rc; see $out/artifacts/$t/)"
    fi
    echo "| $name | $secs | $execs | $rate | $corpus_n | $note |"
  done
} >"$summary"
cat "$summary"
exit $status
