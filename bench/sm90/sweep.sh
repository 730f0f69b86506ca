#!/usr/bin/env bash
# Device machine: builds variants of the sm_90 expert (copies of cuir/experts with one setting
# edited, see the case below) and times each with bench/lowered/check_expert.py (full attention,
# hdim 64/128/256, S=8k, SDPA in the same process); PROFILE=D also runs bench/sm90/profile.sh on
# each at head dim D. Results in $OUT/sweep_NAME.txt (and ncu_NAME.txt).
#   bash bench/sm90/sweep.sh NAME [NAME ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
k=fa3_sm90/kernel.cu
for name in "$@"; do
  dir=/tmp/sweep_$name
  rm -rf "$dir" && cp -r cuir/experts "$dir"
  case $name in
    base) ;;
    pp) sed -i 's/constexpr bool kPingPong = false;/constexpr bool kPingPong = true;/' "$dir/$k" ;;
    s2) sed -i 's/^constexpr int STAGES = 3;/constexpr int STAGES = 2;/' "$dir/$k" ;;
    bn64) sed -i 's/^constexpr int BLOCK_N = 128;/constexpr int BLOCK_N = 64;/' "$dir/$k" ;;
    *) echo "unknown variant $name" >&2; continue ;;
  esac
  echo "== $name"
  python3 bench/lowered/check_expert.py "$dir/fa3_sm90" --no-check 2>&1 | tee "${OUT:-/tmp}/sweep_$name.txt" |
    grep -E "FAIL|full|failures"
  [ -n "${PROFILE:-}" ] && bash bench/sm90/profile.sh "$name" "$dir/fa3_sm90" "$PROFILE"
done
