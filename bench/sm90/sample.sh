#!/usr/bin/env bash
# Device machine: ncu warp-state sampling per SASS instruction of one lowered kernel's attention
# launch (head dim D, S, 16k tokens, Llama2 heads, bf16; bench/sm90/launch_lowered.py), summed by
# loop level (bench/sm90/sample_summary.py). Writes $OUT/sample_S.csv and prints the summary.
#   bash bench/sm90/sample.sh KERNEL.cu S [D]
set -uo pipefail
cd "$(dirname "$0")/../.."
kernel=$1 s=$2 d=${3:-128}
out=${OUT:-/tmp}
timeout 300 ncu --kernel-name-base mangled --kernel-name "regex:attn_fwd_kernel.*Li${d}E" \
  --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
  --section SourceCounters --section SchedulerStats -f -o "/tmp/sample_$s" \
  python3 bench/sm90/launch_lowered.py "$kernel" "$s" "$d" > "$out/sample_$s.log" 2>&1 ||
  { tail -20 "$out/sample_$s.log"; exit 1; }
ncu -i "/tmp/sample_$s.ncu-rep" --page source --csv --print-source sass > "$out/sample_$s.csv"
ncu -i "/tmp/sample_$s.ncu-rep" --page details | grep -E "Duration|Warp Cycles Per Issued|No Eligible"
python3 bench/sm90/sample_summary.py "$out/sample_$s.csv"
