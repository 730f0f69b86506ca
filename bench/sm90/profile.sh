#!/usr/bin/env bash
# Device machine: ncu profile of one hdim-D, S=8k full-attention launch of an expert's kernel.cu
# (bench/lowered/check_expert.py --profile), key sections, to $OUT/ncu_NAME.txt.
#   bash bench/sm90/profile.sh NAME EXPERT_DIR [D]
set -uo pipefail
cd "$(dirname "$0")/../.."
name=$1 dir=$2 d=${3:-128}
timeout 300 ncu --kernel-name-base mangled --kernel-name "regex:attn_fwd_kernel.*Li${d}E" \
  --launch-skip 1 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section SchedulerStats --section LaunchStats \
  python3 bench/lowered/check_expert.py "$dir" --profile "$d" > "${OUT:-/tmp}/ncu_$name.txt" 2>&1
grep -E "Duration|Throughput|Pipe|Warp Cycles|Issued Warp|Eligible|No Eligible|Active Warps|L2 Hit|Mem Busy|Max Bandwidth|Registers|Shared Memory Config" \
  "${OUT:-/tmp}/ncu_$name.txt" | sed "s/^/[$name] /" | head -40
