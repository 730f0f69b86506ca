#!/usr/bin/env bash
# Builds and runs the sm_90 forward-attention check (bench/standalone_sm90/fa3_check.cu).
# Usage (from the repo root): bash bench/standalone_sm90/run.sh [build dir, default /tmp/fa3]
set -euo pipefail
OUT_DIR="${1:-/tmp/fa3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NVCC=/usr/local/cuda/bin/nvcc
mkdir -p "$OUT_DIR"
"$NVCC" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v \
  -o "$OUT_DIR/fa3_check" "$HERE/fa3_check.cu" \
  -L/usr/local/cuda/lib64/stubs -lcuda 2> "$OUT_DIR/ptxas.txt" || { cat "$OUT_DIR/ptxas.txt"; exit 3; }
grep -E "fwd_kernel|registers|spill|C7508|warning" "$OUT_DIR/ptxas.txt" | grep -B1 -A2 fwd_kernel || true
if grep -q C7508 "$OUT_DIR/ptxas.txt"; then echo "setmaxnreg ignored (C7508)"; exit 3; fi
CUOBJDUMP=/usr/local/cuda/bin/cuobjdump
[ -x "$CUOBJDUMP" ] || CUOBJDUMP="$(command -v cuobjdump || true)"
if [ -n "$CUOBJDUMP" ]; then
  "$CUOBJDUMP" -sass "$OUT_DIR/fa3_check" > "$OUT_DIR/fa3_check.sass"
else
  echo "cuobjdump not found: no SASS counts" | tee "$OUT_DIR/fa3_check.sass"
fi
# Per-kernel instruction counts of the attention kernels.
awk '/Function : /{f=$3} /HGMMA|HMMA|LDL|STL/{for(i=1;i<=NF;i++) if($i ~ /^(HGMMA|HMMA|LDL|STL)/){split($i,a,"."); c[f" "a[1]]++}}
     END{for(k in c) print k, c[k]}' "$OUT_DIR/fa3_check.sass" | { grep fwd_kernel || echo "no HGMMA/HMMA/LDL/STL in fwd_kernel SASS (or no SASS)"; } | sort | tee "$OUT_DIR/sass_counts.txt"
"$OUT_DIR/fa3_check" 2>&1 | tee "$OUT_DIR/run.txt"
exit "${PIPESTATUS[0]}"
