#!/usr/bin/env bash
# Device machine: ncu throughput sections (speed of light, pipe utilisation, memory workload,
# warp states) of one lowered kernel's attention launch (head dim D, S, 16k tokens, HQ / HKV heads,
# Llama2's 32/32 unless given, bf16; bench/sm90/launch_lowered.py). Writes $OUT/ncu_NAME_S.txt
# (details) and $OUT/ncu_NAME_S.raw.txt (every collected metric; NAME_S_HQxHKV with heads given)
# and prints the key lines of both.
#   bash bench/sm90/throughput.sh KERNEL.cu S [D [HQ HKV]]
set -uo pipefail
cd "$(dirname "$0")/../.."
kernel=$1 s=$2 d=${3:-128} heads=("${@:4:2}")
name=$(basename "$kernel" _sm_90.cu)
[ ${#heads[@]} -eq 2 ] && s_tag="${s}_${heads[0]}x${heads[1]}" || s_tag=$s
out="${OUT:-/tmp}/ncu_${name}_$s_tag"
timeout 300 ncu --kernel-name-base mangled --kernel-name "regex:attn_fwd_kernel.*Li${d}E" \
  --launch-skip 1 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  -f -o "/tmp/tp_${name}_$s_tag" python3 bench/sm90/launch_lowered.py "$kernel" "$s" "$d" "${heads[@]}" \
  > "$out.log" 2>&1 || { tail -20 "$out.log"; exit 1; }
ncu -i "/tmp/tp_${name}_$s_tag.ncu-rep" --page details > "$out.txt"
ncu -i "/tmp/tp_${name}_$s_tag.ncu-rep" --page raw > "$out.raw.txt"
grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|L2 Hit" "$out.txt" |
  sed "s/^ */[$name $s_tag] /"
grep -E "^ *(sm__pipe_tensor_cycles_active|sm__inst_executed_pipe_(xu|fma|alu|lsu|uniform)|smsp__issue_active)\.avg\.pct_of_peak_sustained_active |^ *(lts__throughput\.avg\.pct_of_peak_sustained_elapsed|lts__t_sector_hit_rate\.pct|dram__bytes\.sum\.per_second|gpu__time_duration\.sum) |issue_stalled_(wait|long_scoreboard|short_scoreboard|math_pipe_throttle|mio_throttle|barrier|dispatch_stall|not_selected|selected|lg_throttle)_per_issue_active\.ratio " "$out.raw.txt" |
  awk '{print $1, $(NF)}' | sed "s/^/[$name $s_tag] /"
